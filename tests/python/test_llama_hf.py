"""Llama-family HF directories (src/model/llama/llama_hf.c + the shared forward of llama.c)
against transformers' own float64 eager forward (tests/python/hf_ref.py): tiny random
LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM built from a config and saved with
save_pretrained (f32, f16, bf16; one file and sharded), every rope_scaling type, GQA, tied and
untied embeddings, attention_bias, mlp_bias, head_dim != hidden/heads, sliding windows shorter
and longer than the input. Bounds: hidden states 1e-4, attention weights 1e-5."""
import json
import os

import numpy as np
import pytest
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

import hf_ref
import test_llama

HID, ATT = 1e-4, 1e-5


def tokens(T, V, seed=1):
    return np.random.default_rng(seed).integers(0, V, size=T).tolist()


def llama_cfg(**kw):
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    base.update(kw)
    return LlamaConfig(**base)


def check(d, T=None):
    print("max diff: hidden %.2e weights %.2e final %.2e logits(rel) %.2e" % (d["hidden"], d["weights"], d["final"], d["logits"]))
    assert d["hidden"] < HID, d
    assert d["weights"] < ATT, d
    assert d["final"] < HID, d
    assert d["logits"] < 1e-4, d


ROPES = {
    "none": None,
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1},
    "yarn_af": {"rope_type": "yarn", "factor": 3.0, "attention_factor": 0.8},
}


@pytest.mark.parametrize("rope", sorted(ROPES))
def test_llama_rope_types(tmp_path, rope):
    cfg = llama_cfg(rope_scaling=ROPES[rope], rope_theta=500.0)
    hf_ref.build(LlamaForCausalLM, cfg, tmp_path)
    # dynamic changes the frequencies only past max_position_embeddings: run there
    T = 96 if rope == "dynamic" else 40
    d, info = hf_ref.compare(tmp_path, LlamaForCausalLM, tokens(T, cfg.vocab_size))
    check(d)
    assert info.family == b"llama" and info.n_kv_head == 2 and info.n_ctx == (128 if rope == "dynamic" else 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tied,bias", [(True, False), (False, True)])
def test_llama_dtypes_tied_bias(tmp_path, dtype, tied, bias):
    cfg = llama_cfg(tie_word_embeddings=tied, attention_bias=bias, mlp_bias=bias,
                    num_key_value_heads=1 if tied else 4)
    hf_ref.build(LlamaForCausalLM, cfg, tmp_path, dtype=dtype)
    d, info = hf_ref.compare(tmp_path, LlamaForCausalLM, tokens(33, cfg.vocab_size))
    check(d)
    assert info.dtype == {torch.float32: b"f32", torch.float16: b"f16", torch.bfloat16: b"bf16"}[dtype]
    G = cfg.num_key_value_heads
    assert d["kv_head"][0] == [h // (4 // G) for h in range(4)]


def test_llama_sharded_head_dim(tmp_path):
    """A sharded checkpoint (index + shards) and head_dim 16 != hidden/heads = 8."""
    cfg = llama_cfg(head_dim=16, hidden_size=32, num_attention_heads=4, num_key_value_heads=2)
    hf_ref.build(LlamaForCausalLM, cfg, tmp_path, max_shard_size="20KB")
    assert os.path.exists(tmp_path / "model.safetensors.index.json")
    d, info = hf_ref.compare(tmp_path, LlamaForCausalLM, tokens(30, cfg.vocab_size))
    check(d)
    assert info.d_head == 16


@pytest.mark.parametrize("window,T", [(8, 40), (5, 5), (50, 40)])
def test_mistral_sliding_window(tmp_path, window, T):
    """Windows shorter than, equal to and longer than the input."""
    cfg = MistralConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                        sliding_window=window, rope_theta=10000.0)
    hf_ref.build(MistralForCausalLM, cfg, tmp_path)
    d, info = hf_ref.compare(tmp_path, MistralForCausalLM, tokens(T, cfg.vocab_size))
    check(d)
    assert info.family == b"mistral" and d["window"] == {0: window, 1: window}
    # the window really is in the reference: row t sees min(t + 1, window) keys
    w = d["attn"][0]
    for t in range(T):
        assert np.count_nonzero(w[:, t, :] > 0, axis=-1).max() == min(t + 1, window)


def test_qwen2_biases(tmp_path):
    cfg = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rope_theta=10000.0, tie_word_embeddings=True)
    m = hf_ref.build(Qwen2ForCausalLM, cfg, tmp_path)
    assert m.model.layers[0].self_attn.q_proj.bias is not None
    d, info = hf_ref.compare(tmp_path, Qwen2ForCausalLM, tokens(40, cfg.vocab_size))
    check(d)
    assert info.family == b"qwen2"


