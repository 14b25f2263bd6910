"""The numeric, tokenizer and model API of attnlim over ctypes (imported by __init__).

ctypes layouts below mirror include/attnlim.h field for field (C11 natural alignment on
LP64; tests/python/test_python_api.py checks them by round-tripping values through the API).
"""
import ctypes
import os
from collections import namedtuple
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import AttnlimError, _check, _Error, _Interruptible, lib

__all__ = ["normalize", "jacobian", "jvp", "row_metrics", "head_metrics", "vanishing_D", "sensitivity",
           "sensitivity_direction", "ks_2samp", "critical_n", "slope_origin", "five_number",
           "Tokenizer", "corpus", "Model", "ForwardResult", "CAPTURES"]

_c = ctypes
ArrayLike = Any  # anything numpy.asarray takes (lists, arrays, scalars)
PathLike = Union[str, bytes, "os.PathLike[str]"]
_dp = _c.POINTER(_c.c_double)
_ep = _c.POINTER(_Error)
_i64 = _c.c_int64


# ---- struct layouts (include/attnlim.h) ----------------------------------------------------------

class _Norm(_c.Structure):  # al_norm, 32 bytes
    _fields_ = [("kind", _c.c_int), ("temperature", _c.c_double), ("alpha", _c.c_double),
                ("ssmax_s", _c.c_double)]


class _MetricsOpts(_c.Structure):  # al_metrics_opts, 40 bytes
    _fields_ = [("top_n", _c.POINTER(_c.c_int)), ("n_top", _c.c_int), ("distance", _c.c_int),
                ("separability", _c.c_int), ("mc_samples", _c.c_int), ("mc_seed", _c.c_uint64),
                ("causal", _c.c_int), ("window", _c.c_int)]


_TOPN_FIELDS = ["dtilde", "dmax", "E", "E_mc", "E_mc_se", "ns_ratio", "ns_lower", "ns_upper"]


class _SensOpts(_c.Structure):  # al_sens_opts, 16 bytes
    _fields_ = [("logit_scale", _c.c_double), ("fresh", _c.c_int), ("window", _c.c_int)]


class _TopN(_c.Structure):  # al_topn_stats, 80 bytes
    _fields_ = [("N", _c.c_int), ("rows", _c.c_int64)] + [(f, _c.c_double) for f in _TOPN_FIELDS]


class _Five(_c.Structure):  # al_five, 48 bytes
    _fields_ = [(f, _c.c_double) for f in ("min", "q1", "median", "q3", "max", "mean")]


_INFO_INTS = ["n_layer", "n_head", "n_kv_head", "d_model", "d_head", "d_ff", "n_ctx", "vocab_size",
              "causal"]


class _ModelInfo(_c.Structure):  # al_model_info, 1296 bytes
    _fields_ = [("family", _c.c_char * 16), ("name", _c.c_char * 128), ("path", _c.c_char * 1024),
                ("sha256", _c.c_char * 65), ("dtype", _c.c_char * 16)] + \
               [(f, _c.c_int) for f in _INFO_INTS] + [("n_params", _c.c_int64)]


_fp = _c.POINTER(_c.c_float)
_CAP_ARRAYS = ["q", "k", "v", "logits", "weights", "hidden", "embed", "residual"]
CAPTURES = {name: 1 << i for i, name in enumerate(_CAP_ARRAYS)}  # AL_CAP_* flags
CAPTURES["logits_precap"] = 1 << 12  # Gemma 2: the logits before attention-logit soft-capping


class _Capture(_c.Structure):  # al_capture, 136 bytes
    _fields_ = [(f, _c.c_int) for f in ("layer", "T", "n_head", "n_kv_head", "d_head", "d_model",
                                        "causal", "n_sel")] + \
               [("heads", _c.POINTER(_c.c_int)), ("kv_head", _c.POINTER(_c.c_int))] + \
               [(f, _fp) for f in _CAP_ARRAYS] + \
               [("window", _c.c_int), ("logits_precap", _fp), ("softcap", _c.c_float),
                ("scale", _c.c_float)]


_Observer = _c.CFUNCTYPE(_c.c_int, _c.c_void_p, _c.POINTER(_Capture), _ep)


class _CaptureRequest(_c.Structure):  # al_capture_request, 40 bytes
    _fields_ = [("what", _c.c_uint), ("layers", _c.POINTER(_c.c_uint8)),
                ("heads", _c.POINTER(_c.c_uint8)), ("fn", _Observer), ("user", _c.c_void_p)]


# ---- prototypes ------------------------------------------------------------------------------------

def _proto(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)


_N = _c.POINTER(_Norm)
_proto("al_norm_default", _Norm, _c.c_int)
_proto("al_norm_parse", _c.c_int, _c.c_char_p, _N, _ep)
_proto("al_norm_check", _c.c_int, _N, _ep)
_proto("al_norm_forward", _c.c_int, _N, _dp, _i64, _dp, _ep)
_proto("al_norm_jacobian", _c.c_int, _N, _dp, _i64, _dp, _ep)
_proto("al_norm_jvp", _c.c_int, _N, _dp, _i64, _dp, _dp, _ep)
_proto("al_norm_vjp", _c.c_int, _N, _dp, _i64, _dp, _dp, _ep)
_proto("al_norm_spectral_norm", _c.c_int, _N, _dp, _i64, _dp, _ep)
_proto("al_norm_frobenius_norm", _c.c_int, _N, _dp, _i64, _dp, _ep)
_proto("al_norm_bounds", None, _N, _i64, _dp, _dp)
_proto("al_norm_sums_to_one", _c.c_int, _N)
_proto("al_row_metrics", _c.c_int, _dp, _dp, _i64, _i64, _c.POINTER(_MetricsOpts),
       _c.POINTER(_TopN), _ep)
_proto("al_head_metrics", _c.c_int, _dp, _dp, _i64, _i64, _c.POINTER(_MetricsOpts),
       _c.POINTER(_TopN), _dp, _dp, _ep)
_proto("al_head_vanishing_D", _c.c_int, _dp, _dp, _i64, _i64, _c.c_int, _dp, _ep)
_proto("al_head_vanishing_D_window", _c.c_int, _dp, _dp, _i64, _i64, _c.c_int, _c.c_int, _dp, _ep)
_proto("al_row_vanishing", _c.c_int, _dp, _i64, _dp, _dp, _dp, _ep)
_proto("al_row_sensitivity", _c.c_int, _dp, _i64, _N, _dp, _c.c_int, _dp, _c.c_int, _dp, _dp, _dp,
       _ep)
