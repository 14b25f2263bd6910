"""Attention from the two places it lives in Python, as attnlim dumps (docs/dumps.md), and back.

- capture_hf: runs a live Hugging Face transformers model with output_attentions=True and
  forward hooks for q, k, v (GPT-2, BERT family, Llama family), and writes the dump;
- from_transformer_lens: a TransformerLens ActivationCache (blocks.{l}.attn.hook_q / hook_k /
  hook_v / hook_rot_q / hook_rot_k / hook_attn_scores / hook_pattern, blocks.{l}.ln1.hook_normalized)
  to a dump;
- to_transformer_lens: attnlim captures (Model.forward) named with TransformerLens hook names
  and laid out as an ActivationCache holds them.

torch is imported only when capture_hf runs; TransformerLens is never imported (the cache is
read through its documented mapping interface)."""
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._dump import write_dump

__all__ = ["capture_hf", "from_transformer_lens", "to_transformer_lens", "TL_NAMES"]

# attnlim capture kind -> TransformerLens hook (per layer l), and the layout TransformerLens uses
TL_NAMES = {"q": "blocks.{l}.attn.hook_q", "k": "blocks.{l}.attn.hook_k", "v": "blocks.{l}.attn.hook_v",
            "logits": "blocks.{l}.attn.hook_attn_scores", "weights": "blocks.{l}.attn.hook_pattern",
            "hidden": "blocks.{l}.ln1.hook_normalized", "residual": "blocks.{l}.hook_resid_pre",
            "embed": "blocks.{l}.attnlim_embed"}  # no TransformerLens name: it is hook_embed + hook_pos_embed
_TL_ROT = {"q": "blocks.{l}.attn.hook_rot_q", "k": "blocks.{l}.attn.hook_rot_k"}


def _np64(t) -> np.ndarray:
    """A torch tensor (any dtype, any device) or an array as float64 numpy."""
    if hasattr(t, "detach"):
        t = t.detach().cpu()
        if hasattr(t, "double"):
            t = t.double()
        t = t.numpy()
    return np.asarray(t, dtype=np.float64)


# ---- Hugging Face transformers -------------------------------------------------------------------

def _heads(x: np.ndarray, n: int) -> np.ndarray:
    """[T, n * D] -> [n, T, D]."""
    T = x.shape[0]
    return np.ascontiguousarray(x.reshape(T, n, -1).transpose(1, 0, 2))


def _hf_arch(model) -> Tuple[str, Any, Sequence[Any]]:
    """(kind, base model, its blocks) of the architectures whose q, k, v are hooked."""
    cfg = model.config
    base = getattr(model, "base_model", model)
    mt = getattr(cfg, "model_type", "")
    if mt == "gpt2" and hasattr(base, "h"):
        return "gpt2", base, list(base.h)
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer") and \
            hasattr(base.encoder.layer[0].attention, "self"):
        return "bert", base, list(base.encoder.layer)
    if hasattr(base, "layers") and hasattr(base.layers[0], "self_attn") and \
            all(hasattr(base.layers[0].self_attn, p) for p in ("q_proj", "k_proj", "v_proj")):
        return "llama", base, list(base.layers)
    return "other", base, []


def _hook_qkv(kind: str, model, blocks, store: Dict[int, Dict[str, Any]], want_hidden: bool):
    """Registers the hooks; returns their handles. store[l] receives raw torch outputs."""
    cfg = model.config
    hs = []

    def put(l, name):
        def hook(module, args, output):
            store.setdefault(l, {})[name] = output[0] if isinstance(output, tuple) and name != "rope_out" \
                else output
        return hook

    if kind == "llama" and getattr(model.base_model, "rotary_emb", None) is not None:
        # the model's (cos, sin) [1, T, d_head], computed once per forward for every layer
        def rope(module, args, output):
            store.setdefault(-1, {})["rope"] = output
        hs.append(model.base_model.rotary_emb.register_forward_hook(rope))
    for l, blk in enumerate(blocks):
        if kind == "gpt2":
            hs.append(blk.attn.c_attn.register_forward_hook(put(l, "qkv")))
            if want_hidden:
                hs.append(blk.ln_1.register_forward_hook(put(l, "hidden")))
        elif kind == "bert":
            sa = blk.attention.self
            for n, mod in (("q", sa.query), ("k", sa.key), ("v", sa.value)):
                hs.append(mod.register_forward_hook(put(l, n)))
        elif kind == "llama":
            at = blk.self_attn
            for n, mod in (("q", at.q_proj), ("k", at.k_proj), ("v", at.v_proj)):
                hs.append(mod.register_forward_hook(put(l, n)))
            rot = getattr(at, "rotary_emb", None)  # older layouts: one per layer
            if rot is not None:
                hs.append(rot.register_forward_hook(put(l, "rope_out")))
            if want_hidden:
                hs.append(blk.input_layernorm.register_forward_hook(put(l, "hidden")))
    return hs


