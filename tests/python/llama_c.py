"""ctypes access to attnlim's model API (al_model_open / al_model_forward with capture) for
the Llama tests. Only the public header's structs are mirrored here."""
import ctypes
import os

import numpy as np


class Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Info(ctypes.Structure):
    _fields_ = [("family", ctypes.c_char * 16), ("name", ctypes.c_char * 128), ("path", ctypes.c_char * 1024),
                ("sha256", ctypes.c_char * 65), ("dtype", ctypes.c_char * 16), ("n_layer", ctypes.c_int),
                ("n_head", ctypes.c_int), ("n_kv_head", ctypes.c_int), ("d_model", ctypes.c_int),
                ("d_head", ctypes.c_int), ("d_ff", ctypes.c_int), ("n_ctx", ctypes.c_int),
                ("vocab_size", ctypes.c_int), ("causal", ctypes.c_int), ("n_params", ctypes.c_int64)]


FP = ctypes.POINTER(ctypes.c_float)


class Capture(ctypes.Structure):
    _fields_ = [("layer", ctypes.c_int), ("T", ctypes.c_int), ("n_head", ctypes.c_int),
                ("n_kv_head", ctypes.c_int), ("d_head", ctypes.c_int), ("d_model", ctypes.c_int),
                ("causal", ctypes.c_int), ("n_sel", ctypes.c_int), ("heads", ctypes.POINTER(ctypes.c_int)),
                ("kv_head", ctypes.POINTER(ctypes.c_int)), ("q", FP), ("k", FP), ("v", FP), ("logits", FP),
                ("weights", FP), ("hidden", FP), ("embed", FP)]


OBSERVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Capture), ctypes.POINTER(Error))


class Request(ctypes.Structure):
    _fields_ = [("what", ctypes.c_uint), ("layers", ctypes.POINTER(ctypes.c_uint8)),
                ("heads", ctypes.POINTER(ctypes.c_uint8)), ("fn", OBSERVER), ("user", ctypes.c_void_p)]


CAP = dict(q=1, k=2, v=4, logits=8, weights=16, hidden=32, embed=64)


def lib():
    path = os.environ.get("ATTNLIM_LIB")
    assert path, "ATTNLIM_LIB is not set (run through ctest, or set it to libattnlim.so)"
    L = ctypes.CDLL(path)
    L.al_model_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Error)]
    L.al_model_free.argtypes = [ctypes.c_void_p]
    L.al_model_get_info.argtypes = [ctypes.c_void_p]
    L.al_model_get_info.restype = ctypes.POINTER(Info)
    L.al_model_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                   ctypes.POINTER(Request), FP, FP, ctypes.POINTER(Error)]
    return L


class CModel:
    def __init__(self, path):
        self.L = lib()
        self.m = ctypes.c_void_p()
        err = Error()
        rc = self.L.al_model_open(str(path).encode(), ctypes.byref(self.m), ctypes.byref(err))
        if rc:
            raise RuntimeError(err.msg.decode())
        self.info = self.L.al_model_get_info(self.m).contents

    def close(self):
        if self.m:
            self.L.al_model_free(self.m)
            self.m = ctypes.c_void_p()

    def forward(self, tokens, what=(), layers=None, logits=False, final=False):
        """Runs the forward; returns dict with captures per layer {what: {layer: array}},
        'kv_head' per layer, and 'logits' [T, V] / 'final' [T, C] when asked."""
        T = len(tokens)
        info = self.info
        toks = (ctypes.c_int32 * T)(*[int(t) for t in tokens])
        got = {w: {} for w in what}
        got["kv_head"] = {}
        shapes = {}

        def cb(user, capp, errp):
            c = capp.contents
            n, d = c.n_sel, c.d_head
            shapes.update(q=(n, c.T, d), k=(n, c.T, d), v=(n, c.T, d), logits=(n, c.T, c.T),
                          weights=(n, c.T, c.T), hidden=(c.T, c.d_model), embed=(c.T, c.d_model))
            for w in what:
                ptr = getattr(c, w)
                if ptr:
                    got[w][c.layer] = np.ctypeslib.as_array(ptr, shape=shapes[w]).copy()
            got["kv_head"][c.layer] = [c.kv_head[h] for h in range(c.n_head)]
            return 0

        fn = OBSERVER(cb)
        req = Request()
        req.what = sum(CAP[w] for w in what)
        req.fn = fn
        lay = None
        if layers is not None:
            lay = (ctypes.c_uint8 * info.n_layer)(*[1 if l in layers else 0 for l in range(info.n_layer)])
            req.layers = lay
        lg = np.zeros((T, info.vocab_size), dtype=np.float32) if logits else None
        fh = np.zeros((T, info.d_model), dtype=np.float32) if final else None
        err = Error()
        rc = self.L.al_model_forward(self.m, toks, T, ctypes.byref(req) if what else None,
                                     lg.ctypes.data_as(FP) if lg is not None else None,
                                     fh.ctypes.data_as(FP) if fh is not None else None, ctypes.byref(err))
        if rc:
            raise RuntimeError(err.msg.decode())
        got["logits"], got["final"] = lg, fh
        return got
