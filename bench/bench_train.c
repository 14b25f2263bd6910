/* bench_train.c: training steps per second of src/train (forward, backward, clip, AdamW) on
 * random tokens, for one normalizer and shape. bench/bench_train.sh runs it beside PyTorch
 * (bench/train_torch.py) at the same shape, batch and threads and prints the ratios.
 *
 * usage: bench_train [--layers 4 --heads 4 --embd 128 --T 256 --batch 8 --vocab 256]
 *                    [--steps 5] [--threads 2] [--normalizer softmax]
 * Prints one JSON object: {"tokens_per_s", "seconds_per_step": [...], "peak_rss_mb", ...}. */
#include "ops.h"
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int L = 4, H = 4, C = 128, T = 256, B = 8, V = 256, steps = 5, threads = 2;
    const char *norm = "softmax";
    for (int i = 1; i + 1 < argc; i += 2) {
        int *dst = !strcmp(argv[i], "--layers")    ? &L
                   : !strcmp(argv[i], "--heads")   ? &H
                   : !strcmp(argv[i], "--embd")    ? &C
                   : !strcmp(argv[i], "--T")       ? &T
                   : !strcmp(argv[i], "--batch")   ? &B
                   : !strcmp(argv[i], "--vocab")   ? &V
                   : !strcmp(argv[i], "--steps")   ? &steps
                   : !strcmp(argv[i], "--threads") ? &threads
                                                   : NULL;
        if (dst)
            *dst = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--normalizer"))
            norm = argv[i + 1];
        else {
            fprintf(stderr, "bench_train: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (steps < 1 || steps > 1000) steps = 5;
    al__set_threads(threads);
    al_error err = {0};
    al__tr_cfg c = {L, H, C, T, V, al_norm_default(AL_NORM_SOFTMAX), 0};
    if (al_norm_parse(norm, &c.norm, &err)) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 2;
    }
    al__tr_model *m = NULL;
    if (al__tr_model_new(&c, B, T, &m, &err)) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 1;
    }
    al__tr_init(m, 1);
    int32_t *tok = malloc((size_t)B * T * sizeof *tok), *tgt = malloc((size_t)B * T * sizeof *tgt);
    al__rng r;
    al__rng_seed(&r, 7);
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)(al__rng_next(&r) % (uint64_t)V),
        tgt[i] = (int32_t)(al__rng_next(&r) % (uint64_t)V);
    al__tr_opt o = al__tr_opt_default();
    double *sec = malloc((size_t)steps * sizeof *sec), loss = 0;
    for (int s = 0; s <= steps; s++) { /* the first step warms up */
        double t0 = al__now();
        if (al__tr_forward(m, tok, tgt, NULL, &loss, &err) || al__tr_backward(m, tok, tgt, &err)) {
            fprintf(stderr, "bench_train: %s\n", err.msg);
            return 1;
        }
        al__tr_adamw(m, &o, s, NULL);
        if (s) sec[s - 1] = al__now() - t0;
    }
    qsort(sec, (size_t)steps, sizeof *sec, cmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"tokens_per_s\": %.6g, \"seconds_per_step\": [", (double)B * T / sec[steps / 2]);
    for (int s = 0; s < steps; s++) printf("%s%.6g", s ? ", " : "", sec[s]);
    printf("], \"peak_rss_mb\": %.1f, \"normalizer\": \"%s\", \"threads\": %d, \"loss\": %.6g}\n",
           ru.ru_maxrss / 1024.0, norm, threads, loss);
    free(sec), free(tok), free(tgt);
    al__tr_model_free(m);
    return 0;
}
