/* fuzz_bpe.c: libFuzzer harness: encode -> decode round trip of arbitrary bytes with the real
 * GPT-2 vocabulary (found with al_data_find, loaded once) and each pre-tokenizer.
 * Input: byte 0 picks the pre-tokenizer (bits 0-1) and allow_special (bit 2); the rest is text.
 * Build: CC=clang cmake -S . -B build-fuzz -DAL_FUZZ=ON -DAL_BUILD_TESTS=OFF -DAL_BUILD_BENCH=OFF
 * Run:   build-fuzz/fuzz_bpe tests/fuzz/corpus/bpe -max_total_time=120 */
#include "attnlim.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* libFuzzer calls the entry point many times in one process: the tokenizers are loaded once
 * (the only static state, a harness necessity). */
static al_tokenizer *load(int which) {
    static al_tokenizer *tk[3];
    static int tried;
    if (!tried) {
        tried = 1;
        setenv("ATTNLIM_NO_DOWNLOAD", "1", 0);
        char path[4096];
        al_error err = {0};
        if (al_data_find("gpt2/encoder.json", NULL, path, sizeof path, &err)) {
            fprintf(stderr, "fuzz_bpe: %s\n", err.msg);
            abort();
        }
        const char *dir = dirname(path);
        static const char *pre[3] = {"gpt2", "llama3", "smollm"};
        for (int i = 0; i < 3; i++)
            if (al_tokenizer_open_bpe(dir, pre[i], &tk[i], &err)) {
                fprintf(stderr, "fuzz_bpe: %s\n", err.msg);
                abort();
            }
    }
    return tk[which];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int which = (data[0] & 3) % 3, special = (data[0] >> 2) & 1;
    const al_tokenizer *tk = load(which);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    al_error err = {0};
    if (al_tokenize(tk, text, len, special, &ids, &n, &err)) {
        fprintf(stderr, "encode failed: %s\n", err.msg);
        abort();
    }
    if (n > len) abort(); /* at least one byte per token */
    char *back = NULL;
    size_t blen = 0;
    if (al_detokenize(tk, ids, n, &back, &blen, &err)) {
        fprintf(stderr, "decode failed: %s\n", err.msg);
        abort();
    }
    if (blen != len || memcmp(back, text, len) != 0) {
        fprintf(stderr, "round trip mismatch (pre %d, special %d): %zu -> %zu bytes\n", which,
                special, len, blen);
        abort();
    }
    free(ids);
    free(back);
    return 0;
}
