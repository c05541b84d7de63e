"""Shader modules with or without naga's runtime checks.

wgpu-py's `create_shader_module` makes every module checked: naga clamps each dynamically
indexed array access into range and bounds every loop. wgpu-native 29 also exports
`wgpuDeviceCreateShaderModuleTrusted(device, descriptor, runtimeChecks)`; with runtime checks
0 it emits neither, and the catalog's tuned kernels run faster without them
(docs/decisions/001-trusted-shader-modules.md). A trusted module's out-of-range access is
undefined instead of clamped, so only kernels whose WGSL checks every access itself (the
built-in catalog's: `KernelSpec.runtime_checks` False) are made trusted; a user's WGSL, and a
KernelSpec subclass defined outside farm.catalog, stays checked.
"""

from __future__ import annotations

from functools import cache

RUNTIME_CHECKS_NONE = 0  # WGPUShaderRuntimeChecks_None: no index clamps, no loop bounding


@cache
def trusted_modules_available() -> bool:
    """Whether this wgpu build exports the trusted module entry point (asked once)."""
    try:
        from wgpu.backends.wgpu_native import _api

        return hasattr(_api.lib, "wgpuDeviceCreateShaderModuleTrusted")
    except Exception:  # noqa: BLE001 - another backend, or wgpu-native missing
        return False


def create_module(gpu, code: str, label: str = "", checked: bool = True):
    """A WGSL shader module on wgpu device `gpu`: wgpu-py's checked one, or, with `checked`
    False and the entry point available, one made without runtime checks. Validation errors
    raise as wgpu-py's do (the same error-checking call wrapper). Without the entry point an
    unchecked module is an error, not a checked one: its source hash says unchecked."""
    if checked:
        return gpu.create_shader_module(code=code, label=label)
    if not trusted_modules_available():
        raise RuntimeError("this wgpu build has no wgpuDeviceCreateShaderModuleTrusted (wgpu-native 29 has it)")
    from wgpu.backends.wgpu_native import _api

    source = _api.new_struct_p("WGPUShaderSourceWGSL *", code=_api.to_c_string_view(code))
    source[0].chain.next = _api.ffi.NULL
    source[0].chain.sType = _api.lib.WGPUSType_ShaderSourceWGSL
    chained = _api.ffi.cast("WGPUChainedStruct *", source)  # `source` stays referenced below
    descriptor = _api.new_struct_p(
        "WGPUShaderModuleDescriptor *", nextInChain=chained, label=_api.to_c_string_view(label)
    )
    handle = _api.libf.wgpuDeviceCreateShaderModuleTrusted(gpu._internal, descriptor, RUNTIME_CHECKS_NONE)
    del source
    if handle == _api.ffi.NULL:
        raise RuntimeError("trusted shader module creation failed")
    return _api.GPUShaderModule(label, handle, gpu)
