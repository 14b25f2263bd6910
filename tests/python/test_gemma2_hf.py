"""Gemma 2 HF directories (the Llama-family forward of src/model/llama/ with Gemma 2's parts)
against transformers' float64 eager forward (tests/python/hf_ref.py): GeGLU, (1 + w) RMSNorm,
post-norms, the embedding scale, attention-logit soft-capping, alternating sliding/global
layers (windows shorter and longer than the input), query_pre_attn_scalar, the final logit
soft-cap. The logits before and after the soft-cap are checked against q.k computed from
transformers' own projections and rotary embedding (forward hooks).
Bounds: hidden states 1e-4, attention weights 1e-5."""
import numpy as np
import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM
from transformers.models.gemma2.modeling_gemma2 import apply_rotary_pos_emb, repeat_kv

import hf_ref
import test_llama
from test_llama_hf import check, tokens


def cfg(**kw):
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                sliding_window=8, query_pre_attn_scalar=12, attn_logit_softcapping=2.0,
                final_logit_softcapping=3.0, rms_norm_eps=1e-6, rope_theta=10000.0)
    base.update(kw)
    return Gemma2Config(**base)


@pytest.mark.parametrize("kw,T", [
    (dict(), 40),
    (dict(sliding_window=50), 40),
    (dict(attn_logit_softcapping=None, final_logit_softcapping=None, num_key_value_heads=4), 30),
], ids=["window_shorter", "window_longer", "no_softcap_mha"])
def test_gemma2(tmp_path, kw, T):
    c = cfg(**kw)
    hf_ref.build(Gemma2ForCausalLM, c, tmp_path)
    d, info = hf_ref.compare(tmp_path, Gemma2ForCausalLM, tokens(T, c.vocab_size))
    check(d)
    assert info.family == b"gemma2"
    assert d["window"] == {0: c.sliding_window, 1: 0, 2: c.sliding_window}


def test_gemma2_softcap_logits(tmp_path):
    """Captured logits before and after the soft-cap against q.k from transformers' own q/k."""
    c = cfg()
    hf_ref.build(Gemma2ForCausalLM, c, tmp_path)
    ids = tokens(24, c.vocab_size)
    ref = Gemma2ForCausalLM.from_pretrained(str(tmp_path), torch_dtype=torch.float64, attn_implementation="eager")
    seen = {}
    hooks = []
    for l, layer in enumerate(ref.model.layers):
        for nm in ("q_proj", "k_proj", "v_proj"):
            hooks.append(getattr(layer.self_attn, nm).register_forward_hook(
                lambda mod, i, o, l=l, nm=nm: seen.__setitem__((l, nm), o)))
    ref(torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    m = test_llama.CModel(tmp_path)
    try:
        got = m.forward(ids, what=("logits", "logits_precap"))
    finally:
        m.close()
    T, H, G, D = len(ids), 4, 2, 16
    pos = torch.arange(T)[None]
    for l in range(c.num_hidden_layers):
        attn = ref.model.layers[l].self_attn
        q = seen[(l, "q_proj")].view(1, T, H, D).transpose(1, 2)
        k = seen[(l, "k_proj")].view(1, T, G, D).transpose(1, 2)
        cos, sin = attn.rotary_emb(seen[(l, "v_proj")], pos)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        z = (q @ repeat_kv(k, H // G).transpose(2, 3))[0].numpy() * c.query_pre_attn_scalar ** -0.5
        W = c.sliding_window if l % 2 == 0 else T
        mask = np.array([[j <= t and j > t - W for j in range(T)] for t in range(T)])
        capped = c.attn_logit_softcapping * np.tanh(z / c.attn_logit_softcapping)
        pre, post = got["logits_precap"][l], got["logits"][l]
        assert np.all(np.isneginf(pre[:, ~mask])) and np.all(np.isneginf(post[:, ~mask]))
        assert np.abs(pre[:, mask] - z[:, mask]).max() < 1e-4
        assert np.abs(post[:, mask] - capped[:, mask]).max() < 1e-5
        assert np.abs(post[:, mask]).max() <= c.attn_logit_softcapping < np.abs(pre[:, mask]).max()


def test_gemma2_zero_softcap(tmp_path):
    hf_ref.build(Gemma2ForCausalLM, cfg(), tmp_path)
    import json
    p = tmp_path / "config.json"
    j = json.loads(p.read_text())
    j["attn_logit_softcapping"] = 0
    p.write_text(json.dumps(j))
    with pytest.raises(RuntimeError) as e:
        test_llama.CModel(tmp_path)
    assert "attn_logit_softcapping" in str(e.value) and "config.json" in str(e.value)
