/* fuzz_hf_config.c: libFuzzer harness for the config.json parsers of the decoder families
 * (al__llama_config_parse in src/model/llama/llama_hf.c, al__neox_config_parse in
 * src/model/gptneox/gptneox.c): every input goes to each. A config that parses must satisfy
 * the invariants the forward relies on; RoPE frequencies are computed for a few lengths and
 * must be finite.
 * Run: build-fuzz/fuzz_hf_config tests/fuzz/corpus/hf_config -max_total_time=120 */
#include "gptneox.h"
#include "llama.h"

#include <math.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rope(const al__rope *r, int n_ctx) {
    double inv[512], scale;
    int Ts[3] = {1, n_ctx / 2 + 1, n_ctx};
    if (r->dim < 2 || r->dim > 1024 || r->dim % 2) abort();
    for (int i = 0; i < 3; i++) {
        al__rope_inv_freq(r, Ts[i], inv, &scale);
        for (int k = 0; k < r->dim / 2; k++)
            if (!isfinite(inv[k]) || !isfinite(scale)) abort();
    }
}

static void neox(const uint8_t *data, size_t size) {
    al__neox_config c;
    al_error err = {0};
    if (al__neox_config_parse((const char *)data, size, "fuzz/config.json", &c, &err)) {
        if (!err.msg[0]) abort();
        return;
    }
    if (c.d_head * c.n_head != c.d_model || c.rope.dim > c.d_head) abort();
    check_rope(&c.rope, c.n_ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    neox(data, size);
    al__llama_config c;
    al_error err = {0};
    if (al__llama_config_parse((const char *)data, size, "fuzz/config.json", &c, &err)) {
        if (!err.msg[0]) abort();
        return 0;
    }
    if (c.n_head % c.n_kv_head || c.d_head % 2 || c.d_head > 1024 || c.window < 0 ||
        c.window > c.n_ctx || c.n_layer < 1 || c.vocab < 1 || c.rope.dim != c.d_head)
        abort();
    check_rope(&c.rope, c.n_ctx);
    return 0;
}
