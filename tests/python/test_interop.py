"""Interop (python/attnlim/_interop.py): attnlim.capture_hf on live HF transformers models (tiny
random GPT-2, Llama with grouped-query attention and RoPE, BERT, built from configs: no
download), attnlim.from_transformer_lens on a cache built to TransformerLens's documented
ActivationCache structure, and captures named with TransformerLens hook names.

References, none of them ours: HF's own attention probabilities (output_attentions) against
softmax(q k^T / sqrt(d)) recomputed in numpy from the hooked q, k (so the hooks, the head layout,
RoPE and the key/value head repetition are right); the input of HF's output projection against
sum_j alpha_ij v_j (so v is right); attnlim's own C GPT-2 on the same weights (save_pretrained)
against the hooked arrays. Then reproduce and diagnose analyse the dumps."""
import os

import numpy as np
import pytest

import attnlim

import torch  # installed by scripts/setup.sh: a missing reference fails, never skips
import transformers  # installed by scripts/setup.sh: a missing reference fails, never skips

T = 24


def causal_softmax(q, k, causal=True):
    """numpy float64 reference: [H, T, T] softmax(q k^T / sqrt(d)) (rows over j <= t if causal)."""
    z = np.einsum("htd,hsd->hts", q, k) / np.sqrt(q.shape[-1])
    if causal:
        z = np.where(np.tril(np.ones(z.shape[-2:], bool)), z, -np.inf)
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def load(dump, l, kind):
    return np.load(os.path.join(dump, "layer%d.%s.npy" % (l, kind)))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=64, vocab_size=100,
                                  attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (1, T), generator=torch.Generator().manual_seed(1))
    d = tmp_path_factory.mktemp("interop")
    return model, ids, d


@pytest.fixture(scope="module")
def gpt2_dump(gpt2):
    model, ids, d = gpt2
    out = d / "gpt2-dump"
    man = attnlim.capture_hf(model, ids, str(out), hidden=True)
    return str(out), man


def test_capture_hf_gpt2_against_hf_attention(gpt2, gpt2_dump):
    model, ids, d = gpt2
    dump, man = gpt2_dump
    assert man["T"] == T and man["token_ids"] == ids[0].tolist() and man["model"]["causal"] is True
    merged = {}
    hooks = [blk.attn.c_proj.register_forward_hook(
        lambda m, a, o, l=l: merged.__setitem__(l, a[0][0].double().numpy())) for l, blk in enumerate(model.transformer.h)]
    with torch.no_grad():
        ref = model(ids, output_attentions=True)
    for h in hooks:
        h.remove()
    for l in range(2):
        q, k, v, w = (load(dump, l, x) for x in ("q", "k", "v", "weights"))
        assert q.shape == (4, T, 8) and w.shape == (4, T, T)
        np.testing.assert_allclose(causal_softmax(q, k), ref.attentions[l][0].double().numpy(), atol=1e-6)
        np.testing.assert_allclose(w, ref.attentions[l][0].double().numpy(), atol=1e-7)
        heads_out = np.einsum("hts,hsd->thd", w, v).reshape(T, 32)  # merged heads, as c_proj reads them
        np.testing.assert_allclose(heads_out, merged[l], atol=1e-6)
        assert load(dump, l, "hidden").shape == (T, 32)


def test_capture_hf_gpt2_against_attnlims_own_forward(gpt2, gpt2_dump):
    model, ids, d = gpt2
    dump, _ = gpt2_dump
    ckpt = d / "gpt2-ckpt"
    model.save_pretrained(str(ckpt), safe_serialization=True)
    with attnlim.Model(str(ckpt)) as m:
        out = m.forward(ids[0].numpy(), capture=("q", "k", "v", "weights", "hidden"))
    for l in range(2):
        for kind in ("q", "k", "v", "weights", "hidden"):
            np.testing.assert_allclose(out.captures[l][kind], load(dump, l, kind), atol=2e-5, err_msg=kind)


