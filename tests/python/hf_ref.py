"""Tiny random HF models built by transformers' own classes (pinned in tests/requirements.txt),
saved with save_pretrained, and their float64 eager forward as the reference of our capture.

compare(dir, cls, T) runs transformers (float64, eager, output_attentions, output_hidden_states)
and attnlim (ctypes, float32) on the same tokens and returns the largest differences of
  - "hidden": the input of each layer after its first norm (our capture's `hidden`) against
    transformers' hidden_states[l] passed through the layer's own first norm module;
  - "weights": every head's attention weights [T, T];
  - "final": the last hidden state (after the final norm);
  - "logits": the logits, relative to their largest magnitude.
"""
import numpy as np
import torch

import test_llama

torch.set_grad_enabled(False)


def randomize(model, seed=0, qk_gain=2.0):
    """Weights of unit-scale activations (the default init, std 0.02, makes every attention
    row nearly uniform): norms 1 + 0.2 N, biases 0.2 N, matrices N / sqrt(fan_in); q/k
    projections times qk_gain so that the weights are peaked."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        x = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if "norm" in name and p.dim() == 1:
            v = 1.0 + 0.2 * x
            if "gemma" in type(model).__name__.lower():
                v = 0.2 * x  # Gemma's norms scale by (1 + w)
        elif p.dim() == 1:
            v = 0.2 * x
        else:
            v = x / np.sqrt(p.shape[-1])
            if any(s in name for s in ("q_proj", "k_proj", "query_key_value")):
                v = v * qk_gain
        p.copy_(v.to(p.dtype))
    return model


def build(cls, config, path, dtype=torch.float32, seed=0, **save):
    torch.manual_seed(seed)
    m = cls(config)
    randomize(m, seed)
    m.to(dtype).save_pretrained(str(path), safe_serialization=True, **save)
    return m


def reference(path, cls, tokens, global_layers=()):
    """global_layers: layers given the plain causal mask instead of the model's (4.46.3's eager
    Qwen2 windows every layer; current transformers leaves those below max_window_layers global)."""
    m = cls.from_pretrained(str(path), torch_dtype=torch.float64, attn_implementation="eager")
    m.eval()
    T = len(tokens)
    causal = torch.full((T, T), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)[None, None]
    for l in global_layers:
        layer = m.model.layers[l]
        layer.forward = (lambda f: lambda *a, **k: f(*a, **dict(k, attention_mask=causal)))(layer.forward)
    ids = torch.tensor([tokens])
    out = m(ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    return m, out


def first_norm(model, l):
    """The first norm module of layer l (input_layernorm, or GPT-NeoX's)."""
    base = getattr(model, "model", None) or getattr(model, "gpt_neox")
    return base.layers[l].input_layernorm


def diffs(ref, out, got, n_layer):
    """Max differences of our forward (got) from transformers' (ref, out): hidden states (the
    first norm's input of each layer), attention weights, final hidden, relative logits."""
    d = {"hidden": max(float(np.abs(got["hidden"][l] - first_norm(ref, l)(out.hidden_states[l])[0].numpy()).max())
                       for l in range(n_layer)),
         "weights": max(float(np.abs(got["weights"][l] - out.attentions[l][0].numpy()).max()) for l in range(n_layer)),
         "final": float(np.abs(got["final"] - out.hidden_states[-1][0].numpy()).max())}
    lg = out.logits[0].numpy()
    d["logits"] = float(np.abs(got["logits"] - lg).max() / np.abs(lg).max())
    return d


def compare(path, cls, tokens, global_layers=()):
    ref, out = reference(path, cls, tokens, global_layers)
    c = test_llama.CModel(path)
    try:
        got = c.forward(tokens, what=("hidden", "weights"), logits=True, final=True)
        info = type("Info", (), {f: getattr(c.info, f) for f, _ in c.info._fields_})()
    finally:
        c.close()
    d = {"hidden": 0.0, "weights": 0.0}
    for l in range(info.n_layer):
        h = first_norm(ref, l)(out.hidden_states[l])[0].numpy()
        d["hidden"] = max(d["hidden"], float(np.abs(got["hidden"][l] - h).max()))
        w = out.attentions[l][0].numpy()
        d["weights"] = max(d["weights"], float(np.abs(got["weights"][l] - w).max()))
    d["final"] = float(np.abs(got["final"] - out.hidden_states[-1][0].numpy()).max())
    lg = out.logits[0].numpy()
    d["logits"] = float(np.abs(got["logits"] - lg).max() / np.abs(lg).max())
    d["window"] = got["window"]
    d["kv_head"] = got["kv_head"]
    d["attn"] = [a[0].numpy() for a in out.attentions]
    return d, info
