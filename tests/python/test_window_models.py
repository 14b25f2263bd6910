"""reproduce and diagnose on tiny random Mistral and Gemma 2 models (built here by transformers'
own classes) whose sliding window (6 keys) is shorter than L: every per-head reading against
numpy float64 straight loops over each row's own keys, on the attention weights and value
vectors of transformers' float64 eager forward (output_attentions=True; v from v_proj). The
windows are recorded per layer in results.json and diagnose.json."""
import json

import numpy as np
import pytest
import torch

import test_families_cli as F
import test_llama
from test_metrics import ref_row

W = 6
FAMS = {
    "mistral": (F.MistralForCausalLM, lambda: F.MistralConfig(**F.SMALL, num_key_value_heads=2, sliding_window=W),
                "llama2", lambda l: W),
    "gemma2": (F.Gemma2ForCausalLM, lambda: F.Gemma2Config(**F.SMALL, num_key_value_heads=2, head_dim=8,
                                                            sliding_window=W, query_pre_attn_scalar=8),
               "gemma", lambda l: 0 if l % 2 else W),
}


@pytest.fixture(scope="module")
def book():
    return test_llama.corpus().decode("utf-8")


def lo_of(t, win):
    return max(0, t - win + 1) if win else 0


def hf_heads(cls, d, toks):
    """transformers' float64 eager attention [layer][head, T, T] and v [layer][head, T, d_head]."""
    ref = cls.from_pretrained(str(d), torch_dtype=torch.float64, attn_implementation="eager")
    cfg = ref.config
    vs = {}
    hooks = [layer.self_attn.v_proj.register_forward_hook(
        lambda mod, inp, out, l=l: vs.__setitem__(l, out[0].detach().numpy()))
        for l, layer in enumerate(ref.model.layers)]
    with torch.no_grad():
        out = ref(torch.tensor([toks]), output_attentions=True, use_cache=False)
    for h in hooks:
        h.remove()
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // nh
    att = [a[0].numpy() for a in out.attentions]
    v = [np.stack([vs[l][:, (h // (nh // nkv)) * dh:(h // (nh // nkv) + 1) * dh] for h in range(nh)])
         for l in range(len(att))]
    return att, v


def head_means(a, x, N, win, L):
    rows = [ref_row(a[t, lo_of(t, win):t + 1], x[lo_of(t, win):t + 1], N)
            for t in range(L) if t + 1 - lo_of(t, win) > N]
    return {k: np.mean([r[k] for r in rows]) if rows else np.nan for k in ("dtilde", "dmax", "E", "ns_lower",
                                                                         "ns_upper", "ns_ratio")}


def spectral(rows, T):
    """Mean over rows (n >= 2) of the spectral norm of softmax's Jacobian at z / T, z = log a."""
    vals = []
    for r in rows:
        if len(r) < 2:
            continue
        z = np.log(r) / T
        p = np.exp(z - z.max())
        p /= p.sum()
        vals.append(np.abs(np.linalg.eigvalsh((np.diag(p) - np.outer(p, p)) / T)).max())
    return np.mean(vals)


@pytest.mark.parametrize("name", sorted(FAMS))
def test_windowed_reproduce_and_diagnose(tmp_path, book, name):
    cls, cfg_fn, pipe, win_of = FAMS[name]
    F.FAMILIES[name] = (cls, cfg_fn, pipe)
    d = tmp_path / "model"
    F.make(name, book, d)
    L = 32
    test_llama.run_cli("capture", "--model", str(d), "--corpus", "war-and-peace", "--length", str(L),
                       "--what", "weights", "--out", str(tmp_path / "cap"), check=True)
    toks = json.loads((tmp_path / "cap" / "manifest.json").read_text())["token_ids"]
    att, v = hf_heads(cls, d, toks)
    n_layer, n_head = len(att), att[0].shape[0]
    rep = tmp_path / "rep"
    test_llama.run_cli("reproduce", "--model", str(d), "--quick", "--lengths", "16,32", "--long-length", str(L),
                       "--top-n", "1,3", "--separability-n", "1,2,4", "--temperatures", "0.3,1,3",
                       "--experiments", "vanishing,alg1,alg2,alg4,alg5", "--out", str(rep), check=True)
    res = json.loads((rep / "results.json").read_text())
    assert res["manifest"]["model"]["sliding_window"]["of_layer"] == [win_of(l) for l in range(n_layer)]
    vmax, vent = np.load(rep / "vanishing_max_weight.npy"), np.load(rep / "vanishing_entropy.npy")
    a1 = {k: np.load(rep / ("alg1_%s.npy" % k)) for k in ("dtilde", "dmax", "E")}
    a2 = np.load(rep / "alg2_dtilde.npy")
    a4 = {k: np.load(rep / ("alg4_%s.npy" % k)) for k in ("ratio", "lower", "upper")}
    spec = np.load(rep / "alg5_spectral.npy")
    for l in range(n_layer):
        win = win_of(l)
        for h in range(n_head):
            a, x = att[l][h], v[l][h]
            rows = [a[t, lo_of(t, win):t + 1] for t in range(L)]
            assert all(abs(a[t, :lo_of(t, win)]).max(initial=0) == 0 for t in range(L))  # HF masks them
            assert np.allclose(vmax[l, h], [r.max() for r in rows], atol=1e-5)
            assert np.allclose(vent[l, h], [-(r * np.log(r)).sum() for r in rows], atol=1e-5)
            for li, Lx in enumerate((16, 32)):  # Algorithm 1, N = 5, on window 0 of each L
                ref = head_means(a[:Lx, :Lx], x[:Lx], 5, win, Lx)
                for k in ("dtilde", "dmax", "E"):
                    assert np.isclose(a1[k][li, l, h], ref[k], rtol=1e-4, atol=1e-6), (k, Lx, l, h)
            for ni, N in enumerate((1, 3)):  # Algorithm 2
                assert np.isclose(a2[ni, l, h], head_means(a, x, N, win, L)["dtilde"], rtol=1e-4)
            for ni, N in enumerate((1, 2, 4)):  # Algorithm 4
                ref = head_means(a, x, N, win, L)
                assert np.isclose(a4["upper"][ni, l, h], ref["ns_upper"], rtol=1e-3, atol=1e-4)
                assert np.isclose(a4["lower"][ni, l, h], ref["ns_lower"], rtol=1e-3, atol=1e-4)
                assert abs(a4["ratio"][ni, l, h] - ref["ns_ratio"]) <= 2.0 / (N * L)  # one flip at most
            for ti, T in enumerate((0.3, 1.0, 3.0)):  # Algorithm 5: the exact spectral norm
                assert np.isclose(spec[l, h, ti], spectral(rows, T), rtol=1e-3), (l, h, T)
    # diagnose at L = 32: every per-head value against the same references
    dg = tmp_path / "diag"
    test_llama.run_cli("diagnose", "--model", str(d), "--length", str(L), "--out", str(dg), check=True)
    dj = json.loads((dg / "diagnose.json").read_text())
    assert dj["sliding_window"]["of_layer"] == [win_of(l) for l in range(n_layer)]
    for e in dj["heads"]:
        l, h = e["layer"], e["head"]
        win, a, x = win_of(l), att[e["layer"]][e["head"]], v[l][h]
        rows = [a[t, lo_of(t, win):t + 1] for t in range(L)]
        assert e["mean_max_weight"] == pytest.approx(np.mean([r.max() for r in rows]), abs=1e-5)
        ent = [-(r * np.log(r)).sum() / np.log(len(r)) for r in rows if len(r) >= 2]
        assert e["mean_entropy_over_log_n"] == pytest.approx(np.mean(ent), abs=1e-5)
        sink = [a[t, 0] for t in range(L) if lo_of(t, win) == 0]  # the rows that see token 0
        assert e["mean_weight_on_token0"] == pytest.approx(np.mean(sink), abs=1e-5)
        assert e["jacobian_spectral_T1"] == pytest.approx(spectral(rows, 1.0), rel=1e-3)
        for k, N in enumerate(dj["separability_N"]):
            ref = head_means(a, x, N, win, L)["ns_ratio"]
            if np.isnan(ref):  # N >= the window: no row has n > N
                assert e["ns_ratio"][k] is None
            else:
                assert abs(e["ns_ratio"][k] - ref) <= 2.0 / (N * L)


def test_windowed_dump(tmp_path, book):
    """A capture of a windowed model is a dump: its manifest records each layer's window, the reader
    validates the masked entries before the window (weights exactly 0), and reproduce / diagnose
    on the dump equal them on the model (the long window and L = T bit for bit, shorter prefixes
    to float32 rounding, as test_dump.test_capture_is_a_dump for unwindowed models)."""
    cls, cfg_fn, pipe, win_of = FAMS["gemma2"]
    F.FAMILIES["gemma2"] = (cls, cfg_fn, pipe)
    d = tmp_path / "model"
    F.make("gemma2", book, d)
    L = 32
    cap = tmp_path / "cap"
    test_llama.run_cli("capture", "--model", str(d), "--corpus", "war-and-peace", "--length", str(L),
                       "--what", "q,k,v,logits,weights", "--out", str(cap), check=True)
    man = json.loads((cap / "manifest.json").read_text())
    assert man["sliding_window"]["of_layer"] == [W, 0]
    args = ("--quick", "--lengths", "16,32", "--long-length", str(L), "--critical-n", "1,2,3,4,5")
    outs = {}
    for what, src in (("dump", cap), ("model", d)):
        test_llama.run_cli("reproduce", "--model", str(src), *args, "--out", str(tmp_path / ("rep_" + what)), check=True)
        outs[what] = {p.name: np.load(p) for p in (tmp_path / ("rep_" + what)).glob("*.npy") if p.name != "explorer_weights.npy"}
    assert sorted(outs["dump"]) == sorted(outs["model"])
    for name, arr in outs["dump"].items():
        ref = outs["model"][name]
        if name.startswith(("alg1_", "alg3_")):
            assert np.array_equal(arr[1], ref[1], equal_nan=True), name
            ok = np.isclose(arr[0], ref[0], rtol=1e-5, atol=1e-9) | (np.isnan(arr[0]) & np.isnan(ref[0]))
            assert ok.all(), name
        else:
            assert np.array_equal(arr, ref, equal_nan=True), name
    res = json.loads((tmp_path / "rep_dump" / "results.json").read_text())
    assert res["manifest"]["model"]["sliding_window"]["of_layer"] == [W, 0]
    a = json.loads(test_llama.run_cli("diagnose", "--model", str(cap), "--json", check=True).stdout)
    b = json.loads(test_llama.run_cli("diagnose", "--model", str(d), "--length", str(L), "--json", check=True).stdout)
    assert a["heads"] == b["heads"] and a["sliding_window"]["of_layer"] == [W, 0]
    # the reader's checks: a weight before the window, a bad window list
    w = np.load(cap / "layer0.weights.npy")
    w2 = w.copy()
    w2[1, 20, 3] = 1e-3  # row 20 of a window of 6 sees keys 15..20
    np.save(cap / "layer0.weights.npy", w2)
    r = test_llama.run_cli("diagnose", "--model", str(cap))
    assert r.returncode != 0 and "column 3, before the layer's sliding window of 6 keys" in r.stderr, r.stderr
    np.save(cap / "layer0.weights.npy", w)
    man["sliding_window"]["of_layer"] = [W]
    (cap / "manifest.json").write_text(json.dumps(man))
    r = test_llama.run_cli("diagnose", "--model", str(cap))
    assert r.returncode != 0 and "\"sliding_window\" must be" in r.stderr, r.stderr
    # a dump of q, k, v only: logits and weights derived over each row's window (q.k / sqrt(d_head):
    # a dump knows no soft-cap, so against numpy on the stored q and k, not against the model)
    man["sliding_window"]["of_layer"] = [W, 0]
    qk = {l: (np.load(cap / ("layer%d.q.npy" % l)).astype(np.float64),
              np.load(cap / ("layer%d.k.npy" % l)).astype(np.float64)) for l in range(2)}
    (cap / "manifest.json").write_text(json.dumps(man))
    for l in range(2):
        for k in ("logits", "weights"):
            (cap / ("layer%d.%s.npy" % (l, k))).unlink()
    man["options"]["what"] = ["q", "k", "v"]
    man["files"] = [f for f in man["files"] if f["what"] not in ("logits", "weights")]
    (cap / "manifest.json").write_text(json.dumps(man))
    c = json.loads(test_llama.run_cli("diagnose", "--model", str(cap), "--json", check=True).stdout)
    for e in c["heads"]:
        l, h = e["layer"], e["head"]
        q, k = qk[l][0][h], qk[l][1][h]
        rows = []
        for t in range(L):
            lo = lo_of(t, win_of(l))
            z = np.array([q[t] @ k[j] for j in range(lo, t + 1)]) / np.sqrt(q.shape[1])
            rows.append(np.exp(z - z.max()) / np.exp(z - z.max()).sum())
        assert e["mean_max_weight"] == pytest.approx(np.mean([r.max() for r in rows]), abs=1e-6)
        sink = [rows[t][0] for t in range(L) if lo_of(t, win_of(l)) == 0]
        assert e["mean_weight_on_token0"] == pytest.approx(np.mean(sink), abs=1e-6)


def test_resume_with_window_shorter_than_L(tmp_path, book):
    """--resume on a Mistral whose window (6) is shorter than L (16, 32): a lost (window, L) job is
    recomputed under the window and the results equal a fresh run's value for value; the same
    directory with another window in config.json is another model (its SHA-256 differs), which
    --resume refuses, naming it."""
    cls, cfg_fn, pipe, _ = FAMS["mistral"]
    F.FAMILIES["mistral"] = (cls, cfg_fn, pipe)
    d = tmp_path / "model"
    F.make("mistral", book, d)
    args = ["reproduce", "--model", str(d), "--quick", "--quiet", "--lengths", "16,32", "--long-length", "32",
            "--experiments", "alg1,alg2,alg5"]
    ref, out = tmp_path / "ref", tmp_path / "out"
    test_llama.run_cli(*args, "--out", str(ref), check=True)
    res = json.loads((ref / "results.json").read_text())
    assert res["manifest"]["model"]["sliding_window"]["of_layer"] == [W, W]
    import shutil
    shutil.copytree(ref, out)
    jobs = sorted(j for j in (out / "partial").iterdir() if j.is_dir())
    assert len(jobs) >= 2, jobs
    shutil.rmtree(jobs[-1])
    r = test_llama.run_cli(*[a for a in args if a != "--quiet"], "--resume", "--out", str(out), check=True)
    assert "reused %d and computed 1 of %d" % (len(jobs) - 1, len(jobs)) in r.stderr, r.stderr
    strip = lambda p: {k: v for k, v in json.loads((p / "results.json").read_text()).items() if k != "manifest"}
    assert strip(out) == strip(ref)
    for f in sorted(p.name for p in ref.glob("*.npy")):
        assert np.array_equal(np.load(out / f), np.load(ref / f), equal_nan=True), f
    cfg = json.loads((d / "config.json").read_text())
    cfg["sliding_window"] = 12
    (d / "config.json").write_text(json.dumps(cfg))
    r = test_llama.run_cli(*args, "--resume", "--out", str(out))
    assert r.returncode != 0 and "--resume" in r.stderr and "other options: model" in r.stderr, r.stderr
