"""attnlim train against independent references:
  - one full training step (loss, every parameter's gradient, the weights after AdamW with
    decoupled decay and global-norm clipping) against PyTorch autograd in float64 on the same
    weights and batch (torch.optim.AdamW, torch.nn.utils.clip_grad_norm_), for every
    normalizer; sparsemax, 1.5-entmax and alpha-entmax through the `entmax` package;
  - a trained softmax checkpoint loads in HF transformers as GPT2LMHeadModel and gives the
    logits of attnlim's own forward and the loss the trainer computed on it;
  - --resume continues bit for bit (a run stopped and resumed equals one straight run);
  - the other commands refuse checkpoints of other normalizers, naming the normalizer;
  - bad options and states are errors naming the fault.
"""
import json
import math
import os
import subprocess

import numpy as np
import pytest

import torch  # installed by scripts/setup.sh: a missing reference fails, never skips
import entmax  # installed by scripts/setup.sh: a missing reference fails, never skips
from safetensors.numpy import load_file  # noqa: E402

BIN = os.environ.get("ATTNLIM_BIN")
if not BIN:
    raise RuntimeError("ATTNLIM_BIN must be set (run through ctest)")

L, H, C, CTX, B, T = 2, 2, 16, 16, 2, 12
LR, WD, CLIP, B1, B2 = 1e-3, 0.1, 1.0, 0.9, 0.95
CASES = {  # name: (attnlim options, torch normalizer spec)
    "softmax": ([], ("softmax", 1.0)),
    "softmax-T0.5": (["--temperature", "0.5"], ("softmax", 0.5)),
    "sparsemax": (["--attention-normalizer", "sparsemax"], ("sparsemax", 1.0)),
    "entmax15": (["--attention-normalizer", "entmax15"], ("entmax15", 1.0)),
    "entmax-a1.3": (["--attention-normalizer", "entmax", "--alpha", "1.3"], ("entmax", 1.3)),
    "ssmax-fixed": (["--attention-normalizer", "ssmax", "--ssmax-s", "0.7"], ("ssmax", 0.7, False)),
    "ssmax-learn": (["--attention-normalizer", "ssmax", "--ssmax-s", "0.7", "--ssmax-learn"],
                    ("ssmax", 0.7, True)),
    "sa-softmax": (["--attention-normalizer", "sa-softmax"], ("sa-softmax", 1.0)),
    "sa-softmax-norm": (["--attention-normalizer", "sa-softmax-norm"], ("sa-softmax-norm", 1.0)),
}


def run(*args, check=True):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"attnlim {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    rng = np.random.default_rng(4)
    words = ["the", "prince", "said", "and", "Natasha", "war", "of", "peace", "Moscow", "a"]
    text = " ".join(rng.choice(words, 3000)) + "\n"
    path = d / "corpus.txt"
    path.write_text(text)
    init = d / "init"
    run("make-model", "--layers", str(L), "--heads", str(H), "--embd", str(C), "--ctx", str(CTX),
        "--vocab", "256", "--seed", "3", "--out", str(init))
    return d, str(path), str(init)


def base_args(corpus_path, out):
    return ["train", "--out", str(out), "--corpus", corpus_path, "--layers", str(L), "--heads",
            str(H), "--embd", str(C), "--ctx", str(CTX), "--batch", str(B), "--seq", str(T),
            "--lr", str(LR), "--weight-decay", str(WD), "--clip", str(CLIP), "--beta1",
            str(B1), "--beta2", str(B2), "--warmup", "0", "--quiet", "--threads", "2"]


# ---- the reference model in torch float64 ------------------------------------------------

