"""Every new family (Mistral, Gemma 2, GPT-NeoX, Qwen2; a tiny random model of each built by
transformers with a tokenizer.json trained by `tokenizers`) through the Python package (model,
tokenizer, capture with window / kv_head / logits_precap) and the CLI (info with the
architecture object, perplexity against transformers' own loss, capture, reproduce and
diagnose, with sliding windows shorter than L too)."""
import json
import math

import numpy as np
import pytest
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

import attnlim
import hf_ref
import stage
import test_hf_tokenizer as th
import test_llama

SMALL = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=256)
FAMILIES = {
    "mistral": (MistralForCausalLM, lambda: MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=16), "llama2"),
    "gemma2": (Gemma2ForCausalLM, lambda: Gemma2Config(**SMALL, num_key_value_heads=2, head_dim=8, sliding_window=16,
                                                       query_pre_attn_scalar=8), "gemma"),
    "qwen2": (Qwen2ForCausalLM, lambda: Qwen2Config(**SMALL, num_key_value_heads=1), "qwen2"),
    "gpt_neox": (GPTNeoXForCausalLM, lambda: GPTNeoXConfig(**SMALL), "gpt_neox"),
}


@pytest.fixture(scope="module")
def book():
    return test_llama.corpus().decode("utf-8")


def make(name, book, path):
    cls, cfg_fn, pipe = FAMILIES[name]
    tk = th.train(pipe, book[:200000], path)
    cfg = cfg_fn()
    cfg.vocab_size = tk.get_vocab_size()
    hf_ref.build(cls, cfg, path)
    return cls, cfg, tk


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_everywhere(tmp_path, book, name):
    d = tmp_path / "model"
    cls, cfg, tk = make(name, book, d)
    # the Python package: tokenizer ids as HF's, forward capture
    text = book[1000:3000]
    m = attnlim.Model(str(d))
    try:
        with m.tokenizer() as t:
            ids = t.encode(text.encode())
        ref_ids = tk.encode(text).ids  # with the template's BOS, as the files say
        assert list(ids) == ref_ids
        ids = ids[:48]
        out = m.forward(ids, capture=("weights", "logits_precap") if name == "gemma2" else ("weights",))
    finally:
        m.close()
    W = getattr(cfg, "sliding_window", None) or 0
    assert sorted(out.captures) == [0, 1]
    G = getattr(cfg, "num_key_value_heads", 4)
    for l, c in out.captures.items():
        assert c["window"] == (0 if (name == "gemma2" and l % 2) else W)
        assert list(c["kv_head"]) == [h // (4 // G) for h in range(4)]
        w = c["weights"]
        for t in range(len(ids)):  # the window is in the weights: min(t + 1, window) keys
            n = min(t + 1, c["window"]) if c["window"] else t + 1
            assert np.count_nonzero(w[:, t, :] > 0, axis=-1).max() <= n
            assert np.allclose(w[:, t, :].sum(-1), 1, atol=1e-5)
        if name == "gemma2":
            cap = cfg.attn_logit_softcapping
            assert c["softcap"] == pytest.approx(cap) and c["scale"] == pytest.approx(8 ** -0.5)
    # the CLI: info shows the architecture, perplexity equals transformers' loss
    r = test_llama.run_cli("info", "--model", str(d), "--json", check=True)
    arch = json.loads(r.stdout)["architecture"]
    assert arch["architecture"] == name and len(arch["kv_head_of_query_head"]) == 4
    ref = cls.from_pretrained(str(d), torch_dtype=torch.float64, attn_implementation="eager")
    L = 32
    toks = tk.encode(book[:5000], add_special_tokens=False).ids[:L]
    with torch.no_grad():
        loss = ref(torch.tensor([toks]), labels=torch.tensor([toks]), use_cache=False).loss.item()
    tokfile = tmp_path / "toks.txt"
    tokfile.write_text(" ".join(map(str, toks)))
    r = test_llama.run_cli("perplexity", "--model", str(d), "--tokens", str(tokfile), "--length", str(L), "--json",
                           check=True)
    ppl = json.loads(r.stdout)["perplexity"]
    assert abs(math.log(ppl) - loss) < 1e-4, (ppl, math.exp(loss))
    r = test_llama.run_cli("capture", "--model", str(d), "--corpus", "war-and-peace", "--length", "24",
                           "--out", str(tmp_path / "cap"), check=True)
    man = json.loads((tmp_path / "cap" / "manifest.json").read_text())
    assert man["model"]["architecture"]["architecture"] == name
    what = "logits,weights" + (",logits_precap" if name == "gemma2" else "")
    r = test_llama.run_cli("capture", "--model", str(d), "--corpus", "war-and-peace", "--length", "24",
                           "--what", what, "--out", str(tmp_path / "capw"), check=True)
    for l in range(2):  # the windowed rows' masks as the capture writes them
        win = 0 if (name == "gemma2" and l % 2) else W
        z = np.load(tmp_path / "capw" / ("layer%d.logits.npy" % l))
        vis = np.array([[j <= t and (not win or j > t - win) for j in range(24)] for t in range(24)])
        assert np.all(np.isneginf(z[:, ~vis])) and np.all(np.isfinite(z[:, vis]))
        if name == "gemma2":
            pre = np.load(tmp_path / "capw" / ("layer%d.logits_precap.npy" % l))
            cap = cfg.attn_logit_softcapping
            assert np.allclose(z[:, vis], cap * np.tanh(pre[:, vis] / cap), atol=1e-5)
    # diagnose runs whether the window is shorter than L or not (test_window_models: its values)
    r = test_llama.run_cli("diagnose", "--model", str(d), "--length", "32", "--out", str(tmp_path / "diag"))
    assert r.returncode == 0, r.stderr
    wins = json.loads((tmp_path / "diag" / "diagnose.json").read_text())["sliding_window"]["of_layer"]
    assert wins == [0 if (name == "gemma2" and l % 2) else W for l in range(2)]
    r = test_llama.run_cli("diagnose", "--model", str(d), "--length", "16", "--out", str(tmp_path / "diag16"))
    assert r.returncode == 0, r.stderr


def test_bos_switch(tmp_path, book):
    """--bos on|off overrides what the files say (the template adds <s> here): one token more.
    The flag checks run on a 20000-character corpus file (each run tokenizes its whole corpus);
    the token count of the whole book once, against HF's."""
    d = tmp_path / "model"
    cls, cfg, tk = make("mistral", book, d)
    short = tmp_path / "short.txt"
    short.write_text(book[:20000])
    corpus = ("--corpus", str(short))
    n = {}
    for b in ("on", "off"):
        r = test_llama.run_cli("perplexity", "--model", str(d), *corpus, "--length", "16",
                               "--bos", b, "--json", check=True)
        n[b] = json.loads(r.stdout)["n_tokens"]
    r = test_llama.run_cli("perplexity", "--model", str(d), *corpus, "--length", "16", "--json",
                           check=True)
    assert n["on"] == n["off"] + 1 == json.loads(r.stdout)["n_tokens"]
    assert n["off"] == len(tk.encode(book[:20000], add_special_tokens=False).ids)
    # the model's default is recorded with where it comes from; --bos / --no-bos are the same
    fr = json.loads(r.stdout)["framing"]["bos"]
    assert fr["used"] is True and fr["default"] is True and fr["token"] == "<s>", fr
    assert "tokenizer" in fr["default_from"], fr
    for flag, want in (("--no-bos", n["off"]), ("--bos", n["on"]), ("--bos=off", n["off"])):
        r = test_llama.run_cli("perplexity", "--model", str(d), *corpus, "--length", "16",
                               flag, "--json", check=True)
        j = json.loads(r.stdout)
        assert j["n_tokens"] == want and j["framing"]["bos"]["used"] == (want == n["on"])
        w0 = j["window_0"]
        assert len(w0["tokens"]) == len(w0["token_ids"]) == 16 and (w0["tokens"][0] == "<s>") == (want == n["on"])
    r = test_llama.run_cli("diagnose", "--model", str(d), "--length", "16", "--no-bos", "--json", check=True)
    j = json.loads(r.stdout)
    assert j["framing"]["bos"] == dict(fr, used=False) and j["window_tokens"]["token_ids"][0] != tk.token_to_id("<s>")
    # the whole book (war-and-peace; in the sanitizer stage its first part, stage.book)
    full = test_llama.corpus().decode("utf-8")
    text = stage.book(full)
    if text == full:
        whole = ("--corpus", "war-and-peace")
    else:
        (tmp_path / "book.txt").write_text(text)
        whole = ("--corpus", str(tmp_path / "book.txt"))
    r = test_llama.run_cli("perplexity", "--model", str(d), *whole, "--length", "16", "--bos", "off", "--json",
                           check=True)
    assert json.loads(r.stdout)["n_tokens"] == len(tk.encode(text, add_special_tokens=False).ids)
    r = test_llama.run_cli("perplexity", "--model", str(d), *corpus, "--length", "16",
                           "--bos", "maybe")
    assert r.returncode == 2 and "expected on or off" in r.stderr
