/* bench_metrics: seconds per head for the METHOD metrics and Algorithm 5.
 *
 *   bench_metrics [L] [d] [reps] [what]
 *
 * what: 0 = everything (default), 1 = only distance+separability (for profiling), 2 = the
 * distance alone on the grid `attnlim reproduce` gives the job at this L (the union of
 * al_critical_grid(L') over the default lengths L' = 32, 64, ..., L, each N < L, and Algorithm
 * 2's 1, 5, 10, 20, 100; dmax up to N = 100 as the job asks), then the separability alone on
 * its default grid: what one head of the default run costs; 3 = that separability alone, 4 = that
 * distance alone.
 *
 * 1. al_head_metrics on one causal head, L = 1024, d = 64, the 48-value N grid of METHOD
 *    section 4, distance + separability (the target: <= 0.15 s on one core).
 * 2. al_head_sensitivity on one causal head of logits, the paper's 25 T x 3 eps grid.
 * Synthetic data: logits q.k/sqrt(d) from Gaussian q, k (scaled like a trained head), weights
 * their softmax, value vectors Gaussian. Single thread (OpenBLAS and OpenMP at 1).
 * what = 5: Algorithm 5 alone (softmax) under each reading: shared directions on the scaled
 * logits (the default), fresh directions, and the raw scale (logit_scale = sqrt(d)). */
#include "attnlim.h"
#include "internal.h"
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* CPU seconds of this thread (robust to other processes sharing the cores). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const int GRID48[] = {1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,
                             13,  14,  15,  16,  18,  20,  22,  24,  26,  28,  30,  32,
                             36,  40,  44,  48,  52,  56,  60,  64,  72,  80,  88,  96,
                             104, 112, 120, 128, 144, 160, 176, 192, 208, 224, 240, 256};

/* z[L, L] causal logits (-inf above the diagonal), w[L, L] their softmax, x[L, d]. */
static void make_head(int L, int d, double *z, double *w, double *x, uint64_t seed) {
    al__rng r;
    al__rng_seed(&r, seed);
    double *q = malloc(sizeof(double) * (size_t)L * d), *k = malloc(sizeof(double) * (size_t)L * d);
    for (int i = 0; i < L * d; i++) {
        q[i] = 1.5 * al__rng_normal(&r);
        k[i] = 1.5 * al__rng_normal(&r);
        x[i] = al__rng_normal(&r);
    }
    for (int t = 0; t < L; t++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < L; j++) {
            double v = -INFINITY;
            if (j <= t) {
                v = 0;
                for (int c = 0; c < d; c++) v += q[t * d + c] * k[j * d + c];
                v /= sqrt((double)d);
            }
            z[(size_t)t * L + j] = v;
            if (v > mx) mx = v;
        }
        for (int j = 0; j <= t; j++) s += exp(z[(size_t)t * L + j] - mx);
        for (int j = 0; j < L; j++)
            w[(size_t)t * L + j] = j <= t ? exp(z[(size_t)t * L + j] - mx) / s : 0.0;
    }
    free(q);
    free(k);
}

