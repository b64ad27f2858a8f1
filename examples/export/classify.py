"""Classifies Fashion-MNIST images with the exported MLP from Python (ctypes + NumPy, through
kiln's python/kiln_model.py): classify.py <library> <weights> <images.f32> <N> [<logits.f32>]
prints the predicted classes; with logits.f32 (the C++ program's) it requires the same bits."""
import os
import sys

sys.path.insert(0, os.environ.get("KILN_PYTHON_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "python")))

import numpy as np  # noqa: E402

import kiln_model  # noqa: E402

lib, weights, images, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
model = kiln_model.Model(lib)
model.load(weights)
x = np.fromfile(images, dtype=np.float32, count=n * 784).reshape(n, 784)
(logits,) = model.run(x=x)
print("classify.py: predicted classes of the first images:", " ".join(str(c) for c in logits[:10].argmax(axis=1)))
if len(sys.argv) > 5:
    want = np.fromfile(sys.argv[5], dtype=np.float32).reshape(n, 10)
    same = np.array_equal(want.view(np.uint32), logits.view(np.uint32))
    print(f"classify.py: {n * 10} logits {'are bit-identical to' if same else 'DIFFER from'} the C++ program's")
    sys.exit(0 if same else 1)
