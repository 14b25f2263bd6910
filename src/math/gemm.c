/* gemm.c: our own single-threaded SGEMM and DGEMM (gemm.h): the forward's matmuls and the head
 * metrics' Gram matrices, attention outputs and x_i . S_t (src/math/metrics.c).
 *
 * Why: OpenBLAS picks its kernels by its own CPU detection (or OPENBLAS_CORETYPE), which on
 * some hosts (e.g. Debian's 0.3.21 on Zen 5, run with OPENBLAS_CORETYPE=Haswell) means AVX2
 * kernels on an AVX-512 CPU. This one is chosen at run time by al__cpu_level(): AVX-512 hosts
 * run it; elsewhere al__sgemm / al__dgemm decline and the caller keeps OpenBLAS.
 *
 * Design (Goto / BLIS): for each block of NC columns and KC of the K sum, B is packed into
 * column panels Bp [NC / NR][KC][NR] (zero-padded), then for each block of MC rows A is packed
 * into row panels Ap [MC / MR][KC][MR] (zero-padded), and a register-tiled micro-kernel computes
 * each MR x NR tile of C from one A panel and one B panel: 2 MR zmm accumulators, one
 * broadcast of A and two zmm loads of B per k (NR = two zmm: 32 floats, 16 doubles). Tiles on
 * the edges of C (fewer than MR rows or NR columns) run on a local MR x NR copy. One code for
 * both types (gemm_impl.h, included once per type), blocks of the same bytes in L1 and L2
 * (KC x NR: 32 KiB, MC x KC: 144 KiB) and a wider NC for double (below).
 *
 * Triangles (al__dgemm's tri): a lower-triangular A (tril(W) X) is packed with zeros above its
 * diagonal, its K blocks beyond a row block's last row skipped and each micro-tile's sum stopped
 * at its last row; a lower-triangular C (X X^T, x_i . S_t for i <= t) skips the micro-tiles
 * wholly above its diagonal (half the flops of a Gram matrix).
 *
 * Deterministic: C[i, j] = ((init + sum of block 0) + sum of block 1) + ..., each block's sum one
 * FMA chain in k order, init = C's bias (or 0 for the first block): the same bits whatever the
 * tiling or the thread count. */
#include "gemm.h"

#include "cpu.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define MR 6 /* rows of a micro-tile */

#define AL_GEMM_TARGET512 __attribute__((target("avx512f,avx2,fma")))

/* float: KC 256 (one B panel, KC x 32, 32 KiB, stays in L1), MC 144 (A's packed block, 144 KiB,
 * in L2), NC 512 (B's packed block, 512 KiB, in L2 / L3) */
#define GEMM_T    float
#define GEMM_V    __m512
#define GEMM_SFX  ps
#define GEMM_F(x) x##_s
#define GEMM_KC   256
#define GEMM_MC   144
#define GEMM_NC   512
#include "gemm_impl.h"

/* double: KC 256 (KC x 16: 32 KiB), MC 72 (144 KiB), NC 1024 (2 MiB, in L3: the metrics'
 * products have n <= L = 1024 columns, so A is packed once; bench_gemm --double: 3% faster
 * than NC 256, MC 144 no faster than 72) */
#define GEMM_T    double
#define GEMM_V    __m512d
#define GEMM_SFX  pd
#define GEMM_F(x) x##_d
#define GEMM_KC   256
#define GEMM_MC   72
#define GEMM_NC   1024
#include "gemm_impl.h"

int al__sgemm(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int transB,
              int m, int n, int K, int acc) {
    return gemm_s(C, ldc, A, lda, B, ldb, transB, m, n, K, acc, 0, 0);
}

int al__dgemm(double *C, int ldc, const double *A, int lda, const double *B, int ldb, int transB,
              int m, int n, int K, int acc, int tri, int off) {
    return gemm_d(C, ldc, A, lda, B, ldb, transB, m, n, K, acc, tri, off);
}
