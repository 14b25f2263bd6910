/* test_ops.c: every kernel of src/ops.h against a naive double-precision loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "ops.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static float *randv(al__rng *r, size_t n, double scale) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * al__rng_normal(r));
    return x;
}

/* max |a - b| / (atol + rtol |b|) <= 1 for every element */
static void assert_close(const float *a, const double *b, size_t n, double atol, double rtol,
                         const char *what) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= atol + rtol * fabs(b[i]))) {
            fail_msg("%s: element %zu: got %.9g, want %.9g (diff %.3g)", what, i, a[i], b[i], d);
        }
    }
}

/* ---- matmul -------------------------------------------------------------------------------- */

static void check_matmul(int M, int K, int N, int with_bias, int nt) {
    al__rng r;
    al__rng_seed(&r, (uint64_t)(M * 131 + K * 7 + N + nt));
    float *x = randv(&r, (size_t)M * K, 1.0);          /* [M, K] */
    float *W = randv(&r, (size_t)K * N, 1.0);          /* [K, N] */
    float *Wt = malloc((size_t)K * N * sizeof(float)); /* [N, K] */
    float *b = with_bias ? randv(&r, (size_t)N, 1.0) : NULL;
    float *y = malloc((size_t)M * N * sizeof(float)), *y2 = malloc((size_t)M * N * sizeof(float));
    double *ref = malloc((size_t)M * N * sizeof(double));
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) Wt[(size_t)n * K + k] = W[(size_t)k * N + n];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = b ? b[n] : 0.0;
            for (int k = 0; k < K; k++) s += (double)x[(size_t)m * K + k] * W[(size_t)k * N + n];
            ref[(size_t)m * N + n] = s;
        }
    al__set_threads(nt);
    al__matmul(y, x, W, b, M, K, N);
    al__matmul_nt(y2, x, Wt, b, M, K, N);
    double tol = 1e-5 * sqrt((double)K);
    assert_close(y, ref, (size_t)M * N, tol, 1e-5, "al__matmul");
    assert_close(y2, ref, (size_t)M * N, tol, 1e-5, "al__matmul_nt");
    free(x), free(W), free(Wt), free(b), free(y), free(y2), free(ref);
}

/* C [m, n] (ldc) = (acc ? C0 : 0) + A [m, K] (lda) @ op(B) by al__sgemm at the level in use,
 * against a double loop: |err| <= 2 (K + 1) u (|C0| + sum_k |a_k b_k|) (u = 2^-24), with
 * leading dimensions larger than the rows (lda = K + 3, ldb = row + 2, ldc = n + 5). C's padding
 * between rows must stay untouched; below avx512 al__sgemm must decline and touch nothing. */
static void check_sgemm(int m, int n, int K, int transB, int acc) {
    al__rng r;
    al__rng_seed(&r, (uint64_t)(m * 7919 + n * 131 + K * 7 + transB * 2 + acc));
    int lda = K + 3, ldb = (transB ? K : n) + 2, ldc = n + 5;
    float *A = randv(&r, (size_t)m * lda, 1.0);                /* [m, lda] */
    float *B = randv(&r, (size_t)(transB ? n : K) * ldb, 1.0); /* [K or n, ldb] */
    float *C = randv(&r, (size_t)m * ldc, 1.0), *C0 = malloc((size_t)m * ldc * sizeof *C);
    assert_non_null(C0);
    memcpy(C0, C, (size_t)m * ldc * sizeof *C);
    int ours = al__cpu_level() >= AL__CPU_AVX512;
    assert_int_equal(al__sgemm(C, ldc, A, lda, B, ldb, transB, m, n, K, acc), ours ? 0 : -1);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (!ours || j >= n) { /* declined, or the padding: untouched */
                assert_memory_equal(&C[at], &C0[at], sizeof *C);
                continue;
            }
            double s = acc ? C0[at] : 0.0, mag = fabs(s);
            for (int k = 0; k < K; k++) {
                double b = transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += (double)A[(size_t)i * lda + k] * b;
                mag += fabs((double)A[(size_t)i * lda + k] * b);
            }
            double tol = 2.0 * (K + 1) * 0x1p-24 * mag;
            if (!(fabs(C[at] - s) <= tol))
                fail_msg("al__sgemm %s m %d n %d K %d transB %d acc %d: C[%d, %d] = %.9g, want "
                         "%.9g (tol %.3g)",
                         al__cpu_name(al__cpu_level()), m, n, K, transB, acc, i, j, C[at], s, tol);
        }
    free(A), free(B), free(C), free(C0);
}

/* fn() at every CPU level this host has; then back to the detected level. */
static void each_level(void (*fn)(void)) {
    for (int isa = AL__CPU_SCALAR; isa <= (int)al__cpu_detect(); isa++) {
        assert_int_equal(al__cpu_force((al__cpu_isa)isa), isa);
        fn();
    }
    al__cpu_force((al__cpu_isa)-1);
}

/* A GEMM check at one shape and variant t (transB, acc, ... as the check decodes it). */
typedef void (*gemm_check)(int m, int n, int K, int t);

