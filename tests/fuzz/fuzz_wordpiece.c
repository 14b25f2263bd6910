/* fuzz_wordpiece.c: libFuzzer harness for the WordPiece encoder (al__wordpiece_encode) over
 * arbitrary bytes (invalid UTF-8 included), with a small vocabulary of ASCII, accented, CJK
 * and Hangul-jamo pieces; $ATTNLIM_FUZZ_VOCAB may name a real vocab.txt instead. Checks: the
 * output is [CLS] ... [SEP] with every id inside the vocabulary, encoding is deterministic,
 * and the ids decode. */
#include "tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char VOCAB[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\nc\nab\n##a\n##b\n##c\n##bc\n"
    "the\n##s\n.\n,\n!\n?\n'\ncafe\n##e\nx\n##x\n中\n国\n日\nᄒ\n##ᅡ\n##ᆫ\n"
    "é\n##é\nσ\n##σ\ni\n##̇\n0\n1\n##0\n##1\n";

/* The tokenizer is opened once per process (a harness may keep state; the library does not). */
static al__wordpiece *tokenizer(int *n_vocab) {
    static al__wordpiece *w = NULL;
    static int n = 0;
    if (!w) {
        al_error err;
        const char *real = getenv("ATTNLIM_FUZZ_VOCAB");
        char path[] = "/tmp/fuzz_wordpiece_XXXXXX";
        if (real) {
            if (al__wordpiece_open(real, 1, 1, &w, &err)) __builtin_trap();
            n = 1 << 22; /* ids are checked by decode below */
        } else {
            int fd = mkstemp(path);
            if (fd < 0 || write(fd, VOCAB, sizeof VOCAB - 1) != (ssize_t)(sizeof VOCAB - 1))
                __builtin_trap();
            close(fd);
            if (al__wordpiece_open(path, 1, 1, &w, &err)) __builtin_trap();
            unlink(path);
            for (size_t i = 0; i < sizeof VOCAB - 1; i++) n += VOCAB[i] == '\n';
        }
    }
    *n_vocab = n;
    return w;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int n_vocab;
    al__wordpiece *w = tokenizer(&n_vocab);
    int32_t *ids = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    al_error err;
    if (al__wordpiece_encode(w, (const char *)data, size, &ids, &n, &err)) __builtin_trap();
    if (n < 2 || ids[0] != 2 || ids[n - 1] != 3) {
        if (!getenv("ATTNLIM_FUZZ_VOCAB")) __builtin_trap();
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) __builtin_trap();
    if (al__wordpiece_encode(w, (const char *)data, size, &again, &n2, &err)) __builtin_trap();
    if (n2 != n || memcmp(ids, again, n * sizeof *ids) != 0) __builtin_trap();
    char *text = NULL;
    size_t len = 0;
    if (al__wordpiece_decode(w, ids, n, &text, &len, &err)) __builtin_trap();
    if (strlen(text) != len) __builtin_trap();
    free(text);
    free(ids);
    free(again);
    return 0;
}
