"""GPT-NeoX (Pythia) HF directories (src/model/gptneox/gptneox.c) against transformers' float64
eager forward (tests/python/hf_ref.py): tiny random GPTNeoXForCausalLM models built from a
config and saved with save_pretrained: parallel and sequential residual, partial rotary
(rotary_pct 0.25, 0.5, 1), exact and tanh GELU, tied and untied, f32/f16/bf16, rope scaling.
Bounds: hidden states 1e-4, attention weights 1e-5."""
import numpy as np
import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

import hf_ref
from test_llama_hf import check, tokens


def cfg(**kw):
    base = dict(vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64, rotary_pct=0.25, rotary_emb_base=10000,
                layer_norm_eps=1e-5, use_parallel_residual=True, tie_word_embeddings=False)
    base.update(kw)
    return GPTNeoXConfig(**base)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(use_parallel_residual=False, rotary_pct=0.5),
    dict(rotary_pct=1.0, hidden_act="gelu_new", tie_word_embeddings=True),
    dict(attention_bias=False, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    dict(rotary_pct=0.5, rope_scaling={"rope_type": "yarn", "factor": 4.0}),
], ids=["pythia", "sequential", "full_rotary_tanh_tied", "no_bias_linear", "yarn"])
def test_gptneox(tmp_path, kw):
    c = cfg(**kw)
    hf_ref.build(GPTNeoXForCausalLM, c, tmp_path)
    d, info = hf_ref.compare(tmp_path, GPTNeoXForCausalLM, tokens(40, c.vocab_size))
    check(d)
    assert info.family == b"gpt_neox" and info.n_kv_head == 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gptneox_half(tmp_path, dtype):
    c = cfg()
    hf_ref.build(GPTNeoXForCausalLM, c, tmp_path, dtype=dtype)
    d, info = hf_ref.compare(tmp_path, GPTNeoXForCausalLM, tokens(33, c.vocab_size))
    check(d)