_proto("al_head_sensitivity", _c.c_int, _dp, _i64, _c.c_int, _N, _dp, _c.c_int, _dp, _c.c_int,
       _c.c_uint64, _c.c_int, _c.c_int, _dp, _dp, _ep)
_proto("al_head_sensitivity_ex", _c.c_int, _dp, _i64, _c.c_int, _N, _dp, _c.c_int, _dp, _c.c_int,
       _c.c_uint64, _c.c_int, _c.c_int, _c.POINTER(_SensOpts), _dp, _dp, _ep)
_proto("al_sensitivity_direction", _c.c_int, _c.c_uint64, _c.c_int, _c.c_int, _i64, _i64, _dp)
_proto("al_ks_2samp", _c.c_int, _dp, _c.c_size_t, _dp, _c.c_size_t, _dp, _dp, _ep)
_proto("al_critical_n", _c.c_int, _c.POINTER(_c.c_int), _c.c_int, _dp, _dp, _c.c_int, _c.c_double,
       _dp, _c.POINTER(_c.c_int), _ep)
_proto("al_slope_origin", _c.c_double, _dp, _dp, _c.c_size_t)
_proto("al_five_number", _c.c_int, _dp, _c.c_size_t, _c.POINTER(_Five), _ep)
_proto("al_tokenizer_open_gpt2", _c.c_int, _c.c_char_p, _c.POINTER(_c.c_void_p), _ep)
_proto("al_tokenizer_open_bpe", _c.c_int, _c.c_char_p, _c.c_char_p, _c.POINTER(_c.c_void_p), _ep)
_proto("al_tokenizer_free", None, _c.c_void_p)
_proto("al_tokenizer_vocab_size", _c.c_int, _c.c_void_p)
_proto("al_tokenize", _c.c_int, _c.c_void_p, _c.c_char_p, _c.c_size_t, _c.c_int,
       _c.POINTER(_c.POINTER(_c.c_int32)), _c.POINTER(_c.c_size_t), _ep)
_proto("al_detokenize", _c.c_int, _c.c_void_p, _c.POINTER(_c.c_int32), _c.c_size_t,
       _c.POINTER(_c.c_void_p), _c.POINTER(_c.c_size_t), _ep)
_proto("al_corpus_load", _c.c_int, _c.c_char_p, _c.c_char_p, _c.POINTER(_c.c_void_p),
       _c.POINTER(_c.c_size_t), _ep)
_proto("al_model_open", _c.c_int, _c.c_char_p, _c.POINTER(_c.c_void_p), _ep)
_proto("al_model_free", None, _c.c_void_p)
_proto("al_model_get_info", _c.POINTER(_ModelInfo), _c.c_void_p)
_proto("al_model_tokenizer", _c.c_int, _c.c_void_p, _c.POINTER(_c.c_void_p), _ep)
_proto("al_model_hash", _c.c_int, _c.c_void_p, _ep)
_proto("al_model_forward", _c.c_int, _c.c_void_p, _c.POINTER(_c.c_int32), _c.c_int,
       _c.POINTER(_CaptureRequest), _fp, _fp, _ep)


class _ForwardOpts(_c.Structure):  # al_forward_opts
    _fields_ = [("logits", _c.c_int), ("last_layer", _c.c_int)]


_proto("al_model_forward_opts", _c.c_int, _c.c_void_p, _c.POINTER(_c.c_int32), _c.c_int,
       _c.POINTER(_CaptureRequest), _c.POINTER(_ForwardOpts), _fp, _fp, _ep)

# al_free: releases the buffers al_tokenize / al_detokenize / al_corpus_load / al_diagnose
# hand out (the library's own free, whatever allocator it was built with)
_proto("al_free", None, _c.c_void_p)


# ---- helpers ---------------------------------------------------------------------------------------

def _f64(a, ndim=None, name="array"):
    arr = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
    if ndim is not None and arr.ndim != ndim:
        raise ValueError("%s must be %d-D, got shape %s" % (name, ndim, arr.shape))
    return arr


def _ptr(arr):
    return arr.ctypes.data_as(_dp)


def _call(fn, *args):
    err = _Error()
    _check(fn(*args, _c.byref(err)), err)


def _norm(method, temperature=1.0, alpha=1.5, ssmax_s=0.43):
    nm, err = _Norm(), _Error()
    _check(lib.al_norm_parse(method.encode(), _c.byref(nm), _c.byref(err)), err)
    nm.temperature, nm.alpha, nm.ssmax_s = float(temperature), float(alpha), float(ssmax_s)
    _call(lib.al_norm_check, _c.byref(nm))
    return nm


# ---- normalizers (METHOD section 7) ----------------------------------------------------------------

def normalize(z: ArrayLike, method: str = "softmax", temperature: float = 1.0, alpha: float = 1.5,
              ssmax_s: float = 0.43) -> np.ndarray:
    """METHOD section 7. Weights p = method(z / temperature) along the last axis of z (any shape, n >= 1).
    method: softmax, sparsemax, entmax15, entmax (alpha), ssmax (ssmax_s), sa-softmax,
    sa-softmax-norm. Entries equal to -inf are masked: the row is normalized over its other
    entries and the masked ones get weight 0 (NaN and +inf are errors). Returns float64 of
    z's shape."""
    nm = _norm(method, temperature, alpha, ssmax_s)
    z = _f64(z)
    if z.ndim == 0:
        raise ValueError("normalize takes an array with at least one axis")
    n = z.shape[-1]
    if n == 0:  # the library's own message for an empty input
        dummy = np.zeros(1)
        _call(lib.al_norm_forward, _c.byref(nm), _ptr(dummy), 0, _ptr(dummy))
    rows = z.reshape(-1, n)
    out = np.zeros_like(rows)
    for i in range(rows.shape[0]):
        keep = rows[i] != -np.inf  # -inf = masked (a causal row): weight 0, not an input
        if keep.all():
            _call(lib.al_norm_forward, _c.byref(nm), _ptr(rows[i]), n, _ptr(out[i]))
            continue
        if not keep.any():
            raise AttnlimError(5, "normalize: row %d is entirely masked (-inf)" % i)
        zi = np.ascontiguousarray(rows[i][keep])
        pi = np.empty_like(zi)
        _call(lib.al_norm_forward, _c.byref(nm), _ptr(zi), len(zi), _ptr(pi))
        out[i][keep] = pi
    return out.reshape(z.shape)


