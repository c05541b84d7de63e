"""farm: a distributed tuning farm for WebGPU compute kernels.

`from farm import ForgeRuntime` is resolved lazily, so `import farm` never imports wgpu.
"""

from __future__ import annotations

__all__ = ["ForgeRuntime"]


def __getattr__(name: str):
    if name == "ForgeRuntime":
        from farm.runtime.forge import ForgeRuntime

        return ForgeRuntime
    raise AttributeError(f"module 'farm' has no attribute {name!r}")