def normalize(z, spec, s_layer):
    """z [B, H, T, T] scaled logits -> weights, row t over keys 0..t."""
    Tn = z.shape[-1]
    mask = torch.tril(torch.ones(Tn, Tn, dtype=torch.bool))
    kind = spec[0]
    if kind in ("softmax", "sa-softmax", "sa-softmax-norm"):
        x = z / spec[1]
        sm = torch.softmax(x.masked_fill(~mask, -math.inf), dim=-1)
        if kind == "softmax":
            return sm
        if kind == "sa-softmax":
            return torch.where(mask, x * sm, torch.zeros_like(x))
        m = torch.clamp(z.masked_fill(~mask, math.inf).amin(-1, keepdim=True), max=0.0)
        M = torch.clamp(z.masked_fill(~mask, -math.inf).amax(-1, keepdim=True), min=0.0)
        w = (z - m) / (M - m)
        return torch.where(mask, w * sm, torch.zeros_like(x))
    if kind == "ssmax":
        logn = torch.log(torch.arange(1, Tn + 1, dtype=z.dtype)).view(1, 1, Tn, 1)
        x = z * s_layer.view(1, -1, 1, 1) * logn
        return torch.softmax(x.masked_fill(~mask, -math.inf), dim=-1)
    if kind == "entmax":  # spec[1] is alpha (temperature 1)
        return entmax.entmax_bisect(z.masked_fill(~mask, -1e4), alpha=spec[1], dim=-1, n_iter=100)
    x = (z / spec[1]).masked_fill(~mask, -1e4)  # far below any threshold: weight exactly 0
    if kind == "sparsemax":
        return entmax.sparsemax(x, dim=-1)
    return entmax.entmax15(x, dim=-1)


def forward(W, tok, tgt, spec, s):
    Bn, Tn = tok.shape
    d = C // H
    ln = torch.nn.functional.layer_norm
    x = W["wte.weight"][tok] + W["wpe.weight"][:Tn]
    for l in range(L):
        p = f"h.{l}."
        h = ln(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], 1e-5)
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (t.view(Bn, Tn, H, d).transpose(1, 2) for t in qkv.split(C, dim=-1))
        a = normalize(q @ k.transpose(-1, -2) / math.sqrt(d), spec, None if s is None else s[l])
        y = (a @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = ln(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], 1e-5)
        h = h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"]
        h = torch.nn.functional.gelu(h, approximate="tanh")
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = ln(x, (C,), W["ln_f.weight"], W["ln_f.bias"], 1e-5)
    logits = x @ W["wte.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             tgt.reshape(-1))


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("name", list(CASES))
def test_one_step_against_autograd(corpus, tmp_path, name):
    d, cpath, init = corpus
    opts, spec = CASES[name]
    dump = tmp_path / "dump.safetensors"
    run(*base_args(cpath, tmp_path / "run"), "--steps", "1", "--init", init, "--dump", str(dump),
        *opts)
    D = load_file(str(dump))
    names = [k[5:] for k in D if k.startswith("init.") and k != "init.attnlim.ssmax_s"]
    W = {n: torch.tensor(D["init." + n], dtype=torch.float64, requires_grad=True) for n in names}
    learn_s = spec[0] == "ssmax" and spec[2]
    s = None
    if spec[0] == "ssmax":
        s = torch.tensor(D["init.attnlim.ssmax_s"], dtype=torch.float64, requires_grad=learn_s)
        assert np.all(D["init.attnlim.ssmax_s"] == np.float32(spec[1]))
    tok = torch.tensor(D["tokens"].astype(np.int64))
    tgt = torch.tensor(D["targets"].astype(np.int64))
    loss = forward(W, tok, tgt, spec, s)
    loss.backward()
    assert abs(D["loss"][0] - loss.item()) <= 1e-6 * loss.item(), (D["loss"][0], loss.item())
    worst = 0.0
    for n in names:
        r = rel(D["grad." + n].astype(np.float64), W[n].grad.numpy())
        worst = max(worst, r)
        assert r < 1e-4, f"{name}: gradient of {n}: relative error {r:.3g}"
    if learn_s:
        r = rel(D["grad.attnlim.ssmax_s"].astype(np.float64), s.grad.numpy())
        assert r < 1e-4, f"{name}: gradient of s: relative error {r:.3g}"
    elif s is not None:
        assert np.all(D["new.attnlim.ssmax_s"] == D["init.attnlim.ssmax_s"])  # fixed s
    # The update: clip by the global norm, then AdamW (decay on the 2-D tensors only), by torch
    # (a) on our gradients: the optimizer alone, tight; (b) on autograd's: the whole step, on the
    # elements whose gradient stands above float32 rounding (Adam's g / (|g| + eps) turns a
    # rounding-level gradient, e.g. the key bias's, which softmax ignores, into a full step).
    ours = {n: torch.tensor(D["grad." + n], dtype=torch.float64) for n in names}
    if learn_s:
        ours["s"] = torch.tensor(D["grad.attnlim.ssmax_s"], dtype=torch.float64)
    worst_a, worst_b, skipped = 0.0, 0.0, 0
    for source in ("ours", "autograd"):
        P = {n: W[n].detach().clone().requires_grad_(True) for n in names}
        if learn_s:
            P["s"] = s.detach().clone().requires_grad_(True)
        for n in P:
            P[n].grad = (ours[n] if source == "ours" else (s if n == "s" else W[n]).grad).clone()
        grads = {n: P[n].grad.clone() for n in P}
        torch.nn.utils.clip_grad_norm_(list(P.values()), CLIP)
        decay = [P[n] for n in names if P[n].dim() == 2]
        rest = [P[n] for n in P if n == "s" or P[n].dim() == 1]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                                 {"params": rest, "weight_decay": 0.0}], lr=LR, betas=(B1, B2),
                                eps=1e-8)
        opt.step()
        for n in P:
            new = D["new." + (n if n != "s" else "attnlim.ssmax_s")].astype(np.float64)
            diff = np.abs(new - P[n].detach().numpy()) / LR
            if source == "ours":
                worst_a = max(worst_a, diff.max())
                assert diff.max() < 1e-4, f"{name}: AdamW on our gradients: {n} off by {diff.max():.3g} lr"
            else:
                g = np.abs(grads[n].numpy())
                keep = g > 1e-4 * g.max()
                skipped += int((~keep).sum())
                worst_b = max(worst_b, diff[keep].max())
                assert diff[keep].max() < 1e-3, f"{name}: updated {n} off by {diff[keep].max():.3g} lr"
    print(f"{name}: loss {loss.item():.6f}, worst gradient relative error {worst:.2e}, update "
          f"error {worst_a:.2e} lr (our gradients), {worst_b:.2e} lr (autograd's; {skipped} "
          f"rounding-level elements left out)")


