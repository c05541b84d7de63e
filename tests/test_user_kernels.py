"""User kernels (farm.Kernel): the two examples tuned end to end on the local
adapter and run through ForgeRuntime, their errors, staleness and shipping to workers."""

from __future__ import annotations

import ast
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

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
files.load([str(EXAMPLES / "softmax.py"), str(EXAMPLES / "conv2d.py")])

COPY = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> params: vec4<u32>;
override factor: f32;
@compute @workgroup_size({{workgroup_size}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.x) { y[gid.x] = x[gid.x] * factor; }
}
"""


def scaled(**overrides):
    args = dict(
        dims=("n",),
        inputs={"x": "f32[n]"},
        outputs={"y": "f32[n]"},
        space={"workgroup_size": [32, 64], "factor": [2, 3]},
        grid="ceil(n / workgroup_size)",
        reference=lambda x, factor: x * factor,
        sizes=["n=1000"],
    )
    return farm.Kernel(overrides.pop("name", "scaled"), overrides.pop("source", COPY), **(args | overrides))


def softmax_np(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_tuned_in_process_and_served(device, tmp_path):
    db = f"sqlite:///{tmp_path}/farm.db"
    tuned = farm.tune_kernel("softmax", reps=3, rounds=2, db=db, device=device)
    assert len(tuned.trials) == 8 and all(t.status == "ok" for t in tuned.trials)
    winner = tuned.winner
    assert winner.median_ns > 0 and set(winner.knobs) == {"workgroup_size", "store_exp"}
    rt = farm.ForgeRuntime(db=db, device=device)
    problem = catalog.get("softmax").sizes[0]
    assert rt.tuned_schedule("softmax", problem) == (winner.schedule, "tuned")
    x = np.random.default_rng(1).standard_normal((64, 1000)).astype(np.float32)
    np.testing.assert_allclose(rt.run("softmax", x=x), softmax_np(x), atol=1e-6, rtol=1e-4)
    y = rt.run(catalog.get("softmax"), x=rt.asarray(x))  # the object, DeviceArray in -> out
    np.testing.assert_allclose(y.numpy(), softmax_np(x), atol=1e-6, rtol=1e-4)
    other = rt.run("softmax", x=x[:3, :17].copy())  # any size: dims come from the shapes
    np.testing.assert_allclose(other, softmax_np(x[:3, :17]), atol=1e-6, rtol=1e-4)


def test_conv2d_tiled_tuned_and_run(device):
    tuned = farm.tune_kernel("conv2d", strategy="random", budget=6, reps=3, rounds=2, device=device)
    assert sum(t.status == "ok" for t in tuned.trials) == 7
    assert tuned.winner.knobs["tile_x"] * tuned.winner.knobs["tile_y"] >= 16
    rt = farm.ForgeRuntime(schedules=None, device=device)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((50, 77)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3))
    expected = np.einsum("ijab,ab->ij", windows, w)
    for knobs in ({"tile_x": 8, "tile_y": 8, "shared": 1}, {"tile_x": 32, "tile_y": 1, "shared": 0}):
        schedule = farm.catalog.get("conv2d").default.__class__.of(**knobs)
        out = rt.run("conv2d", x=x, weights=w, schedule=schedule)
        assert out.shape == (48, 75)
        np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-4)


def test_run_checks_arguments_against_declared_shapes(device):
    rt = farm.ForgeRuntime(schedules=None, device=device)
    x = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="x: expected dtype float32, got float64"):
        rt.run("softmax", x=x.astype(np.float64))
    with pytest.raises(ValueError, match="x: expected a 2-D array"):
        rt.run("softmax", x=x[0])
    with pytest.raises(TypeError, match="missing input 'x'"):
        rt.run("softmax")
    with pytest.raises(TypeError, match="unexpected argument 'z'"):
        rt.run("softmax", x=x, z=x)
    with pytest.raises(ValueError, match=r"weights: expected shape \(3, 3\) \(k, k with h=4, w=8, k=3\), got \(3, 2\)"):
        rt.run("conv2d", x=x, weights=np.ones((3, 2), np.float32))
    np.testing.assert_allclose(rt.run("gemv", a=x, x=np.ones(8, np.float32)), np.full(4, 8.0))  # built-in by name


def test_override_constants_strings_and_bools(device):
    spec = scaled()
    rt = farm.ForgeRuntime(schedules=None, device=device)
    x = np.arange(1000, dtype=np.float32)
    for factor in (2, 3):
        out = rt.run(spec, x=x, schedule=spec.default.__class__.of(workgroup_size=64, factor=factor))
        np.testing.assert_array_equal(out, x * factor)
    text = scaled(name="labels", space={"workgroup_size": [32, 64], "factor": [2, 3], "mode": ["a", "b"]},
                  reference=lambda x, factor, mode: x * factor)  # fmt: skip
    assert text.space["mode"] == (0, 1) and text.knobs(text.default)["mode"] == "a"


def test_definition_errors_name_kernel_and_fix():
    with pytest.raises(KernelError, match=r"kernel 'bad1': restriction 'unrol <= n' names 'unrol', which is no knob"):
        scaled(name="bad1", restrict="unrol <= n")
    with pytest.raises(KernelError, match=r"kernel 'bad2': source line 5 has placeholder \{\{workgroup_sise\}\}"):
        scaled(name="bad2", source=COPY.replace("{{workgroup_size}}", "{{workgroup_sise}}"))
    with pytest.raises(KernelError, match="kernel 'gemv': a built-in kernel has that name"):
        scaled(name="gemv")
    with pytest.raises(KernelError, match="cannot read its WGSL"):
        scaled(name="bad3", source="missing.wgsl")
    with pytest.raises(KernelError, match=r"shape of x 'm' names 'm', which is no dim"):
        scaled(name="bad4", inputs={"x": "f32[m]"})
    wrong = scaled(name="bad5", reference=lambda x: x[:10])
    with pytest.raises(ValueError, match=r"kernel 'bad5': reference returned shape \(10,\) for output 'y'; expected"):
        farm.tune_kernel(wrong)


def test_wgsl_typo_is_a_compile_error_naming_the_line(device):
    typo = scaled(name="typo", source=COPY.replace("y[gid.x] =", "y[gid.x] = = "))
    with pytest.raises(ValueError, match=r"kernel 'typo': no schedule was certified.*compile_error") as info:
        farm.tune_kernel(typo, reps=2, rounds=1, device=device)
    assert ":7:" in str(info.value) or "line 7" in str(info.value) or "7 │" in str(info.value)


def test_source_hash_covers_wgsl_python_and_declaration():
    base = scaled(name="hashed").source_hash()
    assert scaled(name="hashed").source_hash() == base
    assert scaled(name="hashed", source=COPY.replace("* factor", "* factor + 0.0")).source_hash() != base
    assert scaled(name="hashed", grid="ceil(n / workgroup_size) + 1").source_hash() != base
    assert scaled(name="hashed", atol=1e-3).source_hash() != base


def test_bundle_ships_files_by_value(tmp_path):
    """A worker with only $FARM_KERNELS_BUNDLE (the files gone from disk) has the kernel, same hash."""
    for name in ("softmax.py", "softmax.wgsl"):
        (tmp_path / name).write_text((EXAMPLES / name).read_text())
    code = (
        "import os, sys; from farm.catalog import files; files.load([sys.argv[1]]);"
        "b = files.bundle(); from farm import catalog; print(catalog.get('softmax').source_hash()); print(b)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_KERNELS")}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "softmax.py")], env=env,
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    for name in ("softmax.py", "softmax.wgsl"):
        (tmp_path / name).unlink()
    worker = "from farm import catalog; s = catalog.get('softmax'); print(s.source_hash(), len(s.schedules()))"
    got = subprocess.run([sys.executable, "-c", worker], env=env | {"FARM_KERNELS_BUNDLE": out[1]},
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert got == [out[0], "8"]


def test_cli_tune_winners_and_errors(tmp_path, farm_home):
    db = f"sqlite:///{tmp_path}/cli.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_KERNELS")}
    farm_cmd = [sys.executable, "-m", "farm"]
    kernels = ["--kernels-file", str(EXAMPLES / "softmax.py")]
    tuned = subprocess.run([*farm_cmd, "tune", *kernels, "--allow-cpu", "--budget", "2", "--reps", "2", "--db", db],
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr
    assert "softmax  rows=64,cols=1000" in tuned.stdout
    listed = subprocess.run([*farm_cmd, "winners", "--wide", *kernels, "--db", db], env=env, capture_output=True,
                            text=True)  # fmt: skip
    row = next(line for line in listed.stdout.splitlines() if line.startswith("softmax"))
    assert row.split()[-1] == "no"  # not stale
    via_env = subprocess.run([*farm_cmd, "winners", "--wide", "--db", db], capture_output=True, text=True,
                             env=env | {"FARM_KERNELS_FILES": str(EXAMPLES / "softmax.py")})  # fmt: skip
    assert next(line for line in via_env.stdout.splitlines() if line.startswith("softmax")).split()[-1] == "no"
    huge = subprocess.run([*farm_cmd, "tune", *kernels, "--allow-cpu", "--sizes", "softmax:rows=60000,cols=20000",
                           "--db", db], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert huge.returncode == 2 and huge.stderr.count("\n") == 1, huge.stderr  # refused before Ray starts
    assert huge.stderr.startswith("farm: error: softmax rows=60000,cols=20000: its buffer 'x' needs 4.47 GiB")
    bad = tmp_path / "bad.py"
    bad.write_text("from farm import Kernel\nKernel('oops', source='x.wgsl', dims=(), inputs={}, outputs={},"
                   " space={}, grid='1', reference=lambda: 0)\n")  # fmt: skip
    failed = subprocess.run([*farm_cmd, "winners", "--kernels-file", str(bad), "--db", db], env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert failed.returncode == 2
    assert (
        failed.stderr.startswith("farm: error: kernel 'oops': cannot read its WGSL") and failed.stderr.count("\n") == 1
    )


def test_softmax_example_is_short_and_public():
    text = (EXAMPLES / "softmax.py").read_text()
    tree = ast.parse(text)
    code = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    lines = {line for node in code for line in range(node.lineno, node.end_lineno + 1)}
    assert len([i for i in lines if text.splitlines()[i - 1].strip()]) <= 25
    imported = {a.name for n in code if isinstance(n, ast.Import) for a in n.names}
    imported |= {f"{n.module}.{a.name}" for n in code if isinstance(n, ast.ImportFrom) for a in n.names}
    assert imported == {"numpy", "farm.Kernel"}
    assert {"softmax.py", "conv2d.py"} <= {Path(p).name for p in files._LOADED}


BOOM = '''from farm import Kernel

def bad_reference(x):
    raise RuntimeError("boom")

Kernel("boomk", source="""@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> params: vec4<u32>;
@compute @workgroup_size({{workgroup_size}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.x) { y[gid.x] = x[gid.x]; }
}
""", dims=("n",), inputs={"x": "f32[n]"}, outputs={"y": "f32[n]"}, space={"workgroup_size": [32, 64]},
       grid="ceil(n / workgroup_size)", reference=bad_reference, sizes=["n=64"])
'''


def test_a_raising_reference_is_the_kernels_error_in_process_and_on_the_cli(tmp_path, farm_home):
    """A user's reference that raises is one line from `farm certify` and from `farm tune`
    (Ray), not a traceback or a WorkerFailure, naming the kernel, the function and the problem;
    tune_kernel raises the same KernelError."""
    boom = scaled(name="boom_in_process", reference=lambda x, factor: 1 / 0)
    with pytest.raises(KernelError, match=r"kernel 'boom_in_process': its reference \(.*\) raised ZeroDivisionError"):
        farm.tune_kernel(boom, budget=2)
    path = tmp_path / "boom.py"
    path.write_text(BOOM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_KERNELS")}
    want = "farm: error: kernel 'boomk': its reference (bad_reference) raised RuntimeError: boom for n=64\n"
    for command in (["certify"], ["tune", "--allow-cpu", "--budget", "2", "--reps", "2",
                                  "--db", f"sqlite:///{tmp_path}/boom.db"]):  # fmt: skip
        run = subprocess.run([sys.executable, "-m", "farm", *command, "--kernels-file", str(path), "boomk"], env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert run.returncode == 2 and run.stderr.endswith(want) and "Traceback" not in run.stderr, run.stderr