@pytest.mark.parametrize("window,mwl", [(6, 1), (6, 0), (6, 3), (100, 1)])
def test_qwen2_use_sliding_window(tmp_path, window, mwl):
    """use_sliding_window = true as current transformers (Qwen2Config.layer_types): layers below
    max_window_layers global, the others windowed. The reference is transformers 4.46.3's float64
    eager forward, which windows every layer, with the plain causal mask handed to the layers
    below max_window_layers (max_window_layers = 0 is 4.46.3 unchanged); "layer_types" in the
    config, as current transformers writes it, is read and checked against these fields."""
    cfg = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rope_theta=10000.0, use_sliding_window=True, sliding_window=window,
                      max_window_layers=mwl)
    hf_ref.build(Qwen2ForCausalLM, cfg, tmp_path)
    T = 40
    win = [0 if l < mwl else window for l in range(3)]
    d, info = hf_ref.compare(tmp_path, Qwen2ForCausalLM, tokens(T, cfg.vocab_size), global_layers=range(mwl))
    check(d)
    assert d["window"] == dict(enumerate(win))
    for l in range(3):  # the reference's mask: row t sees min(t + 1, window) keys (all t + 1 if global)
        for t in range(T):
            assert np.count_nonzero(d["attn"][l][:, t, :] > 0, axis=-1).max() == min(t + 1, win[l] or T)
    r = test_llama.run_cli("info", "--model", str(tmp_path), "--json", check=True)
    arch = json.loads(r.stdout)["architecture"]
    assert arch["max_window_layers"] == mwl and arch["window_of_layer"] == win
    types = ["sliding_attention" if w else "full_attention" for w in win]
    edit_config(tmp_path, layer_types=types)  # as current transformers saves it: accepted
    test_llama.run_cli("info", "--model", str(tmp_path), check=True)
    edit_config(tmp_path, layer_types=types[::-1] if mwl not in (0, 3) else ["full_attention"] + types[1:]
                if mwl == 0 else ["sliding_attention"] * 3)
    r = test_llama.run_cli("info", "--model", str(tmp_path))
    assert r.returncode != 0 and "config.json: layer_types[" in r.stderr and "max_window_layers" in r.stderr, \
        r.stderr


def edit_config(path, **kw):
    p = path / "config.json"
    c = json.loads(p.read_text())
    c.update(kw)
    p.write_text(json.dumps(c))


def open_error(path):
    with pytest.raises(RuntimeError) as e:
        test_llama.CModel(path)
    return str(e.value)


def test_bad_configs(tmp_path):
    """Malformed config.json files: each refused with a message naming the fault."""
    hf_ref.build(LlamaForCausalLM, llama_cfg(), tmp_path)
    cases = [
        (dict(rope_scaling={"rope_type": "longrope", "factor": 2.0}), "rope_scaling type 'longrope'"),
        (dict(num_key_value_heads=3), "not a multiple of 3 key/value heads"),
        (dict(model_type="falcon"), "model_type 'falcon'"),
        (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
        (dict(rope_scaling={"rope_type": "linear"}), "\"factor\" is missing"),
        (dict(attention_bias=True), "tensor 'model.layers.0.self_attn.q_proj.bias' is missing"),
        (dict(num_hidden_layers=1), "unexpected tensor 'model.layers.1."),
    ]
    orig = (tmp_path / "config.json").read_text()
    for kw, msg in cases:
        (tmp_path / "config.json").write_text(orig)
        edit_config(tmp_path, **kw)
        e = open_error(tmp_path)
        assert msg in e and "config.json" in e or msg in e, (kw, e)
    (tmp_path / "config.json").write_text(orig)
    edit_config(tmp_path, model_type="mistral", sliding_window=65)
    assert "sliding_window 65 is larger than the context" in open_error(tmp_path)