def _hf_layer(kind: str, cfg, raw: Dict[str, Any], T: int) -> Dict[str, np.ndarray]:
    """One layer's q, k, v [H, T, D] (k, v repeated per query head; q, k after RoPE)."""
    H = cfg.num_attention_heads
    out = {}
    if kind == "gpt2":
        C = cfg.hidden_size
        qkv = _np64(raw["qkv"]).reshape(-1, 3 * C)[:T]
        for i, n in enumerate("qkv"):
            out[n] = _heads(qkv[:, i * C:(i + 1) * C], H)
    elif kind == "bert":
        for n in "qkv":
            out[n] = _heads(_np64(raw[n]).reshape(T, -1), H)
    elif kind == "llama":
        G = getattr(cfg, "num_key_value_heads", None) or H
        q, k, v = (_heads(_np64(raw[n]).reshape(T, -1), m) for n, m in (("q", H), ("k", G), ("v", G)))
        if "rope" in raw:
            cos, sin = (_np64(t).reshape(T, -1) for t in raw["rope"])  # [T, D]

            def rot(x):  # x * cos + rotate_half(x) * sin, over the last axis
                h = x.shape[-1] // 2
                return x * cos + np.concatenate([-x[..., h:], x[..., :h]], axis=-1) * sin
            q, k = rot(q), rot(k)
        rep = H // G
        out = {"q": q, "k": np.repeat(k, rep, axis=0), "v": np.repeat(v, rep, axis=0)}
    if "hidden" in raw:
        out["hidden"] = _np64(raw["hidden"]).reshape(T, -1)
    return out


def capture_hf(model, input_ids, out_dir: str, what: Iterable[str] = ("q", "k", "v", "weights"),
               hidden: bool = False, name: Optional[str] = None, force: bool = False,
               check: bool = True) -> Dict[str, Any]:
    """Runs a live Hugging Face transformers model over one window and writes what it computed
    as an attention dump into out_dir (docs/dumps.md), which attnlim.reproduce / diagnose /
    Model analyse like a model (METHOD section 8).

    model: a transformers PreTrainedModel (GPT-2, BERT family, Llama family: Llama, Mistral,
      Qwen2; any other model gives only the weights). Use attn_implementation="eager" (or a
      model whose attention returns weights).
    input_ids: token ids [T] or [1, T] (a torch tensor, array or list); one window, no padding.
    what: among q, k, v (forward hooks on the projections: [n_head, T, d_head] float64; q and k
      after the rotary embedding, k and v repeated for each query head under grouped-query
      attention) and weights (output_attentions: [n_head, T, T] softmax rows). Logits need not
      be stored: attnlim derives them from q and k.
    hidden: also the layer input after its first norm [T, d_model] (GPT-2, Llama family).
    The model runs under torch.no_grad() in eval mode, as it is (its dtype, its device).
    Returns the dump's manifest (a dict)."""
    import torch

    what = tuple(what)
    bad = sorted(set(what) - {"q", "k", "v", "weights"})
    if bad:
        raise ValueError("capture_hf: what: %r is not one of q, k, v, weights" % bad[0])
    ids = torch.as_tensor(np.asarray(input_ids.cpu() if hasattr(input_ids, "cpu") else input_ids))
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise ValueError("capture_hf: input_ids must be [T] or [1, T] (one window), got %s" % (tuple(ids.shape),))
    T = int(ids.shape[1])
    cfg = model.config
    kind, base, blocks = _hf_arch(model)
    if kind == "other" and set(what) & {"q", "k", "v"}:
        raise ValueError("capture_hf: q, k, v of model_type %r are not hooked (GPT-2, BERT and Llama "
                         "families are); pass what=('weights',)" % getattr(cfg, "model_type", "?"))
    if hidden and kind not in ("gpt2", "llama"):
        raise ValueError("capture_hf: hidden (the input of a layer after its first norm) is hooked for "
                         "GPT-2 and the Llama family only")
    store: Dict[int, Dict[str, Any]] = {}
    handles = _hook_qkv(kind, model, blocks, store, hidden) if set(what) & {"q", "k", "v"} or hidden else []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(ids.to(next(model.parameters()).device), output_attentions="weights" in what)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    n_layer = cfg.num_hidden_layers
    layers: Dict[int, Dict[str, np.ndarray]] = {l: {} for l in range(n_layer)}
    for l in range(n_layer):
        if store:
            raw = dict(store[l])
            if "rope_out" in raw:
                raw["rope"] = raw.pop("rope_out")
            elif -1 in store:
                raw["rope"] = store[-1]["rope"]
            elif kind == "llama":
                raise ValueError("capture_hf: found no rotary embedding (cos, sin) to apply to q and k")
            arrs = _hf_layer(kind, cfg, raw, T)
            layers[l].update({k: v for k, v in arrs.items() if k in what or k == "hidden"})
        if "weights" in what:
            att = getattr(out, "attentions", None)
            if not att or att[l] is None:
                raise ValueError("capture_hf: the model returned no attention weights (load it with "
                                 "attn_implementation='eager')")
            layers[l]["weights"] = _np64(att[l])[0]
    causal = kind != "bert" and not getattr(cfg, "is_encoder_decoder", False)
    H = cfg.num_attention_heads
    d_model = cfg.hidden_size
    desc = {"name": name or getattr(cfg, "_name_or_path", "") or "%s via transformers" % cfg.model_type,
            "n_layer": n_layer, "n_head": H, "n_kv_head": H, "d_head": d_model // H, "d_model": d_model,
            "vocab_size": cfg.vocab_size, "source": "transformers %s, %s" % (_tf_version(), type(model).__name__)}
    return write_dump(out_dir, layers, token_ids=ids[0].tolist(), causal=causal, model=desc, force=force,
                      check=check)


