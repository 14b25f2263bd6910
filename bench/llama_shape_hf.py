"""Writes a random-weight HF LlamaForCausalLM directory (float32 safetensors) of SmolLM2-135M's
shape (or a Qwen2 / Gemma 2 shape), for bench_llama: the HF-safetensors path against the GGUF
path on the same shape (the FLOP count depends on the shape only).

usage: python bench/llama_shape_hf.py OUT_DIR [llama|qwen2|gemma2]"""
import sys

import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
             num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0,
             tie_word_embeddings=True)  # SmolLM2-135M
out, fam = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "llama")
torch.manual_seed(0)
if fam == "llama":
    m = LlamaForCausalLM(LlamaConfig(**SHAPE, rms_norm_eps=1e-5))
elif fam == "qwen2":
    m = Qwen2ForCausalLM(Qwen2Config(**SHAPE))
else:  # Gemma 2 at the same width: head_dim 64, windows of 4096 (> T: every row sees its prefix)
    m = Gemma2ForCausalLM(Gemma2Config(**SHAPE, head_dim=64, query_pre_attn_scalar=64, sliding_window=4096))
m.to(torch.float32).save_pretrained(out, safe_serialization=True)
print(out)