def test_softmax_checkpoint_in_transformers(corpus, tmp_path):
    import transformers  # installed by scripts/setup.sh: a missing reference fails, never skips
    import attnlim
    d, cpath, _ = corpus
    run(*base_args(cpath, tmp_path / "a"), "--steps", "8", "--lr", "3e-3")
    # the trainer's loss at the checkpoint's weights: one more run starting from them
    run(*base_args(cpath, tmp_path / "b"), "--steps", "1", "--init", str(tmp_path / "a"),
        "--dump", str(tmp_path / "dump.safetensors"))
    D = load_file(str(tmp_path / "dump.safetensors"))
    model = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "a"))
    model.eval()
    tok = torch.tensor(D["tokens"].astype(np.int64))
    with torch.no_grad():
        logits = model(tok).logits.double()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256),
                                             torch.tensor(D["targets"].astype(np.int64)).reshape(-1))
    assert abs(loss.item() - D["loss"][0]) < 1e-5, (loss.item(), D["loss"][0])
    ours = attnlim.Model(str(tmp_path / "a")).forward(D["tokens"][0]).logits
    diff = np.abs(ours - logits[0].numpy()).max()
    assert diff < 1e-4, diff
    print(f"HF loss {loss.item():.6f} vs trainer {D['loss'][0]:.6f}; max logit difference {diff:.2e}")