def jacobian(z: ArrayLike, method: str = "softmax", temperature: float = 1.0, alpha: float = 1.5,
             ssmax_s: float = 0.43, full: bool = False) -> Dict[str, Any]:
    """METHOD section 7 (Lemma 2 / Corollary 3). The Jacobian J = dp/dz [n, n] of normalize(z) for one z[n]: a dict with "spectral"
    (largest singular value), "frobenius", "bound_sup" = 1/(2T) and "bound_paper" =
    min(1/(4T), sqrt 2) (NaN where no bound is known), "sums_to_one", and "matrix" (the
    dense J, J[i, j] = dp_i/dz_j) when full=True."""
    nm = _norm(method, temperature, alpha, ssmax_s)
    z = _f64(z, 1, "z")
    n = z.shape[0]
    spec, frob, bs, bp = _c.c_double(), _c.c_double(), _c.c_double(), _c.c_double()
    _call(lib.al_norm_spectral_norm, _c.byref(nm), _ptr(z), n, _c.byref(spec))
    _call(lib.al_norm_frobenius_norm, _c.byref(nm), _ptr(z), n, _c.byref(frob))
    lib.al_norm_bounds(_c.byref(nm), n, _c.byref(bs), _c.byref(bp))
    out = {"spectral": spec.value, "frobenius": frob.value, "bound_sup": bs.value,
           "bound_paper": bp.value, "sums_to_one": bool(lib.al_norm_sums_to_one(_c.byref(nm)))}
    if full:
        J = np.empty((n, n))
        _call(lib.al_norm_jacobian, _c.byref(nm), _ptr(z), n, _ptr(J))
        out["matrix"] = J
    return out


def jvp(z: ArrayLike, v: ArrayLike, method: str = "softmax", temperature: float = 1.0, alpha: float = 1.5,
        ssmax_s: float = 0.43, transpose: bool = False) -> np.ndarray:
    """METHOD section 7. J v (or J^T v with transpose=True) for the Jacobian of normalize at z[n]; v[n]."""
    nm = _norm(method, temperature, alpha, ssmax_s)
    z, v = _f64(z, 1, "z"), _f64(v, 1, "v")
    if v.shape != z.shape:
        raise ValueError("v must have z's shape %s, got %s" % (z.shape, v.shape))
    out = np.empty_like(z)
    fn = lib.al_norm_vjp if transpose else lib.al_norm_jvp
    _call(fn, _c.byref(nm), _ptr(z), z.shape[0], _ptr(v), _ptr(out))
    return out


# ---- metrics (METHOD sections 2-6) -----------------------------------------------------------------

def _opts(top_n, distance, separability, mc, seed, causal, window=0):
    tn = np.ascontiguousarray(np.atleast_1d(np.asarray(top_n, dtype=np.int32)))
    o = _MetricsOpts()
    o.top_n = tn.ctypes.data_as(_c.POINTER(_c.c_int))
    o.n_top, o.distance, o.separability = len(tn), int(bool(distance)), int(bool(separability))
    o.mc_samples, o.mc_seed, o.causal, o.window = int(mc), int(seed), int(bool(causal)), int(window)
    return o, tn  # keep tn alive while o is used


def _stats(arr):
    return [dict({"N": s.N, "rows": s.rows}, **{f: getattr(s, f) for f in _TOPN_FIELDS}) for s in arr]


def row_metrics(alpha: ArrayLike, x: ArrayLike, top_n: Sequence[int] = (1, 5), mc: int = 0, seed: int = 0,
                distance: bool = True, separability: bool = True) -> List[Dict[str, float]]:
    """METHOD sections 3 and 5 (dtilde, dmax, E [reading]; N_s/N and its bounds [reading]). Distance and separability metrics of one row: alpha[n] weights, x[n, d] vectors. One
    dict per N of top_n (in that order) with N, rows (1, or 0 with NaN values when n <= N),
    dtilde, dmax, E, E_mc, E_mc_se (Monte-Carlo with mc samples, NaN if mc == 0), ns_ratio,
    ns_lower, ns_upper."""
    a, xs = _f64(alpha, 1, "alpha"), _f64(x, 2, "x")
    if xs.shape[0] != a.shape[0]:
        raise ValueError("x must have %d rows (one per weight), got %d" % (a.shape[0], xs.shape[0]))
    o, keep = _opts(top_n, distance, separability, mc, seed, False)
    out = (_TopN * o.n_top)()
    _call(lib.al_row_metrics, _ptr(a), _ptr(xs), a.shape[0], xs.shape[1], _c.byref(o), out)
    return _stats(out)


def head_metrics(w: ArrayLike, x: ArrayLike, top_n: Sequence[int] = (1, 5), causal: bool = True, mc: int = 0,
                 seed: int = 0, distance: bool = True, separability: bool = True, window: int = 0) -> Dict[str, Any]:
    """METHOD sections 2, 3 and 5 over one head (Ctrl-C stops it: KeyboardInterrupt). One head: w[L, L] weights (causal: row t uses keys 0..t; with a sliding window > 0 keys max(0, t - window + 1)..t), x[L, d] vectors. Returns a dict:
    "stats" (a list of dicts as row_metrics, means over the rows with n_t > N), "row_max"[L]
    and "row_entropy"[L]."""
    ws, xs = _f64(w, 2, "w"), _f64(x, 2, "x")
    L = ws.shape[0]
    if ws.shape != (L, L) or xs.shape[0] != L:
        raise ValueError("w must be [L, L] and x [L, d]; got %s and %s" % (ws.shape, xs.shape))
    o, keep = _opts(top_n, distance, separability, mc, seed, causal, window)
    out = (_TopN * o.n_top)()
    rmax, rent = np.empty(L), np.empty(L)
    with _Interruptible():  # Ctrl-C stops it between row blocks
        _call(lib.al_head_metrics, _ptr(ws), _ptr(xs), L, xs.shape[1], _c.byref(o), out, _ptr(rmax),
              _ptr(rent))
    return {"stats": _stats(out), "row_max": rmax, "row_entropy": rent}


def row_vanishing(alpha: ArrayLike) -> Tuple[float, float, float]:
    """One row's vanishing-attention statistics (METHOD 2): (max weight, entropy H, H / log n;
    the last NaN when n = 1)."""
    a = _f64(alpha, 1, "alpha")
    mx, H, Hn = _c.c_double(), _c.c_double(), _c.c_double()
    _call(lib.al_row_vanishing, _ptr(a), a.shape[0], _c.byref(mx), _c.byref(H), _c.byref(Hn))
    return mx.value, H.value, Hn.value


