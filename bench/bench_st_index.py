"""How the sharded-safetensors checks scale (issue 12, class 11): a model directory whose
model.safetensors.index.json lists N tensors over two shards of N/2 tensors each (one float32
each), opened by `attnlim info`. Opening reads the index (N weight_map entries, every key checked
for duplicates) and both shard headers (N/2 tensors each, every tensor checked against the index
and the other shard), then the GPT-2 loader refuses the directory for lack of its tensors (the
message is checked, so every check above has run). Prints the wall time of each N and its ratio
to the previous N (2x the entries: a ratio near 2 is linear, near 4 quadratic), best of --repeat.
Times are CPU seconds (user + sys) of the `attnlim info` process, so that a loaded machine
changes them little.

usage: python3 bench/bench_st_index.py [--bin build/attnlim] [--sizes 125000,250000,500000,1000000]
       [--repeat 3] [--dir /tmp/attnlim-bench-st-index]
Run it under `nice -n 5` on a shared machine and quote the ratios, not the times."""
import argparse
import json
import os
import resource
import shutil
import struct
import subprocess


def shard(path, names):
    header = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i, n in enumerate(names)}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * (4 * len(names)))


def make(d, n, duplicate=None):
    """duplicate: None, "index" (the first tensor listed again at the end of the weight_map) or
    "shards" (the first tensor held by the second shard too, as its last)."""
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    names = ["t.%d.weight" % i for i in range(n)]
    half = n // 2
    shard(os.path.join(d, "a.safetensors"), names[:half])
    shard(os.path.join(d, "b.safetensors"), names[half:] + (names[:1] if duplicate == "shards" else []))
    entries = ['"%s":"%s"' % (x, "a.safetensors" if i < half else "b.safetensors") for i, x in enumerate(names)]
    if duplicate == "index":
        entries.append('"%s":"b.safetensors"' % names[0])
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write('{"metadata":{},"weight_map":{' + ",".join(entries) + "}}")
    cfg = {"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8, "n_ctx": 8, "vocab_size": 16}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)


def run(binary, d, want):
    """The CPU seconds (user + sys) of one `attnlim info` (robust to a loaded machine)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([binary, "info", "--model", d], capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert p.returncode != 0 and want in p.stderr, p.stderr
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/attnlim")
    ap.add_argument("--sizes", default="125000,250000,500000,1000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/attnlim-bench-st-index")
    a = ap.parse_args()
    prev = None
    print("%10s %10s %8s %16s %17s" % ("entries", "CPU s", "ratio", "dup. in index s", "dup. in shards s"))
    for n in map(int, a.sizes.split(",")):
        d = os.path.join(a.dir, "m%d" % n)
        make(d, n)
        best = min(run(a.bin, d, "tensor wte.weight is missing") for _ in range(a.repeat))
        make(d, n, duplicate="index")
        dup = min(run(a.bin, d, 'duplicate key "t.0.weight"') for _ in range(a.repeat))
        make(d, n, duplicate="shards")
        dsh = min(run(a.bin, d, "t.0.weight") for _ in range(a.repeat))
        shutil.rmtree(d)
        print("%10d %10.3f %8s %16.3f %17.3f" % (n, best, "%.2f" % (best / prev) if prev else "-", dup, dsh))
        prev = best


if __name__ == "__main__":
    main()