/* check(m, n, K, t) for every m x n x K of ms[6] x ns[6] x ks[5] (0-terminated when shorter)
 * and t < nt, at every CPU level this host has; then back to the detected level. */
static void each_level_shape(const int *ms, const int *ns, const int *ks, int nt, gemm_check check,
                             void (*extra)(void)) {
    for (int isa = AL__CPU_SCALAR; isa <= (int)al__cpu_detect(); isa++) {
        assert_int_equal(al__cpu_force((al__cpu_isa)isa), isa);
        for (int a = 0; a < 6 && ms[a]; a++)
            for (int b = 0; b < 6 && ns[b]; b++)
                for (int c = 0; c < 5 && ks[c]; c++)
                    for (int t = 0; t < nt; t++) check(ms[a], ns[b], ks[c], t);
        if (extra) extra();
    }
    al__cpu_force((al__cpu_isa)-1);
}

static void sgemm_variant(int m, int n, int K, int t) {
    check_sgemm(m, n, K, t & 1, t >> 1);
}

/* odd shapes around the micro-tile (6 x 32) and the blocks (K 256, rows 144, columns 512) */
static void test_sgemm(void **state) {
    (void)state;
    static const int ms[6] = {1, 7, 31, 33, 65, 257}, ns[6] = {1, 7, 31, 33, 65, 600};
    static const int ks[5] = {1, 7, 31, 257, 600};
    each_level_shape(ms, ns, ks, 4, sgemm_variant, NULL);
}

/* Deterministic whatever the tiling: at avx512, al__sgemm on the whole of C and on 4 uneven
 * tiles of it give the same bits, and so do al__matmul_nt on 1 and on 2 threads. */
static void test_sgemm_bits(void **state) {
    (void)state;
    if (al__cpu_force(AL__CPU_AVX512) != AL__CPU_AVX512) skip();
    enum { M = 300, K = 600, N = 700 };
    al__rng r;
    al__rng_seed(&r, 18);
    float *A = randv(&r, (size_t)M * K, 1.0), *B = randv(&r, (size_t)N * K, 1.0); /* [M,K] [N,K] */
    float *C1 = malloc((size_t)M * N * sizeof *C1), *C2 = malloc((size_t)M * N * sizeof *C2);
    assert_non_null(C1), assert_non_null(C2);
    assert_int_equal(al__sgemm(C1, N, A, K, B, K, 1, M, N, K, 0), 0);
    for (int t = 0; t < 4; t++) { /* rows [0, 131) [131, M) x columns [0, 333) [333, N) */
        int i0 = t & 1 ? 131 : 0, i1 = t & 1 ? M : 131, j0 = t & 2 ? 333 : 0, j1 = t & 2 ? N : 333;
        assert_int_equal(al__sgemm(C2 + (size_t)i0 * N + j0, N, A + (size_t)i0 * K, K,
                                   B + (size_t)j0 * K, K, 1, i1 - i0, j1 - j0, K, 0),
                         0);
    }
    assert_memory_equal(C1, C2, (size_t)M * N * sizeof *C1);
    /* the bias as the chain's start: the same bits as writing it into C and accumulating */
    float *bias = randv(&r, (size_t)N, 1.0); /* [N] */
    for (int i = 0; i < M; i++) memcpy(C1 + (size_t)i * N, bias, (size_t)N * sizeof *C1);
    assert_int_equal(al__sgemm(C1, N, A, K, B, K, 1, M, N, K, 1), 0);
    assert_int_equal(al__sgemm_bias(C2, N, A, K, B, K, 1, M, N, K, bias), 0);
    assert_memory_equal(C1, C2, (size_t)M * N * sizeof *C1);
    free(bias);
    al__set_threads(1);
    al__matmul_nt(C1, A, B, NULL, M, K, N);
    al__set_threads(2);
    al__matmul_nt(C2, A, B, NULL, M, K, N);
    assert_memory_equal(C1, C2, (size_t)M * N * sizeof *C1);
    al__set_threads(0);
    al__cpu_force((al__cpu_isa)-1);
    free(A), free(B), free(C1), free(C2);
}

/* ---- DGEMM (the head metrics' products) --------------------------------------------------- */

static double *randd(al__rng *r, size_t n) {
    double *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = al__rng_normal(r);
    return x;
}

/* C [m, n] (ldc) by al__dgemm with tri and off at the level in use, against a long-double loop
 * over A's k <= i (TRIL_A; the rest of A is NaN: never read) with |err| <= 2 (K + 1) u (|C0| +
 * sum_k |a_k b_k|) (u = 2^-53), odd leading dimensions. Every element wanted (j <= i + off under
 * TRIL_C) is checked; the others are either C0's (a skipped micro-tile) or the product's too;
 * the padding between rows is untouched; TRIL_A's bits are those of the full A with its upper
 * triangle zeroed. Below avx512 al__dgemm declines and touches nothing. */
/* the columns k < ka_of(...) of A's row i that a product reads: all K, or (TRIL_A) k <= i + off */
static int ka_of(int i, int off, int K, int tra) {
    int ka = i + 1 + off;
    return !tra ? K : ka < 0 ? 0 : ka < K ? ka : K;
}

