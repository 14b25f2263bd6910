/* gemm.c: our own single-threaded SGEMM and DGEMM (gemm.h): the forward's matmuls and the head
 * metrics' Gram matrices, attention outputs and x_i . S_t (src/math/metrics.c).
 *
 * Why: OpenBLAS picks its kernels by its own CPU detection (or OPENBLAS_CORETYPE), which on
 * some hosts (e.g. Debian's 0.3.21 on Zen 5, run with OPENBLAS_CORETYPE=Haswell) means AVX2
 * kernels on an AVX-512 CPU. This one is chosen at run time by al__cpu_level(): AVX-512 hosts
 * run it; elsewhere al__sgemm / al__dgemm decline and the caller keeps OpenBLAS.
 *
 * Design (Goto / BLIS): for each block of NC columns and KC of the K sum, B is packed into
 * column panels Bp [NC / NR][KC][NR] (zero-padded; a float B [N, K] read as its transpose through
 * 16 x 16 register transposes), and a register-tiled micro-kernel computes each MR x NR tile of
 * C from MR rows of A and one B panel (in L1 across the row tiles): 2 MR zmm accumulators, one
 * broadcast of A per row and two zmm loads of B per k (NR = two zmm: 32 floats, 16 doubles).
 * float reads A in place (a block of MC rows x KC stays in L2 across the panels); double packs
 * each block of MC rows into row panels Ap [MC / MR][KC][MR] (zero-padded), which its triangular
 * A needs (below). Tiles on the edges of C (fewer than MR rows
 * or NR columns) run on a local MR x NR copy. One code for both types (gemm_impl.h, included once
 * per type), blocks of the same bytes in L1 and L2 (KC x NR: 32 KiB, MC x KC: 144 KiB) and a
 * wider NC for double (below). The packed blocks live in a per-thread buffer kept for the
 * thread's life (thread_scratch: allocated once, freed when the thread exits), not one per call.
 *
 * Triangles (al__dgemm's tri): a lower-triangular A (tril(W) X) is packed with zeros above its
 * diagonal, its K blocks beyond a row block's last row skipped and each micro-tile's sum stopped
 * at its last row; a lower-triangular C (X X^T, x_i . S_t for i <= t) skips the micro-tiles
 * wholly above its diagonal (half the flops of a Gram matrix).
 *
 * Deterministic: C[i, j] is one FMA chain over k in ascending order, started from init = C
 * (acc), the bias (al__sgemm_bias) or 0, the K blocks continuing it through C: the same bits
 * whatever the tiling, the blocking or the thread count. */
#include "gemm.h"

#include "cpu.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MR 6 /* rows of a micro-tile */

#define AL_GEMM_TARGET512 __attribute__((target("avx512f,avx2,fma")))

/* ---- per-thread scratch: one buffer per thread, grown on demand, kept for the thread's life
 * and freed by the key's destructor when the thread exits (OpenMP's pool threads live as long as
 * the process: their buffers stay reachable) ---- */
typedef struct scratch_t {
    void *p;
    size_t bytes;
} scratch_t;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_ok;

static void scratch_free(void *s) {
    if (!s) return;
    free(((scratch_t *)s)->p);
    free(s);
}
static void scratch_init(void) {
    scratch_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

/* this thread's buffer of >= bytes (64-byte aligned; contents not kept when it grows), or NULL */
static void *thread_scratch(size_t bytes) {
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_ok) return NULL;
    scratch_t *s = pthread_getspecific(scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(scratch_key, s)) {
            free(s);
            return NULL;
        }
    }
    if (s->bytes < bytes) {
        free(s->p);
        s->bytes = 0;
        if (!(s->p = aligned_alloc(64, (bytes + 63) & ~(size_t)63))) return NULL;
        s->bytes = bytes;
    }
    return s->p;
}

