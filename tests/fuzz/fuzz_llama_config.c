/* fuzz_llama_config.c: libFuzzer harness for the config.json parser of the Llama family
 * (al__llama_config_parse in src/model/llama/llama_hf.c). A config that parses must satisfy
 * the invariants the forward relies on; RoPE frequencies are computed for a few lengths and
 * must be finite.
 * Run: build-fuzz/fuzz_llama_config tests/fuzz/corpus/llama_config -max_total_time=120 */
#include "llama.h"

#include <math.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    al__llama_config c;
    al_error err = {0};
    if (al__llama_config_parse((const char *)data, size, "fuzz/config.json", &c, &err)) {
        if (!err.msg[0]) abort();
        return 0;
    }
    if (c.n_head % c.n_kv_head || c.d_head % 2 || c.d_head > 1024 || c.window < 0 ||
        c.window > c.n_ctx || c.n_layer < 1 || c.vocab < 1 || c.rope.dim != c.d_head)
        abort();
    double inv[512], scale;
    int Ts[3] = {1, c.n_ctx / 2 + 1, c.n_ctx};
    for (int i = 0; i < 3; i++) {
        al__rope_inv_freq(&c.rope, Ts[i], inv, &scale);
        for (int k = 0; k < c.rope.dim / 2; k++)
            if (!isfinite(inv[k]) || !isfinite(scale)) abort();
    }
    return 0;
}