static void check_dgemm(int m, int n, int K, int transB, int acc, int tri, int off) {
    al__rng r;
    al__rng_seed(&r, (uint64_t)(m * 7919 + n * 131 + K * 7 + transB * 2 + acc + tri * 5 + off));
    int lda = K + 3, ldb = (transB ? K : n) + 2, ldc = n + 5, tra = tri & AL__GEMM_TRIL_A;
    double *A = randd(&r, (size_t)m * lda), *B = randd(&r, (size_t)(transB ? n : K) * ldb);
    double *C = randd(&r, (size_t)m * ldc), *C0 = malloc((size_t)m * ldc * sizeof *C);
    double *Az = malloc((size_t)m * lda * sizeof *A), *Cz = malloc((size_t)m * ldc * sizeof *C);
    assert_non_null(C0), assert_non_null(Az), assert_non_null(Cz);
    for (int i = 0; i < m; i++)
        for (int k = ka_of(i, off, K, tra); k < K; k++) {
            Az[(size_t)i * lda + k] = 0.0;
            A[(size_t)i * lda + k] = NAN;
        }
    for (int i = 0; i < m; i++)
        for (int k = 0; k < ka_of(i, off, K, tra); k++)
            Az[(size_t)i * lda + k] = A[(size_t)i * lda + k];
    memcpy(C0, C, (size_t)m * ldc * sizeof *C);
    memcpy(Cz, C, (size_t)m * ldc * sizeof *C);
    int ours = al__cpu_level() >= AL__CPU_AVX512;
    assert_int_equal(al__dgemm(C, ldc, A, lda, B, ldb, transB, m, n, K, acc, tri, off),
                     ours ? 0 : -1);
    if (ours && tra)
        assert_int_equal(al__dgemm(Cz, ldc, Az, lda, B, ldb, transB, m, n, K, acc, 0, 0), 0);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (!ours || j >= n) { /* declined, or the padding: untouched */
                assert_memory_equal(&C[at], &C0[at], sizeof *C);
                continue;
            }
            long double s = acc ? C0[at] : 0.0, mag = fabsl(s);
            for (int k = 0; k < ka_of(i, off, K, tra); k++) {
                long double p = (long double)A[(size_t)i * lda + k] *
                                (transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                s += p, mag += fabsl(p);
            }
            double tol = 2.0 * (K + 1) * 0x1p-53 * (double)mag;
            int wanted = !(tri & AL__GEMM_TRIL_C) || j <= i + off;
            if (!wanted && !memcmp(&C[at], &C0[at], sizeof *C)) continue; /* skipped */
            if (!(fabsl(C[at] - s) <= tol))
                fail_msg("al__dgemm m %d n %d K %d transB %d acc %d tri %d off %d: C[%d, %d] = "
                         "%.17g, want %.17Lg (tol %.3g)",
                         m, n, K, transB, acc, tri, off, i, j, C[at], s, tol);
            if (tra && wanted) assert_memory_equal(&C[at], &Cz[at], sizeof *C);
        }
    free(A), free(B), free(C), free(C0), free(Az), free(Cz);
}

/* variant t < 24: transB, acc, and one of six triangle cases (tri, off; off scaled by k; off
 * shifts both triangles: the rows from t0 of metrics.c's tril(W) G take off = t0) */
static void dgemm_variant_k(int m, int n, int K, int t, int k) {
    static const int tris[][2] = {{0, 0},
                                  {AL__GEMM_TRIL_A, 0},
                                  {AL__GEMM_TRIL_C, 0},
                                  {AL__GEMM_TRIL_C, 13},
                                  {AL__GEMM_TRIL_A | AL__GEMM_TRIL_C, -3},
                                  {AL__GEMM_TRIL_A | AL__GEMM_TRIL_C, 11}};
    check_dgemm(m, n, K, t & 1, (t >> 1) & 1, tris[t / 4][0], tris[t / 4][1] * k);
}

static void dgemm_variant(int m, int n, int K, int t) {
    dgemm_variant_k(m, n, K, t, 1);
}

static void dgemm_wide(void) { /* columns past one block of 1024 */
    for (int t = 0; t < 24; t++) dgemm_variant_k(20, 1030, 300, t, 40);
}

/* odd shapes around the micro-tile (6 x 16), the blocks (K 256, rows 72, columns 1024) and
 * the triangles' diagonals, every CPU level */
static void test_dgemm(void **state) {
    (void)state;
    static const int ms[6] = {1, 7, 17, 73, 150}, ns[6] = {1, 7, 17, 33, 70};
    static const int ks[5] = {1, 7, 31, 257, 600};
    each_level_shape(ms, ns, ks, 24, dgemm_variant, dgemm_wide);
}

/* Deterministic whatever the tiling: at avx512, al__dgemm on the whole of C and on 4 uneven
 * tiles of it give the same bits, with and without the triangles (a tile's triangle shifted by
 * its corner: TRIL_A's rows at i0 see A's columns from k0 = i0 on as their diagonal). The Gram
 * matrix X X^T is symmetric bit for bit. */
