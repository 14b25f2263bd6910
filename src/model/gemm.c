/* gemm.c: our own single-threaded SGEMM for the forward's matmuls (see al__sgemm in ops.h).
 *
 * Why: OpenBLAS picks its kernels by its own CPU detection (or OPENBLAS_CORETYPE), which on
 * some hosts (e.g. Debian's 0.3.21 on Zen 5, run with OPENBLAS_CORETYPE=Haswell) means AVX2
 * kernels on an AVX-512 CPU. This one is chosen at run time by al__cpu_level(): AVX-512 hosts
 * run it; elsewhere al__sgemm declines and the caller keeps OpenBLAS.
 *
 * Design (Goto / BLIS): for each block of NC columns and KC of the K sum, B is packed into
 * column panels Bp [NC / NR][KC][NR] (zero-padded), then for each block of MC rows A is packed
 * into row panels Ap [MC / MR][KC][MR] (zero-padded), and a register-tiled micro-kernel computes
 * each MR x NR tile of C from one A panel and one B panel: MR x NR / 16 zmm accumulators, one
 * broadcast of A and NR / 16 loads of B per k. Tiles on the edges of C (fewer than MR rows or NR
 * columns) run on a local MR x NR copy.
 *
 * Deterministic: C[i, j] = ((init + sum of block 0) + sum of block 1) + ..., each block's sum one
 * FMA chain in k order, init = C's bias (or 0 for the first block): the same bits whatever the
 * tiling or the thread count. */
#include "ops.h"

#include "cpu.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define MR 6   /* rows of a micro-tile */
#define NR 32  /* columns of a micro-tile: two zmm */
#define KC 256 /* K block: one B panel (KC x NR floats, 32 KiB) stays in L1 */
#define MC 144 /* row block: A's packed block (MC x KC, 144 KiB) stays in L2 */
#define NC 512 /* column block: B's packed block (KC x NC, 512 KiB) in L2 / L3 */

#define AL_GEMM_TARGET512 __attribute__((target("avx512f,avx2,fma")))

/* Bp [ceil(nc / NR)][kc][NR] = columns [0, nc) of op(B) over k in [0, kc): B [kc, nc] (ldb)
 * or, transB, B [nc, kc] (ldb) read as its transpose; padded with zeros to whole panels. */
static AL_GEMM_TARGET512 void pack_b(float *Bp, const float *B, int ldb, int transB, int kc,
                                     int nc) {
    if (!transB) { /* row by row of B (one page after the other): k outer */
        for (int k = 0; k < kc; k++)
            for (int j0 = 0; j0 < nc; j0 += NR) {
                int nr = nc - j0 < NR ? nc - j0 : NR;
                const float *b = B + (size_t)k * ldb + j0;                    /* [nr] */
                float *p = Bp + (size_t)(j0 / NR) * kc * NR + (size_t)k * NR; /* [NR] */
                __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
                __mmask16 m1 =
                    nr >= NR ? 0xffff : (nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0);
                _mm512_store_ps(p, _mm512_maskz_loadu_ps(m0, b));
                _mm512_store_ps(p + 16, _mm512_maskz_loadu_ps(m1, b + 16));
            }
        return;
    }
    for (int j0 = 0; j0 < nc; j0 += NR) { /* B [nc, kc]: its rows are the panels' columns */
        int nr = nc - j0 < NR ? nc - j0 : NR;
        float *p = Bp + (size_t)(j0 / NR) * kc * NR; /* [kc][NR] */
        for (int j = 0; j < nr; j++) {
            const float *b = B + (size_t)(j0 + j) * ldb; /* [kc] */
            for (int k = 0; k < kc; k++) p[(size_t)k * NR + j] = b[k];
        }
        for (int k = 0; k < kc && nr < NR; k++)
            memset(p + (size_t)k * NR + nr, 0, (size_t)(NR - nr) * sizeof *p);
    }
}

