/* fuzz_vocab.c: libFuzzer harness for the vocabulary parsers (encoder.json / vocab.json and
 * vocab.bpe / merges.txt) and the BPE built from them. Input: byte 0 picks the pre-tokenizer;
 * then the encoder.json text, the separator "\n#---\n", the vocab.bpe text. Both go to files
 * in a private temporary directory, opened with al_tokenizer_open_bpe; a vocabulary that
 * loads then encodes and decodes a fixed text and the input itself.
 * Run: build-fuzz/fuzz_vocab tests/fuzz/corpus/vocab -max_total_time=120 */
#include "attnlim.h"
#include "fuzz_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const al_tokenizer *tk, const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    al_error err = {0};
    if (al_tokenize(tk, text, len, 1, &ids, &n, &err)) {
        fprintf(stderr, "encode failed on a loaded vocabulary: %s\n", err.msg);
        abort();
    }
    char *back = NULL;
    size_t blen = 0;
    if (al_detokenize(tk, ids, n, &back, &blen, &err)) abort(); /* our own ids are in range */
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *pre[3] = {"gpt2", "llama3", "smollm"};
    const char *which = pre[(data[0] & 3) % 3];
    const char *in = (const char *)data + 1;
    size_t n = size - 1;
    const char *sep = memmem(in, n, "\n#---\n", 6);
    size_t enc_len = sep ? (size_t)(sep - in) : n;
    const char *bpe = sep ? sep + 6 : "";
    size_t bpe_len = sep ? n - enc_len - 6 : 0;
    const char *dir = fuzz_root("vocab");
    char enc_path[512], bpe_path[512];
    snprintf(enc_path, sizeof enc_path, "%s/encoder.json", dir);
    snprintf(bpe_path, sizeof bpe_path, "%s/vocab.bpe", dir);
    fuzz_put(enc_path, in, enc_len);
    fuzz_put(bpe_path, bpe, bpe_len);
    al_tokenizer *tk = NULL;
    al_error err = {0};
    if (al_tokenizer_open_bpe(dir, which, &tk, &err) == 0) {
        static const char fixed[] = "Hello world! It's 1805.\n\n  \xe2\x80\x99s <|endoftext|> \xff";
        exercise(tk, fixed, sizeof fixed - 1);
        exercise(tk, in, n);
        al_tokenizer_free(tk);
    } else if (!err.msg[0]) {
        abort(); /* every failure carries a message */
    }
    return 0;
}
