"""A full-array sum in two passes that share their knobs: `splits` workgroups each sum a
slice into a scratch array sized by `splits`, then one workgroup sums that. Tuned as one
pipeline: `farm tune --kernels-file examples/array_sum.py --allow-cpu`."""

import numpy as np

from farm import Kernel, Pass


def array_sum(x):
    return np.array([x.astype(np.float64).sum()])


kernel = Kernel(
    "array_sum",
    source="array_sum.wgsl",  # one file, two entry points
    passes=[
        Pass("slice_sums", grid="splits", binds=["x", "partials", "params"]),
        Pass("sum_partials", grid=1, binds=["partials", "y"]),
    ],
    dims=("n",),
    inputs={"x": "f32[n]"},
    scratch={"partials": "f32[splits]"},  # sized by a knob
    outputs={"y": "f32[1]"},
    space={"workgroup_size": [64, 128, 256], "splits": [16, 64, 256, 1024]},
    restrict=["workgroup_size <= max_invocations", "splits <= n"],  # the adapter's limit by name
    reference=array_sum,
    atol=1e-2,
    rtol=1e-5,
    sizes=["n=262144"],
)
