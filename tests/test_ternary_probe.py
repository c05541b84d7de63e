"""benchmarks/ternary_probe.py's smoke run on the CPU adapter: every variant of every shape
timed, its source substitutions failing loudly, its inputs in the spec's format, and the
catalog kernels it times certified here (the probe itself no longer certifies them)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from farm.catalog.ternary_gemv import pack_codes
from farm.oracle import compare as oracle
from farm.schedule import Status

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load_probe():
    """benchmarks/ternary_probe.py as a module; it imports ternary_probe_kernels beside it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location("ternary_probe", BENCHMARKS / "ternary_probe.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


PROBE = _load_probe()
# Every catalog schedule a smoke run times: the best known ones, the stage_x=3 winner, the split sample.
TIMED = [
    *(schedule for _, schedule in PROBE.REAL),
    PROBE.DP4A_TUNED,
    *(PROBE.split_schedule(*s) for s in PROBE.split_space(cpu=True)),
]


@pytest.fixture(scope="module")
def probe():
    return PROBE


def _planned(probe) -> set[tuple[str, str]]:
    """(variant, schedule label) the probe times per shape."""
    planned = {("copy", "vec4 wg256")}
    planned |= {("load-only", f"wg128 r{r} vw{vw} tpr{tpr}") for tpr, vw, r in probe.LOAD_LAYOUTS}
    for variant, schedule in probe.REAL:
        label = probe._label(schedule)
        planned |= {(variant, label), (f"{variant} compute-only", label)}
        planned |= {(part, label) for part in probe.PARTS.get(variant, ())}
    planned |= {(f"decode {kind}", f"wg256 words{probe.DECODE_WORDS}") for kind in probe.DECODE_KINDS}
    return planned | _split_rows(probe)


def _split_rows(probe) -> set[tuple[str, str]]:
    """The stage_x=4 rows of a smoke run: every schedule of split_space, the winners compute-only."""
    rows = {("split", f"wg{wg} r{r} vw{vw} tpr{tpr} s{s}") for wg, r, vw, tpr, s in probe.split_space(cpu=True)}
    return rows | {
        ("split compute-only", f"wg{wg} r{r} vw{vw} tpr{tpr} s{s}") for wg, r, vw, tpr, s in probe.SPLIT_WINNERS
    }


# slow: ~5 s with a warm Mesa shader cache, ~40 s cold (lavapipe's LLVM compiles the unrolled
# pair-table kernel wg128 r2 tpr1 and its two derivatives for ~25 s).
@pytest.mark.slow
def test_probe_smoke_run_times_every_variant_of_every_shape(probe, device, tmp_path):
    argv = ["--allow-cpu", "--out", str(tmp_path), "--reps", "2", "--warmup", "1"]
    assert probe.main(argv, device=device) == 0
    data = json.loads((tmp_path / "ternary_probe.json").read_text())
    rows = data["rows"]
    planned = _planned(probe)
    # copy, loads, staged, lut, lut parts, dp4a (3 rows each), decode, split
    assert len(planned) == 1 + 20 + 5 + 5 + 6 + 3 * 8 + len(probe.DECODE_KINDS) + 6 + 2
    shapes = {f"m={m},k={k}" for m, k in probe.CPU_SHAPES}
    assert {r["shape"] for r in rows} == shapes
    for shape in shapes:
        got = [(r["variant"], r["schedule"]) for r in rows if r["shape"] == shape]
        assert sorted(got) == sorted(planned), shape
    for r in rows:
        assert r["median_ns"] is not None and r["median_ns"] > 0, r
        assert r["gbps"] > 0 and r["fraction_of_copy"] > 0, r
        if r["variant"] == "load-only":
            assert r["message"] == "xor of every row checked", r
        if r["variant"].startswith("decode "):
            assert r["message"].endswith("codes, no weight loads, no table build"), r


def test_probe_only_split_times_the_split_kernel_against_its_baseline(probe, device, tmp_path):
    argv = ["--allow-cpu", "--only", "split", "--shape", "64x2048", "--out", str(tmp_path), "--reps", "2"]
    assert probe.main(argv, device=device) == 0
    rows = json.loads((tmp_path / "ternary_probe.json").read_text())["rows"]
    label = probe._label(probe.DP4A_TUNED)
    want = {("copy", "vec4 wg256"), ("dp4a", label), ("dp4a compute-only", label), ("dp4a no-dot", label)}
    want |= {(f"decode {kind}", f"wg256 words{probe.DECODE_WORDS}") for kind in probe.SPLIT_DECODE_KINDS}
    assert sorted((r["variant"], r["schedule"]) for r in rows) == sorted(want | _split_rows(probe))
    assert all(r["median_ns"] > 0 for r in rows)


def test_probe_refuses_the_cpu_adapter_without_allow_cpu(probe, device, tmp_path, capsys):
    if not device.profile.is_cpu:
        pytest.skip("a GPU adapter is not refused")
    assert probe.main(["--out", str(tmp_path)], device=device) == 2
    assert "pass --allow-cpu" in capsys.readouterr().err
    assert not (tmp_path / "ternary_probe.json").exists()


def test_probe_substitutions_fail_loudly_when_the_template_changes(probe):
    schedule = probe.REAL[2][1]  # a stage_x=2 schedule
    problem = probe.SPEC.problem(m=64, k=1024)
    source = probe.SPEC.launch(schedule, problem, probe.make_inputs(64, 1024)).source
    assert "synth(" in probe.compute_only_source(source, schedule)
    changed = source.replace("build(t0, lid, ta, tb);", "build(t0, lid, tb, ta);")
    with pytest.raises(probe.ProbeError, match="lookup-only"):
        probe.lut_lookup_only_source(changed, schedule)
    with pytest.raises(probe.ProbeError, match="build-only"):
        probe.lut_build_only_source(changed, schedule)
    fewer_loads = source.replace("w[wrow1 + min(c + 0u, nv - 1u)]", "x[0]")
    with pytest.raises(probe.ProbeError, match="compute-only weight loads"):
        probe.compute_only_source(fewer_loads, schedule)


@pytest.mark.parametrize("schedule", TIMED, ids=str)
def test_the_catalog_kernels_the_probe_times_certify_at_its_smoke_shapes(device, schedule):
    for m, k in PROBE.CPU_SHAPES:  # small-integer data: exact
        result = oracle.certify(PROBE.SPEC, schedule, PROBE.SPEC.problem(m=m, k=k), device)
        assert result.status is Status.OK, result.message
        assert result.metrics.max_abs == 0.0


def test_probe_inputs_follow_the_specs_format(probe):
    m, k = 5, 1000  # 63 words a row, the last one half past k
    inputs = probe.make_inputs(m, k)
    words = inputs["w_packed"].reshape(m, -1)
    codes = ((words[:, :, None] >> (2 * np.arange(16, dtype=np.uint32))) & 3).reshape(m, -1)
    assert words.shape == (m, 63) and not codes[:, k:].any()  # codes past k are zero
    assert set(np.unique(codes[:, :k])) == {0, 1, 2}
    np.testing.assert_array_equal(pack_codes(codes[:, :k]), words)
    x, scale = inputs["x"], inputs["scale"]
    assert x.shape == (k,) and np.all(x == np.round(x)) and np.abs(x).max() <= 8
    assert scale.shape == (m,) and np.all(np.log2(scale) == np.round(np.log2(scale)))