static void test_dgemm_bits(void **state) {
    (void)state;
    if (al__cpu_force(AL__CPU_AVX512) != AL__CPU_AVX512) skip();
    enum { M = 300, K = 600, N = 290 };
    al__rng r;
    al__rng_seed(&r, 19);
    double *A = randd(&r, (size_t)M * K), *B = randd(&r, (size_t)N * K); /* [M, K] [N, K] */
    double *C1 = malloc((size_t)M * N * sizeof *C1), *C2 = malloc((size_t)M * N * sizeof *C2);
    assert_non_null(C1), assert_non_null(C2);
    for (int tri = 0; tri <= AL__GEMM_TRIL_C; tri += AL__GEMM_TRIL_C) {
        memset(C1, 0, (size_t)M * N * sizeof *C1), memset(C2, 0, (size_t)M * N * sizeof *C2);
        assert_int_equal(al__dgemm(C1, N, A, K, B, K, 1, M, N, K, 0, tri, 0), 0);
        for (int t = 0; t < 4; t++) { /* rows [0, 131) [131, M) x columns [0, 133) [133, N) */
            int i0 = t & 1 ? 131 : 0, i1 = t & 1 ? M : 131, j0 = t & 2 ? 133 : 0,
                j1 = t & 2 ? N : 133;
            assert_int_equal(al__dgemm(C2 + (size_t)i0 * N + j0, N, A + (size_t)i0 * K, K,
                                       B + (size_t)j0 * K, K, 1, i1 - i0, j1 - j0, K, 0, tri,
                                       i0 - j0),
                             0);
        }
        for (int i = 0; i < M; i++) /* the wanted part (all of it without a triangle) */
            assert_memory_equal(C1 + (size_t)i * N, C2 + (size_t)i * N,
                                (size_t)(tri ? (i + 1 < N ? i + 1 : N) : N) * sizeof *C1);
    }
    /* TRIL_A: rows [0, 131) and [131, M) of tril(A) B (A's rows at 131 see columns >= 131 as 0) */
    assert_int_equal(al__dgemm(C1, N, A, K, B, K, 1, M, N, K, 0, AL__GEMM_TRIL_A, 0), 0);
    for (int i = 131; i < M; i++) /* the second call's A starts at row 131: zero its upper part */
        for (int k = i + 1; k < K; k++) A[(size_t)i * K + k] = 0.0;
    assert_int_equal(al__dgemm(C2, N, A, K, B, K, 1, 131, N, K, 0, AL__GEMM_TRIL_A, 0), 0);
    assert_int_equal(
        al__dgemm(C2 + (size_t)131 * N, N, A + (size_t)131 * K, K, B, K, 1, M - 131, N, K, 0, 0, 0),
        0);
    assert_memory_equal(C1, C2, (size_t)M * N * sizeof *C1);
    /* X X^T: the upper triangle's bits are the lower's */
    assert_int_equal(al__dgemm(C1, N, A, K, A, K, 1, N, N, K, 0, 0, 0), 0); /* [N, N] of A's rows */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < i; j++)
            assert_memory_equal(&C1[(size_t)i * N + j], &C1[(size_t)j * N + i], sizeof *C1);
    al__cpu_force((al__cpu_isa)-1);
    free(A), free(B), free(C1), free(C2);
}

static void check_matmul_shapes(void) {
    check_matmul(1, 1, 1, 0, 1);
    check_matmul(3, 5, 7, 1, 2);
    check_matmul(1, 64, 300, 1, 2);    /* one row: column tiles */
    check_matmul(200, 96, 77, 1, 2);   /* many rows: row x column tiles */
    check_matmul(130, 257, 129, 0, 3); /* odd sizes, more threads than cores */
    check_matmul(200, 96, 77, 1, 1);
    check_matmul(1000, 32, 17, 1, 2);   /* tiles: 2 row parts x 2 column parts (of 16, 1) */
    check_matmul(40, 70, 500, 1, 2);    /* fewer than 64 rows: 6 column tiles, dynamic */
    check_matmul(257, 33, 95, 0, 4);    /* 4 row parts x 3 column parts with tails */
    check_matmul(129, 16, 1500, 1, 2);  /* 2 row parts, columns in halving chunks to 64 */
    check_matmul(700, 8, 333, 0, 5);    /* 5 row parts, chunks of 1 unit and a short tail */
    check_matmul(1024, 600, 700, 1, 2); /* our SGEMM: 512-row tiles, K and column blocks */
}

/* every CPU level this machine has: our SGEMM at avx512, OpenBLAS below */
static void test_matmul(void **state) {
    (void)state;
    each_level(check_matmul_shapes);
    al__set_threads(0);
}

/* ---- norms and pointwise ----------------------------------------------------------------- */

