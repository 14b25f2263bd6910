/* bench_gemm.c: GFLOP/s of one single-threaded product C [M, N] = A [M, K] @ op(W), our SGEMM
 * (al__sgemm, src/math/gemm.c) beside OpenBLAS's cblas_sgemm, on the forward's shapes
 * (GPT-2 124M and SmolLM2-135M at T = 1024), both layouts: W [K, N] and W [N, K]^T.
 * --double: milliseconds of the head metrics' three double products (src/math/metrics.c) at
 * L = M, d = 576 (d_model-wide vectors) and 64 (a head's), our al__dgemm beside the OpenBLAS
 * calls metrics.c made before it: the Gram matrix X X^T (ours: the lower block triangle;
 * OpenBLAS: cblas_dgemm, all of it), S = tril(W) X (ours: TRIL_A; OpenBLAS: copy + cblas_dtrmm),
 * XS = S X^T in blocks of 32 rows, columns <= the row (ours: TRIL_C; OpenBLAS: cblas_dgemm to
 * the block's last column); for the wide vectors XS = tril(W) G instead (metrics.c's
 * xs_from_gram), G [L, L] = X X^T, in blocks of 144 or 288 rows, columns <= the row (ours:
 * TRIL_A | TRIL_C shifted to the block's first row; OpenBLAS: cblas_dgemm on the block's band).
 *
 * usage: bench_gemm [--M 1024] [--reps 5] [--double]   (best of reps; OpenBLAS runs the kernels
 * its OPENBLAS_CORETYPE or its detection picks: compare e.g. Haswell and SkylakeX in two runs).
 * Not run by the tests. */
#include "ops.h"
#include "cpu.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* best seconds of reps products; ours = 0: OpenBLAS */
static double time_one(int ours, float *C, const float *A, const float *W, int M, int K, int N,
                       int transW, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        if (ours) {
            if (al__sgemm(C, N, A, K, W, transW ? K : N, transW, M, N, K, 0) != 0) return -1.0;
        } else {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, transW ? CblasTrans : CblasNoTrans, M, N, K,
                        1.0f, A, K, W, transW ? K : N, 0.0f, C, N);
        }
        t = now() - t;
        if (t < best) best = t;
    }
    return best;
}

/* XS = tril(W) G in blocks of xg rows (G: w itself here, the same flops); ours = 0: OpenBLAS */
static int wg_blocks(int ours, const double *w, double *C, int L, int xg) {
    for (int t = 0; t < L; t += xg) {
        int nb = L - t < xg ? L - t : xg, nc = t + nb;
        if (ours && al__dgemm(C, L, w + (size_t)t * L, L, w, L, 0, nb, nc, nc, 0,
                              AL__GEMM_TRIL_A | AL__GEMM_TRIL_C, t))
            return -1;
        if (!ours)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, nc, nc, 1.0,
                        w + (size_t)t * L, L, w, L, 0.0, C, L);
    }
    return 0;
}

/* one of the metrics' products (what: 0 Gram, 1 tril(W) X, 2 the XS blocks, 3 and 4 tril(W) G
 * by 144 and 288 rows); ours = 0: OpenBLAS */
static int dprod(int what, int ours, const double *w, const double *x, double *C, int L, int d) {
    if (what >= 3) return wg_blocks(ours, w, C, L, what == 3 ? 144 : 288);
    if (what == 0 && ours) return al__dgemm(C, L, x, d, x, d, 1, L, L, d, 0, AL__GEMM_TRIL_C, 0);
    if (what == 0)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, d, 1.0, x, d, x, d, 0.0, C, L);
    if (what == 1 && ours) return al__dgemm(C, d, w, L, x, d, 0, L, d, L, 0, AL__GEMM_TRIL_A, 0);
    if (what == 1) {
        memcpy(C, x, (size_t)L * d * sizeof *C);
        cblas_dtrmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, L, d, 1.0, w,
                    L, C, d);
    }
    for (int t = 0; t < L && what == 2; t += 32) { /* S = x here: the same flops */
        int nb = L - t < 32 ? L - t : 32;
        if (ours &&
            al__dgemm(C, L, x + (size_t)t * d, d, x, d, 1, nb, t + nb, d, 0, AL__GEMM_TRIL_C, t))
            return -1;
        if (!ours)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, t + nb, d, 1.0,
                        x + (size_t)t * d, d, x, d, 0.0, C, L);
    }
    return 0;
}

