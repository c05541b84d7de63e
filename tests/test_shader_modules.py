"""Which modules keep naga's runtime checks: the built-in kernels' WGSL checks every access
itself, so their modules are made without the clamps and loop bounds (farm.gpu.modules,
docs/decisions/001-trusted-shader-modules.md); a user's kernel keeps them. Both kinds compile, run and
fail to compile the same way on lavapipe."""

from __future__ import annotations

import numpy as np
import pytest

import farm
from farm import catalog
from farm.catalog import _REGISTRY
from farm.gpu import GpuError
from farm.gpu import device as device_module
from farm.gpu.modules import trusted_modules_available
from farm.oracle.launch import prepare

DOUBLE = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&out)) { out[g.x] = f32(g.x) * 2.0; }
}
"""


COPY = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&out)) { out[g.x] = x[g.x]; }
}
"""


def test_this_wgpu_exports_the_trusted_entry_point():
    assert trusted_modules_available()  # else every module is silently checked


def test_a_module_without_runtime_checks_runs_and_is_cached_apart(device):
    checked = device.pipeline(DOUBLE, label="double-modules")
    trusted = device.pipeline(DOUBLE, label="double-modules", checked=False)
    assert trusted is not checked and device.pipeline(DOUBLE, label="double-modules", checked=False) is trusted
    buf = device.empty(4 * 100)
    for pipeline in (checked, trusted):
        device.dispatch(pipeline, [buf], 2)
        np.testing.assert_array_equal(device.read(buf, np.float32, 100), np.arange(100, dtype=np.float32) * 2)
    device.release(buf)


def test_a_module_without_runtime_checks_still_fails_to_compile_by_name(device):
    with pytest.raises(GpuError) as err:
        device.pipeline("@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }", label="broken[t]", checked=False)
    assert err.value.step == "compile" and "broken[t]" in str(err.value)


def _checked_flags(device, monkeypatch, spec, problem) -> set[bool]:
    seen = []
    create = device_module.create_module

    def recording(gpu, code, label="", checked=True):
        seen.append(checked)
        return create(gpu, code, label, checked)

    monkeypatch.setattr(device_module, "create_module", recording)
    device._pipelines.clear()  # compile again, through the recorder
    schedule = spec.default
    with prepare(device, spec, schedule, problem, spec.generate(problem, 0)):
        pass
    return set(seen)


def test_built_in_kernels_are_compiled_without_runtime_checks_and_a_users_with_them(device, monkeypatch):
    gemv = catalog.get("gemv")
    assert not gemv.runtime_checks
    assert _checked_flags(device, monkeypatch, gemv, gemv.problem(m=64, n=64)) == {False}
    user = farm.Kernel(
        "scaled_checked",
        COPY,
        dims=("n",),
        inputs={"x": "f32[n]"},
        outputs={"out": "f32[n]"},
        space={"workgroup_size": [64]},
        grid="ceil(n / 64)",
        reference=lambda x: x,
        sizes=["n=100"],
        params=False,
    )
    try:
        assert user.runtime_checks
        assert _checked_flags(device, monkeypatch, user, user.problem(n=100)) == {True}
    finally:
        _REGISTRY.pop("scaled_checked", None)  # other tests iterate the catalog


def test_the_modules_mode_is_part_of_the_source_hash(monkeypatch):
    gemv = catalog.get("gemv")
    trusted_hash = gemv.source_hash()
    monkeypatch.setattr(type(gemv), "runtime_checks", True)
    monkeypatch.delitem(gemv.__dict__, "_source_hash")
    assert gemv.source_hash() != trusted_hash  # winners timed one way are stale the other
    monkeypatch.delitem(gemv.__dict__, "_source_hash")


def test_a_kernelspec_subclass_from_outside_the_catalog_keeps_the_checks():
    gemv = type(catalog.get("gemv"))
    outside = type("MyGemv", (gemv,), {"__module__": "my_kernels"})
    vouched = type("MyTrustedGemv", (gemv,), {"__module__": "my_kernels", "runtime_checks": False})
    inside = type("CatalogGemv", (gemv,), {"__module__": "farm.catalog.gemv"})
    assert (outside.runtime_checks, vouched.runtime_checks, inside.runtime_checks) == (True, False, False)
