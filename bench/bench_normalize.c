/* bench_normalize.c: rows per second of the normalizers (forward, spectral norm, JVP) on one
 * core, for rows of n = 64 and n = 1024 logits drawn N(0, sd^2) (seeded).
 * Time is the thread CPU time (the machine may be shared), so rows/s are per CPU-second.
 * usage: bench_normalize [seconds_per_case (default 0.3)] [sd (default 2)] */
#include "attnlim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N_ROWS 256 /* distinct rows cycled through */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double normal(uint64_t *s) {
    double u1 = ((double)(splitmix(s) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = (double)(splitmix(s) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

typedef enum { OP_FORWARD, OP_SPECTRAL, OP_FWD_SPECTRAL, OP_JVP } op_kind;
static const char *const op_names[] = {"forward", "spectral_norm", "forward+spectral", "jvp"};

/* Rows per second of one operation on rows z [N_ROWS, n]. */
static double rate(const al_norm *nm, op_kind op, const double *z, int64_t n, double *out,
                   const double *v, double seconds) {
    al_error err;
    double sink = 0, t0 = now(), t;
    long done = 0;
    do {
        for (int r = 0; r < N_ROWS; r++) {
            const double *row = z + (size_t)r * (size_t)n;
            double s = 0;
            int rc = 0;
            switch (op) {
            case OP_FORWARD:
                rc = al_norm_forward(nm, row, n, out, &err);
                break;
            case OP_SPECTRAL:
                rc = al_norm_spectral_norm(nm, row, n, &s, &err);
                break;
            case OP_FWD_SPECTRAL:
                rc = al_norm_forward_spectral(nm, row, n, out, &s, &err);
                break;
            case OP_JVP:
                rc = al_norm_jvp(nm, row, n, v, out, &err);
                break;
            }
            if (rc) {
                fprintf(stderr, "bench_normalize: %s\n", err.msg);
                exit(1);
            }
            sink += s + out[0];
        }
        done += N_ROWS;
        t = now() - t0;
    } while (t < seconds);
    if (sink == 12345.678) printf(" ");
    return (double)done / t;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.3;
    double sd = argc > 2 ? atof(argv[2]) : 2.0;
    if (!(seconds > 0)) seconds = 0.3;
    const int64_t sizes[] = {64, 1024};
    const al_norm_kind kinds[] = {AL_NORM_SOFTMAX,        AL_NORM_SPARSEMAX, AL_NORM_ENTMAX15,
                                  AL_NORM_ENTMAX,         AL_NORM_SSMAX,     AL_NORM_SA_SOFTMAX,
                                  AL_NORM_SA_SOFTMAX_NORM};
    printf("attnlim %s bench_normalize: rows/s on one core, logits N(0, %g^2), %d distinct rows\n",
           al_version(), sd, N_ROWS);
    printf("%-16s %-18s %14s %14s\n", "method", "operation", "n=64", "n=1024");
    double *z = malloc(sizeof(double) * N_ROWS * 1024), *out = malloc(sizeof(double) * 1024),
           *v = malloc(sizeof(double) * 1024);
    if (!z || !out || !v) return 1;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        al_norm nm = al_norm_default(kinds[k]);
        if (kinds[k] == AL_NORM_ENTMAX) nm.alpha = 1.25;
        for (int op = 0; op < 4; op++) {
            int sa = kinds[k] == AL_NORM_SA_SOFTMAX || kinds[k] == AL_NORM_SA_SOFTMAX_NORM;
            if (op == OP_FWD_SPECTRAL && kinds[k] != AL_NORM_SOFTMAX) continue;
            double r[2];
            for (int s = 0; s < 2; s++) {
                int64_t n = sizes[s];
                uint64_t seed = 42 + (uint64_t)n;
                for (int64_t i = 0; i < N_ROWS * n; i++) z[i] = sd * normal(&seed);
                for (int64_t i = 0; i < n; i++) v[i] = normal(&seed);
                double secs = (sa && op == OP_SPECTRAL) ? seconds / 3 : seconds;
                r[s] = rate(&nm, (op_kind)op, z, n, out, v, secs);
            }
            char label[40];
            snprintf(label, sizeof label, "%s%s", al_norm_name(kinds[k]),
                     kinds[k] == AL_NORM_ENTMAX ? "(1.25)" : "");
            printf("%-16s %-18s %14.4g %14.4g\n", label, op_names[op], r[0], r[1]);
        }
    }
    free(z);
    free(out);
    free(v);
    return 0;
}
