"""Row-wise softmax as a farm kernel: `farm tune --kernels-file examples/softmax.py --allow-cpu`."""

import numpy as np

from farm import Kernel


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    return e / e.sum(axis=1, keepdims=True)


kernel = Kernel(
    "softmax",
    source="softmax.wgsl",  # next to this file; {{knob}} placeholders
    dims=("rows", "cols"),
    inputs={"x": "f32[rows, cols]"},
    outputs={"y": "f32[rows, cols]"},
    space={"workgroup_size": [32, 64, 128, 256], "store_exp": [False, True]},
    restrict="workgroup_size <= 4 * cols",
    grid="rows",  # one workgroup per row
    reference=softmax,
    atol=1e-6,
    rtol=1e-4,
    sizes=["rows=64,cols=1000"],
)