def test_the_dump_is_analysed(gpt2_dump, tmp_path):
    dump, _ = gpt2_dump
    rep = attnlim.diagnose(model=dump)
    assert len(rep["heads"]) == 8 and rep["model"]["family"] == "dump"
    res = attnlim.reproduce(str(tmp_path / "r"), model=dump, quick=True, experiments=["vanishing", "alg1"])
    assert res["manifest"]["model"]["family"] == "dump"
    with attnlim.Model(dump) as m:
        got = m.forward(np.asarray(json_ids(dump)), capture=("weights",)).captures[1]["weights"]
        np.testing.assert_allclose(got, load(dump, 1, "weights"), atol=1e-7)


def json_ids(dump):
    import json
    return json.load(open(os.path.join(dump, "manifest.json")))["token_ids"]


def test_capture_hf_llama_gqa_rope(tmp_path):
    torch.manual_seed(2)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=80,
                                   max_position_embeddings=64, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.arange(T)[None] * 3 % 80
    with torch.no_grad():
        ref = model(ids, output_attentions=True)
    man = attnlim.capture_hf(model, ids, str(tmp_path / "d"), hidden=True)
    assert man["model"]["n_head"] == 4
    for l in range(2):
        q, k, v = (load(tmp_path / "d", l, x) for x in "qkv")
        assert k.shape == (4, T, 8)
        np.testing.assert_array_equal(k[0], k[1])  # query heads 0, 1 read key/value head 0
        np.testing.assert_allclose(causal_softmax(q, k), ref.attentions[l][0].double().numpy(), atol=1e-6)


def test_capture_hf_bert_bidirectional(tmp_path):
    torch.manual_seed(3)
    cfg = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, vocab_size=90, max_position_embeddings=64,
                                  attn_implementation="eager")
    model = transformers.BertModel(cfg).eval()
    ids = torch.arange(T)[None] % 90
    with torch.no_grad():
        ref = model(ids, output_attentions=True)
    man = attnlim.capture_hf(model, ids, str(tmp_path / "d"))
    assert man["model"]["causal"] is False
    for l in range(2):
        q, k = load(tmp_path / "d", l, "q"), load(tmp_path / "d", l, "k")
        np.testing.assert_allclose(causal_softmax(q, k, causal=False), ref.attentions[l][0].double().numpy(),
                                   atol=1e-6)
    assert attnlim.diagnose(model=str(tmp_path / "d"))["model"]["family"] == "dump"


class FakeActivationCache:
    """The parts of transformer_lens.ActivationCache that from_transformer_lens reads, as its
    documentation describes them: cache_dict (hook name -> tensor) and has_batch_dim."""

    def __init__(self, cache_dict, has_batch_dim=True):
        self.cache_dict = cache_dict
        self.has_batch_dim = has_batch_dim

    def __getitem__(self, k):
        return self.cache_dict[k]

    def keys(self):
        return self.cache_dict.keys()


