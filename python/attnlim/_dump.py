"""write_dump: attention tensors of any framework as an attnlim dump (docs/dumps.md).

A dump is a directory: manifest.json ("schema": "attnlim.dump/1") and, per stored layer l and
array kind, layer{l}.{kind}.npy. `attnlim reproduce --model DIR` and `attnlim diagnose --model
DIR` analyse it as they analyse a model (its tokens are the dump's T tokens)."""
import ctypes
import json
import os
from typing import Any, Dict, Optional, Sequence

import numpy as np

from . import AttnlimError, _check, _Error, lib

_ep = ctypes.POINTER(_Error)
for _name, _res, _args in (
        ("al_dump_writer_open", ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, _ep]),
        ("al_dump_writer_path", ctypes.c_char_p, [ctypes.c_void_p]),
        ("al_dump_writer_add", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                              ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p,
                                              ctypes.c_char_p, _ep]),
        ("al_dump_writer_set", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, _ep]),
        ("al_dump_writer_finish", ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), _ep]),
        ("al_dump_writer_free", None, [ctypes.c_void_p])):
    _f = getattr(lib, _name)
    _f.restype, _f.argtypes = _res, _args

KINDS = ("q", "k", "v", "logits", "weights", "hidden", "embed")
_PER_HEAD = ("q", "k", "v", "logits", "weights")
SCHEMA = "attnlim.dump/1"


def _as_float(name, a):
    """float64 stays float64; every other float dtype (float16, bfloat16, float32) becomes
    float32. Torch tensors: pass t.detach().cpu().numpy() (or anything np.asarray takes)."""
    a = np.asarray(a)
    if a.dtype == np.float64:
        return np.ascontiguousarray(a)
    if not (np.issubdtype(a.dtype, np.floating) or a.dtype.name == "bfloat16"):
        raise TypeError("%s: dtype %s is not a float type" % (name, a.dtype))
    return np.ascontiguousarray(a.astype(np.float32))


def _layer_items(layers):
    if isinstance(layers, dict):
        items = sorted((int(l), arrs) for l, arrs in layers.items())
    else:
        items = list(enumerate(layers))
    if not items:
        raise ValueError("layers: no layer given")
    for l, arrs in items:
        if l < 0:
            raise ValueError("layers: layer index %d is negative" % l)
        if not isinstance(arrs, dict) or not arrs:
            raise ValueError("layers[%d]: a dict of arrays (q, k, v, logits, weights, hidden, embed)" % l)
        bad = sorted(set(arrs) - set(KINDS))
        if bad:
            raise ValueError("layers[%d]: unknown array %r (one of %s)" % (l, bad[0], ", ".join(KINDS)))
    return items


