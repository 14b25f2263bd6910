"""GGUF files of architectures qwen2 and gemma2 (the Llama-family forward of
src/model/llama/ read through llama.c's GGUF reader), converted here from tiny random HF models
with the `gguf` package's own writer and tensor-name map (gguf.GGUFWriter,
gguf.get_tensor_name_map), following llama.cpp's converter conventions: no q/k row permutation
for these architectures, Gemma 2's norms stored as 1 + w. Compared with transformers' float64
eager forward of the HF model: hidden states 1e-4, attention weights 1e-5."""
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from transformers import Gemma2Config, Gemma2ForCausalLM, Qwen2Config, Qwen2ForCausalLM

import gguf
import hf_ref
from test_llama_hf import check, tokens

ARCH = {"qwen2": gguf.MODEL_ARCH.QWEN2, "gemma2": gguf.MODEL_ARCH.GEMMA2}


def convert(hf_dir, cfg, arch, out):
    w = gguf.GGUFWriter(str(out), arch)
    L = cfg.num_hidden_layers
    w.add_block_count(L)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    if arch == "gemma2":
        w.add_key_length(cfg.head_dim)
        w.add_value_length(cfg.head_dim)
        w.add_sliding_window(cfg.sliding_window)
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    names = gguf.get_tensor_name_map(ARCH[arch], L)
    for name, t in load_file(str(hf_dir / "model.safetensors")).items():
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new, name
        t = t.astype(np.float32)
        if arch == "gemma2" and name.endswith("norm.weight"):
            t = t + 1  # llama.cpp's Gemma converters store 1 + w
        w.add_tensor(new, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch", ["qwen2", "gemma2"])
def test_gguf_family(tmp_path, arch):
    if arch == "qwen2":
        cls = Qwen2ForCausalLM
        cfg = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    else:
        cls = Gemma2ForCausalLM
        cfg = Gemma2Config(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                           sliding_window=8, query_pre_attn_scalar=16, attn_logit_softcapping=2.0,
                           final_logit_softcapping=3.0)
    d = tmp_path / "hf"
    hf_ref.build(cls, cfg, d)
    g = tmp_path / ("tiny-%s.gguf" % arch)
    convert(d, cfg, arch, g)
    ids = tokens(40, cfg.vocab_size)
    ref, out = hf_ref.reference(d, cls, ids)
    import test_llama
    m = test_llama.CModel(g)
    try:
        got = m.forward(ids, what=("hidden", "weights"), logits=True, final=True)
        assert m.info.family == arch.encode()
    finally:
        m.close()
    dh = max(float(np.abs(got["hidden"][l] - hf_ref.first_norm(ref, l)(out.hidden_states[l])[0].numpy()).max())
             for l in range(cfg.num_hidden_layers))
    dw = max(float(np.abs(got["weights"][l] - out.attentions[l][0].numpy()).max()) for l in range(cfg.num_hidden_layers))
    lg = out.logits[0].numpy()
    d = {"hidden": dh, "weights": dw, "final": float(np.abs(got["final"] - out.hidden_states[-1][0].numpy()).max()),
         "logits": float(np.abs(got["logits"] - lg).max() / np.abs(lg).max())}
    check(d)
    if arch == "gemma2":
        assert got["window"] == {0: 8, 1: 0, 2: 8}


def convert_neox(hf_dir, cfg, out, more_kv=None):
    """As llama.cpp's GPTNeoXModel converter: query_key_value rows [H, 3, d] regrouped as
    [q; k; v] blocks. more_kv(writer): more metadata (a tokenizer)."""
    w = gguf.GGUFWriter(str(out), "gptneox")
    if more_kv:
        more_kv(w)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_rope_dimension_count(int(cfg.rotary_pct * cfg.hidden_size // cfg.num_attention_heads))
    w.add_parallel_residual(cfg.use_parallel_residual)
    w.add_layer_norm_eps(cfg.layer_norm_eps)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPTNEOX, cfg.num_hidden_layers)
    H, C = cfg.num_attention_heads, cfg.hidden_size
    for name, t in load_file(str(hf_dir / "model.safetensors")).items():
        if name.endswith(("attention.bias", "attention.masked_bias", "inv_freq")):
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new, name
        t = t.astype(np.float32)
        if "query_key_value" in name:
            t = t.reshape((H, 3, C // H) + t.shape[1:])
            t = np.concatenate([t[:, i].reshape((C,) + t.shape[3:]) for i in range(3)])
        w.add_tensor(new, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("parallel", [True, False])
def test_gguf_gptneox(tmp_path, parallel):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
    import test_llama
    cfg = GPTNeoXConfig(vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.5,
                        use_parallel_residual=parallel)
    d = tmp_path / "hf"
    hf_ref.build(GPTNeoXForCausalLM, cfg, d)
    g = tmp_path / "tiny-gptneox.gguf"
    convert_neox(d, cfg, g)
    ids = tokens(40, cfg.vocab_size)
    ref, out = hf_ref.reference(d, GPTNeoXForCausalLM, ids)
    m = test_llama.CModel(g)
    try:
        got = m.forward(ids, what=("hidden", "weights"), logits=True, final=True)
        assert m.info.family == b"gpt_neox"
    finally:
        m.close()
    check(hf_ref.diffs(ref, out, got, cfg.num_hidden_layers))
