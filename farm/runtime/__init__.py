"""The library: `ForgeRuntime` runs the certified kernels on the caller's data with the
schedule tuned for this adapter (`forge`), found through the winners chain (`winners`),
after its arguments are checked (`validation`)."""

from farm.runtime.forge import ForgeRuntime

__all__ = ["ForgeRuntime"]
