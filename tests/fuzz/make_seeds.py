#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_safetensors (tests/fuzz/seeds/): small valid safetensors and
IDX files, raw and gzip-compressed, so that the fuzzer starts from inputs that pass the format
checks and mutates them from there. Standard library only. Run by hand; commit the output.
(The fixture written by the Python safetensors package, tests/data/fixture.safetensors, is
copied in as well.)
"""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "seeds")


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def idx(code, dims, raw):
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + raw


seeds = {
    "empty.safetensors": safetensors({}),
    "meta.safetensors": safetensors({}, {"format": "pt", "k\u00e9y": "v\\\"\u2713"}),
    "mixed.safetensors": safetensors({
        "w": ("F32", [2, 3], struct.pack("<6f", 1, -2, 0.5, 3, 4, -0.0)),
        "b": ("F64", [3], struct.pack("<3d", 1e300, -1, 2.5)),
        "i": ("I64", [], struct.pack("<q", -7)),
        "j": ("I32", [2, 1], struct.pack("<2i", 5, -5)),
        "h": ("BF16", [2], struct.pack("<2H", 0x3F80, 0xC020)),
        "m": ("BOOL", [3], bytes([1, 0, 1])),
        "e": ("F32", [0, 4], b""),
    }),
    "f16.safetensors": safetensors({"x": ("F16", [2], b"\x00\x3c\x00\xc0")}),
    # the weights of fuzz_export's model, and a checkpoint of it (optimizer state, kiln.step)
    "export.safetensors": safetensors({
        "w": ("F32", [3, 2], struct.pack("<6f", 0.5, -1, 2, 0.25, -3, 1)),
        "b": ("F32", [2], struct.pack("<2f", 0.125, -0.5)),
    }),
    "export-ckpt.safetensors": safetensors({
        "w": ("F32", [3, 2], struct.pack("<6f", 0.5, -1, 2, 0.25, -3, 1)),
        "b": ("F32", [2], struct.pack("<2f", 0.125, -0.5)),
        "w.exp_avg": ("F32", [3, 2], struct.pack("<6f", 0, 0, 1, 0, 0, 1)),
    }, {"kiln.step": "3"}),
    "images.idx": idx(0x08, [2, 3, 4], bytes(range(24))),
    "labels.idx": idx(0x08, [5], bytes([9, 0, 3, 1, 7])),
    "f64.idx": idx(0x0E, [2], struct.pack(">2d", 1.5, -2.0)),
    "i16.idx": idx(0x0B, [1, 3], struct.pack(">3h", -1, 300, 7)),
}
seeds["images.idx.gz"] = gzip.compress(seeds["images.idx"], mtime=0)

os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
shutil.copyfile(os.path.join(HERE, "..", "data", "fixture.safetensors"), os.path.join(OUT, "fixture.safetensors"))
