"""Random-weight HF model directories of realistic shapes for every family, built by
transformers' own classes (save_pretrained, safetensors), for bench/bench_families.sh (our
forward against llama.cpp's prompt processing on the same GGUF). Not used by the tests.

usage: python bench/family_shapes.py OUT_DIR FAMILY [DTYPE]
FAMILY: qwen2 (Qwen2-0.5B's shape), mistral (TinyLlama-1.1B's widths, 8 of its 22 layers, the
Mistral class with Mistral-7B-v0.1's window of 4096), gemma2 (Gemma-2-2B's widths and vocabulary,
4 of its 26 layers), gptneox (Pythia-410m's shape). DTYPE: float16 (default) or float32."""
import sys

import torch
import transformers as tf

SHAPES = {
    "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM,
              dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                   num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                   rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "mistral": (tf.MistralConfig, tf.MistralForCausalLM,
                dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=32,
                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, rope_theta=1e4,
                     rms_norm_eps=1e-5, sliding_window=4096, tie_word_embeddings=False)),
    "gemma2": (tf.Gemma2Config, tf.Gemma2ForCausalLM,
               dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256, vocab_size=256000,
                    max_position_embeddings=8192, sliding_window=4096, attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0)),
    "gptneox": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM,
                dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                     vocab_size=50304, max_position_embeddings=2048, rotary_pct=0.25, rotary_emb_base=10000,
                     use_parallel_residual=True, tie_word_embeddings=False)),
}

out, fam = sys.argv[1], sys.argv[2]
dtype = getattr(torch, sys.argv[3] if len(sys.argv) > 3 else "float16")
cfg_cls, cls, shape = SHAPES[fam]
torch.manual_seed(0)
cfg = cfg_cls(**shape)
cfg.torch_dtype = dtype
m = cls(cfg)  # transformers' own init (N(0, initializer_range))
m.to(dtype).save_pretrained(out, safe_serialization=True)
print(out)
