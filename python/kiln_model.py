"""Calls a model that kiln exported (CMake kiln_add_model, kiln/export/kiln_model.h) from
Python, with ctypes and NumPy only: no compiled extension.

    import kiln_model
    m = kiln_model.Model("./libmnist.so")
    m.load("weights.safetensors")          # or m.set_param("fc1.weight", array)
    logits, = m.run(x=images)              # NumPy arrays in, NumPy arrays out

Inputs are passed to the library without copies (any strides NumPy can express in whole
elements; others, and negative strides, are made contiguous first); each output is a new array
that the library writes in place. An array's dtype must be the placeholder's (no silent
conversion). Errors raise KilnError with the library's code and message.
"""
import ctypes
import json

import numpy as np

ABI_VERSION = 1
MAX_RANK = 8

# kiln_dtype codes; bf16 (3) has no NumPy dtype: its arrays are uint16 bit patterns
_CODES = {np.dtype(np.bool_): 0, np.dtype(np.int32): 1, np.dtype(np.int64): 2, np.dtype(np.float32): 4,
          np.dtype(np.float64): 5}
_NAMES = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "bf16": np.uint16, "f32": np.float32,
          "f64": np.float64}


class KilnError(RuntimeError):
    """An error the library reported: `code` is its kiln_status."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("data", ctypes.c_void_p)]


class Model:
    """One instance of the library's model, with its own parameters (zero until loaded or set)."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.kiln_abi_version.restype = ctypes.c_uint32
        lib.kiln_last_error.restype = ctypes.c_char_p
        lib.kiln_model_describe.restype = ctypes.c_char_p
        lib.kiln_model_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.kiln_model_destroy.argtypes = [ctypes.c_void_p]
        lib.kiln_model_destroy.restype = None
        lib.kiln_model_load.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.kiln_model_set_param.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Tensor)]
        lib.kiln_model_output_shape.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Tensor), ctypes.c_size_t,
                                                ctypes.c_size_t, ctypes.POINTER(ctypes.c_int32),
                                                ctypes.POINTER(ctypes.c_int64)]
        lib.kiln_model_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Tensor), ctypes.c_size_t,
                                       ctypes.POINTER(_Tensor), ctypes.c_size_t]
        lib.kiln_set_num_threads.argtypes = [ctypes.c_int]
        if lib.kiln_abi_version() != ABI_VERSION:
            raise KilnError(1, f"{path}: ABI version {lib.kiln_abi_version()}, this wrapper knows {ABI_VERSION}")
        self._lib = lib
        self.description = json.loads(lib.kiln_model_describe().decode())
        handle = ctypes.c_void_p()
        self._check(lib.kiln_model_create(ctypes.byref(handle)))
        self._handle = handle

    def close(self):
        if getattr(self, "_handle", None):
            self._lib.kiln_model_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def _check(self, code):
        if code != 0:
            raise KilnError(code, self._lib.kiln_last_error().decode())

    @property
    def inputs(self):
        return self.description["inputs"]

    @property
    def params(self):
        return self.description["params"]

    @property
    def outputs(self):
        return self.description["outputs"]

    @staticmethod
    def _tensor(name, array, keep):
        """A kiln_tensor over the array's memory (kept alive in `keep` for the call)."""
        a = np.asarray(array)
        size = a.dtype.itemsize
        if a.dtype not in _CODES and a.dtype != np.uint16:
            raise TypeError(f"{name}: dtype {a.dtype} has no kiln dtype")
        if any(s < 0 or s % size for s in a.strides):
            a = np.ascontiguousarray(a)
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        strides = (ctypes.c_int64 * max(a.ndim, 1))(*(s // size for s in a.strides))
        keep.extend([a, shape, strides])
        code = 3 if a.dtype == np.uint16 else _CODES[a.dtype]
        return _Tensor(name.encode() if name else None, code, a.ndim, shape, strides, a.ctypes.data)

    def load(self, path):
        """Reads every parameter from a safetensors file (or a kiln training checkpoint)."""
        self._check(self._lib.kiln_model_load(self._handle, str(path).encode()))

    def set_param(self, name, array):
        keep = []
        t = self._tensor(name, array, keep)
        self._check(self._lib.kiln_model_set_param(self._handle, ctypes.byref(t)))

    def run(self, **inputs):
        """The model's outputs (a list of new arrays) for inputs given by name."""
        keep = []
        ins = (_Tensor * max(len(inputs), 1))(*[self._tensor(n, a, keep) for n, a in inputs.items()])
        outs = []
        for i, o in enumerate(self.outputs):
            rank = ctypes.c_int32()
            shape = (ctypes.c_int64 * MAX_RANK)()
            self._check(self._lib.kiln_model_output_shape(self._handle, ins, len(inputs), i, ctypes.byref(rank), shape))
            outs.append(np.empty(tuple(shape[:rank.value]), dtype=_NAMES[o["dtype"]]))
        c_outs = (_Tensor * max(len(outs), 1))(*[self._tensor(None, a, keep) for a in outs])
        self._check(self._lib.kiln_model_run(self._handle, ins, len(inputs), c_outs, len(outs)))
        return outs

    def set_num_threads(self, n):
        """Threads the library's CPU kernels use; returns the previous count."""
        return self._lib.kiln_set_num_threads(n)
