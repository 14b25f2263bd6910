"""Llama 3.1/3.2-style RoPE in GGUF (src/model/llama/llama.c: rope.scaling.* metadata and the
rope_freqs.weight tensor) against transformers' float64 eager forward of the HF model it was
converted from: tiny random HF Llamas with rope_scaling llama3, yarn (default and own betas) and
linear, written to GGUF here with the `gguf` package as llama.cpp's converter does (q/k rows
permuted per head; llama3 as rope_freqs.weight computed by the converter's formula; yarn and
linear as rope.scaling.type/factor/original_context_length). Hidden states within 1e-4,
attention weights within 1e-5; malformed rope metadata named."""
import math

import numpy as np
import pytest
from safetensors.numpy import load_file
from transformers import LlamaForCausalLM

import gguf
import hf_ref
import test_llama
from test_llama_hf import ROPES, check, llama_cfg, tokens


def permute(w, n_head, n_head_kv):
    """llama.cpp's converter: each head's rows (i, i + d/2) become adjacent pairs (2i, 2i+1)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_freqs(cfg):
    """The converter's rope_freqs for rope_type llama3 (per-frequency divisors, float32)."""
    rs, dim = cfg.rope_scaling, cfg.hidden_size // cfg.num_attention_heads
    freqs = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < old / hi:
            out.append(1.0)
        elif wl > old / lo:
            out.append(factor)
        else:
            s = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - s) / factor + s))
    return np.asarray(out, np.float32)


def convert_llama(hf_dir, cfg, out, freqs_override=None, extra=None, betas=True):
    w = gguf.GGUFWriter(str(out), "llama")
    H, G, L = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_hidden_layers
    w.add_block_count(L)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_rope_dimension_count(cfg.hidden_size // H)
    rs = cfg.rope_scaling or {}
    kind = rs.get("rope_type")
    if kind == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    elif kind == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rs["factor"])
        w.add_rope_scaling_orig_ctx_len(cfg.max_position_embeddings)  # what transformers 4.46 uses
        if "attention_factor" in rs:  # llama.cpp multiplies 0.1 ln(factor) + 1 by it
            w.add_rope_scaling_attn_factors(rs["attention_factor"] / (0.1 * math.log(rs["factor"]) + 1))
        if betas and rs.get("beta_fast", 32) != 32:
            w.add_rope_scaling_yarn_beta_fast(rs["beta_fast"])
        if betas and rs.get("beta_slow", 1) != 1:
            w.add_rope_scaling_yarn_beta_slow(rs["beta_slow"])
    for k, (v, t) in (extra or {}).items():
        w.add_key_value(k, v, t)
    if kind == "llama3" or freqs_override is not None:
        w.add_tensor("rope_freqs.weight", llama3_rope_freqs(cfg) if freqs_override is None else freqs_override)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, L)
    for name, t in load_file(str(hf_dir / "model.safetensors")).items():
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new, name
        t = t.astype(np.float32)
        if name.endswith("q_proj.weight"):
            t = permute(t, H, H)
        elif name.endswith("k_proj.weight"):
            t = permute(t, H, G)
        w.add_tensor(new, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare_gguf(g, hf_dir, ids, n_layer):
    ref, out = hf_ref.reference(hf_dir, LlamaForCausalLM, ids)
    m = test_llama.CModel(g)
    try:
        got = m.forward(ids, what=("hidden", "weights"), logits=True, final=True)
    finally:
        m.close()
    return hf_ref.diffs(ref, out, got, n_layer)


GGUF_ROPES = {k: v for k, v in ROPES.items() if k in ("llama3", "yarn", "yarn_af", "linear")}
# betas that move the correction range for d 16, base 500, 64 positions (32/1 give dims 0..3, these 2..4)
GGUF_ROPES["yarn_betas"] = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 2.0, "beta_slow": 0.5}


@pytest.mark.parametrize("rope", sorted(GGUF_ROPES))
def test_gguf_rope_equals_transformers(tmp_path, rope):
    cfg = llama_cfg(rope_scaling=GGUF_ROPES[rope], rope_theta=500.0, hidden_size=64)
    d = tmp_path / "hf"
    hf_ref.build(LlamaForCausalLM, cfg, d)
    g = tmp_path / "tiny.gguf"
    convert_llama(d, cfg, g)
    res = compare_gguf(g, d, tokens(40, cfg.vocab_size), cfg.num_hidden_layers)
    check(res)


def test_rope_freqs_matter(tmp_path):
    """The factors are used: the llama3 model with rope_freqs all 1 is the unscaled rope, away
    from the reference by far more than the tolerance."""
    cfg = llama_cfg(rope_scaling=ROPES["llama3"], rope_theta=500.0, hidden_size=64)
    d = tmp_path / "hf"
    hf_ref.build(LlamaForCausalLM, cfg, d)
    g = tmp_path / "ones.gguf"
    convert_llama(d, cfg, g, freqs_override=np.ones(8, np.float32))
    res = compare_gguf(g, d, tokens(40, cfg.vocab_size), cfg.num_hidden_layers)
    assert res["weights"] > 1e-3, res


def test_yarn_betas_matter(tmp_path):
    """The betas are read: the same GGUF without them (the defaults 32 / 1) is far off."""
    cfg = llama_cfg(rope_scaling=GGUF_ROPES["yarn_betas"], rope_theta=500.0, hidden_size=64)
    d = tmp_path / "hf"
    hf_ref.build(LlamaForCausalLM, cfg, d)
    g = tmp_path / "nobetas.gguf"
    convert_llama(d, cfg, g, betas=False)
    res = compare_gguf(g, d, tokens(40, cfg.vocab_size), cfg.num_hidden_layers)
    assert res["weights"] > 1e-4, res


def open_error(p):
    with pytest.raises(RuntimeError) as e:
        test_llama.CModel(p).close()
    return str(e.value)


def test_bad_rope_named(tmp_path):
    cfg = llama_cfg(rope_scaling=ROPES["llama3"], rope_theta=500.0, hidden_size=64)
    d = tmp_path / "hf"
    hf_ref.build(LlamaForCausalLM, cfg, d)
    g = tmp_path / "bad.gguf"
    convert_llama(d, cfg, g, freqs_override=np.ones(5, np.float32))
    msg = open_error(g)
    assert "rope_freqs.weight" in msg and "expected [8]" in msg and str(g) in msg
    convert_llama(d, cfg, g, freqs_override=np.array([1, 1, 0, 1, 1, 1, 1, 1], np.float32))
    assert "rope_freqs.weight[2]" in open_error(g)
    S, F = gguf.GGUFValueType.STRING, gguf.GGUFValueType.FLOAT32
    cfg2 = llama_cfg(hidden_size=64)
    convert_llama(d, cfg2, g, extra={"llama.rope.scaling.type": ("longrope", S)})
    msg = open_error(g)
    assert "'longrope'" in msg and "not supported" in msg
    convert_llama(d, cfg2, g, extra={"llama.rope.scaling.type": ("yarn", S)})
    assert "without llama.rope.scaling.factor" in open_error(g)
    convert_llama(d, cfg2, g, extra={"llama.rope.scaling.type": ("yarn", S), "llama.rope.scaling.factor": (0.5, F)})
    assert "llama.rope.scaling.factor 0.5 is out of range" in open_error(g)
