"""The exported test model from Python (python/kiln_model.py, ctypes + NumPy): loads the weights
that test_export wrote, runs on its input and requires the C++ program's outputs bit for bit;
a transposed input goes through without a copy; bad input raises KilnError.
Usage: check_python.py <library> <files dir> <python dir>"""
import sys

lib, files, here = sys.argv[1:4]
sys.path.insert(0, here)

import numpy as np  # noqa: E402

import kiln_model  # noqa: E402

m = kiln_model.Model(lib)
assert [i["name"] for i in m.inputs] == ["x"], m.inputs
assert m.inputs[0]["shape"] == [-1, 20], m.inputs
m.load(f"{files}/weights.safetensors")
x = np.fromfile(f"{files}/x.f32", dtype=np.float32).reshape(11, 20)
want = [np.fromfile(f"{files}/{n}.f32", dtype=np.float32).reshape(11, 5) for n in ("logits", "log_probs")]
for given in (x, np.ascontiguousarray(x.T).T):  # contiguous, and strides (1, 11) in elements
    got = m.run(x=given)
    for g, w in zip(got, want):
        assert g.shape == (11, 5) and g.dtype == np.float32
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), "outputs differ from the C++ program's"
for bad, code, says in ((x[:, :19], 2, "input 'x'"), (x.astype(np.float64), 3, "input 'x'")):
    try:
        m.run(x=bad)
        raise AssertionError("no error")
    except kiln_model.KilnError as e:
        assert e.code == code and says in str(e), (e.code, str(e))
try:
    m.run(y=x)
    raise AssertionError("no error")
except kiln_model.KilnError as e:
    assert e.code == 1 and "no input 'y'" in str(e), str(e)
print(f"check_python: 11 rows, both outputs bit-identical to the C++ program's (numpy {np.__version__})")