/* r[16] (rows) = its transpose (r[j] lane i = old r[i] lane j) */
static AL_GEMM_TARGET512 void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) { /* per 128-bit lane: a0 b0 a1 b1 | a2 b2 a3 b3 */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 16
    for (int g = 0; g < 16; g += 4) { /* u[g + c], lane l: rows g..g+3 at column 4 l + c */
        u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int c = 0; c < 4;
         c++) { /* column 4 l + c: lane l of u[c], u[4 + c], u[8 + c], u[12 + c] */
        __m512 v = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88),
               w = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
        __m512 x = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88),
               y = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
        r[c] = _mm512_shuffle_f32x4(v, x, 0x88);
        r[8 + c] = _mm512_shuffle_f32x4(v, x, 0xDD);
        r[4 + c] = _mm512_shuffle_f32x4(w, y, 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(w, y, 0xDD);
    }
}

AL_GEMM_TARGET512 void al__transpose16_avx512(float *dst, size_t ldd, const float *src, size_t lds,
                                              int rows, int cols) {
    for (int k0 = 0; k0 < cols; k0 += 16) {
        int kt = cols - k0 < 16 ? cols - k0 : 16;
        __mmask16 km = (__mmask16)(kt == 16 ? 0xffffu : (1u << kt) - 1);
        __m512 r[16]; /* in registers: every loop unrolled, the rows past rows masked out */
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            r[j] = _mm512_maskz_loadu_ps(j < rows ? km : 0,
                                         src + (size_t)(j < rows ? j : 0) * lds + k0);
        if (k0 + 64 < cols) /* 4 cache lines ahead in each row (the weights come from DRAM) */
            for (int j = 0; j < rows && j < 16; j++)
                _mm_prefetch((const char *)(src + (size_t)j * lds + k0 + 64), _MM_HINT_T0);
        transpose16(r);
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            if (k < kt) _mm512_storeu_ps(dst + (size_t)(k0 + k) * ldd, r[k]);
    }
}

/* Bp as pack_b, from B [nc, kc] (ldb) read as its transpose: blocks of 16 rows */
static void pack_bt_s(float *Bp, const float *B, int ldb, int kc, int nc) {
    int ncp = (nc + 31) / 32 * 32; /* whole panels: the rows past nc are zeros */
    for (int j0 = 0; j0 < ncp; j0 += 16) {
        int nr = nc - j0 < 16 ? nc - j0 : 16; /* rows of B in this block (<= 0: padding only) */
        float *p = Bp + (size_t)(j0 / 32) * kc * 32 + j0 % 32; /* [kc] rows of 16 (stride 32) */
        al__transpose16_avx512(p, 32, nr > 0 ? B + (size_t)j0 * ldb : B, (size_t)ldb, nr, kc);
    }
}

/* float: KC 256 (one B panel, KC x 32, 32 KiB, stays in L1), MC 144 (A's block, 144 KiB, in
 * L2), NC 512 (B's packed block, 512 KiB, in L2 / L3) */
#define GEMM_T       float
#define GEMM_V       __m512
#define GEMM_SFX     ps
#define GEMM_F(x)    x##_s
#define GEMM_KC      256
#define GEMM_MC      144
#define GEMM_NC      512
#define GEMM_PACK_A  0
#define GEMM_PACK_BT pack_bt_s
#include "gemm_impl.h"

/* double: KC 256 (KC x 16: 32 KiB), MC 72 (144 KiB), NC 1024 (2 MiB, in L3: the metrics'
 * products have n <= L = 1024 columns, so A is packed once; bench_gemm --double: 3% faster
 * than NC 256, MC 144 no faster than 72) */
#define GEMM_T      double
#define GEMM_V      __m512d
#define GEMM_SFX    pd
#define GEMM_F(x)   x##_d
#define GEMM_KC     256
#define GEMM_MC     72
#define GEMM_NC     1024
#define GEMM_PACK_A 1
#include "gemm_impl.h"

int al__sgemm(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int transB,
              int m, int n, int K, int acc) {
    return gemm_s(C, ldc, A, lda, B, ldb, transB, m, n, K, acc, NULL, 0, 0);
}

int al__sgemm_bias(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int transB,
                   int m, int n, int K, const float *bias) {
    return gemm_s(C, ldc, A, lda, B, ldb, transB, m, n, K, 0, bias, 0, 0);
}

int al__dgemm(double *C, int ldc, const double *A, int lda, const double *B, int ldb, int transB,
              int m, int n, int K, int acc, int tri, int off) {
    return gemm_d(C, ldc, A, lda, B, ldb, transB, m, n, K, acc, NULL, tri, off);
}