def row_sensitivity(z: ArrayLike, temps: ArrayLike, eps: ArrayLike, v: ArrayLike, method: str = "softmax",
                    alpha: float = 1.5, ssmax_s: float = 0.43) -> Tuple[np.ndarray, np.ndarray]:
    """METHOD section 6. Algorithm 5 for one row of logits z[n] in the direction v[n]: returns (fd[n_t, n_eps],
    spec[n_t]): |f((z + eps v)/T) - f(z/T)| / eps and the exact spectral norm of the Jacobian of
    f(z/T). The paper's v is sensitivity_direction(seed, layer, head, row, n)."""
    nm = _norm(method, 1.0, alpha, ssmax_s)
    zs, vs = _f64(z, 1, "z"), _f64(v, 1, "v")
    if vs.shape != zs.shape:
        raise ValueError("v must have the shape of z %s, got %s" % (zs.shape, vs.shape))
    ts, es = _f64(np.atleast_1d(temps), 1, "temps"), _f64(np.atleast_1d(eps), 1, "eps")
    fd, sp = np.empty((len(ts), len(es))), np.empty(len(ts))
    _call(lib.al_row_sensitivity, _ptr(zs), zs.shape[0], _c.byref(nm), _ptr(ts), len(ts), _ptr(es),
          len(es), _ptr(vs), _ptr(fd), _ptr(sp))
    return fd, sp


def vanishing_D(q: ArrayLike, k: ArrayLike, causal: bool = True, window: int = 0) -> np.ndarray:
    """METHOD section 2, Corollary 1 (q[L, d_head], k[L, d_head], unitless): D[L], D_t = |q_t| max_{j <= t (causal) or all j} |k_j| / sqrt(d_head); with a sliding window > 0, j = max(0, t - window + 1)..t."""
    qs, ks = _f64(q, 2, "q"), _f64(k, 2, "k")
    if qs.shape != ks.shape:
        raise ValueError("q and k must have the same shape, got %s and %s" % (qs.shape, ks.shape))
    D = np.empty(qs.shape[0])
    _call(lib.al_head_vanishing_D_window, _ptr(qs), _ptr(ks), qs.shape[0], qs.shape[1], int(bool(causal)),
          int(window), _ptr(D))
    return D