static void test_layernorm_rmsnorm(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 7);
    const int M = 70, C = 96;
    float *x = randv(&r, (size_t)M * C, 3.0), *g = randv(&r, C, 1.0), *b = randv(&r, C, 1.0);
    for (int i = 0; i < C; i++) x[i] += 100.0f; /* a row with a large mean */
    float *y = malloc((size_t)M * C * sizeof(float));
    double *ref = malloc((size_t)M * C * sizeof(double));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < M; i++) {
            double mu = 0, v = 0, ss = 0;
            for (int c = 0; c < C; c++)
                mu += x[i * C + c], ss += (double)x[i * C + c] * x[i * C + c];
            mu /= C;
            for (int c = 0; c < C; c++) v += (x[i * C + c] - mu) * (x[i * C + c] - mu);
            v /= C;
            for (int c = 0; c < C; c++)
                ref[i * C + c] = pass == 0 ? (x[i * C + c] - mu) / sqrt(v + 1e-5) * g[c] + b[c]
                                           : x[i * C + c] / sqrt(ss / C + 1e-6) * g[c];
        }
        if (pass == 0)
            al__layernorm(y, x, g, b, M, C, 1e-5f);
        else
            al__rmsnorm(y, x, g, M, C, 1e-6f);
        assert_close(y, ref, (size_t)M * C, 1e-5, 1e-5, pass ? "rmsnorm" : "layernorm");
    }
    /* in place */
    memcpy(y, x, (size_t)M * C * sizeof(float));
    al__rmsnorm(y, y, g, M, C, 1e-6f);
    assert_close(y, ref, (size_t)M * C, 1e-5, 1e-5, "rmsnorm in place");
    free(x), free(g), free(b), free(y), free(ref);
}

/* al__add_layernorm (and al__layernorm, the same row code) at every CPU level, row lengths
 * around the vector widths: x + d exactly as float adds, y against the double loop; the same as
 * al__add then al__layernorm, bit for bit, in place too */
static void test_add_layernorm(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 11);
    const int M = 67, Cs[] = {1, 7, 8, 15, 16, 17, 33, 96, 768};
    for (int isa = AL__CPU_SCALAR; isa <= (int)al__cpu_detect(); isa++) {
        assert_int_equal(al__cpu_force((al__cpu_isa)isa), isa);
        for (size_t k = 0; k < sizeof Cs / sizeof *Cs; k++) {
            const int C = Cs[k];
            size_t n = (size_t)M * C;
            float *x = randv(&r, n, 3.0), *d = randv(&r, n, 1.0), *g = randv(&r, C, 1.0),
                  *b = randv(&r, C, 1.0), *y = malloc(n * sizeof *y), *x2 = malloc(n * sizeof *x2),
                  *y2 = malloc(n * sizeof *y2);
            double *ref = malloc(n * sizeof *ref);
            for (int c = 0; c < C; c++) x[c] += 100.0f; /* a row with a large mean */
            memcpy(x2, x, n * sizeof *x);
            for (size_t i = 0; i < n; i++) x2[i] += d[i]; /* the float sums */
            for (int i = 0; i < M; i++) {
                const float *xi = x2 + (size_t)i * C;
                double mu = 0, v = 0;
                for (int c = 0; c < C; c++) mu += xi[c];
                mu /= C;
                for (int c = 0; c < C; c++) v += (xi[c] - mu) * (xi[c] - mu);
                for (int c = 0; c < C; c++)
                    ref[(size_t)i * C + c] = (xi[c] - mu) / sqrt(v / C + 1e-5) * g[c] + b[c];
            }
            al__add_layernorm(x, d, y, g, b, M, C, 1e-5f);
            assert_memory_equal(x, x2, n * sizeof *x);
            assert_close(y, ref, n, 1e-5, 1e-5, "add_layernorm");
            al__layernorm(y2, x2, g, b, M, C, 1e-5f);
            assert_memory_equal(y, y2, n * sizeof *y);
            al__layernorm(x2, x2, g, b, M, C, 1e-5f); /* in place */
            assert_memory_equal(x2, y2, n * sizeof *y);
            free(x), free(d), free(g), free(b), free(y), free(x2), free(y2), free(ref);
        }
    }
    al__cpu_force((al__cpu_isa)-1);
}

static void test_pointwise(void **state) {
    (void)state;
    const size_t n = 200001; /* large enough for the threaded path */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)),
          *u = malloc(n * sizeof(float));
    double *ref = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(-20.0 + 40.0 * i / (n - 1)), u[i] = (float)(0.5 + i % 7);

    memcpy(y, x, n * sizeof(float));
    al__gelu_tanh(y, n);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        ref[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    assert_close(y, ref, n, 2e-7, 2e-6, "gelu_tanh");

    memcpy(y, x, n * sizeof(float));
    al__gelu_erf(y, n);
    for (size_t i = 0; i < n; i++) ref[i] = 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)));
    assert_close(y, ref, n, 2e-7, 2e-6, "gelu_erf");

    memcpy(y, x, n * sizeof(float));
    al__silu_mul(y, u, n);
    for (size_t i = 0; i < n; i++) ref[i] = x[i] / (1.0 + exp(-(double)x[i])) * u[i];
    assert_close(y, ref, n, 1e-7, 2e-6, "silu_mul");

    memcpy(y, x, n * sizeof(float));
    al__add(y, u, n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + u[i];
    assert_close(y, ref, n, 0, 1e-7, "add");

    /* exp over the whole float range that does not overflow or flush */
    for (size_t i = 0; i < n; i++) x[i] = (float)(-87.0 + 175.0 * i / (n - 1));
    memcpy(y, x, n * sizeof(float));
    al__exp_inplace(y, n);
    for (size_t i = 0; i < n; i++) ref[i] = exp((double)x[i]);
    assert_close(y, ref, n, 0, 5e-7, "exp");
    assert_true(fabsf(al__expf(0.0f) - 1.0f) == 0.0f);
    free(x), free(y), free(u), free(ref);
}

