"""PyTorch (transformers, float32, sdpa, no capture) forward of an HF model directory at T tokens:
the process CPU seconds per forward / threads, beside bench_llama --no-capture on the same
directory (bench/llama_shape_hf.py writes one of any family).

usage: python bench/family_torch.py DIR T [threads] [reps]"""
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM

d, T = sys.argv[1], int(sys.argv[2])
th = int(sys.argv[3]) if len(sys.argv) > 3 else 2
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 1
torch.set_num_threads(th)
m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
ids = torch.randint(0, m.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    m.model(ids, use_cache=False)  # warm-up; the decoder stack only (no LM head), as bench_llama
    cpu, wall = [], []
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        m.model(ids, use_cache=False)
        cpu.append((time.process_time() - c0) / th)
        wall.append(time.perf_counter() - w0)
print("torch %s T = %d, %d threads: CPU/threads median %.3f s, wall median %.3f s"
      % (m.config.model_type, T, th, statistics.median(cpu), statistics.median(wall)))
