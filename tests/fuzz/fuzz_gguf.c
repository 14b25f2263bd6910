/* fuzz_gguf.c: libFuzzer harness of the GGUF reader (al__gguf_parse) and the dequantisation
 * of every tensor it accepts. Seeds: tests/fuzz/corpus/gguf/. */
#include "gguf.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    al__gguf *g = NULL;
    al_error err;
    if (al__gguf_parse(data, size, "fuzz.gguf", &g, &err) != 0) return 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const al__gguf_kv *kv = &g->kv[i];
        char s[256];
        int64_t v;
        double f;
        al__gguf_get_str(g, kv->key, s, sizeof s, &err);
        al__gguf_get_int(g, kv->key, INT64_MIN, INT64_MAX, &v, &err);
        al__gguf_get_float(g, kv->key, &f, &err);
        if (kv->type == AL_GGUF_ARRAY) {
            char **strs = NULL;
            int32_t *vals = NULL;
            int64_t n;
            if (al__gguf_get_str_array(g, kv->key, &strs, &n, &err) == 0)
                for (int64_t j = 0; j < n; j++) (void)strlen(strs[j]);
            free(strs);
            al__gguf_get_i32_array(g, kv->key, &vals, &n, &err);
            free(vals);
        }
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const al__gguf_tensor *t = &g->tensors[i];
        if (t->n_elem > (1 << 16) || !al__ggml_can_dequant(t->type)) continue;
        float *dst = malloc((size_t)t->n_elem * sizeof *dst);
        if (!dst) continue;
        al__gguf_load_f32(g, t->name, t->n_dims, t->ne, dst, &err);
        free(dst);
    }
    al__gguf_close(g);
    return 0;
}
