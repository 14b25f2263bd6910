/* bench_llama.c: seconds per SmolLM2 forward with every head's attention weights streamed to a
 * consumer that touches them, and the GFLOP/s it reaches.
 *
 * usage: bench_llama [--model PATH|smollm2] [--threads 2] [--T 2048] [--reps 3] [--long 8192]
 *                    [--no-capture [--all-rows]]
 * --long L additionally times one forward at L tokens (0 = skip); --no-capture runs the forward
 * without any capture and computes the last token's logits only (AL_LOGITS_LAST: the work of
 * llama.cpp's prompt processing, bench/bench_llamacpp.sh); with --all-rows instead every token's
 * final hidden state (no LM head: the forward before AL_LOGITS_LAST). Not run by the tests. */
#include "model.h"
#include "touch.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* FLOP of one forward: matmuls and causal attention (q.k and alpha.v) of every row and layer (no
 * LM head); last_only (AL_LOGITS_LAST): the top layer's attention, output projection and MLP
 * for the last row only, plus the LM head of that row. */
static void flops(const al_model_info *in, int T, int last_only, double *mm, double *att) {
    double C = in->d_model, Hd = (double)in->n_head * in->d_head,
           Gd = (double)in->n_kv_head * in->d_head;
    double F = in->d_ff, nf = strcmp(in->family, "gpt_neox") == 0 ? 2 : 3; /* GELU MLP or gated */
    double per_head = 2.0 * 2.0 * in->d_head * ((double)T * (T + 1) / 2);  /* one head, causal */
    *mm = 2.0 * T * in->n_layer * (C * Hd + 2 * C * Gd + Hd * C + nf * C * F);
    *att = in->n_layer * in->n_head * per_head;
    if (last_only) {
        *mm += 2.0 * C * in->vocab_size - 2.0 * (T - 1) * (Hd * C + nf * C * F);
        *att -= in->n_head * (per_head - 2.0 * 2.0 * in->d_head * T);
    }
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall seconds of one forward; *cpu receives the process CPU seconds it took (on a machine
 * shared with other jobs, cpu / threads estimates the wall time of an idle machine). */
static int no_capture, all_rows;
static float *out; /* --no-capture: logits [1, vocab], or with --all-rows final hidden [T, d] */
static double time_forward(al_model *m, const int32_t *tokens, int T, touch *tc, double *cpu) {
    al_capture_request req = {AL_CAP_WEIGHTS, NULL, NULL, touch_capture, tc};
    al_error err = {0};
    double t0 = al__now(), c0 = cpu_now();
    al_forward_opts o = {no_capture ? (all_rows ? AL_LOGITS_ALL : AL_LOGITS_LAST) : AL_LOGITS_NONE,
                         -1};
    float *lg = no_capture && !all_rows ? out : NULL, *fh = no_capture && all_rows ? out : NULL;
    if (al_model_forward_opts(m, tokens, T, no_capture ? NULL : &req, &o, lg, fh, &err)) {
        fprintf(stderr, "bench_llama: %s\n", err.msg);
        exit(1);
    }
    *cpu = cpu_now() - c0;
    return al__now() - t0;
}

int main(int argc, char **argv) {
    const char *model = "smollm2";
    int threads = 2, T = 2048, reps = 3, longT = 8192;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--model") == 0)
            model = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--T") == 0)
            T = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0)
            reps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--long") == 0)
            longT = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-capture") == 0)
            no_capture = 1;
        else if (strcmp(argv[i], "--all-rows") == 0)
            all_rows = 1;
        else {
            fprintf(stderr,
                    "usage: bench_llama [--model PATH|smollm2] [--threads 2] [--T 2048] [--reps 3] "
                    "[--long 8192] [--no-capture [--all-rows]]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 100 || T < 1) return 2;
    al__set_threads(threads);
    al_error err = {0};
    al_model *m;
    double t0 = al__now();
    if (al_model_open(model, &m, &err)) {
        fprintf(stderr, "bench_llama: %s\n", err.msg);
        return 1;
    }
    const al_model_info *in = al_model_get_info(m);
    printf("model %s (%s, %d layers, %d heads / %d kv heads, d_model %d, d_ff %d): loaded and "
           "dequantised "
           "in %.2f s\n",
           in->name, in->dtype, in->n_layer, in->n_head, in->n_kv_head, in->d_model, in->d_ff,
           al__now() - t0);
    int maxT = T > longT ? T : longT;
    if (maxT > in->n_ctx) maxT = in->n_ctx;
    if (T > in->n_ctx) T = in->n_ctx;
    int32_t *tokens = malloc((size_t)maxT * sizeof *tokens);
    al__rng r;
    al__rng_seed(&r, 1);
    for (int t = 0; t < maxT; t++)
        tokens[t] = (int32_t)(al__rng_next(&r) % (uint64_t)in->vocab_size);
    setvbuf(stdout, NULL, _IOLBF, 0);
    touch tc = {0, 0};
    size_t n_out = all_rows ? (size_t)maxT * in->d_model : (size_t)in->vocab_size;
    if (no_capture && !(out = malloc(n_out * sizeof(float)))) return 1;
    double cpu;
    time_forward(m, tokens, T, &tc, &cpu); /* warm-up: page faults, buffers */
    double *ts = malloc((size_t)reps * sizeof *ts), *cs = malloc((size_t)reps * sizeof *cs);
    for (int i = 0; i < reps; i++) ts[i] = time_forward(m, tokens, T, &tc, &cs[i]);
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    qsort(cs, (size_t)reps, sizeof *cs, cmp_double);
    double med = ts[reps / 2], cmed = cs[reps / 2] / threads, mm, att;
    flops(in, T, no_capture && !all_rows, &mm, &att);
    printf("T = %d, %d threads, %s of all %d heads: median %.3f s, min %.3f s per "
           "forward "
           "(%d reps)\n",
           T, threads,
           !no_capture ? "weights streamed"
           : all_rows  ? "no capture, every row's final hidden"
                       : "no capture, the last token's logits",
           in->n_layer * in->n_head, med, ts[0], reps);
    printf(
        "FLOP per forward: matmuls %.1f G + attention (causal) %.1f G = %.1f G -> %.1f GFLOP/s\n",
        mm / 1e9, att / 1e9, (mm + att) / 1e9, (mm + att) / med / 1e9);
    printf(
        "CPU time per forward / %d threads: median %.3f s (%.1f GFLOP/s; the wall time of an idle "
        "machine)\n",
        threads, cmed, (mm + att) / cmed / 1e9);
    if (longT > 0 && longT <= in->n_ctx) {
        double t = time_forward(m, tokens, longT, &tc, &cpu);
        flops(in, longT, no_capture && !all_rows, &mm, &att);
        printf("T = %d: %.3f s per forward, CPU %.3f s / %d threads = %.3f s (1 rep; %.1f G FLOP, "
               "%.1f GFLOP/s by CPU time)\n",
               longT, t, cpu, threads, cpu / threads, (mm + att) / 1e9,
               (mm + att) / (cpu / threads) / 1e9);
    }
    printf("(checksum %.6g over %ld head captures)\n", tc.sum, tc.heads);
    free(ts);
    free(cs);
    free(tokens);
    al_model_free(m);
    return 0;
}