def _tf_version() -> str:
    try:
        import transformers
        return transformers.__version__
    except Exception:  # pragma: no cover
        return "?"


# ---- TransformerLens -----------------------------------------------------------------------------

def _tl_get(cache, key):
    d = getattr(cache, "cache_dict", cache)
    return d[key] if key in d else None


def _tl_keys(cache) -> Iterable[str]:
    d = getattr(cache, "cache_dict", cache)
    return list(d.keys())


def from_transformer_lens(cache, out_dir: str, token_ids: Optional[Sequence[int]] = None, causal: bool = True,
                          model: Optional[Dict[str, Any]] = None, batch: int = 0, force: bool = False,
                          check: bool = True) -> Dict[str, Any]:
    """A TransformerLens ActivationCache (or any mapping of its hook names to tensors) as an
    attention dump in out_dir (docs/dumps.md), for attnlim.reproduce / diagnose / Model.

    Read per layer l, as TransformerLens lays them out (batch first unless the cache has no
    batch dimension; batch picks the sequence):
      blocks.{l}.attn.hook_q, hook_k, hook_v      [batch, pos, head, d_head] (k, v: per key/value
                                                  head; repeated here for each query head)
      blocks.{l}.attn.hook_rot_q, hook_rot_k      after the rotary embedding (used instead of
                                                  hook_q / hook_k when present)
      blocks.{l}.attn.hook_attn_scores            [batch, head, query_pos, key_pos], already
                                                  divided by sqrt(d_head): attnlim's logits
      blocks.{l}.attn.hook_pattern                [batch, head, query_pos, key_pos]: weights
      blocks.{l}.ln1.hook_normalized              [batch, pos, d_model]: hidden
    Every layer must hold the same of these; at least one of them. Entries above the diagonal
    of a causal cache's scores and pattern (TransformerLens's IGNORE, 0) are masked in the dump
    whatever they hold.
    token_ids: the T ids (e.g. model.to_tokens(text)[0]); causal: False for a bidirectional
    model; model: the manifest's model fields (name, ...). Returns the manifest."""
    keys = set(_tl_keys(cache))
    n_layer = 0
    while any(k.startswith("blocks.%d." % n_layer) for k in keys):
        n_layer += 1
    if n_layer == 0:
        raise ValueError("from_transformer_lens: no blocks.{l}.* hooks in the cache")
    has_batch = getattr(cache, "has_batch_dim", True)
    layers: Dict[int, Dict[str, np.ndarray]] = {}
    for l in range(n_layer):
        arrs: Dict[str, np.ndarray] = {}
        for kind in ("q", "k", "v"):
            t = _tl_get(cache, _TL_ROT[kind].format(l=l)) if kind in _TL_ROT else None
            if t is None:
                t = _tl_get(cache, TL_NAMES[kind].format(l=l))
            if t is not None:
                a = _np64(t)
                a = a[batch] if has_batch else a  # [pos, head, d_head]
                if a.ndim != 3:
                    raise ValueError("from_transformer_lens: %s: expected [batch, pos, head, d_head], got %s"
                                     % (TL_NAMES[kind].format(l=l), _np64(t).shape))
                arrs[kind] = np.ascontiguousarray(a.transpose(1, 0, 2))  # [head, pos, d_head]
        for kind in ("logits", "weights"):
            t = _tl_get(cache, TL_NAMES[kind].format(l=l))
            if t is not None:
                a = _np64(t)
                a = a[batch] if has_batch else a  # [head, q, k]
                arrs[kind] = np.ascontiguousarray(a)  # a causal dump masks j > t itself
        t = _tl_get(cache, TL_NAMES["hidden"].format(l=l))
        if t is not None:
            a = _np64(t)
            arrs["hidden"] = np.ascontiguousarray(a[batch] if has_batch else a)
        if not arrs:
            raise ValueError("from_transformer_lens: layer %d has none of hook_q/k/v, hook_attn_scores, "
                             "hook_pattern, ln1.hook_normalized" % l)
        if "q" in arrs:
            for kind in ("k", "v"):
                if kind in arrs and arrs[kind].shape[0] != arrs["q"].shape[0]:
                    H, G = arrs["q"].shape[0], arrs[kind].shape[0]
                    if H % G:
                        raise ValueError("from_transformer_lens: layer %d: %d query heads, %d %s heads"
                                         % (l, H, G, kind))
                    arrs[kind] = np.repeat(arrs[kind], H // G, axis=0)
        layers[l] = arrs
    desc = dict(model or {})
    desc.setdefault("name", "TransformerLens cache")
    desc.setdefault("source", "TransformerLens ActivationCache")
    ids = None if token_ids is None else [int(i) for i in np.asarray(
        token_ids.cpu() if hasattr(token_ids, "cpu") else token_ids).reshape(-1)]
    return write_dump(out_dir, layers, token_ids=ids, causal=causal, model=desc, force=force, check=check)


def to_transformer_lens(captures: Mapping[int, Mapping[str, np.ndarray]], rotary: bool = False,
                        batch_dim: bool = True) -> Dict[str, np.ndarray]:
    """Model.forward's captures ({layer: {kind: array, "heads": ...}}) named with TransformerLens
    hook names and laid out as an ActivationCache holds them (batch_dim: a leading batch of 1):
      q, k, v  [n_sel, T, d_head] -> blocks.{l}.attn.hook_q / hook_k / hook_v [1, T, n_sel, d_head]
               (rotary=True, for Llama-family models whose q, k come after RoPE: hook_rot_q /
               hook_rot_k)
      logits   -> blocks.{l}.attn.hook_attn_scores [1, n_sel, T, T] (masked entries -inf)
      weights  -> blocks.{l}.attn.hook_pattern [1, n_sel, T, T]
      hidden   -> blocks.{l}.ln1.hook_normalized [1, T, d_model]
      residual -> blocks.{l}.hook_resid_pre [1, T, d_model] (the layer input before its norm)
      embed    -> blocks.{l}.attnlim_embed [1, T, d_model] (token + position embedding, which
               TransformerLens keeps apart as hook_embed and hook_pos_embed)
    "heads" (the query heads of the n_sel axis) is kept as blocks.{l}.attn.heads."""
    out: Dict[str, np.ndarray] = {}
    for l, caps in captures.items():
        for kind, a in caps.items():
            if kind == "heads":
                out["blocks.%d.attn.heads" % l] = np.asarray(a)
                continue
            if kind in ("kv_head", "window", "softcap", "scale"):  # per-layer facts, not arrays
                continue
            if kind not in TL_NAMES:
                raise ValueError("to_transformer_lens: unknown capture %r" % kind)
            name = (_TL_ROT if rotary and kind in _TL_ROT else TL_NAMES)[kind].format(l=l)
            a = np.asarray(a)
            if kind in ("q", "k", "v"):
                a = a.transpose(1, 0, 2)  # [T, n_sel, d_head]
            out[name] = a[None] if batch_dim else a
    return out