def write_dump(out_dir: str, layers: Any, token_ids: Optional[Sequence[int]] = None, causal: bool = True,
               model: Optional[Dict[str, Any]] = None, heads: Optional[Sequence[int]] = None,
               force: bool = False, check: bool = True) -> Dict[str, Any]:
    """Writes an attention dump into out_dir (docs/dumps.md), atomically: everything goes to a
    temporary directory beside it, which becomes out_dir in one rename when complete.

    layers: {layer index: {kind: array}} (or a list, index = layer), kinds among
      q, k, v        [n_heads, T, d_head]   (k, v: the key/value head each query head reads)
      logits         [n_heads, T, T]        q.k / sqrt(d_head)
      weights        [n_heads, T, T]        softmax rows
      hidden, embed  [T, d_model]           the layer input after its first norm; the model input
    Every layer holds the same kinds. Entries above the diagonal of a causal dump's logits and
    weights are masked: written as attnlim capture writes them (-inf, 0), whatever they held.
    Logits and weights may be left out when q and k are given: attnlim derives them.
    token_ids: the T token ids (None: the dump accepts any tokens; say so in your results).
    causal: True for a decoder (row t sees keys j <= t), False for an encoder.
    model: dict with name, n_layer, n_head, n_kv_head, d_head, d_model, vocab_size and any other
      description (e.g. the source checkpoint); n_layer defaults to the highest layer + 1,
      n_head to the heads stored, d_head and d_model to the arrays'.
    heads: the query-head indices stored, increasing (default 0..n_heads-1).
    force: replace an existing dump in out_dir (a directory holding only manifest.json and
      layer*.npy). check: open the finished dump with libattnlim before publishing it (every
      array is then read back and checked as attnlim checks it).
    Returns the manifest (a dict)."""
    items = _layer_items(layers)
    kinds = [k for k in KINDS if k in items[0][1]]
    for l, arrs in items:
        if sorted(arrs) != sorted(kinds):
            raise ValueError("layers[%d] holds %s, layer %d holds %s: every layer holds the same arrays"
                             % (l, sorted(arrs), items[0][0], sorted(kinds)))
    model = dict(model or {})
    T = None
    n_sel = d_head = d_model = None
    conv = {}
    for l, arrs in items:
        for k in kinds:
            a = _as_float("layers[%d][%r]" % (l, k), arrs[k])
            where = "layers[%d][%r]" % (l, k)
            if k in _PER_HEAD:
                if a.ndim != 3:
                    raise ValueError("%s: shape %s, expected 3 dimensions [n_heads, T, %s]"
                                     % (where, a.shape, "d_head" if k in "qkv" else "T"))
                n_sel = a.shape[0] if n_sel is None else n_sel
                T = a.shape[1] if T is None else T
                if a.shape[0] != n_sel or a.shape[1] != T:
                    raise ValueError("%s: shape %s, expected [%d, %d, ...] (n_heads, T)" % (where, a.shape, n_sel, T))
                if k in ("q", "k", "v"):
                    d_head = a.shape[2] if d_head is None else d_head
                    if a.shape[2] != d_head:
                        raise ValueError("%s: d_head %d, other arrays have %d" % (where, a.shape[2], d_head))
                elif a.shape[2] != T:
                    raise ValueError("%s: shape %s, expected [%d, %d, %d]" % (where, a.shape, n_sel, T, T))
            else:
                if a.ndim != 2:
                    raise ValueError("%s: shape %s, expected [T, d_model]" % (where, a.shape))
                T = a.shape[0] if T is None else T
                d_model = a.shape[1] if d_model is None else d_model
                if a.shape != (T, d_model):
                    raise ValueError("%s: shape %s, expected [%d, %d] (T, d_model)" % (where, a.shape, T, d_model))
            conv[(l, k)] = a
    if T is None or T < 1:
        raise ValueError("the arrays hold no token (T = 0)")
    if n_sel is None:  # only hidden / embed: the heads come from the model description
        n_sel = len(heads) if heads is not None else int(model.get("n_head", 1))
    if heads is None:
        heads = list(range(n_sel))
    heads = [int(h) for h in heads]
    if len(heads) != n_sel or heads != sorted(set(heads)):
        raise ValueError("heads: %d distinct increasing indices expected (one per stored head), got %r"
                         % (n_sel, heads))
    model.setdefault("n_layer", items[-1][0] + 1)
    model.setdefault("n_head", max(heads) + 1)
    model.setdefault("n_kv_head", model["n_head"])
    if d_head is None and "d_head" not in model:
        if d_model is None:
            raise ValueError("model: d_head is needed (no q, k or v given)")
        model["d_head"] = d_model // model["n_head"]
    model.setdefault("d_head", d_head)
    if d_head is not None and model["d_head"] != d_head:
        raise ValueError("model d_head %r, but the arrays have d_head %d" % (model["d_head"], d_head))
    model.setdefault("d_model", d_model if d_model is not None else model["n_head"] * model["d_head"])
    if d_model is not None and model["d_model"] != d_model:
        raise ValueError("model d_model %r, but hidden/embed have %d columns" % (model["d_model"], d_model))
    model["causal"] = bool(causal)
    model.setdefault("name", os.path.basename(os.path.abspath(out_dir)))
    if max(heads) >= model["n_head"]:
        raise ValueError("heads: %d is outside the model's %d heads" % (max(heads), model["n_head"]))
    if items[-1][0] >= model["n_layer"]:
        raise ValueError("layers: %d is outside the model's %d layers" % (items[-1][0], model["n_layer"]))
    ids = None
    if token_ids is not None:
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or len(ids) != T or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError("token_ids: %d integer ids expected (T), got shape %s dtype %s" % (T, ids.shape, ids.dtype))
        if len(ids) and (ids.min() < 0 or ids.max() > 2**31 - 1):
            raise ValueError("token_ids: ids must lie in [0, 2^31)")
        ids = [int(i) for i in ids]
    # finite values outside the mask; masked entries as capture writes them
    upper = np.triu(np.ones((T, T), dtype=bool), k=1) if causal else None
    for (l, k), a in conv.items():
        live = a if upper is None or k not in ("logits", "weights") else a[:, ~upper]
        if not np.isfinite(live).all():
            idx = np.argwhere(~np.isfinite(a if upper is None or k not in ("logits", "weights")
                                           else np.where(upper, 0, a)))[0]
            raise ValueError("layers[%d][%r]: NaN/Inf at %s (arrays must be finite%s)"
                             % (l, k, tuple(int(i) for i in idx),
                                ", masked entries aside" if upper is not None and k in ("logits", "weights") else ""))
        if upper is not None and k in ("logits", "weights"):
            a = a.copy()
            a[:, upper] = -np.inf if k == "logits" else 0.0
            conv[(l, k)] = a
    out_dir = os.path.abspath(out_dir)
    if not os.path.basename(out_dir):
        raise ValueError("out_dir: name the directory")
    err = _Error()
    w = lib.al_dump_writer_open(os.fsencode(out_dir), b"dump", int(bool(force)), ctypes.byref(err))
    if not w:
        msg = err.msg.decode(errors="replace")
        if any(m in msg for m in ("already holds files", "does not write", "not a directory")):
            raise FileExistsError(msg + (" (give force=True to replace a dump)"
                                         if "already holds files" in msg else ""))
        raise AttnlimError(err.code, msg)
    try:
        for (l, k), a in sorted(conv.items(), key=lambda e: (e[0][0], KINDS.index(e[0][1]))):
            shape = (ctypes.c_int64 * a.ndim)(*a.shape)
            _check(lib.al_dump_writer_add(w, l, k.encode(), 1 if a.dtype == np.float64 else 0, a.ndim, shape,
                                          a.ctypes.data_as(ctypes.c_void_p), None, ctypes.byref(err)), err)
        man = {"schema": SCHEMA, "producer": "attnlim.write_dump", "model": model, "T": int(T)}
        if ids is not None:
            man["token_ids"] = ids
        man.update({"layers": [l for l, _ in items], "heads": heads, "arrays": kinds, "files": None,
                    "conventions": {
                        "layout": "q, k, v [n_heads, T, d_head]; logits, weights [n_heads, T, T]; "
                                  "hidden, embed [T, d_model]; n_heads = the heads listed, in order",
                        "masked_entries": "causal dumps: for query row t, keys j > t are masked: "
                                          "logits -inf, weights 0; encoders mask nothing"}})
        for key, value in man.items():
            text = None if key == "files" else json.dumps(value).encode()
            _check(lib.al_dump_writer_set(w, key.encode(), text, ctypes.byref(err)), err)
        text = ctypes.c_void_p()
        _check(lib.al_dump_writer_finish(w, int(bool(check)), ctypes.byref(text), ctypes.byref(err)), err)
        try:
            man = json.loads(ctypes.string_at(text).decode())
        finally:
            lib.al_free(text)
    finally:
        lib.al_dump_writer_free(w)
    return man
