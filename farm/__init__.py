"""farm: a distributed tuning farm for WebGPU compute kernels.

The public names are resolved lazily, so `import farm` never imports wgpu:
`ForgeRuntime` (run kernels), `Kernel` and `Pass` (define your own, farm.catalog.user),
`tune_kernel` (tune one in this process, farm.tuning.local).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers and the API reference; at run time __getattr__ imports on first use
    from farm.catalog.user import Kernel, Pass
    from farm.runtime.forge import ForgeRuntime
    from farm.tuning.local import tune_kernel

__all__ = ["ForgeRuntime", "Kernel", "Pass", "tune_kernel"]


def __getattr__(name: str):
    if name == "ForgeRuntime":
        from farm.runtime.forge import ForgeRuntime

        return ForgeRuntime
    if name in ("Kernel", "Pass"):
        from farm.catalog import user

        return getattr(user, name)
    if name == "tune_kernel":
        from farm.tuning.local import tune_kernel

        return tune_kernel
    raise AttributeError(f"module 'farm' has no attribute {name!r}")
