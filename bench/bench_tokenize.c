/* bench_tokenize.c: GPT-2 BPE over the whole War and Peace body (METHOD section 1), one core.
 * Usage: bench_tokenize [--vocab DIR] [--data DIR] [--repeat R]. Prints the best of R runs:
 * seconds, tokens, tokens/s and MB/s (target: <= 1 s for the 3.3 MB body). */
#include "attnlim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
    double best = 1e30;
    size_t n = 0;
    for (int r = 0; r < repeat; r++) {
        int32_t *ids = NULL;
        double t = now();
        if (al_tokenize(tk, text, len, 0, &ids, &n, &err)) goto fail;
        t = now() - t;
        if (t < best) best = t;
        free(ids);
    }
    printf("tokenizer load: %.3f s\n", t_open);
    printf("war-and-peace body: %zu bytes -> %zu tokens\n", len, n);
    printf("encode (best of %d): %.3f s, %.0f tokens/s, %.2f MB/s\n", repeat, best,
           (double)n / best, (double)len / best / 1e6);
    al_tokenizer_free(tk);
    free(text);
    return 0;
fail:
    fprintf(stderr, "bench_tokenize: %s\n", err.msg);
    al_tokenizer_free(tk);
    free(text);
    return 1;
}