static void test_softmax(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 3);
    for (int n = 1; n <= 1100; n += 137) {
        float *z = randv(&r, (size_t)n, 10.0), *w = malloc((size_t)n * sizeof(float));
        double *ref = malloc((size_t)n * sizeof(double)), mx = -INFINITY, s = 0;
        z[0] += 1000.0f; /* a large shift */
        for (int j = 0; j < n; j++) mx = fmax(mx, z[j]);
        for (int j = 0; j < n; j++) s += exp(z[j] - mx);
        for (int j = 0; j < n; j++) ref[j] = exp(z[j] - mx) / s;
        al__softmax_row(w, z, n);
        assert_close(w, ref, (size_t)n, 1e-8, 2e-6, "softmax");
        al__softmax_row(z, z, n); /* in place */
        assert_close(z, ref, (size_t)n, 1e-8, 2e-6, "softmax in place");
        free(z), free(w), free(ref);
    }
}

/* ---- attention ------------------------------------------------------------------------------- */

typedef struct seen {
    int calls, last_layer, stop_at;
    int T, H, G, D, C, causal;
    const uint8_t *heads;
    const float *qkv; /* [T, (H + 2G) * D] */
    double *ref_z;    /* [H, T, T] naive logits */
    double *ref_w;    /* [H, T, T] naive weights */
    const float *hidden, *embed;
    unsigned what;
} seen;

static int observer(void *user, const al_capture *cap, al_error *err) {
    seen *s = user;
    s->calls++;
    s->last_layer = cap->layer;
    assert_int_equal(cap->T, s->T);
    assert_int_equal(cap->n_head, s->H);
    assert_int_equal(cap->n_kv_head, s->G);
    assert_int_equal(cap->d_head, s->D);
    int n_sel = 0;
    for (int h = 0; h < s->H; h++) n_sel += !s->heads || s->heads[h];
    assert_int_equal(cap->n_sel, n_sel);
    int T = s->T, D = s->D, W = (s->H + 2 * s->G) * D;
    for (int h = 0; h < s->H; h++) assert_int_equal(cap->kv_head[h], h / (s->H / s->G));
    for (int i = 0; i < cap->n_sel; i++) {
        int h = cap->heads[i], g = h / (s->H / s->G);
        if (i) assert_true(cap->heads[i] > cap->heads[i - 1]);
        assert_true(!s->heads || s->heads[h]);
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                size_t o = ((size_t)i * T + t) * D + d;
                const float *row = s->qkv + (size_t)t * W;
                if (s->what & AL_CAP_Q) assert_true(cap->q[o] == row[h * D + d]);
                if (s->what & AL_CAP_K) assert_true(cap->k[o] == row[(s->H + g) * D + d]);
                if (s->what & AL_CAP_V) assert_true(cap->v[o] == row[(s->H + s->G + g) * D + d]);
            }
        for (int t = 0; t < T; t++)
            for (int j = 0; j < T; j++) {
                size_t o = ((size_t)i * T + t) * T + j, ro = ((size_t)h * T + t) * T + j;
                int masked = s->causal && j > t;
                if (s->what & AL_CAP_LOGITS) {
                    if (masked)
                        assert_true(isinf(cap->logits[o]) && cap->logits[o] < 0);
                    else
                        assert_true(fabs(cap->logits[o] - s->ref_z[ro]) <=
                                    1e-5 * (1 + fabs(s->ref_z[ro])));
                }
                if (s->what & AL_CAP_WEIGHTS) {
                    if (masked)
                        assert_true(cap->weights[o] == 0.0f);
                    else
                        assert_true(fabs(cap->weights[o] - s->ref_w[ro]) <= 2e-6);
                }
            }
    }
    if (!(s->what & AL_CAP_Q)) assert_null(cap->q);
    if (!(s->what & AL_CAP_LOGITS)) assert_null(cap->logits);
    if (!(s->what & AL_CAP_WEIGHTS)) assert_null(cap->weights);
    assert_ptr_equal(cap->hidden, (s->what & AL_CAP_HIDDEN) ? s->hidden : NULL);
    assert_ptr_equal(cap->embed, (s->what & AL_CAP_EMBED) ? s->embed : NULL);
    if (s->stop_at == cap->layer)
        return al__err(err, AL_E_CANCELLED, "stop requested at layer %d", cap->layer);
    return 0;
}

