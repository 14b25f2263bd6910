/* bench_gemm.c: GFLOP/s of one single-threaded product C [M, N] = A [M, K] @ op(W), our SGEMM
 * (al__sgemm, src/model/gemm.c) beside OpenBLAS's cblas_sgemm, on the forward's shapes
 * (GPT-2 124M and SmolLM2-135M at T = 1024), both layouts: W [K, N] and W [N, K]^T.
 *
 * usage: bench_gemm [--M 1024] [--reps 5]   (best of reps; OpenBLAS runs the kernels its
 * OPENBLAS_CORETYPE or its detection picks: compare e.g. Haswell and SkylakeX in two runs).
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

int main(int argc, char **argv) {
    int M = 1024, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--M"))
            M = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
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
