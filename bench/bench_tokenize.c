/* bench_tokenize.c: GPT-2 BPE over the whole War and Peace body (METHOD section 1), one core.
 * Usage: bench_tokenize [--vocab DIR] [--data DIR] [--repeat R]. Prints the best of R runs:
 * wall and CPU seconds, tokens, tokens/s and MB/s (target: <= 1 s for the 3.3 MB body; the CPU
 * time is the one to read on a shared machine). */
#include "attnlim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) {
    return clock_s(CLOCK_MONOTONIC);
}
static double cpu(void) {
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

int main(int argc, char **argv) {
    const char *vocab = NULL, *data = NULL;
    int repeat = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--vocab"))
            vocab = argv[i + 1];
        else if (!strcmp(argv[i], "--data"))
            data = argv[i + 1];
        else if (!strcmp(argv[i], "--repeat"))
            repeat = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_tokenize [--vocab DIR] [--data DIR] [--repeat R]\n");
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    al_error err = {0};
    al_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0;
    double t0 = now();
    if (al_tokenizer_open_gpt2(vocab, &tk, &err)) goto fail;
    double t_open = now() - t0;
    if (al_corpus_load("war-and-peace", data, &text, &len, &err)) goto fail;
    double best = 1e30, best_cpu = 1e30;
    size_t n = 0;
    for (int r = 0; r < repeat; r++) {
        int32_t *ids = NULL;
        double t = now(), c = cpu();
        if (al_tokenize(tk, text, len, 0, &ids, &n, &err)) goto fail;
        t = now() - t;
        c = cpu() - c;
        if (t < best) best = t;
        if (c < best_cpu) best_cpu = c;
        free(ids);
    }
    printf("tokenizer load: %.3f s\n", t_open);
    printf("war-and-peace body: %zu bytes -> %zu tokens\n", len, n);
    printf("encode (best of %d, one thread): %.3f s wall, %.3f s CPU; %.0f tokens/s, %.2f MB/s "
           "(wall)\n",
           repeat, best, best_cpu, (double)n / best, (double)len / best / 1e6);
    al_tokenizer_free(tk);
    free(text);
    return 0;
fail:
    fprintf(stderr, "bench_tokenize: %s\n", err.msg);
    al_tokenizer_free(tk);
    free(text);
    return 1;
}