/* q, k, v interleaved in one [T, (H + 2G) D] buffer, as a fused qkv projection writes them */
static void check_attention(int T, int H, int G, int D, int causal, unsigned what,
                            const uint8_t *heads, al__attn_ws *ws) {
    al__rng r;
    al__rng_seed(&r, (uint64_t)(T * 1000 + H * 10 + G + causal));
    int W = (H + 2 * G) * D, C = H * D;
    float *qkv = randv(&r, (size_t)T * W, 1.5 * pow(8.0 / D, 0.25)); /* logits ~ alike */
    float *hidden = randv(&r, (size_t)T * C, 1.0), *embed = randv(&r, (size_t)T * C, 1.0);
    float *out = malloc((size_t)T * C * sizeof(float));
    double *z = malloc((size_t)H * T * T * sizeof(double)),
           *w = malloc((size_t)H * T * T * sizeof(double));
    double *ref = malloc((size_t)T * C * sizeof(double));
    for (int h = 0; h < H; h++) {
        int g = h / (H / G);
        for (int t = 0; t < T; t++) {
            int n = causal ? t + 1 : T;
            double mx = -INFINITY, s = 0;
            for (int j = 0; j < T; j++) {
                double dot = 0;
                for (int d = 0; d < D; d++)
                    dot += (double)qkv[(size_t)t * W + h * D + d] *
                           qkv[(size_t)j * W + (H + g) * D + d];
                z[((size_t)h * T + t) * T + j] = j < n ? dot / sqrt((double)D) : -INFINITY;
                if (j < n) mx = fmax(mx, dot / sqrt((double)D));
            }
            for (int j = 0; j < n; j++) s += exp(z[((size_t)h * T + t) * T + j] - mx);
            for (int j = 0; j < T; j++)
                w[((size_t)h * T + t) * T + j] =
                    j < n ? exp(z[((size_t)h * T + t) * T + j] - mx) / s : 0.0;
            for (int d = 0; d < D; d++) {
                double o = 0;
                for (int j = 0; j < n; j++)
                    o += w[((size_t)h * T + t) * T + j] * qkv[(size_t)j * W + (H + G + g) * D + d];
                ref[(size_t)t * C + h * D + d] = o;
            }
        }
    }
    seen s = {.stop_at = -1,
              .T = T,
              .H = H,
              .G = G,
              .D = D,
              .C = C,
              .causal = causal,
              .heads = heads,
              .qkv = qkv,
              .ref_z = z,
              .ref_w = w,
              .hidden = hidden,
              .embed = embed,
              .what = what};
    al_capture_request req = {.what = what, .heads = heads, .fn = observer, .user = &s};
    al__attn a = {.layer = 2,
                  .T = T,
                  .n_head = H,
                  .n_kv_head = G,
                  .d_head = D,
                  .d_model = C,
                  .causal = causal,
                  .q = qkv,
                  .q_stride = (size_t)W,
                  .k = qkv + H * D,
                  .k_stride = (size_t)W,
                  .v = qkv + (H + G) * D,
                  .v_stride = (size_t)W,
                  .out = out,
                  .hidden = hidden,
                  .embed = embed,
                  .req = &req};
    al_error err = {0};
    int rc = ws ? al__attention_ws(&a, ws, &err) : al__attention(&a, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(s.calls, what ? 1 : 0);
    assert_close(out, ref, (size_t)T * C, 2e-6, 2e-5, "attention output");

    /* a layer not selected: no call; an observer that stops: its error comes back */
    uint8_t layers[3] = {1, 1, 0};
    req.layers = layers;
    s.calls = 0;
    assert_int_equal(al__attention(&a, &err), 0);
    assert_int_equal(s.calls, 0);
    if (what) {
        layers[2] = 1;
        s.stop_at = 2;
        rc = al__attention(&a, &err);
        assert_int_equal(rc, AL_E_CANCELLED);
        assert_non_null(strstr(err.msg, "stop requested at layer 2"));
    }
    free(qkv), free(hidden), free(embed), free(out), free(z), free(w), free(ref);
}

/* the checks of test_attention at the CPU level in use (its tile kernels and softmax) */
static void attention_at_level(void) {
    const unsigned all = AL_CAP_Q | AL_CAP_K | AL_CAP_V | AL_CAP_LOGITS | AL_CAP_WEIGHTS |
                         AL_CAP_HIDDEN | AL_CAP_EMBED;
    const uint8_t some[4] = {0, 1, 0, 1};
    al__attn_ws ws = {0};
    al__set_threads(2);
    check_attention(1, 1, 1, 8, 1, all, NULL, NULL);
    check_attention(70, 4, 4, 16, 1, all, NULL, &ws);           /* T past one block */
    check_attention(130, 4, 2, 8, 1, all, some, &ws);           /* grouped-query, some heads */
    check_attention(130, 4, 1, 8, 0, all, NULL, &ws);           /* encoder, one kv head */
    check_attention(64, 4, 4, 16, 1, 0, NULL, &ws);             /* no capture */
    check_attention(97, 4, 2, 8, 1, AL_CAP_WEIGHTS, some, &ws); /* weights only */
    check_attention(97, 4, 4, 8, 1, AL_CAP_LOGITS | AL_CAP_K, NULL, &ws); /* logits only */
    check_attention(97, 4, 4, 8, 0, AL_CAP_HIDDEN, NULL, &ws);            /* per-layer only */
    /* the zeros above the blocks are kept from the last pass of the same layout, and rewritten
     * after a pass that put logits (-inf) where the weights go now */
    check_attention(97, 4, 4, 8, 1, AL_CAP_WEIGHTS, NULL, &ws);
    check_attention(97, 4, 4, 8, 1, AL_CAP_WEIGHTS, NULL, &ws);
    check_attention(97, 4, 4, 8, 1, AL_CAP_LOGITS | AL_CAP_WEIGHTS, NULL, &ws);
    check_attention(97, 4, 4, 8, 1, AL_CAP_LOGITS | AL_CAP_WEIGHTS, NULL, &ws);
    check_attention(97, 4, 4, 8, 1, AL_CAP_WEIGHTS, NULL, &ws);
    check_attention(150, 3, 3, 64, 1, all, NULL, &ws); /* GPT-2's head width */
    check_attention(150, 2, 1, 40, 0, all, NULL, &ws); /* width not a multiple of 16 */
    check_attention(33, 2, 2, 40, 1, all, NULL, &ws);  /* the buffers shrink back */
    al__set_threads(1);
    check_attention(129, 2, 2, 8, 1, all, NULL, &ws); /* one thread */
    al__set_threads(0);
    al__attn_ws_free(&ws);
}

static void test_attention(void **state) {
    (void)state;
    each_level(attention_at_level);
}

/* al__softmax_exp times its return is al__softmax_row, bit for bit; al__scale_stream writes
 * src * s then zeros, exactly, from any alignment, at every CPU level */
static void test_softmax_exp_scale_stream(void **state) {
    (void)state;
    al__rng r;
    al__rng_seed(&r, 5);
    float *src = randv(&r, 300, 4.0), *w = malloc(300 * sizeof *w), *w2 = malloc(300 * sizeof *w);
    float *buf = aligned_alloc(64, 400 * sizeof *buf);
    assert_non_null(buf);
    for (int isa = AL__CPU_SCALAR; isa <= (int)al__cpu_detect(); isa++) {
        assert_int_equal(al__cpu_force((al__cpu_isa)isa), isa);
        for (int n = 1; n <= 300; n += 23) {
            float inv = al__softmax_exp(w, src, n);
            al__softmax_row(w2, src, n);
            for (int j = 0; j < n; j++) assert_true(w[j] * inv == w2[j]);
        }
        /* a NaN logit (a NaN weight of the model upstream) leaves the whole row NaN at every
         * level, as libm's expf would: never a finite row for the capture to pass on */
        for (int n = 1; n <= 40; n += 3)
            for (int at = 0; at < n; at += 5) {
                float z[40];
                memcpy(z, src, sizeof z);
                z[at] = NAN;
                al__softmax_row(w, z, n);
                for (int j = 0; j < n; j++)
                    if (!isnan(w[j]))
                        fail_msg("softmax %s n %d NaN at %d: w[%d] = %g", al__cpu_name(isa), n, at,
                                 j, w[j]);
            }
        for (int off = 0; off < 17; off += 3)
            for (int n = 0; n <= 70; n += 7)
                for (int width = n; width <= n + 40; width += 13) {
                    for (int j = 0; j < 400; j++) buf[j] = -1.0f;
                    al__scale_stream(buf + off, src, n, 0.37f, width);
                    al__stream_fence();
                    for (int j = 0; j < 400; j++) {
                        float want = j < off || j >= off + width ? -1.0f
                                     : j - off < n               ? src[j - off] * 0.37f
                                                                 : 0.0f;
                        if (buf[j] != want)
                            fail_msg("scale_stream %s off %d n %d width %d: [%d] %g, want %g",
                                     al__cpu_name(al__cpu_level()), off, n, width, j - off, buf[j],
                                     want);
                    }
                }
    }
    al__cpu_force((al__cpu_isa)-1);
    free(src), free(w), free(w2), free(buf);
}

static void test_attention_bad_shape(void **state) {
    (void)state;
    float x[16] = {0};
    al__attn a = {.T = 2,
                  .n_head = 3,
                  .n_kv_head = 2,
                  .d_head = 1,
                  .d_model = 3,
                  .causal = 1,
                  .q = x,
                  .q_stride = 3,
                  .k = x,
                  .k_stride = 2,
                  .v = x,
                  .v_stride = 2,
                  .out = x};
    al_error err = {0};
    assert_int_equal(al__attention(&a, &err), AL_E_INVALID);
    assert_non_null(strstr(err.msg, "kv heads 2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_sgemm),
        cmocka_unit_test(test_sgemm_bits),
        cmocka_unit_test(test_dgemm),
        cmocka_unit_test(test_dgemm_bits),
        cmocka_unit_test(test_layernorm_rmsnorm),
        cmocka_unit_test(test_add_layernorm),
        cmocka_unit_test(test_pointwise),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_softmax_exp_scale_stream),
        cmocka_unit_test(test_attention_bad_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