def tl_cache_from_dump(dump, n_layer=2, kv_heads=None):
    """A cache in TransformerLens's layout built from a dump's arrays: q, k, v [batch, pos, head,
    d_head] (k, v with kv_heads heads: the first of each group), scores [batch, head, q, k]
    (IGNORE -inf above the diagonal), pattern [batch, head, q, k], ln1.hook_normalized."""
    c = {}
    for l in range(n_layer):
        q, k, v, w = (load(dump, l, x) for x in ("q", "k", "v", "weights"))
        H = q.shape[0]
        G = kv_heads or H
        pick = np.arange(0, H, H // G)
        c["blocks.%d.attn.hook_q" % l] = torch.tensor(q.transpose(1, 0, 2)[None])
        c["blocks.%d.attn.hook_k" % l] = torch.tensor(k[pick].transpose(1, 0, 2)[None])
        c["blocks.%d.attn.hook_v" % l] = torch.tensor(v[pick].transpose(1, 0, 2)[None])
        z = np.einsum("htd,hsd->hts", q, k) / np.sqrt(q.shape[-1])
        z[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf
        c["blocks.%d.attn.hook_attn_scores" % l] = torch.tensor(z[None])
        c["blocks.%d.attn.hook_pattern" % l] = torch.tensor(w[None])
        c["blocks.%d.ln1.hook_normalized" % l] = torch.tensor(load(dump, l, "hidden")[None])
        c["blocks.%d.hook_resid_pre" % l] = torch.zeros(1, T, 32)  # other hooks are ignored
    return c


def test_from_transformer_lens(gpt2_dump, tmp_path):
    dump, _ = gpt2_dump
    ids = json_ids(dump)
    cache = FakeActivationCache(tl_cache_from_dump(dump))
    man = attnlim.from_transformer_lens(cache, str(tmp_path / "tl"), token_ids=torch.tensor([ids]),
                                        model={"name": "tiny gpt2 via TransformerLens"})
    assert man["token_ids"] == ids and sorted(man["arrays"]) == ["hidden", "k", "logits", "q", "v", "weights"]
    for l in range(2):
        for kind in ("q", "k", "v", "weights", "hidden"):
            np.testing.assert_allclose(load(tmp_path / "tl", l, kind), load(dump, l, kind), atol=1e-12)
        np.testing.assert_allclose(causal_softmax(load(tmp_path / "tl", l, "q"), load(tmp_path / "tl", l, "k")),
                                   load(dump, l, "weights"), atol=1e-6)
    # grouped-query attention: 2 key/value heads for 4 query heads, repeated per query head
    gqa = {k: v for k, v in tl_cache_from_dump(dump, kv_heads=2).items() if "hook_pattern" not in k}
    attnlim.from_transformer_lens(gqa, str(tmp_path / "gqa"), token_ids=ids)
    k = load(tmp_path / "gqa", 0, "k")
    np.testing.assert_array_equal(k[1], load(dump, 0, "k")[0])
    np.testing.assert_array_equal(k[3], load(dump, 0, "k")[2])
    # no batch dimension (a cache indexed by [0]), and a plain dict
    nb = FakeActivationCache({k: v[0] for k, v in tl_cache_from_dump(dump).items()}, has_batch_dim=False)
    attnlim.from_transformer_lens(nb, str(tmp_path / "nb"), token_ids=ids)
    np.testing.assert_array_equal(load(tmp_path / "nb", 1, "v"), load(dump, 1, "v"))
    with pytest.raises(ValueError, match="no blocks"):
        attnlim.from_transformer_lens({"embed.W_E": torch.zeros(3)}, str(tmp_path / "bad"))


def test_transformer_lens_names_and_back(gpt2, gpt2_dump, tmp_path):
    model, ids, d = gpt2
    dump, _ = gpt2_dump
    ckpt = d / "gpt2-ckpt2"
    model.save_pretrained(str(ckpt), safe_serialization=True)
    with attnlim.Model(str(ckpt)) as m:
        out = m.forward(ids[0].numpy(), capture=("q", "k", "v", "logits", "weights", "hidden"),
                        names="transformer_lens")
    c = out.captures
    assert c["blocks.1.attn.hook_q"].shape == (1, T, 4, 8)
    assert c["blocks.0.attn.hook_pattern"].shape == (1, 4, T, T)
    assert c["blocks.0.ln1.hook_normalized"].shape == (1, T, 32)
    assert np.isneginf(c["blocks.0.attn.hook_attn_scores"][0, 0, 0, 1])
    np.testing.assert_allclose(c["blocks.1.attn.hook_v"][0].transpose(1, 0, 2), load(dump, 1, "v"), atol=2e-5)
    # back: the TransformerLens-named arrays make the same dump
    attnlim.from_transformer_lens({k: v for k, v in c.items() if not k.endswith(".heads")}, str(tmp_path / "back"),
                                  token_ids=ids[0].tolist())
    np.testing.assert_allclose(load(tmp_path / "back", 1, "weights"), load(dump, 1, "weights"), atol=2e-5)
    with pytest.raises(ValueError, match="names"):
        attnlim.Model(str(ckpt)).forward([1, 2], names="tl")
