"""Softmax over long rows, split: `splits` workgroups per row each reduce a slice to its
(max, sum) in scratch, then each rescales its slice with the row's combined stats. Two
passes tuned as one: `farm tune --kernels-file examples/long_softmax.py --allow-cpu`."""

import numpy as np

from farm import Kernel, Pass


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True).astype(np.float64))
    return e / e.sum(axis=1, keepdims=True)


kernel = Kernel(
    "long_softmax",
    source="long_softmax.wgsl",
    passes=[
        Pass("slice_stats", grid=("splits", "rows"), binds=["x", "stats", "params"]),
        Pass("scale_slices", grid=("splits", "rows"), binds=["x", "y", "stats", "params"]),
    ],
    dims=("rows", "cols"),
    inputs={"x": "f32[rows, cols]"},
    scratch={"stats": "f32[rows, splits, 2]"},  # (max, sum) per slice
    outputs={"y": "f32[rows, cols]"},
    space={"workgroup_size": [64, 128, 256], "splits": [1, 4, 16, 64]},
    restrict=["workgroup_size <= max_invocations", "splits <= cols"],
    reference=softmax,
    atol=1e-6,
    rtol=1e-4,
    sizes=["rows=8,cols=65536"],
)
