"""A tiled 2-D convolution as a farm kernel: 2-D workgroup tiles, an optional shared-memory
halo, a 2-D grid: `farm tune --kernels-file examples/conv2d.py --allow-cpu`."""

import numpy as np

from farm import Kernel


def conv2d(x, weights):
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), weights.shape)
    return np.einsum("ijab,ab->ij", windows, weights)


kernel = Kernel(
    "conv2d",
    source="conv2d.wgsl",
    dims=("h", "w", "k"),
    inputs={"x": "f32[h, w]", "weights": "f32[k, k]"},
    outputs={"y": "f32[h - k + 1, w - k + 1]"},
    space={"tile_x": [4, 8, 16, 32], "tile_y": [1, 2, 4, 8, 16], "shared": [False, True]},
    restrict=["tile_x * tile_y >= 16", "k <= h and k <= w"],
    workgroup_bytes="4 * (tile_x + k - 1) * (tile_y + k - 1)",
    grid=("ceil((w - k + 1) / tile_x)", "ceil((h - k + 1) / tile_y)"),
    reference=conv2d,
    atol=1e-4,
    rtol=1e-4,
    sizes=["h=96,w=130,k=5"],
)