def test_resume_is_bit_for_bit(corpus, tmp_path):
    _, cpath, _ = corpus
    a = base_args(cpath, tmp_path / "a") + ["--steps", "6", "--warmup", "2", "--eval-every", "2",
                                            "--attention-normalizer", "entmax15"]
    run(*a)
    b = base_args(cpath, tmp_path / "b") + ["--steps", "6", "--warmup", "2", "--eval-every", "2",
                                            "--attention-normalizer", "entmax15"]
    run(*b, "--stop-after", "3")
    assert json.loads((tmp_path / "b" / "config.json").read_text())["attnlim_train"]["step"] == 3
    with open(tmp_path / "b" / "log.jsonl", "a") as f:  # a line past the state (a crash after it)
        f.write('{"step": 4, "loss": 0}\n')
    run(*b, "--resume")
    for f in ("model.safetensors", "state.bin"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    la = [json.loads(x) for x in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    lb = [json.loads(x) for x in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert [(x["step"], x.get("loss"), x.get("val_loss")) for x in la] == \
           [(x["step"], x.get("loss"), x.get("val_loss")) for x in lb]
    steps = [x["loss"] for x in la if "loss" in x]
    assert len(steps) == 6
    ev = [x for x in la if "val_loss" in x]
    assert [x["step"] for x in ev] == [2, 4, 6]
    for x in ev:
        assert len(x["grad_norm_layers"]) == L and len(x["entropy_norm"]) == L
        assert all(0 <= v <= 1 + 1e-9 for row in x["entropy_norm"] for v in row)
        assert all(0 <= v <= 1 for row in x["ns_ratio"] for v in row)


def test_loss_falls_on_a_fixed_batch(corpus, tmp_path):
    _, cpath, _ = corpus
    run(*base_args(cpath, tmp_path / "r"), "--steps", "30", "--lr", "3e-3", "--clip", "0",
        "--weight-decay", "0", "--min-lr-frac", "1", "--fixed-batch", "--eval-every", "0")
    losses = [json.loads(x)["loss"] for x in (tmp_path / "r" / "log.jsonl").read_text().splitlines()
              if '"loss"' in x]
    assert len(losses) == 30
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.7 * losses[0]


def test_progress_lines_when_stderr_is_not_a_tty(corpus, tmp_path):
    """stderr a pipe (not a TTY): plain progress lines with the step, loss and tokens/s (one
    every $ATTNLIM_PROGRESS_INTERVAL seconds; 0: every step), never a carriage return or an
    escape code; --quiet: none."""
    _, cpath, _ = corpus
    env = dict(os.environ, ATTNLIM_PROGRESS_INTERVAL="0")
    args = [BIN, *base_args(cpath, tmp_path / "r"), "--steps", "3"]
    args.remove("--quiet")
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("progress:")]
    assert any("step 3 loss" in x and "tok/s" in x for x in lines), p.stderr
    assert any("step 1 loss" in x for x in lines), p.stderr
    assert "\r" not in p.stderr and "\x1b" not in p.stderr
    q = subprocess.run(args + ["--quiet", "--out", str(tmp_path / "q")], capture_output=True,
                       text=True, timeout=300, env=env)
    assert q.returncode == 0 and "progress:" not in q.stderr, q.stderr


@pytest.mark.parametrize("opts", [["--attention-normalizer", "sparsemax"],
                                  ["--attention-normalizer", "entmax", "--alpha", "1.3"],
                                  ["--attention-normalizer", "ssmax", "--ssmax-s", "0.6"],
                                  ["--attention-normalizer", "ssmax", "--ssmax-s", "0.6",
                                   "--ssmax-learn", "--lr", "0.05"],
                                  ["--attention-normalizer", "sa-softmax"],
                                  ["--attention-normalizer", "sa-softmax-norm"],
                                  ["--temperature", "0.5"],
                                  ["--attention-normalizer", "entmax15", "--temperature", "2"]])
def test_other_commands_run_the_trained_normalizer(corpus, tmp_path, opts):
    """The GPT-2 loader runs a checkpoint with the normalizer it was trained with (config.json's
    attnlim_normalizer through the forward's attention variants; a learnt ssmax s per head,
    sa-softmax and a temperature included): perplexity's NLL over T + 1 tokens equals the
    trainer's loss on the same T predictions (the trainer's forward is the reference here: it is
    itself checked against torch autograd above); an explicit --attention-normalizer softmax
    runs softmax instead."""
    _, cpath, init = corpus
    a = base_args(cpath, tmp_path / "a")
    i = a.index("--batch")
    a[i + 1] = "1"
    run(*a, "--steps", "3", "--init", init, *opts)  # make-model's weights: peaked attention
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())["attnlim_normalizer"]
    if "--ssmax-learn" in opts:  # the heads' s moved apart: a per-head s is what is loaded
        s = np.array(cfg["s_per_head"])
        assert s.shape == (L, H) and np.ptp(s) > 1e-3, s
    b = base_args(cpath, tmp_path / "b")
    b[i + 1] = "1"
    run(*b, "--steps", "1", "--init", str(tmp_path / "a"), "--dump",
        str(tmp_path / "d.safetensors"), *opts)
    D = load_file(str(tmp_path / "d.safetensors"))
    ids = list(D["tokens"][0]) + [D["targets"][0][-1]]
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids)))
    ppl = ["perplexity", "--model", str(tmp_path / "a"), "--tokens", str(tmp_path / "ids.txt"),
           "--length", str(T + 1), "--json"]
    nll = json.loads(run(*ppl).stdout)["nll"]
    assert abs(nll - D["loss"][0]) < 1e-5, (nll, D["loss"][0])
    # the independent reference: torch float64 (entmax for the sparse ones) on the checkpoint's
    # own files, the normalizer and the learnt s read from its config.json
    W = {k: torch.tensor(v, dtype=torch.float64) for k, v in
         load_file(str(tmp_path / "a" / "model.safetensors")).items()}
    W = {k[12:] if k.startswith("transformer.") else k: v for k, v in W.items()}
    kind = cfg["name"]
    spec = (kind, cfg.get("alpha", 1.0)) if kind == "entmax" else \
        (kind, cfg.get("temperature", 1.0), False)
    s = None
    if kind == "ssmax":
        s = torch.tensor(cfg["s_per_head"] if "s_per_head" in cfg else [[cfg["s"]] * H] * L,
                         dtype=torch.float64)
    ref = forward(W, torch.tensor([ids[:-1]], dtype=torch.int64),
                  torch.tensor([ids[1:]], dtype=torch.int64), spec, s).item()
    assert abs(nll - ref) < 1e-5 * max(1.0, ref), (cfg, nll, ref)
    soft = json.loads(run(*ppl, "--attention-normalizer", "softmax").stdout)["nll"]
    assert abs(soft - nll) > 1e-4, (soft, nll)
    import attnlim
    w = attnlim.Model(str(tmp_path / "a")).forward(D["tokens"][0], capture=("weights",))
    lower = np.tril(np.ones((T, T), dtype=bool))
    zeros = sum(int((c["weights"][:, lower] == 0).sum()) for c in w.captures.values())
    if cfg["name"] in ("sparsemax", "entmax15", "entmax"):
        assert zeros > 0, zeros  # sparse supports, captured as run
    elif cfg["name"] in ("softmax", "ssmax"):
        assert zeros == 0, zeros
    sums = np.concatenate([c["weights"].sum(-1).ravel() for c in w.captures.values()])
    assert (np.abs(sums - 1).max() < 1e-5) == (not cfg["name"].startswith("sa-softmax")), sums


