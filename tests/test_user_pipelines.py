"""User kernels of several passes (farm.Kernel passes=, scratch=): the two examples tuned as
one pipeline on the local adapter, run on numpy arrays and DeviceArrays, and bindings
checked against the WGSL's declarations before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import farm
from farm import catalog
from farm.catalog import files
from farm.catalog.user import KernelError
from farm.gpu import HardwareProfile
from farm.oracle.certify import certify_kernels, format_table
from farm.oracle.launch import prepare

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
files.load([str(EXAMPLES / "array_sum.py"), str(EXAMPLES / "long_softmax.py")])

TWO_PASS = """struct Params { n: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> doubled: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size({{workgroup_size}})
fn double(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.n) { doubled[gid.x] = 2.0 * x[gid.x]; }
}

@compute @workgroup_size({{workgroup_size}})
fn add_one(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.n) { y[gid.x] = doubled[gid.x] + 1.0; }
}
"""


def affine(**overrides):
    args = dict(
        source=TWO_PASS,
        passes=[
            farm.Pass("double", grid="ceil(n / workgroup_size)", binds=["x", "doubled", "params"]),
            {"entry": "add_one", "grid": "ceil(n / workgroup_size)", "binds": ["doubled", "y", "params"]},
        ],
        dims=("n",),
        inputs={"x": "f32[n]"},
        scratch={"doubled": "f32[n]"},
        outputs={"y": "f32[n]"},
        space={"workgroup_size": [32, 64]},
        reference=lambda x: 2 * x.astype(np.float64) + 1,
        sizes=["n=1000"],
    )
    return farm.Kernel(overrides.pop("name", "affine_passes"), **(args | overrides))


def softmax_np(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_trial_runs_and_times_every_pass_in_one_launch(device):
    spec = catalog.get("array_sum")
    schedule = spec.default.__class__.of(workgroup_size=64, splits=256)
    problem = spec.problem(n=5000)
    launch = spec.launch(schedule, problem, spec.generate(problem, 0))
    assert [p.entry_point for p in launch.passes()] == ["slice_sums", "sum_partials"]
    assert [a.name for a in launch.args] == ["x", "y", "partials", "params"]
    assert launch.args[2].shape == (256,) and not launch.args[2].output  # scratch sized by the knob
    assert [p.numbers for p in launch.passes()] == [(0, 2, 3), (2, 1)]  # by the WGSL's names
    with prepare(device, spec, schedule, problem, spec.generate(problem, 0)) as prepared:
        assert len(prepared.calls()) == 2
        assert prepared.time(warmup=1, reps=2).median_ns > 0
    assert spec.source_hash() != affine(name="hash_a").source_hash()


def test_array_sum_tuned_as_one_and_run_on_device_arrays(device, tmp_path):
    db = f"sqlite:///{tmp_path}/farm.db"
    tuned = farm.tune_kernel("array_sum", strategy="random", budget=4, reps=2, rounds=1, db=db, device=device)
    assert tuned.trials and all(t.status == "ok" for t in tuned.trials)
    assert set(tuned.winner.knobs) == {"workgroup_size", "splits"}
    rt = farm.ForgeRuntime(db=db, device=device)
    assert rt.tuned_schedule("array_sum", catalog.get("array_sum").sizes[0])[1] == "tuned"
    x = np.random.default_rng(3).standard_normal(262144).astype(np.float32)
    total = rt.run("array_sum", x=rt.asarray(x))  # a DeviceArray in, one out
    np.testing.assert_allclose(total.numpy(), [x.astype(np.float64).sum()], atol=1e-2)
    np.testing.assert_allclose(rt.run("array_sum", x=x[:777].copy()), [x[:777].astype(np.float64).sum()], atol=1e-3)


def test_long_softmax_tuned_and_every_split_correct(device):
    tuned = farm.tune_kernel("long_softmax", strategy="random", budget=4, reps=2, rounds=1, device=device)
    assert all(t.status == "ok" for t in tuned.trials)
    rt = farm.ForgeRuntime(schedules=None, device=device)
    x = np.random.default_rng(4).standard_normal((3, 5000)).astype(np.float32)
    spec = catalog.get("long_softmax")
    for splits in (1, 4, 64):
        schedule = spec.default.__class__.of(workgroup_size=64, splits=splits)
        out = rt.run(spec, {"rows": 3, "cols": 5000}, {"x": rt.asarray(x)}, schedule=schedule)["y"]
        np.testing.assert_allclose(out.numpy(), softmax_np(x), atol=1e-6, rtol=1e-4)


def test_cli_tunes_only_the_files_kernels(tmp_path, farm_home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_KERNELS")}
    db = f"sqlite:///{tmp_path}/cli.db"
    tuned = subprocess.run(
        [sys.executable, "-m", "farm", "tune", "--kernels-file", str(EXAMPLES / "array_sum.py"), "--allow-cpu",
         "--budget", "2", "--reps", "2", "--sizes", "array_sum:n=4096", "--db", db],
        env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    assert "array_sum  n=4096" in tuned.stdout
    certified = subprocess.run(
        [sys.executable, "-m", "farm", "certify", "--kernels-file", str(EXAMPLES / "long_softmax.py"), "--schedules",
         "1"], env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert certified.returncode == 0, certified.stderr
    assert "long_softmax" in certified.stdout and "gemv" not in certified.stdout  # only the file's kernels
    assert "items_per_invocation" not in tuned.stdout + certified.stdout  # only the knobs it declares


def test_bindings_are_checked_against_the_wgsl_before_anything_runs():
    with pytest.raises(KernelError, match=r"kernel 'wide': binding 'x' \(@binding\(0\) x in source line 2\): "
                                          r"declared float64, the WGSL declares array<f32>"):  # fmt: skip
        affine(name="wide", inputs={"x": "float64[n]"})
    with pytest.raises(KernelError, match=r"binding 'x' .*'x' is an input \(storage, read\); the WGSL declares "
                                          r"var<storage, read_write>"):  # fmt: skip
        affine(name="writes_input", source=TWO_PASS.replace("read> x", "read_write> x"))
    with pytest.raises(KernelError, match=r"binding 'params' .*the dims are a uniform"):
        affine(name="storage_params", source=TWO_PASS.replace("<uniform> params", "<storage, read> params"))
    with pytest.raises(KernelError, match=r"source has no @compute entry point 'double'"):
        affine(name="no_entry", source=TWO_PASS.replace("fn double", "fn twice"))
    with pytest.raises(KernelError, match=r"pass 1 \(add_one\) binds \['doubled', 'z'\]"):
        affine(name="bad_binds", passes=[farm.Pass("double", grid=1, binds=["x", "doubled", "params"]),
                                         farm.Pass("add_one", grid=1, binds=["doubled", "z"])])  # fmt: skip
    with pytest.raises(KernelError, match=r"shape of x 'workgroup_size' names knob 'workgroup_size'.*scratch"):
        affine(name="knob_shape", inputs={"x": "f32[workgroup_size]"})
    with pytest.raises(KernelError, match=r"source must be WGSL text or a path, got list"):
        farm.Kernel("listed", source=[TWO_PASS], dims=("n",), inputs={}, outputs={}, space={}, grid="1",
                    reference=lambda: 0)  # fmt: skip


def test_restrictions_and_grids_read_the_adapters_limits(device):
    spec = affine(
        name="limited", space={"workgroup_size": [32, 64, 4096]}, restrict="workgroup_size <= max_invocations"
    )
    problem = spec.problem(n=100)
    big = spec.default.__class__.of(workgroup_size=4096)
    assert "restriction 'workgroup_size <= max_invocations' is false" in spec.invalid_reason(
        big, problem, device.profile
    )
    small = HardwareProfile.from_dict(device.profile.to_dict() | {"limits": {**dict(device.profile.limits),
                                      "max-compute-invocations-per-workgroup": 32}})  # fmt: skip
    assert spec.invalid_reason(spec.default.__class__.of(workgroup_size=64), problem, small)
    assert spec.invalid_reason(spec.default.__class__.of(workgroup_size=32), problem, small) == ""


def test_a_compile_error_names_the_file_and_line_once(device, tmp_path):
    source = (EXAMPLES / "array_sum.py").read_text().replace('"array_sum"', '"broken_sum"')
    (tmp_path / "broken_sum.py").write_text(source.replace("array_sum.wgsl", "broken_sum.wgsl"))
    wgsl = (EXAMPLES / "array_sum.wgsl").read_text()
    (tmp_path / "broken_sum.wgsl").write_text(wgsl.replace("s += partials[i];", "s += = partials[i];"))
    files.load([str(tmp_path / "broken_sum.py")])
    rows = certify_kernels(["broken_sum"], schedules=3, device=device)
    assert len(rows) >= 3 and {r.status for r in rows} == {"compile_error"}
    table = format_table(rows)
    line = 1 + wgsl.splitlines().index("        s += partials[i];")
    assert table.count(f"broken_sum.wgsl:{line}:") == 1 and table.count("(error 1 below)") == len(rows)


def test_a_broken_kernels_file_stops_only_its_own_kernels(tmp_path, farm_home):
    """$FARM_KERNELS_FILES with a broken file beside a good one: the broken one is one warning
    line naming it and the good kernel still certifies; asking for a kernel only the broken
    file would define fails with that file's error."""
    broken = tmp_path / "broken.py"
    broken.write_text("from farm import Kernel, Pass\n\nwrecked = Kernel(name_of_it, source='x.wgsl')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_KERNELS")}
    env["FARM_KERNELS_FILES"] = os.pathsep.join([str(broken), str(EXAMPLES / "array_sum.py")])
    farm_cmd = [sys.executable, "-m", "farm", "certify", "--schedules", "0"]
    good = subprocess.run([*farm_cmd, "array_sum"], env=env, capture_output=True, text=True, timeout=300)
    assert good.returncode == 0, good.stderr
    assert "array_sum" in good.stdout and "1 certified" in good.stdout
    said = [line for line in good.stderr.splitlines() if "broken.py" in line]
    assert said == [f"farm: warning: kernels file {broken} line 3: NameError: name 'name_of_it' is not defined "
                    "(from $FARM_KERNELS_FILES; its kernels are unavailable)"], good.stderr  # fmt: skip
    missing = subprocess.run([*farm_cmd, "wrecked"], env=env, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.splitlines()[-1] == (
        f"farm: error: unknown kernel 'wrecked'; kernels file {broken} line 3: NameError: name 'name_of_it' "
        "is not defined"
    )