/* what = 5: al_head_sensitivity_ex on softmax, the default grid, under each reading. */
static int bench_alg5_readings(const double *z, int L, int d, int reps) {
    double T[25], eps[3] = {1e-3, 1e-1, 10}, fd[75], spec[25];
    for (int a = 0; a < 25; a++) T[a] = pow(10.0, -3.0 + 4.0 * a / 24.0);
    al_norm nm = {.kind = AL_NORM_SOFTMAX, .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
    struct {
        const char *name;
        al_sens_opts so;
    } rd[] = {{"default", {1.0, 0, 0}}, {"fresh", {1.0, 1, 0}}, {"raw", {sqrt((double)d), 0, 0}}};
    for (int c = 0; c < 3; c++) {
        double best = INFINITY, best_cpu = INFINITY;
        al_error err = {0};
        for (int r = 0; r < reps; r++) {
            double t0 = al__now(), c0 = cpu_now();
            if (al_head_sensitivity_ex(z, L, 1, &nm, T, 25, eps, 3, 7, 0, 0, &rd[c].so, fd, spec,
                                       &err)) {
                fprintf(stderr, "al_head_sensitivity_ex: %s\n", err.msg);
                return 1;
            }
            double dt = al__now() - t0, dc = cpu_now() - c0;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        printf("alg5 %-8s L=%d causal, 25 T x 3 eps: %.4f s/head wall, %.4f s CPU (best of %d)\n",
               rd[c].name, L, best, best_cpu, reps);
        printf("  check: spec[0]=%.17g fd[0]=%.17g fd[1]=%.17g fd[2]=%.17g fd[40]=%.17g "
               "fd[74]=%.17g\n",
               spec[0], fd[0], fd[1], fd[2], fd[40], fd[74]);
    }
    return 0;
}

int main(int argc, char **argv) {
    int L = argc > 1 ? atoi(argv[1]) : 1024;
    int d = argc > 2 ? atoi(argv[2]) : 64;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    int what = argc > 4 ? atoi(argv[4]) : 0;
    if (L < 2 || d < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_metrics [L >= 2] [d >= 1] [reps >= 1]\n");
        return 2;
    }
    double *z = malloc(sizeof(double) * (size_t)L * L), *w = malloc(sizeof(double) * (size_t)L * L);
    double *x = malloc(sizeof(double) * (size_t)L * d);
    if (!z || !w || !x) return 1;
    make_head(L, d, z, w, x, 42);
    int nN = 0, *grid = malloc(sizeof(int) * (size_t)(L + 48));
    if (!grid) return 1;
    if (what >= 2) { /* the reproduce job's grid: a set of N < L */
        char *in = calloc((size_t)L, 1);
        int *g = malloc(sizeof(int) * (size_t)L), a2[] = {1, 5, 10, 20, 100};
        if (!in || !g) return 1;
        for (int Lp = 32; Lp <= L; Lp *= 2) {
            int k = al_critical_grid(Lp, g, L);
            for (int q = 0; q < k; q++)
                if (g[q] < L) in[g[q]] = 1;
        }
        for (int q = 0; q < 5; q++)
            if (a2[q] < L) in[a2[q]] = 1;
        for (int v = 1; v < L; v++)
            if (in[v]) grid[nN++] = v;
        free(in);
        free(g);
    } else {
        for (int i = 0; i < 48; i++)
            if (GRID48[i] < L) grid[nN++] = GRID48[i];
    }
    al_metrics_opts o = {.top_n = grid, .n_top = nN, .distance = 1, .separability = 1, .causal = 1};
    al_topn_stats *out = malloc(sizeof(al_topn_stats) * (size_t)(nN + 1));
    if (!out) return 1;
    double *row_max = malloc(sizeof(double) * L), *row_ent = malloc(sizeof(double) * L);
    al_error err = {0};
    struct {
        const char *name;
        int dist, sep;
    } cfg[] = {{"distance+separability", 1, 1}, {"distance", 1, 0}, {"separability", 0, 1}};
    int cfirst = what == 2 || what == 4 ? 1 : what == 3 ? 2 : 0;
    int clast = what == 1 ? 1 : what == 4 ? 2 : what == 5 ? 0 : 3;
    for (int c = cfirst; c < clast; c++) {
        if (what >= 2 && c == 2) { /* reproduce's separability grid */
            static const int sep[] = {1, 2, 4, 8, 16, 32, 64, 128};
            nN = 0;
            for (int q = 0; q < 8; q++)
                if (sep[q] < L) grid[nN++] = sep[q];
        }
        o.distance = cfg[c].dist;
        o.separability = cfg[c].sep;
        double best = INFINITY, best_cpu = INFINITY;
        for (int r = 0; r < reps; r++) {
            double t0 = al__now(), c0 = cpu_now();
            /* the reproduce job's call: dmax up to Algorithm 2's N = 100 only */
            if (al__head_metrics_gram(w, x, NULL, NULL, what >= 2 ? 100 : -1, L, d, &o, out,
                                      row_max, row_ent, &err)) {
                fprintf(stderr, "al_head_metrics: %s\n", err.msg);
                return 1;
            }
            double dt = al__now() - t0, dc = cpu_now() - c0;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        printf("head metrics  L=%d d=%d causal, %d N values, %-22s: %.4f s/head wall, %.4f s "
               "CPU (best of %d)\n",
               L, d, nN, cfg[c].name, best, best_cpu, reps);
        if (c == cfirst)
            printf("  check: N=%d dtilde=%.6g dmax=%.6g E=%.6g ns=%.4f [%.4f, %.4f]\n", out[4].N,
                   out[4].dtilde, out[4].dmax, out[4].E, out[4].ns_ratio, out[4].ns_lower,
                   out[4].ns_upper);
    }

    if (what == 5) {
        if (bench_alg5_readings(z, L, d, reps)) return 1;
        goto done;
    }
    if (what != 0) goto done;
    /* Algorithm 5: 25 T log-spaced over [1e-3, 1e1], eps in {1e-3, 1e-1, 10} */
    double T[25], eps[3] = {1e-3, 1e-1, 10}, fd[75], spec[25];
    for (int a = 0; a < 25; a++) T[a] = pow(10.0, -3.0 + 4.0 * a / 24.0);
    al_norm_kind kinds[] = {AL_NORM_SOFTMAX, AL_NORM_SPARSEMAX};
    for (int c = 0; c < 2; c++) {
        al_norm nm = {.kind = kinds[c], .temperature = 1, .alpha = 1.5, .ssmax_s = 0.43};
        double best = INFINITY, best_cpu = INFINITY;
        int r_s = kinds[c] == AL_NORM_SOFTMAX ? reps : 1;
        for (int r = 0; r < r_s; r++) {
            double t0 = al__now(), c0 = cpu_now();
            if (al_head_sensitivity(z, L, 1, &nm, T, 25, eps, 3, 7, 0, 0, fd, spec, &err)) {
                fprintf(stderr, "al_head_sensitivity: %s\n", err.msg);
                return 1;
            }
            double dt = al__now() - t0, dc = cpu_now() - c0;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        printf("sensitivity   L=%d causal, 25 T x 3 eps, %-9s: %.4f s/head wall, %.4f s CPU "
               "(best of %d)\n",
               L, al_norm_name(kinds[c]), best, best_cpu, r_s);
        printf("  check: T=%.3g spec=%.6g fd(eps=1e-3)=%.6g; T=%.3g spec=%.6g fd=%.6g\n", T[0],
               spec[0], fd[0], T[24], spec[24], fd[72]);
    }
done:
    free(z);
    free(w);
    free(x);
    free(row_max);
    free(row_ent);
    free(out);
    free(grid);
    return 0;
}