def test_bad_trained_normalizer_entries(corpus, tmp_path):
    """A config.json whose attnlim_normalizer is malformed is refused naming config.json."""
    _, cpath, _ = corpus
    run(*base_args(cpath, tmp_path / "r"), "--steps", "1", "--attention-normalizer", "ssmax",
        "--ssmax-learn")
    cfg_path = tmp_path / "r" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for bad, why in [({"s_per_head": [[1.0] * H]}, "s_per_head"),
                     ({"s_per_head": [[-1.0] * H] * L}, "s_per_head"),
                     ({"name": "bogus"}, "unknown normalizer bogus"),
                     ({"temperature": "hot"}, "numeric")]:
        c = json.loads(json.dumps(cfg))
        c["attnlim_normalizer"].update(bad)
        cfg_path.write_text(json.dumps(c))
        p = run("info", "--model", str(tmp_path / "r"), check=False)
        assert p.returncode == 1 and why in p.stderr and "config.json" in p.stderr, p.stderr


def test_errors(corpus, tmp_path):
    _, cpath, init = corpus
    a = base_args(cpath, tmp_path / "r")
    run(*a, "--steps", "1")
    p = run(*a, "--steps", "1", check=False)  # the directory holds a run
    assert p.returncode == 1 and "--resume" in p.stderr
    p = run(*a, "--steps", "1", "--resume", "--attention-normalizer", "sparsemax", check=False)
    assert p.returncode == 1 and "state.bin" in p.stderr
    p = run(*a[:2], str(tmp_path / "x"), *a[3:], "--ssmax-learn", check=False)
    assert p.returncode == 2 and "ssmax" in p.stderr
    p = run(*a[:2], str(tmp_path / "y"), *a[3:], "--seq", "17", check=False)
    assert p.returncode == 2 and "--ctx" in p.stderr
    p = run(*a[:2], str(tmp_path / "z"), *a[3:], "--attention-normalizer", "bogus", check=False)
    assert p.returncode == 2 and "bogus" in p.stderr
    p = run(*a[:2], str(tmp_path / "w"), *a[3:], "--init", str(tmp_path / "nothing"), check=False)
    assert p.returncode == 1 and "nothing" in p.stderr
    (tmp_path / "r" / "state.bin").write_bytes(b"ALTRST01" + b"\0" * 20)
    p = run(*a, "--steps", "2", "--resume", check=False)
    assert p.returncode == 1 and "state.bin" in p.stderr


