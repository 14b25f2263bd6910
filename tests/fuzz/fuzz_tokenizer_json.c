/* fuzz_tokenizer_json.c: libFuzzer harness for the tokenizer.json reader (al__hftok_parse in
 * src/text/hf_tokenizer.c) and the pipeline it builds. Input: the tokenizer.json text, then
 * optionally the separator "\n#---\n" and a text to encode. A file that parses encodes that text
 * and a fixed one (every id in range) and decodes the ids.
 * Run: build-fuzz/fuzz_tokenizer_json tests/fuzz/corpus/tokenizer_json -max_total_time=120 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const al__hftok *t, const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    al_error err = {0};
    if (al__hftok_encode(t, text, len, 1, &ids, &n, &err)) {
        if (err.code == AL_E_NOMEM) return;
        fprintf(stderr, "encode failed on a parsed tokenizer: %s\n", err.msg);
        abort();
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= al__hftok_vocab_size(t)) abort();
    char *back = NULL;
    size_t blen = 0;
    if (al__hftok_decode(t, ids, n, &back, &blen, &err)) abort();
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = (const char *)data;
    const char *sep = memmem(in, size, "\n#---\n", 6);
    size_t json_len = sep ? (size_t)(sep - in) : size;
    al__hftok *t = NULL;
    al_error err = {0};
    if (al__hftok_parse(in, json_len, "fuzz/tokenizer.json", &t, &err) == 0) {
        static const char fixed[] = "Hello world! It's 2024 \xe2\x96\x81 caf\xc3\xa9 <s></s>\n\t ";
        exercise(t, fixed, sizeof fixed - 1);
        if (sep) exercise(t, sep + 6, size - json_len - 6);
        al__hftok_free(t);
    } else if (!err.msg[0]) {
        abort(); /* an error must say what is wrong */
    }
    return 0;
}
