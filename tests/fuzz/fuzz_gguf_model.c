/* fuzz_gguf_model.c: libFuzzer harness for the Llama model built from a GGUF file
 * (src/llama.c: the hyperparameter checks, the weight shapes and dequantisation, the tokenizer
 * from tokenizer.ggml.model / pre / tokens / merges / token_type) on every input that the
 * GGUF reader (fuzzed alone by fuzz_gguf) accepts. Such an input is written to a file in a
 * private temporary directory and opened with al__llama_open_gguf, the opener al_model_open
 * calls for a .gguf. Checks:
 *  - a failure (open or tokenizer) has a message naming the file;
 *  - an opened model has the shape of its metadata (vocab = token_embd rows, d_head = d_model /
 *    n_head, n_head a multiple of n_kv_head);
 *  - its tokenizer, when it builds, has vocab_size tokens, and encodes a fixed text and the
 *    input's first bytes to ids in range that decode;
 *  - a forward of min(3, n_ctx) tokens succeeds (when the model is small), and every captured
 *    attention row is causal (zero above the diagonal) and, where finite, sums to 1.
 * Seeds: tests/fuzz/corpus/gguf_model/ (tiny Llamas written with the gguf Python package,
 * tests/fuzz/make_gguf_model_seeds.py). */
#include "attnlim.h"
#include "gguf.h"
#include "model.h"
#include "fuzz_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_path[320];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    snprintf(g_path, sizeof g_path, "%s/model.gguf", fuzz_root("gguf_model"));
    return 0;
}

static int check_rows(void *user, const al_capture *cap, al_error *err) {
    (void)err;
    int T = *(const int *)user;
    for (int h = 0; h < cap->n_sel; h++)
        for (int t = 0; t < T; t++) {
            const float *row = cap->weights + ((size_t)h * T + t) * T;
            double s = 0;
            int finite = 1;
            for (int u = 0; u < T; u++) {
                if (u > t && row[u] != 0) abort(); /* causal */
                finite &= isfinite(row[u]) != 0;
                s += row[u];
            }
            if (finite && fabs(s - 1) > 1e-4) abort();
        }
    return 0;
}

static void exercise_tokenizer(al_model *m, const uint8_t *data, size_t size) {
    al_tokenizer *tk = NULL;
    al_error err = {0};
    int rc = al_model_tokenizer(m, &tk, &err);
    if (getenv("AL_FUZZ_VERBOSE")) fprintf(stderr, "tokenizer: %s\n", rc ? err.msg : "ok");
    if (rc) {
        if (!strstr(err.msg, g_path)) {
            fprintf(stderr, "tokenizer error names no file: %s\n", err.msg);
            abort();
        }
        return;
    }
    int V = m->info.vocab_size;
    if (al_tokenizer_vocab_size(tk) != V) abort();
    static const char fixed[] = "Hello world! It's 1805.\n <|endoftext|> \xe2\x80\x99s \xff";
    const char *texts[2] = {fixed, (const char *)data};
    size_t lens[2] = {sizeof fixed - 1, size < 64 ? size : 64};
    for (int k = 0; k < 2; k++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (al_tokenize(tk, texts[k], lens[k], 1, &ids, &n, &err) == 0) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= V) abort();
            char *back = NULL;
            size_t blen = 0;
            if (al_detokenize(tk, ids, n, &back, &blen, &err)) abort(); /* our own ids */
            free(back);
            free(ids);
        } else if (!err.msg[0]) {
            abort();
        }
    }
    al_tokenizer_free(tk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    al__gguf *g = NULL;
    al_error err = {0};
    if (al__gguf_parse(data, size, "fuzz.gguf", &g, &err) != 0) return 0; /* fuzz_gguf's job */
    al__gguf_close(g);
    fuzz_put(g_path, data, size);
    al_model *m = calloc(1, sizeof *m);
    if (!m) return 0;
    int rc = al__llama_open_gguf(m, g_path, &err);
    if (getenv("AL_FUZZ_VERBOSE")) fprintf(stderr, "open: %s\n", rc ? err.msg : "ok");
    if (rc) {
        if (m->impl) abort();
        if (!strstr(err.msg, g_path)) {
            fprintf(stderr, "open error names no file: %s\n", err.msg);
            abort();
        }
        free(m);
        return 0;
    }
    const al_model_info *in = &m->info;
    if (in->n_head < 1 || in->n_kv_head < 1 || in->n_head % in->n_kv_head ||
        in->d_head * in->n_head != in->d_model || in->d_head % 2 || in->vocab_size < 1 ||
        in->n_ctx < 1 || in->n_layer < 1 || !in->causal)
        abort();
    exercise_tokenizer(m, data, size);
    /* a forward, when the model is small enough for a fuzz iteration */
    int T = in->n_ctx < 3 ? in->n_ctx : 3;
    double cost = (double)in->n_layer * in->d_model * (in->d_model + 3.0 * in->d_ff) +
                  (double)in->vocab_size * in->d_model;
    if (cost < 4e6) {
        int32_t tok[3] = {0, in->vocab_size - 1, in->vocab_size / 2};
        float *logits = malloc((size_t)T * (size_t)in->vocab_size * sizeof *logits);
        if (logits) {
            al_capture_request req = {AL_CAP_WEIGHTS, NULL, NULL, check_rows, &T};
            if (al_model_forward(m, tok, T, &req, logits, NULL, &err)) {
                fprintf(stderr, "forward failed on an opened model: %s\n", err.msg);
                abort();
            }
            free(logits);
        }
    }
    al_model_free(m);
    return 0;
}