static int bench_double(int L, int reps) {
    static const char *name[] = {"Gram X X^T", "tril(W) X", "XS blocks", "W G /144", "W G /288"};
    printf("%-12s %5s %4s %9s %9s %6s\n", "product", "L", "d", "ours ms", "BLAS ms", "ratio");
    for (int d = 576; d >= 64; d = d == 576 ? 64 : 0) {
        double *w = malloc((size_t)L * L * sizeof *w), *x = malloc((size_t)L * d * sizeof *x);
        double *C = malloc((size_t)L * (L > d ? L : d) * sizeof *C);
        if (!w || !x || !C) return 1;
        for (size_t i = 0; i < (size_t)L * L; i++) w[i] = (double)(i % 7) * 0.1 - 0.3;
        for (size_t i = 0; i < (size_t)L * d; i++) x[i] = (double)(i % 5) * 0.1 - 0.2;
        for (int what = 0; what < (d == 576 ? 5 : 3); what++) { /* W G: d-independent */
            double best[2] = {1e30, 1e30};
            for (int r = 0; r < reps; r++)
                for (int ours = 1; ours >= 0; ours--) {
                    double t = now();
                    if (dprod(what, ours, w, x, C, L, d)) return 1;
                    t = now() - t;
                    best[ours] = t < best[ours] ? t : best[ours];
                }
            printf("%-12s %5d %4d %9.2f %9.2f %6.2f\n", name[what], L, d, 1e3 * best[1],
                   1e3 * best[0], best[0] / best[1]);
        }
        free(w), free(x), free(C);
    }
    return 0;
}

int main(int argc, char **argv) {
    int M = 1024, reps = 5, dbl = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--double"))
            dbl = 1;
        else if (!strcmp(argv[i], "--M") && i + 1 < argc)
            M = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
    }
    static const struct {
        const char *what;
        int K, N;
    } shapes[] = {
        {"gpt2 c_attn", 768, 2304},      {"gpt2 c_proj", 768, 768},
        {"gpt2 c_fc", 768, 3072},        {"gpt2 mlp proj", 3072, 768},
        {"smollm2 q/o", 576, 576},       {"smollm2 k/v", 576, 192},
        {"smollm2 gate/up", 576, 1536},  {"smollm2 down", 1536, 576},
        {"smollm2 lm-head", 576, 49152},
    };
    al__blas_single();
    printf(
        "M = %d, best of %d, one thread; CPU level %s; OpenBLAS core %s (OPENBLAS_CORETYPE=%s)\n",
        M, reps, al__cpu_name(al__cpu_level()), openblas_get_corename(),
        getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    if (dbl) return bench_double(M, reps);
    printf("%-16s %5s %6s %2s %9s %9s %6s\n", "shape", "K", "N", "T", "ours", "OpenBLAS", "ratio");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int K = shapes[s].K, N = shapes[s].N;
        float *A = malloc((size_t)M * K * sizeof *A), *W = malloc((size_t)K * N * sizeof *W);
        float *C = malloc((size_t)M * N * sizeof *C);
        if (!A || !W || !C) return 1;
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(i % 7) * 0.1f - 0.3f;
        for (size_t i = 0; i < (size_t)K * N; i++) W[i] = (float)(i % 5) * 0.1f - 0.2f;
        for (int t = 0; t < 2; t++) {
            double flop = 2.0 * M * K * N;
            double a = time_one(1, C, A, W, M, K, N, t, reps),
                   b = time_one(0, C, A, W, M, K, N, t, reps);
            printf("%-16s %5d %6d %2s %9.1f %9.1f %6.2f\n", shapes[s].what, K, N, t ? "nt" : "nn",
                   a > 0 ? flop / a / 1e9 : 0.0, flop / b / 1e9, a > 0 ? b / a : 0.0);
        }
        free(A), free(W), free(C);
    }
    return 0;
}