/* Ap [ceil(mc / MR)][kc][MR] = A [mc, kc] (lda) in row panels, padded with zero rows */
static void pack_a(float *Ap, const float *A, int lda, int kc, int mc) {
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = mc - i0 < MR ? mc - i0 : MR;
        float *p = Ap + (size_t)(i0 / MR) * kc * MR; /* [kc][MR] */
        for (int i = 0; i < mr; i++) {
            const float *a = A + (size_t)(i0 + i) * lda; /* [kc] */
            for (int k = 0; k < kc; k++) p[(size_t)k * MR + i] = a[k];
        }
        for (int i = mr; i < MR; i++)
            for (int k = 0; k < kc; k++) p[(size_t)k * MR + i] = 0.0f;
    }
}

/* C [MR, NR] (ldc) = (acc ? C : 0) + Ap [kc][MR] @ Bp [kc][NR], each element one FMA chain */
static AL_GEMM_TARGET512 void kern512(int kc, const float *Ap, const float *Bp, float *C, int ldc,
                                      int acc) {
    __m512 c[MR][2];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        c[i][0] = acc ? _mm512_loadu_ps(C + (size_t)i * ldc) : _mm512_setzero_ps();
        c[i][1] = acc ? _mm512_loadu_ps(C + (size_t)i * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(Bp + (size_t)k * NR),
               b1 = _mm512_load_ps(Bp + (size_t)k * NR + 16);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_set1_ps(Ap[(size_t)k * MR + i]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        _mm512_storeu_ps(C + (size_t)i * ldc, c[i][0]);
        _mm512_storeu_ps(C + (size_t)i * ldc + 16, c[i][1]);
    }
}

/* one micro-tile C [mr <= MR, nr <= NR] (ldc): in place when whole, else on a local copy */
static void tile512(int kc, const float *Ap, const float *Bp, float *C, int ldc, int mr, int nr,
                    int acc) {
    if (mr == MR && nr == NR) {
        kern512(kc, Ap, Bp, C, ldc, acc);
        return;
    }
    float t[MR * NR];
    for (int i = 0; i < mr && acc; i++)
        memcpy(t + i * NR, C + (size_t)i * ldc, (size_t)nr * sizeof *t);
    kern512(kc, Ap, Bp, t, NR, acc);
    for (int i = 0; i < mr; i++) memcpy(C + (size_t)i * ldc, t + i * NR, (size_t)nr * sizeof *t);
}

/* C [mc, nc] (ldc) (+)= Ap @ Bp: the packed blocks (pack_a, pack_b) over kc */
static void block512(int kc, const float *Ap, const float *Bp, float *C, int ldc, int mc, int nc,
                     int acc) {
    for (int j0 = 0; j0 < nc; j0 += NR) {
        const float *bp = Bp + (size_t)(j0 / NR) * kc * NR;
        int nr = nc - j0 < NR ? nc - j0 : NR;
        for (int i0 = 0; i0 < mc; i0 += MR) {
            int mr = mc - i0 < MR ? mc - i0 : MR;
            tile512(kc, Ap + (size_t)(i0 / MR) * kc * MR, bp, C + (size_t)i0 * ldc + j0, ldc, mr,
                    nr, acc);
        }
    }
}

int al__sgemm(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int transB,
              int m, int n, int K, int acc) {
    if (al__cpu_level() < AL__CPU_AVX512 || m <= 0 || n <= 0 || K <= 0) return -1;
    float *Bp = aligned_alloc(64, (size_t)(KC * NC + KC * MC) * sizeof *Bp);
    if (!Bp) return -1;
    float *Ap = Bp + (size_t)KC * NC;
    for (int j0 = 0; j0 < n; j0 += NC) {
        int nc = n - j0 < NC ? n - j0 : NC;
        for (int k0 = 0; k0 < K; k0 += KC) {
            int kc = K - k0 < KC ? K - k0 : KC;
            const float *b = transB ? B + (size_t)j0 * ldb + k0 : B + (size_t)k0 * ldb + j0;
            pack_b(Bp, b, ldb, transB, kc, nc);
            for (int i0 = 0; i0 < m; i0 += MC) {
                int mc = m - i0 < MC ? m - i0 : MC;
                pack_a(Ap, A + (size_t)i0 * lda + k0, lda, kc, mc);
                block512(kc, Ap, Bp, C + (size_t)i0 * ldc + j0, ldc, mc, nc, acc || k0 > 0);
            }
        }
    }
    free(Bp);
    return 0;
}
