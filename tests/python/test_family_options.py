"""Model.forward's defaults fit the model's family, and an option that does not apply is refused
saying why: an encoder (MiniLM, BERT family) returns no logits by default and its attention
equals HF transformers' BertModel(output_attentions=True) on the same files; logits=True for it
is refused (no language-model head); a decoder still returns logits [T, vocab] by default; an
attention dump returns neither logits nor final hidden states and refuses both when asked."""
import os

import numpy as np
import pytest

import attnlim

BIN = os.environ.get("ATTNLIM_BIN")


@pytest.fixture(scope="module")
def minilm():
    m = attnlim.Model("minilm")  # the cache, or a fetch (ctest allows the network)
    yield m
    m.close()


IDS = [101, 1996, 3899, 2001, 2006, 1996, 2795, 1012, 102]  # "[CLS] the cat sat on the mat . [SEP]"


def test_encoder_forward_defaults_to_no_logits(minilm):
    out = minilm.forward(IDS, capture=("weights",))
    T = len(IDS)
    assert out.logits is None
    assert out.hidden.shape == (T, minilm.info["d_model"])
    w = out.captures[0]["weights"]
    assert w.shape == (minilm.info["n_head"], T, T)
    # against HF transformers (float64 reference on the same safetensors, no download)
    import torch  # installed by scripts/setup.sh: a missing reference fails, never skips
    import transformers  # installed by scripts/setup.sh: a missing reference fails, never skips
    d = os.path.dirname(minilm.info["path"])
    hf = transformers.BertModel.from_pretrained(d, local_files_only=True, attn_implementation="eager").double().eval()
    with torch.no_grad():
        ref = hf(torch.tensor([IDS]), output_attentions=True)
    for layer in (0, minilm.info["n_layer"] - 1):
        got = minilm.forward(IDS, capture=("weights",), layers=[layer]).captures[layer]["weights"]
        np.testing.assert_allclose(got, ref.attentions[layer][0].numpy(), atol=2e-5)
    np.testing.assert_allclose(out.hidden, ref.last_hidden_state[0].numpy(), atol=2e-4)


def test_encoder_refuses_logits(minilm):
    with pytest.raises(ValueError, match="no language-model head"):
        minilm.forward(IDS, logits=True)
    assert minilm.forward(IDS, logits=False).logits is None


def test_decoder_still_gives_logits(tmp_path):
    import subprocess
    d = tmp_path / "gpt2"
    subprocess.run([BIN, "make-model", "--layers", "1", "--heads", "2", "--embd", "16", "--ctx", "16",
                    "--vocab", "64", "--seed", "2", "--out", str(d)], check=True, capture_output=True)
    with attnlim.Model(str(d)) as m:
        out = m.forward([1, 2, 3], capture=("weights",))
        assert out.logits.shape == (3, 64) and out.hidden.shape == (3, 16)
        assert m.forward([1, 2, 3], logits=False).logits is None


def test_dump_refuses_logits_and_hidden(tmp_path):
    rng = np.random.default_rng(0)
    layers = {l: {x: rng.standard_normal((2, 8, 4)) for x in ("q", "k", "v")} for l in range(2)}
    attnlim.write_dump(str(tmp_path / "d"), layers, token_ids=list(range(8)), causal=True)
    with attnlim.Model(str(tmp_path / "d")) as m:
        out = m.forward(list(range(8)), capture=("weights",))
        assert out.logits is None and out.hidden is None and out.captures[1]["weights"].shape == (2, 8, 8)
        with pytest.raises(ValueError, match="stores attention, not the model's output logits"):
            m.forward(list(range(8)), logits=True)
        with pytest.raises(ValueError, match="no final hidden states"):
            m.forward(list(range(8)), hidden=True)