def test_checkpoints_run_in_other_commands(corpus, tmp_path):
    """A GPT-2 BPE run's checkpoint runs perplexity on the corpus (the model's own tokenizer),
    a byte-level one on token ids; both perplexities finite and below the uniform vocabulary's."""
    _, cpath, _ = corpus
    run(*base_args(cpath, tmp_path / "bpe"), "--steps", "2", "--tokenizer", "gpt2", "--lr", "1e-2")
    p = run("perplexity", "--model", str(tmp_path / "bpe"), "--corpus", cpath, "--length", "12",
            "--json")
    assert 1 < json.loads(p.stdout)["perplexity"] < 50257
    run(*base_args(cpath, tmp_path / "bytes"), "--steps", "2")
    ids = np.frombuffer(open(cpath, "rb").read()[:200], dtype=np.uint8)
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids)))
    p = run("perplexity", "--model", str(tmp_path / "bytes"), "--tokens", str(tmp_path / "ids.txt"),
            "--length", "12", "--json")
    assert 1 < json.loads(p.stdout)["perplexity"] < 256


def test_byte_level_checkpoint_tokenizes_as_trained(corpus, tmp_path):
    """A byte-level run's checkpoint carries vocab.json + merges.txt (the GPT-2 byte-to-character
    map, id = byte, no merges): every command tokenizes a corpus into its bytes, as the trainer
    did. Against Python's bytes and HF's GPT2Tokenizer on the same files; perplexity over
    --corpus equals perplexity over those ids given with --tokens."""
    _, cpath, _ = corpus
    run(*base_args(cpath, tmp_path / "r"), "--steps", "1", "--tokenizer", "bytes")
    text = "Natasha é 日本 \x01\x7f tabs\tand\r\nnewlines\n"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    ours = [int(x) for x in run("tokenize", "--model", str(tmp_path / "r"), "--corpus",
                                str(tmp_path / "t.txt")).stdout.split()]
    assert ours == list(text.encode("utf-8"))
    from transformers import GPT2Tokenizer
    hf = GPT2Tokenizer(str(tmp_path / "r" / "vocab.json"), str(tmp_path / "r" / "merges.txt"))
    assert hf(text)["input_ids"] == ours
    ids = list(open(cpath, "rb").read()[:T + 1])
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids)))
    a = json.loads(run("perplexity", "--model", str(tmp_path / "r"), "--corpus", cpath, "--length",
                       str(T + 1), "--json").stdout)["nll"]
    b = json.loads(run("perplexity", "--model", str(tmp_path / "r"), "--tokens",
                       str(tmp_path / "ids.txt"), "--length", str(T + 1), "--json").stdout)["nll"]
    assert a == b
    (tmp_path / "r" / "vocab.json").unlink()
    p = run("info", "--model", str(tmp_path / "r"), check=False)
    assert p.returncode == 1 and "vocab.json" in p.stderr and "bytes" in p.stderr, p.stderr