def sensitivity(z: ArrayLike, temps: ArrayLike, eps: ArrayLike, method: str = "softmax", causal: bool = True,
                seed: int = 0, layer: int = 0, head: int = 0, alpha: float = 1.5,
                ssmax_s: float = 0.43, window: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """METHOD section 6. Algorithm 5 on logits z[L, L] (causal: row t uses columns 0..t): returns (fd_mean[n_t,
    n_eps], spec_mean[n_t]), the means over rows (n >= 2) of |f((z + eps v)/T) - f(z/T)| / eps
    and of the exact spectral norm of the Jacobian of f(z/T). v: sensitivity_direction. window > 0 (causal
    sliding window, Mistral / Gemma 2): row t uses columns max(0, t - window + 1)..t, n = min(t + 1, window)."""
    nm = _norm(method, 1.0, alpha, ssmax_s)
    zs = _f64(z, 2, "z")
    L = zs.shape[0]
    if zs.shape != (L, L):
        raise ValueError("z must be [L, L], got %s" % (zs.shape,))
    ts, es = _f64(np.atleast_1d(temps), 1, "temps"), _f64(np.atleast_1d(eps), 1, "eps")
    fd, sp = np.empty((len(ts), len(es))), np.empty(len(ts))
    so = _SensOpts(1.0, 0, int(window))
    _call(lib.al_head_sensitivity_ex, _ptr(zs), L, int(bool(causal)), _c.byref(nm), _ptr(ts), len(ts),
          _ptr(es), len(es), int(seed), int(layer), int(head), _c.byref(so), _ptr(fd), _ptr(sp))
    return fd, sp


def sensitivity_direction(seed: int, layer: int, head: int, row: int, n: int) -> np.ndarray:
    """METHOD section 6. The unit direction v[n] Algorithm 5 uses for (seed, layer, head, row)."""
    v = np.empty(int(n))
    rc = lib.al_sensitivity_direction(int(seed), int(layer), int(head), int(row), int(n), _ptr(v))
    if rc != 0:
        raise AttnlimError(rc, "sensitivity_direction: n must be >= 1 (got %d)" % n)
    return v


# ---- statistics (METHOD section 4) -----------------------------------------------------------------

def ks_2samp(a: ArrayLike, b: ArrayLike) -> Tuple[float, float]:
    """METHOD section 4. a[n], b[m]. Two-sided two-sample Kolmogorov-Smirnov test: (statistic, pvalue), as scipy's."""
    x, y = _f64(a, 1, "a"), _f64(b, 1, "b")
    st, p = _c.c_double(), _c.c_double()
    _call(lib.al_ks_2samp, _ptr(x), len(x), _ptr(y), len(y), _c.byref(st), _c.byref(p))
    return st.value, p.value


def critical_n(N: Sequence[int], dtilde: ArrayLike, E: ArrayLike,
               level: float = 0.01) -> Tuple[np.ndarray, Optional[int]]:
    """METHOD section 4. Algorithm 3 for one L: N[nN] increasing, dtilde[nN, heads] and E[nN, heads] per-head
    means. Returns (pvalues[nN], the smallest N with p >= level or None)."""
    Ns = np.ascontiguousarray(np.asarray(N, dtype=np.int32))
    d, e = _f64(dtilde, 2, "dtilde"), _f64(E, 2, "E")
    if d.shape != e.shape or d.shape[0] != len(Ns):
        raise ValueError("dtilde and E must both be [len(N), heads]; got %s, %s" % (d.shape, e.shape))
    pv, crit = np.empty(len(Ns)), _c.c_int()
    _call(lib.al_critical_n, Ns.ctypes.data_as(_c.POINTER(_c.c_int)), len(Ns), _ptr(d), _ptr(e),
          d.shape[1], float(level), _ptr(pv), _c.byref(crit))
    return pv, (None if crit.value < 0 else crit.value)


def slope_origin(x: ArrayLike, y: ArrayLike) -> float:
    """METHOD section 4 (the slope of N* against L). x[n], y[n]. Least squares through the origin: sum x y / sum x^2 (NaN if sum x^2 == 0)."""
    xs, ys = _f64(x, 1, "x"), _f64(y, 1, "y")
    if xs.shape != ys.shape:
        raise ValueError("x and y must have the same length")
    return lib.al_slope_origin(_ptr(xs), _ptr(ys), len(xs))


def five_number(x: ArrayLike) -> Dict[str, float]:
    """METHOD section 4. dict(min, q1, median, q3, max, mean) of x[n] (quartiles as numpy.percentile)."""
    xs, f = _f64(x, 1, "x"), _Five()
    _call(lib.al_five_number, _ptr(xs), len(xs), _c.byref(f))
    return {k: getattr(f, k) for k, _ in _Five._fields_}


# ---- tokenizers and corpora ------------------------------------------------------------------------

def _take_bytes(p, n):
    try:
        return _c.string_at(p.value, n.value) if n.value else b""
    finally:
        lib.al_free(p)


class Tokenizer:
    """A byte-level BPE tokenizer (GPT-2's by default). Use Tokenizer.gpt2(), or a with-block."""

    def __init__(self, handle):
        self._h = handle

    @classmethod
    def gpt2(cls, vocab: Optional[PathLike] = None) -> "Tokenizer":
        """GPT-2 BPE: vocab None (the shared data files, found as al_data_find does) or a
        directory with encoder.json + vocab.bpe (or vocab.json + merges.txt)."""
        h = _c.c_void_p()
        _call(lib.al_tokenizer_open_gpt2, None if vocab is None else os.fsencode(vocab), _c.byref(h))
        return cls(h)

    @classmethod
    def bpe(cls, vocab: PathLike, pretok: str = "gpt2") -> "Tokenizer":
        """Any byte-level BPE in vocab's files, pre-tokenizer "gpt2", "llama3" or "smollm"."""
        h = _c.c_void_p()
        _call(lib.al_tokenizer_open_bpe, os.fsencode(vocab), pretok.encode(), _c.byref(h))
        return cls(h)

    def _handle(self):
        if not self._h:
            raise ValueError("the tokenizer is closed")
        return self._h

    @property
    def vocab_size(self) -> int:
        """Number of token ids (ids are 0 .. vocab_size - 1)."""
        return lib.al_tokenizer_vocab_size(self._handle())

    def encode(self, text: Union[str, bytes], allow_special: bool = False) -> np.ndarray:
        """Token ids (int32 ndarray) of text (str, encoded as UTF-8, or bytes)."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids, n = _c.POINTER(_c.c_int32)(), _c.c_size_t()
        _call(lib.al_tokenize, self._handle(), data, len(data), int(bool(allow_special)),
              _c.byref(ids), _c.byref(n))
        try:
            return np.ctypeslib.as_array(ids, shape=(n.value,)).copy() if n.value else \
                np.zeros(0, dtype=np.int32)
        finally:
            lib.al_free(_c.cast(ids, _c.c_void_p))

    def decode_bytes(self, ids: ArrayLike) -> bytes:
        """The bytes of ids[n] (any int dtype; out-of-range ids are an error naming the id)."""
        arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int64))
        if arr.ndim != 1:
            raise ValueError("ids must be 1-D")
        if arr.size and (arr.min() < 0 or arr.max() > 2**31 - 1):
            raise AttnlimError(1, "decode: token id out of range")
        a32 = arr.astype(np.int32)
        p, n = _c.c_void_p(), _c.c_size_t()
        _call(lib.al_detokenize, self._handle(), a32.ctypes.data_as(_c.POINTER(_c.c_int32)), len(a32),
              _c.byref(p), _c.byref(n))
        return _take_bytes(p, n)

    def decode(self, ids: ArrayLike, errors: str = "replace") -> str:
        """Text of ids (bytes decoded as UTF-8 with errors; decode_bytes gives the bytes)."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def close(self) -> None:
        """Frees the C tokenizer (idempotent)."""
        if self._h:
            lib.al_tokenizer_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def corpus(name_or_path: PathLike = "war-and-peace", data_path: Optional[PathLike] = None,
           as_bytes: bool = False) -> Union[str, bytes]:
    """METHOD section 1 (the corpus). A corpus: "war-and-peace" (the body of pg2600.txt, CRLF -> LF) or a text file. Returns
    str (UTF-8, invalid bytes replaced) or bytes with as_bytes=True."""
    p, n = _c.c_void_p(), _c.c_size_t()
    _call(lib.al_corpus_load, os.fsencode(name_or_path),
          None if data_path is None else os.fsencode(data_path), _c.byref(p), _c.byref(n))
    data = _take_bytes(p, n)
    return data if as_bytes else data.decode("utf-8", errors="replace")


# ---- models and capture ----------------------------------------------------------------------------

ForwardResult = namedtuple("ForwardResult", ["logits", "hidden", "captures"])
ForwardResult.__doc__ = """logits [T, vocab] float32 (or None), hidden [T, d_model] float32 (or
None; after the final norm for decoders), captures {layer: {what: ndarray, "heads": ndarray}}."""


def _outputs_for(info: Dict[str, Any], logits: Optional[bool], hidden: Optional[bool]) -> Tuple[bool, bool]:
    """The forward's outputs that apply to the model's family: None = where they exist; an
    explicit True where they do not is refused, saying why."""
    fam, name = info["family"], info["name"] or info["path"]
    has_head = fam not in ("bert", "dump")  # decoders have a language-model head
    if logits and not has_head:
        why = ("an attention dump stores attention, not the model's output logits" if fam == "dump" else
               "a %s encoder has no language-model head, so there are no output logits" % fam.upper())
        raise ValueError("forward(logits=True) does not apply to %s: %s (leave logits unset)" % (name, why))
    if hidden and fam == "dump":
        raise ValueError("forward(hidden=True) does not apply to %s: an attention dump stores no final "
                         "hidden states (capture 'hidden' gives each stored layer's input)" % name)
    return (has_head if logits is None else bool(logits)), (fam != "dump" if hidden is None else bool(hidden))


class Model:
    """A model opened by path (HF dir / .safetensors, llm.c .bin, .gguf) or known name."""

    def __init__(self, path_or_name: PathLike):
        h = _c.c_void_p()
        _call(lib.al_model_open, os.fsencode(path_or_name), _c.byref(h))
        self._h = h

    def _handle(self):
        if not self._h:
            raise ValueError("the model is closed")
        return self._h

    @property
    def info(self) -> Dict[str, Any]:
        """dict of al_model_info: family, name, path, sha256, dtype, n_layer, n_head, n_kv_head,
        d_model, d_head, d_ff, n_ctx, vocab_size, causal, n_params."""
        i = lib.al_model_get_info(self._handle()).contents
        d = {f: getattr(i, f).decode(errors="replace") for f in ("family", "name", "path", "sha256",
                                                                  "dtype")}
        d.update({f: getattr(i, f) for f in _INFO_INTS})
        d["n_params"] = i.n_params
        return d

    def sha256(self) -> str:
        """The model identity: SHA-256 of the `sha256sum` lines of the files that define the
        model (config.json, shard index, shards, or the one weights file), sorted by name."""
        _call(lib.al_model_hash, self._handle())
        return self.info["sha256"]

    def tokenizer(self) -> Tokenizer:
        """The model's own tokenizer (a Tokenizer, to close or use in a with-block)."""
        h = _c.c_void_p()
        _call(lib.al_model_tokenizer, self._handle(), _c.byref(h))
        return Tokenizer(h)

    def forward(self, tokens: ArrayLike, capture: Union[str, Iterable[str]] = (),
                layers: Optional[Iterable[int]] = None, heads: Optional[Iterable[int]] = None,
                logits: Optional[bool] = None, hidden: Optional[bool] = None,
                names: str = "attnlim", rows: str = "all") -> "ForwardResult":
        """Runs the model over tokens[T] (int ids, T <= n_ctx). capture: names among q, k, v,
        logits, weights, hidden, embed, residual (the layer input before its first norm),
        logits_precap (Gemma 2: the logits before soft-capping) (METHOD section 1: what the
        metrics read); each layer's dict also holds heads, kv_head [n_head], window (the
        sliding window, 0 = none), softcap and scale; layers /
        heads: iterables of indices (None = all). Each layer's capture is copied (only what was
        asked, only the selected heads) while the forward streams, so memory stays at one layer
        in C. Per-head arrays are float32 [n_sel, T, d_head] (q, k, v) or [n_sel, T, T]
        (logits = q.k / sqrt(d_head), masked entries -inf; weights, masked entries 0).

        logits: the output logits [T, vocab] (float32). None (the default) gives them where
        the model has a language-model head (decoders: gpt2, llama) and not otherwise; True
        for a model without one (a BERT encoder, an attention dump) is refused, saying why.
        hidden: the final hidden states [T, d_model]; None gives them except for an attention
        dump (it stores none), where True is refused. rows="last": logits and hidden are the last
        token's only ([1, vocab], [1, d_model]), and the forward does only that work (the top
        layer's attention output and MLP for that token, the head for that row: as a prompt's
        next-token prediction needs). With neither logits nor hidden no layer above the last
        one captured runs. Ctrl-C stops the forward between layers (KeyboardInterrupt).

        names="transformer_lens": captures is instead one flat dict named and laid out as a
        TransformerLens ActivationCache ("blocks.{l}.attn.hook_pattern" [1, n_sel, T, T], ...;
        attnlim.to_transformer_lens says which name each array gets)."""
        if names not in ("attnlim", "transformer_lens"):
            raise ValueError("names: 'attnlim' or 'transformer_lens', not %r" % (names,))
        if rows not in ("all", "last"):
            raise ValueError("rows: 'all' or 'last', not %r" % (rows,))
        info = self.info
        logits, hidden = _outputs_for(info, logits, hidden)
        toks = np.ascontiguousarray(np.asarray(tokens, dtype=np.int64))
        if toks.ndim != 1:
            raise ValueError("tokens must be 1-D")
        if toks.size and (toks.min() < 0 or toks.max() > 2**31 - 1):
            raise AttnlimError(1, "forward: token id out of int32 range")
        toks = toks.astype(np.int32)
        T = len(toks)
        if isinstance(capture, str):
            capture = (capture,)
        what = 0
        for c in capture:
            if c not in CAPTURES:
                raise ValueError("unknown capture %r (one of %s)" % (c, ", ".join(CAPTURES)))
            what |= CAPTURES[c]

        def mask(sel, n, kind):
            if sel is None:
                return None
            m = np.zeros(n, dtype=np.uint8)
            for i in sel:
                if not 0 <= int(i) < n:
                    raise ValueError("%s index %d out of range [0, %d)" % (kind, int(i), n))
                m[int(i)] = 1
            return m

        lmask = mask(layers, info["n_layer"], "layer")
        hmask = mask(heads, info["n_head"], "head")
        captures, failure = {}, []

        def observer(user, cap_p, err_p):
            try:
                cap = cap_p.contents
                n_sel, Tc, dh, dm = cap.n_sel, cap.T, cap.d_head, cap.d_model
                shapes = {"q": (n_sel, Tc, dh), "k": (n_sel, Tc, dh), "v": (n_sel, Tc, dh),
                          "logits": (n_sel, Tc, Tc), "weights": (n_sel, Tc, Tc),
                          "hidden": (Tc, dm), "embed": (Tc, dm), "residual": (Tc, dm),
                          "logits_precap": (n_sel, Tc, Tc)}
                got = {"heads": np.array([cap.heads[i] for i in range(n_sel)], dtype=np.int64),
                       "kv_head": np.array([cap.kv_head[h] for h in range(cap.n_head)], dtype=np.int64),
                       "window": cap.window, "softcap": cap.softcap, "scale": cap.scale}
                for name in capture:
                    p = getattr(cap, name)
                    if not p:
                        raise AttnlimError(6, "capture %r not provided by the model" % name)
                    got[name] = np.ctypeslib.as_array(p, shape=shapes[name]).copy()
                captures[cap.layer] = got
                return 0
            except BaseException as e:  # stop the forward; re-raised below
                failure.append(e)
                msg = ("python observer: %s" % e).encode()[:1000]
                err_p.contents.code = 8
                err_p.contents.msg = msg
                return 1

        cb = _Observer(observer)  # kept alive until the forward returns
        req = _CaptureRequest()
        req.what = what
        req.layers = None if lmask is None else lmask.ctypes.data_as(_c.POINTER(_c.c_uint8))
        req.heads = None if hmask is None else hmask.ctypes.data_as(_c.POINTER(_c.c_uint8))
        req.fn, req.user = cb, None
        n_rows = 1 if rows == "last" and T else T
        lg = np.empty((n_rows, info["vocab_size"]), dtype=np.float32) if logits else None
        hd = np.empty((n_rows, info["d_model"]), dtype=np.float32) if hidden else None
        opts = _ForwardOpts(0 if logits or hidden else 2, -1)  # AL_LOGITS_ALL or _NONE
        if rows == "last" and (logits or hidden):
            opts.logits = 1  # AL_LOGITS_LAST
        err = _Error()
        with _Interruptible():  # Ctrl-C stops the forward between layers
            rc = lib.al_model_forward_opts(self._handle(), toks.ctypes.data_as(_c.POINTER(_c.c_int32)), T,
                                           _c.byref(req) if what else None, _c.byref(opts),
                                           None if lg is None else lg.ctypes.data_as(_fp),
                                           None if hd is None else hd.ctypes.data_as(_fp), _c.byref(err))
        if failure:
            raise failure[0]
        _check(rc, err)
        if names == "transformer_lens":
            from ._interop import to_transformer_lens
            captures = to_transformer_lens(captures, rotary=info["family"] == "llama")
        return ForwardResult(lg, hd, captures)

    def close(self) -> None:
        """Frees the C model (idempotent)."""
        if self._h:
            lib.al_model_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- experiments (`attnlim reproduce`, `attnlim diagnose`) -----------------------------------------

class _AttnSpec(_c.Structure):  # al_attn_spec, 48 bytes (zero: the model's own attention)
    _fields_ = [("rule", _c.c_char_p), ("normalizer", _c.c_char_p),
                ("layers", _c.POINTER(_c.c_int)), ("n_layers", _c.c_int),
                ("heads", _c.POINTER(_c.c_int)), ("n_heads", _c.c_int)]


class _ReproOpts(_c.Structure):  # al_repro_opts, 304 bytes
    _fields_ = [("model", _c.c_char_p), ("corpus", _c.c_char_p), ("data_path", _c.c_char_p),
                ("out_dir", _c.c_char_p), ("windows", _c.c_int), ("vectors", _c.c_int),
                ("normalizer", _c.c_char_p), ("quick", _c.c_int), ("resume", _c.c_int),
                ("progress", _c.c_int), ("quiet", _c.c_int), ("threads", _c.c_int),
                ("experiments", _c.c_uint), ("seed", _c.c_uint64), ("mc_samples", _c.c_int),
                ("long_length", _c.c_int), ("lengths", _c.POINTER(_c.c_int)), ("n_lengths", _c.c_int),
                ("top_n", _c.POINTER(_c.c_int)), ("n_top_n", _c.c_int),
                ("critical_n", _c.POINTER(_c.c_int)), ("n_critical_n", _c.c_int),
                ("separability_n", _c.POINTER(_c.c_int)), ("n_separability_n", _c.c_int),
                ("temperatures", _dp), ("n_temperatures", _c.c_int), ("eps", _dp), ("n_eps", _c.c_int),
                ("synthetic", _c.c_int), ("distance", _c.c_int), ("expectation", _c.c_int),
                ("exact_max", _c.c_int64), ("temperature_raw", _c.c_int),
                ("fresh_directions", _c.c_int), ("attention", _AttnSpec),
                ("readings", _c.c_char_p), ("bos", _c.c_int), ("wrap", _c.c_int),
                ("layers", _c.POINTER(_c.c_int)), ("n_layers", _c.c_int),
                ("heads", _c.POINTER(_c.c_int)), ("n_heads", _c.c_int)]


class _DiagOpts(_c.Structure):  # al_diag_opts, 144 bytes
    _fields_ = [("model", _c.c_char_p), ("corpus", _c.c_char_p), ("data_path", _c.c_char_p),
                ("out_dir", _c.c_char_p), ("length", _c.c_int), ("window", _c.c_int),
                ("threads", _c.c_int), ("normalizer", _c.c_char_p), ("attention", _AttnSpec),
                ("layers", _c.POINTER(_c.c_int)), ("n_layers", _c.c_int),
                ("heads", _c.POINTER(_c.c_int)), ("n_heads", _c.c_int),
                ("bos", _c.c_int), ("wrap", _c.c_int)]


_proto("al_repro_defaults", None, _c.POINTER(_ReproOpts))
_proto("al_repro_pick_model", _c.c_int, _c.c_char_p, _c.c_size_t, _ep)
_proto("al_reproduce", _c.c_int, _c.POINTER(_ReproOpts), _ep)
_proto("al_vectors_parse", _c.c_int, _c.c_char_p, _c.POINTER(_c.c_int), _ep)
_proto("al_distance_parse", _c.c_int, _c.c_char_p, _c.POINTER(_c.c_int), _ep)
_proto("al_expect_parse", _c.c_int, _c.c_char_p, _c.POINTER(_c.c_int), _ep)
_proto("al_diagnose", _c.c_int, _c.POINTER(_DiagOpts), _c.POINTER(_c.c_void_p), _ep)

EXPERIMENTS = {"vanishing": 1, "alg1": 2, "alg2": 4, "alg3": 8, "alg4": 16, "alg5": 32}
__all__ += ["reproduce", "diagnose", "pick_model", "EXPERIMENTS"]


def _s(x):
    return None if x is None else os.fsencode(x)


def pick_model() -> str:
    """The model `reproduce` uses by default: "gpt2" when its weights are available, else
    "smollm2" (AttnlimError with advice when neither is)."""
    buf = _c.create_string_buffer(256)
    _call(lib.al_repro_pick_model, buf, 256)
    return buf.value.decode()


def reproduce(out_dir: PathLike, model: Optional[PathLike] = None, corpus: Optional[PathLike] = None,
              data_path: Optional[PathLike] = None, windows: Union[int, str] = 1, vectors: str = "value",
              normalizer: Optional[str] = None, quick: bool = False, resume: bool = False,
              progress: bool = False, quiet: bool = True, threads: int = 0,
              experiments: Optional[Iterable[str]] = None, seed: int = 1234, mc: int = 0,
              long_length: int = 0, lengths: Optional[Sequence[int]] = None,
              top_n: Optional[Sequence[int]] = None, critical_n: Optional[Sequence[int]] = None,
              separability_n: Optional[Sequence[int]] = None,
              temperatures: Optional[Sequence[float]] = None, eps: Optional[Sequence[float]] = None,
              synthetic: Optional[bool] = None, distance: str = "sum-of-norms",
              expectation: str = "analytic", exact_max: int = 0, temperature_scale: str = "scaled",
              directions: str = "shared", readings: Optional[str] = None,
              layers: Optional[Sequence[int]] = None, heads: Optional[Sequence[int]] = None,
              bos: Optional[bool] = None, wrap: Optional[bool] = None,
              on_progress: Optional[Callable[[str, int, int], Optional[bool]]] = None) -> Dict[str, Any]:
    """METHOD sections 1-7, Algorithms 1-5. Runs the paper's experiments (as `attnlim
    reproduce`) and writes results.json, CSVs, NPYs, figures and reports into out_dir
    (docs/reproduce.md). experiments: names among vanishing, alg1..alg5 (None = all). Grids
    None = METHOD's defaults (or --quick's): lengths L (tokens), top_n / critical_n /
    separability_n N (tokens), temperatures T (> 0, unitless), eps (finite-difference steps).
    synthetic: None (from the checkpoint), False or True. windows: K (windows 0..K-1 of every L)
    or "all" (every window of the corpus at the longest L). The readings of METHOD section 9
    (docs/readings.md): vectors, distance (sum-of-norms | norm-of-sum | sum-vector), expectation
    (analytic | mc | exact), exact_max, temperature_scale (scaled | raw), directions
    (shared | fresh); readings: None, "all" or "AXIS=VALUE;..." (every claim under each reading
    too, on the same forward passes: readings.json). threads: OpenMP threads over heads
    for this call only (0 = the OpenMP default). layers / heads: only those heads are analysed
    (None = all; the others are NaN). bos: BOS first in the text (None = the model's default);
    wrap: an encoder's windows [CLS] + L - 2 tokens + [SEP] (None = on). Returns results.json
    as a dict.

    Ctrl-C (or on_progress(stage, done, total) returning False) stops the run at its next
    unit of work (a layer or a head): KeyboardInterrupt (AttnlimError code AL_E_CANCELLED for
    on_progress), nothing final written; the (window, L) jobs already done stay in
    out_dir/partial and resume=True reuses them."""
    o = _ReproOpts()
    lib.al_repro_defaults(_c.byref(o))
    o.model, o.corpus, o.data_path, o.out_dir = _s(model), _s(corpus), _s(data_path), _s(out_dir)
    o.normalizer = None if normalizer is None else normalizer.encode()
    vec = _c.c_int()
    _call(lib.al_vectors_parse, vectors.encode(), _c.byref(vec))
    o.vectors, o.windows = vec.value, (-1 if windows == "all" else int(windows))  # AL_WINDOWS_ALL
    _call(lib.al_distance_parse, distance.encode(), _c.byref(vec))
    o.distance = vec.value
    _call(lib.al_expect_parse, expectation.encode(), _c.byref(vec))
    o.expectation, o.exact_max = vec.value, int(exact_max)
    for name, val, allowed in (("temperature_scale", temperature_scale, ("scaled", "raw")),
                               ("directions", directions, ("shared", "fresh"))):
        if val not in allowed:
            raise ValueError("%s: %r is not one of %s" % (name, val, ", ".join(allowed)))
    o.temperature_raw, o.fresh_directions = int(temperature_scale == "raw"), int(directions == "fresh")
    o.readings = None if readings is None else readings.encode()
    o.quick, o.resume, o.progress, o.quiet = int(quick), int(resume), int(progress), int(quiet)
    o.threads, o.seed, o.mc_samples, o.long_length = int(threads), int(seed), int(mc), int(long_length)
    if experiments is not None:
        bits = 0
        for e in experiments:
            if e not in EXPERIMENTS:
                raise ValueError("unknown experiment %r (one of %s)" % (e, ", ".join(EXPERIMENTS)))
            bits |= EXPERIMENTS[e]
        o.experiments = bits
    if synthetic is not None:
        o.synthetic = int(bool(synthetic))
    keep = []
    for field, grid, dt in (("lengths", lengths, np.int32), ("top_n", top_n, np.int32),
                            ("critical_n", critical_n, np.int32),
                            ("separability_n", separability_n, np.int32),
                            ("temperatures", temperatures, np.float64), ("eps", eps, np.float64)):
        if grid is None:
            continue
        arr = np.ascontiguousarray(np.atleast_1d(np.asarray(grid, dtype=dt)))
        keep.append(arr)
        ptype = _dp if dt == np.float64 else _c.POINTER(_c.c_int)
        setattr(o, field, arr.ctypes.data_as(ptype))
        setattr(o, "n_" + field, len(arr))
    o.bos, o.wrap = _switch(bos), _switch(wrap)
    keep += _selection(o, layers, heads)
    with _Interruptible(on_progress):  # Ctrl-C: KeyboardInterrupt; the next run may --resume
        _call(lib.al_reproduce, _c.byref(o))
    import json
    with open(os.path.join(out_dir, "results.json"), encoding="utf-8") as f:
        return json.load(f)


def _switch(v: Optional[bool]) -> int:
    """None / True / False as the C options' 0 (the default) / 1 (on) / 2 (off)."""
    return 0 if v is None else 1 if v else 2


def _selection(o, layers: Optional[Sequence[int]], heads: Optional[Sequence[int]]) -> list:
    """layers / heads (None = all) into o's arrays; returns the arrays to keep alive."""
    keep = []
    for field, sel in (("layers", layers), ("heads", heads)):
        if sel is None:
            continue
        arr = np.ascontiguousarray(np.atleast_1d(np.asarray(sel, dtype=np.int32)))
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError("%s: a non-empty list of indices (or None for all)" % field)
        keep.append(arr)
        setattr(o, field, arr.ctypes.data_as(_c.POINTER(_c.c_int)))
        setattr(o, "n_" + field, int(arr.size))
    return keep


def diagnose(model: Optional[PathLike] = None, corpus: Optional[PathLike] = None,
             data_path: Optional[PathLike] = None, out_dir: Optional[PathLike] = None, length: int = 0,
             window: int = 0, threads: int = 0, normalizer: Optional[str] = None,
             layers: Optional[Sequence[int]] = None, heads: Optional[Sequence[int]] = None,
             bos: Optional[bool] = None, wrap: Optional[bool] = None,
             on_progress: Optional[Callable[[str, int, int], Optional[bool]]] = None) -> Dict[str, Any]:
    """METHOD sections 2, 5 and 7 per head. Per-head health of a model on one window of
    length tokens (as `attnlim diagnose`): the report as a dict (with out_dir, diagnose.json
    and diagnose.md are written there too). layers / heads: only these (None = all, as
    `--layers` / `--heads`); the report's "heads" lists those diagnosed. bos / wrap as for
    reproduce. Ctrl-C stops it between heads (KeyboardInterrupt); on_progress as for
    reproduce."""
    import json
    o = _DiagOpts(_s(model), _s(corpus), _s(data_path), _s(out_dir), int(length), int(window),
                  int(threads), None if normalizer is None else normalizer.encode())
    keep = _selection(o, layers, heads)  # noqa: F841 (alive for the call)
    o.bos, o.wrap = _switch(bos), _switch(wrap)
    p = _c.c_void_p()
    with _Interruptible(on_progress):
        _call(lib.al_diagnose, _c.byref(o), _c.byref(p))
    try:
        return json.loads(_c.string_at(p.value).decode("utf-8"))
    finally:
        lib.al_free(p)
