#!/usr/bin/env python3
"""Writes tests/data/fixture.safetensors with the Python `safetensors` package, and
tests/data/fixture.txt with the same values as bit patterns, so that kiln's reader is checked
against a file it did not write and against values it did not compute.

Run once by hand (not at build time) and commit both files:
    python3 -m venv /tmp/st && /tmp/st/bin/pip install safetensors numpy
    /tmp/st/bin/python tests/data/make_safetensors_fixture.py

fixture.txt has one line per tensor: `name dtype shape bits...`, where shape is a comma-separated
list ("-" for a scalar, shape []) and each element is the hexadecimal bit pattern of its stored
little-endian value (2 hex digits for BOOL, 4 for BF16, 8 for I32/F32, 16 for I64/F64).
"""
import os
import struct

import numpy as np
import safetensors
from safetensors import TensorSpec, serialize_file

HERE = os.path.dirname(os.path.abspath(__file__))

# Exactly representable values, plus the special ones a reader must keep bit for bit:
# infinity, negative zero, NaN, the smallest subnormal, extreme integers.
w1 = (np.arange(15, dtype=np.float32) * 0.25 - 1.5).reshape(3, 5)
w1[1, 4] = np.float32(1e-45)  # smallest float32 subnormal, bits 0x00000001
w1[2, 2] = np.inf
w1[2, 3] = -0.0
w1[2, 4] = np.nan
tensors = {
    "layers.0.weight": w1,
    "layers.0.bias": np.array([0.1, -2.5, 1e300, -1e-310, np.pi], dtype=np.float64),
    "step": np.array(1234567890123, dtype=np.int64),  # shape []: a scalar
    "ids/\u00e9": np.array([[-2**31, -1, 0], [1, 7, 2**31 - 1]], dtype=np.int32),
    "mask": np.array([True, False, False, True]),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "big": np.array([-2**63, 2**63 - 1, -42], dtype=np.int64),
}
# numpy has no bfloat16: the raw 16-bit patterns go to the package's serializer as "bfloat16"
# (1.0, -2.5, +inf, the smallest subnormal, 3.140625, -0.0).
bf16_bits = np.array([[0x3F80, 0xC020, 0x7F80], [0x0001, 0x4049, 0x8000]], dtype=np.uint16)

metadata = {"format": "pt", "note": 'kiln fixture "quoted" \\ na\u00efve \u2713', "empty": ""}

specs = {
    name: TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
    for name, a in tensors.items()
}
specs["half.bf16"] = TensorSpec(dtype="bfloat16", shape=list(bf16_bits.shape),
                                data_ptr=bf16_bits.ctypes.data, data_len=bf16_bits.nbytes)
serialize_file(specs, os.path.join(HERE, "fixture.safetensors"), metadata=metadata)

CODES = {"float32": ("F32", "<I", 8), "float64": ("F64", "<Q", 16), "int64": ("I64", "<Q", 16),
         "int32": ("I32", "<I", 8), "bool": ("BOOL", "<B", 2)}


def line(name, code, shape, words):
    dims = ",".join(str(d) for d in shape) if shape else "-"
    return " ".join([name, code, dims] + words)


lines = []
for name, a in tensors.items():
    code, fmt, width = CODES[a.dtype.name]
    raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
    n = struct.calcsize(fmt)
    words = [format(struct.unpack(fmt, raw[i:i + n])[0], "0%dx" % width) for i in range(0, len(raw), n)]
    lines.append(line(name, code, a.shape, words))
lines.append(line("half.bf16", "BF16", bf16_bits.shape, [format(int(b), "04x") for b in bf16_bits.ravel()]))
with open(os.path.join(HERE, "fixture.txt"), "w", encoding="utf-8") as f:
    f.write("# written by make_safetensors_fixture.py with safetensors %s, numpy %s\n"
            % (safetensors.__version__, np.__version__))
    f.write("\n".join(lines) + "\n")
