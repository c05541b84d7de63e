import re

import numpy as np
import pytest

from farm import catalog
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.schedule import InvalidSchedule, Problem, Schedule, Status

SPEC = catalog.get("fft")
LENGTHS = [2**p for p in range(1, 11)]
VEC2_TWO_PER_GROUP = Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=2)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("schedule", [SPEC.default, VEC2_TWO_PER_GROUP], ids=str)
def test_fft_matches_numpy_for_every_power_of_two_length(device, schedule, n):
    x = np.random.default_rng(n).standard_normal((3, n, 2)).astype(np.float32)
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=3), {"x": x})["y"]
    want = np.fft.fft(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=-1)
    atol = 2e-6 * np.sqrt(n) * np.log2(n)
    np.testing.assert_allclose(out[..., 0], want.real, atol=atol, rtol=1e-4)
    np.testing.assert_allclose(out[..., 1], want.imag, atol=atol, rtol=1e-4)


@pytest.mark.parametrize("n", [2, 64, 1024])
@pytest.mark.parametrize(
    "schedule",
    [
        Schedule.of(workgroup_size=32),
        Schedule.of(workgroup_size=1024),
        Schedule.of(workgroup_size=256, items_per_invocation=4, vector_width=2),
    ],
    ids=str,
)
def test_fft_certifies_across_schedules(device, schedule, n):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=n, batch=5), device)
    assert result.status is Status.OK, result.message


@pytest.mark.parametrize("n", [2, 16, 1024])
def test_fft_of_an_impulse_is_all_ones(device, n):
    x = np.zeros((1, n, 2), np.float32)
    x[0, 0, 0] = 1.0
    out = run(device, SPEC, SPEC.default, SPEC.problem(n=n, batch=1), {"x": x})["y"]
    np.testing.assert_array_equal(out[0, :, 0], np.ones(n))
    np.testing.assert_array_equal(out[0, :, 1], np.zeros(n))


@pytest.mark.parametrize("schedule", [SPEC.default, Schedule.of(workgroup_size=64, items_per_invocation=4)], ids=str)
def test_fft_batch_keeps_each_transform_separate(device, schedule):
    # Transform b holds an impulse at t = b, whose spectrum is exp(-2πi·f·b/n): any mix-up
    # between transforms (or a partial last workgroup of 4) shows as a wrong phase.
    n, batch = 32, 6
    x = np.zeros((batch, n, 2), np.float32)
    x[np.arange(batch), np.arange(batch), 0] = 1.0
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=batch), {"x": x})["y"]
    f = np.arange(n)
    for b in range(batch):
        want = np.exp(-2j * np.pi * f * b / n)
        np.testing.assert_allclose(out[b, :, 0], want.real, atol=1e-6)
        np.testing.assert_allclose(out[b, :, 1], want.imag, atol=1e-6)


def test_fft_accepts_flat_interleaved_input(device):
    x = np.arange(16, dtype=np.float32)
    out = run(device, SPEC, SPEC.default, SPEC.problem(n=4, batch=2), {"x": x})["y"]
    signals = x.reshape(2, 4, 2)
    want = np.fft.fft(signals[..., 0] + 1j * signals[..., 1], axis=-1)
    np.testing.assert_allclose(out[..., 0] + 1j * out[..., 1], want, atol=1e-5)


def test_fft_folds_more_than_65535_workgroups(device):
    result = oracle.certify(SPEC, SPEC.default, SPEC.problem(n=2, batch=70_000), device)
    assert result.status is Status.OK, result.message


def test_fft_corrupted_reference_does_not_certify(device, monkeypatch):
    problem = SPEC.problem(n=256, batch=4)
    real = SPEC.reference

    def nudged(problem, schedule, inputs):
        y = real(problem, schedule, inputs)["y"].copy()
        y[2, 100, 1] += 1e-2
        return {"y": y}

    monkeypatch.setattr(SPEC, "reference", nudged)
    result = oracle.certify(SPEC, SPEC.default, problem, device)
    assert result.status is Status.WRONG_RESULT
    assert result.metrics.max_abs == pytest.approx(1e-2, rel=0.1)


def test_fft_inverse_direction_reference_does_not_certify(device, monkeypatch):
    def inverse(problem, schedule, inputs):
        x = inputs["x"].astype(np.float64)
        z = np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=-1) * problem["n"]
        return {"y": np.stack([z.real, z.imag], axis=-1).astype(np.float32)}

    monkeypatch.setattr(SPEC, "reference", inverse)
    result = oracle.certify(SPEC, SPEC.default, SPEC.problem(n=64, batch=2), device)
    assert result.status is Status.WRONG_RESULT


@pytest.mark.parametrize("n", [1, 0, 3, 96, 2048])
def test_fft_problem_rejects_lengths_that_are_not_powers_of_two_in_range(n):
    with pytest.raises(ValueError, match=f"n={n} must be a power of two"):
        SPEC.problem(n=n, batch=1)


def test_fft_check_rejects_length_one_built_without_validation(device):
    with pytest.raises(InvalidSchedule, match="n=1 must be a power of two"):
        SPEC.check(SPEC.default, Problem.of(n=1, batch=1), device.profile)


def test_fft_rejects_vector_width_four(device):
    schedule = Schedule.of(workgroup_size=64, vector_width=4)
    with pytest.raises(InvalidSchedule, match=r"vector_width 4 not in \(1, 2\)"):
        SPEC.check(schedule, SPEC.problem(n=64, batch=1), device.profile)


def test_fft_rejects_workgroup_storage_over_the_adapter_limit(device):
    schedule = Schedule.of(workgroup_size=256, items_per_invocation=8)
    limit = device.profile.limit("max-compute-workgroup-storage-size")
    assert 8 * 1024 * 8 > limit
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=1024, batch=8), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert "needs 65536 bytes of workgroup storage" in result.message


# -- Stockham variants (stockham = radix 2, 4, 8, 16 or 32; swizzle) -----------------

STOCKHAM_SCHEDULES = [
    Schedule.of(workgroup_size=256, items_per_invocation=2, vector_width=2, stockham=4, swizzle=2),
    Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, stockham=16, swizzle=1),
    Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=2, stockham=8, swizzle=2),
    Schedule.of(workgroup_size=32, items_per_invocation=3, vector_width=2, stockham=2, swizzle=0),
    Schedule.of(workgroup_size=1024, items_per_invocation=1, vector_width=1, stockham=16, swizzle=0),
    Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, stockham=8, swizzle=1),
    Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=2, stockham=32, swizzle=3),
]


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("schedule", STOCKHAM_SCHEDULES, ids=str)
def test_fft_stockham_certifies_for_every_power_of_two_length(device, schedule, n):
    # batch 5 with 2 or 3 transforms per workgroup leaves the last workgroup partial.
    problem = SPEC.problem(n=n, batch=5)
    result = oracle.certify(SPEC, schedule, problem, device)
    if SPEC.workgroup_bytes(schedule, problem) > device.profile.limit("max-compute-workgroup-storage-size"):
        assert result.status is Status.INVALID_SCHEDULE, result.message
    else:
        assert result.status is Status.OK, result.message


@pytest.mark.parametrize("schedule", STOCKHAM_SCHEDULES[:3], ids=str)
def test_fft_stockham_keeps_each_transform_separate(device, schedule):
    n, batch = 64, 5
    x = np.zeros((batch, n, 2), np.float32)
    x[np.arange(batch), 3 * np.arange(batch), 0] = 1.0
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=batch), {"x": x})["y"]
    f = np.arange(n)
    for b in range(batch):
        want = np.exp(-2j * np.pi * f * 3 * b / n)
        np.testing.assert_allclose(out[b, :, 0] + 1j * out[b, :, 1], want, atol=2e-6)


@pytest.mark.parametrize("schedule", STOCKHAM_SCHEDULES[:3], ids=str)
def test_fft_stockham_of_an_impulse_is_exactly_all_ones(device, schedule):
    x = np.zeros((2, 1024, 2), np.float32)
    x[:, 0, 0] = 1.0
    out = run(device, SPEC, schedule, SPEC.problem(n=1024, batch=2), {"x": x})["y"]
    np.testing.assert_array_equal(out[..., 0], np.ones((2, 1024)))
    np.testing.assert_array_equal(out[..., 1], np.zeros((2, 1024)))


@pytest.mark.parametrize(
    "knobs,reason",
    [
        ({"swizzle": 1}, r"swizzle 1 needs stockham > 0 \(the radix-2 kernel has no swizzled layout\)"),
        ({"stockham": 64}, r"stockham 64 not in \(0, 2, 4, 8, 16, 32\)"),
        ({"stockham": 4, "swizzle": 5}, r"swizzle 5 not in \(0, 1, 2, 3, 4\)"),
    ],
    ids=["swizzle_without_stockham", "stockham_radix", "swizzle_value"],
)
def test_fft_rejects_bad_speed_knobs_naming_the_knob(device, knobs, reason):
    schedule = Schedule.of(workgroup_size=64, **knobs)
    with pytest.raises(InvalidSchedule, match=reason):
        SPEC.check(schedule, SPEC.problem(n=64, batch=2), device.profile)


@pytest.mark.parametrize(
    "n,radix,stages",
    [
        (1024, 4, [4, 4, 4, 4, 4]),
        (512, 4, [4, 4, 4, 4, 2]),
        (2, 4, [2]),
        (16, 2, [2, 2, 2, 2]),
        (1024, 16, [16, 16, 4]),
        (128, 16, [16, 8]),
        (1024, 8, [8, 8, 8, 2]),
        (8, 16, [8]),
        (1024, 32, [32, 32]),
        (512, 32, [32, 16]),
    ],
)
def test_fft_stockham_stages_and_barriers(n, radix, stages):
    from farm.catalog.fft_stockham import stage_radices

    assert stage_radices(n, radix) == stages
    problem = SPEC.problem(n=n, batch=1)
    schedule = Schedule.of(workgroup_size=256, stockham=radix)
    launch = SPEC.launch(schedule, problem, SPEC.generate(problem, 0))
    body = launch.source.split("fn main_stockham")[1]
    assert launch.entry_point == "main_stockham"
    assert body.count("workgroupBarrier()") == len(stages) - 1
    # two buffers, or one when the first stage writes what the last reads, or none
    assert SPEC.workgroup_bytes(schedule, problem) == {1: 0, 2: 8 * n}.get(len(stages), 16 * n)


def test_fft_stockham_workgroup_storage_is_two_buffers(device):
    problem = SPEC.problem(n=1024, batch=4)
    fits = Schedule.of(workgroup_size=256, items_per_invocation=2, stockham=4)
    too_big = Schedule.of(workgroup_size=256, items_per_invocation=4, stockham=4)
    assert SPEC.workgroup_bytes(fits, problem) == 2 * 8 * 1024 * 2
    SPEC.check(fits, problem, device.profile)
    assert device.profile.limit("max-compute-workgroup-storage-size") < 65536
    with pytest.raises(InvalidSchedule, match="needs 65536 bytes of workgroup storage"):
        SPEC.check(too_big, problem, device.profile)


@pytest.mark.parametrize("swizzle", [0, 1, 2, 3])
def test_fft_swizzle_permutes_the_points_of_a_transform(swizzle):
    from farm.catalog.fft_slots import swizzle_expr

    # The emitted WGSL expression read as Python (u32 literals and countOneBits mapped over).
    expr = re.sub(r"(\d+)u\b", r"\1", swizzle_expr(swizzle)).replace("countOneBits", "popcount")
    positions = [eval(expr, {"i": i, "popcount": lambda v: bin(v).count("1")}) for i in range(1024)]
    assert sorted(positions) == list(range(1024))
    assert sorted(positions[:16]) == list(range(16))
    assert (positions == list(range(1024))) == (swizzle == 0)


def test_fft_space_keeps_the_original_schedules_and_adds_stockham(device):
    schedules = SPEC.schedules()
    assert len(schedules) == 624 == len(set(schedules))
    assert SPEC.default in schedules
    original = [s for s in schedules if s.knobs == ()]
    assert len(original) == 48
    problem = SPEC.problem(n=256, batch=2)
    from farm.catalog.fft_stockham import single_buffer_problem

    for schedule in schedules:
        single = schedule.get("single_buffer", 0)
        radix, items, threads = schedule.get("stockham", 0), schedule.items_per_invocation, schedule.workgroup_size
        if single and single_buffer_problem(256, radix, items, threads):
            with pytest.raises(InvalidSchedule, match="single_buffer needs workgroup_size >= "):
                SPEC.check_knobs(schedule, problem, device.profile)
            continue
        SPEC.check_knobs(schedule, problem, device.profile)
    knobs = {(s.get("stockham", 0), s.get("swizzle", 0), s.get("single_buffer", 0)) for s in schedules}
    assert knobs == {(0, 0, 0), (4, 0, 0), (4, 2, 0), (8, 0, 0), (8, 2, 0), (16, 0, 0), (16, 1, 0),
                     (8, 0, 1), (8, 2, 1), (16, 0, 1), (16, 1, 1), (32, 0, 1), (32, 3, 1)}  # fmt: skip
    assert all(s.vector_width == 2 for s in schedules if s.get("single_buffer", 0))
    assert all((s.get("stage_twiddles", 0) > 0) == (s.get("stockham", 0) > 0) for s in schedules)
    products = [s for s in schedules if s.get("stage_twiddles", 0) == 2]
    assert len(products) == 144 and all(s.get("single_buffer", 0) for s in products)


def test_fft_speed_knobs_at_zero_emit_the_original_kernel():
    problem = SPEC.problem(n=64, batch=2)
    inputs = SPEC.generate(problem, 0)
    zeros = Schedule.of(workgroup_size=64, stockham=0, swizzle=0)
    original = SPEC.launch(SPEC.default, problem, inputs)
    assert SPEC.launch(zeros, problem, inputs).source == original.source
    assert "main_stockham" not in original.source and original.entry_point == "main"


# -- NaN and Inf: numpy's answer where both algorithms agree --------------------------------

NONFINITE = np.array([np.inf, -np.inf, np.nan], np.float32)
NONFINITE_SCHEDULES = [
    SPEC.default,
    VEC2_TWO_PER_GROUP,
    *STOCKHAM_SCHEDULES[:3],  # radix 4, 16, 8
    STOCKHAM_SCHEDULES[6],  # radix 32, whose twiddles the host specializes (no run-time -1 case)
    Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=2, stockham=2, swizzle=0),
]


def _spoiled(rng, n: int, batch: int, points: tuple[int, ...]) -> np.ndarray:
    """(batch, n, 2) normal values with ±Inf/NaN in random parts of `points` of each transform
    (some transforms get none, some every part)."""
    x = rng.standard_normal((batch, n, 2)).astype(np.float32)
    for row in range(batch):
        for point in points:
            for part in range(2):
                if rng.random() < 0.5:
                    x[row, point, part] = rng.choice(NONFINITE)
    return x


def _numpy(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return np.fft.fft(x.view(np.complex64)[..., 0]).view(np.float32).reshape(x.shape)


@pytest.mark.parametrize("n", [2, 4, 16, 128, 1024])
@pytest.mark.parametrize("schedule", NONFINITE_SCHEDULES, ids=str)
def test_fft_nonfinite_at_points_0_and_half_match_numpy_exactly(device, schedule, n):
    """The twiddle 1 was multiplied: -0 · Inf made a NaN where numpy has ±Inf or a number."""
    x = _spoiled(np.random.default_rng(n), n, 24, (0, n // 2))
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=24), {"x": x})["y"]
    atol = 4e-6 * np.sqrt(n) * np.log2(n)
    np.testing.assert_allclose(out, _numpy(x), atol=atol, rtol=1e-4, equal_nan=True)  # NaN, ±Inf in place


@pytest.mark.parametrize("schedule", NONFINITE_SCHEDULES, ids=str)
def test_fft_nonfinite_elsewhere_keeps_numpy_nonfinite_points_and_infs(device, schedule):
    """Where the butterfly orders differ (farm.catalog.fft): an output point is non-finite
    exactly where numpy's is, and numpy's ±Inf parts come back as that Inf or NaN."""
    n, rng = 64, np.random.default_rng(7)
    x = rng.standard_normal((n, n, 2)).astype(np.float32)
    x[np.arange(n), np.arange(n), rng.integers(0, 2, n)] = rng.choice(NONFINITE, n)  # point t of row t
    out = run(device, SPEC, schedule, SPEC.problem(n=n, batch=n), {"x": x})["y"]
    want = _numpy(x)
    np.testing.assert_array_equal(np.isfinite(out).all(-1), np.isfinite(want).all(-1))
    infs = np.isinf(want)
    assert np.all((out[infs] == want[infs]) | np.isnan(out[infs]))
    finite = np.isfinite(want).all(-1)
    np.testing.assert_allclose(out[finite], want[finite], atol=1e-4, rtol=1e-4)


# -- single_buffer: the exchanges through one workgroup buffer ------------------------

SINGLE_SCHEDULES = [
    Schedule.of(workgroup_size=256, items_per_invocation=4, vector_width=2, stockham=16, swizzle=1, single_buffer=1),
    Schedule.of(workgroup_size=512, items_per_invocation=2, vector_width=2, stockham=8, swizzle=2, single_buffer=1),
    Schedule.of(workgroup_size=1024, items_per_invocation=3, vector_width=1, stockham=4, swizzle=0, single_buffer=1),
    Schedule.of(workgroup_size=128, items_per_invocation=3, vector_width=2, stockham=32, swizzle=3, single_buffer=1),
]


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("schedule", SINGLE_SCHEDULES, ids=str)
def test_fft_single_buffer_certifies_for_every_power_of_two_length(device, schedule, n):
    # batch 5 leaves the last workgroup partial; radix 4 at items 3 runs three stages between
    problem = SPEC.problem(n=n, batch=5)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message


def test_fft_single_buffer_takes_one_buffer_and_two_barriers_an_exchange():
    from farm.catalog.fft_stockham import stage_radices

    problem = SPEC.problem(n=1024, batch=8)
    single, double = SINGLE_SCHEDULES[0], Schedule.of(**(SINGLE_SCHEDULES[0].as_dict() | {"single_buffer": 0}))
    inputs = SPEC.generate(problem, 0)
    body = SPEC.launch(single, problem, inputs).source.split("fn main_stockham")[1]
    middles = len(stage_radices(1024, 16)) - 2  # (16, 16, 4): one stage both reads and writes
    assert body.count("workgroupBarrier()") == 1 + 2 * middles  # the first stage's, then two a middle one
    source = SPEC.launch(single, problem, inputs).source
    assert "var<workgroup> s0" in source and "var<workgroup> s1" not in source
    assert SPEC.workgroup_bytes(single, problem) == 8 * 1024 * 4 == SPEC.workgroup_bytes(double, problem) // 2


def test_fft_single_buffer_rejects_a_workgroup_too_small_for_its_units_naming_them(device):
    schedule = Schedule.of(workgroup_size=128, items_per_invocation=4, vector_width=2, stockham=16, single_buffer=1)
    with pytest.raises(InvalidSchedule, match=r"single_buffer needs workgroup_size >= items_per_invocation \* n / "
                       r"radix = 256 \(items_per_invocation 4, n=1024, radix 16\); got 128"):  # fmt: skip
        SPEC.check(schedule, SPEC.problem(n=1024, batch=8), device.profile)
    SPEC.check(schedule, SPEC.problem(n=256, batch=8), device.profile)  # (16, 16): no stage between
    with pytest.raises(InvalidSchedule, match=r"single_buffer 1 needs stockham > 0"):
        SPEC.check(Schedule.of(workgroup_size=64, single_buffer=1), SPEC.problem(n=64, batch=2), device.profile)


def _wavefronts(expr: str, reads: list[list[int]]) -> int:
    """The most 16-lane wavefronts one warp access takes in the bank model (32 banks of 4
    bytes, a vec2<f32> slot spans two: 16 slots mod 16 distinct is one wavefront)."""
    python = re.sub(r"(\d+)u\b", r"\1", expr).replace("countOneBits", "popcount")
    slot = lambda i: eval(python, {"i": i, "popcount": lambda v: bin(v).count("1")})  # noqa: E731
    worst = 0
    for lanes in reads:
        for half in (lanes[:16], lanes[16:]):
            banks = [slot(i) % 16 for i in half]
            worst = max(worst, max(banks.count(b) for b in set(banks)))
    return worst


@pytest.mark.parametrize("swizzle,want", [(0, 16), (1, 2), (3, 1)])
def test_fft_swizzle_3_makes_radix_32_conflict_free_in_the_bank_model(swizzle, want):
    from farm.catalog.fft_slots import swizzle_expr

    # n = 1024 as (32, 32): the first stage's unit j writes slots 32j + q, the last reads j + 32q.
    writes = [[32 * j + q for j in range(32)] for q in range(32)]
    reads = [[j + 32 * q for j in range(32)] for q in range(32)]
    assert _wavefronts(swizzle_expr(swizzle), writes + reads) == want


TW_MUL = """
fn tw_mul(v: vec2<f32>, t: u32) -> vec2<f32> {
    return select(select(cmul(v, tw(t)), -v, t == HALF), v, t == 0u);
}
"""


def _generic_twiddles(n, r, ns, table=None, products=False):
    """The generic twiddle lines, unspecialized by the host: every point through tw_mul, which
    selects the exact 1 and -1 at run time (where the emitted lines use the branch-free `tw`)."""
    if ns == 1:
        return []
    return [f"let k = j % {ns}u;", *(f"v{q} = tw_mul(v{q}, k * {q * n // (r * ns)}u);" for q in range(1, r))]


@pytest.mark.parametrize(
    "schedule",
    [SINGLE_SCHEDULES[3], STOCKHAM_SCHEDULES[0], STOCKHAM_SCHEDULES[1], SINGLE_SCHEDULES[0]],
    ids=str,
)
def test_fft_specialized_twiddles_give_tw_mul_bit_for_bit(device, schedule, monkeypatch):
    # Inputs with Inf at a few points go through the t = 0 and the sign-selected twiddles.
    from farm.catalog import fft_stockham

    problem = SPEC.problem(n=1024, batch=3)
    x = SPEC.generate(problem, 7)["x"]
    x[1, 5, 0], x[2, 700, 1] = np.inf, -np.inf
    got = run(device, SPEC, schedule, problem, {"x": x})["y"]
    monkeypatch.setattr(fft_stockham, "_twiddles", _generic_twiddles)
    template = SPEC.template()
    entry = "@compute @workgroup_size(WG)\nfn main_stockham"
    monkeypatch.setattr(type(SPEC), "template", lambda self: template.replace(entry, TW_MUL + entry))
    want = run(device, SPEC, schedule, problem, {"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def test_fft_radix_32_twiddles_skip_the_sign_select_below_half():
    from farm.catalog.fft_stockham import _twiddles

    lines = "".join(_twiddles(1024, 32, 32))  # t = k·q, k < 32: under 512 for q <= 16
    assert [q for q in range(1, 32) if f"tw(k * {q}u)" in lines] == list(range(17, 32))
    assert _twiddles(1024, 4, 256)[4] == "v3 = select(cmul(v3, tw(k * 3u)), v3, k0);"


def test_fft_stockham_twiddles_never_reach_half_the_period():
    # Why the specialized twiddles need no exact -1: no stage of any length and radix has t = n/2.
    from farm.catalog.fft_stockham import stage_radices

    for n in LENGTHS:
        for radix in (2, 4, 8, 16, 32):
            ns = 1
            for r in stage_radices(n, radix):
                m = [q * n // (r * ns) for q in range(1, r)]
                assert all(k * mq != n // 2 for k in range(ns) for mq in m), (n, radix, r, ns)
                ns *= r


# -- stage_twiddles: each stage's twiddles laid out so a warp's lanes read consecutive entries --

STAGED = [Schedule.of(**s.as_dict(), stage_twiddles=1) for s in (*STOCKHAM_SCHEDULES, *SINGLE_SCHEDULES)]


def _skip_unless_runnable(device, schedule: Schedule, other: Schedule, problem) -> None:
    """Skip where `schedule` needs more workgroup memory than the adapter has, or where the
    schedule it is compared with is invalid at this length."""
    if SPEC.workgroup_bytes(schedule, problem) > device.profile.limit("max-compute-workgroup-storage-size"):
        pytest.skip("too much workgroup memory on this adapter")
    try:
        SPEC.check(other, problem, device.profile)
    except InvalidSchedule:
        pytest.skip("schedule invalid at this length")


@pytest.mark.parametrize("n", [4, 64, 512, 1024])
@pytest.mark.parametrize("schedule", STAGED, ids=str)
def test_fft_stage_twiddles_give_the_half_table_bit_for_bit(device, schedule, n):
    problem = SPEC.problem(n=n, batch=5)
    half = Schedule.of(**{k: v for k, v in schedule.as_dict().items() if k != "stage_twiddles"})
    _skip_unless_runnable(device, schedule, half, problem)
    x = SPEC.generate(problem, 3)["x"]
    x[1, 1, 0], x[3, n - 1, 1] = np.inf, -np.inf  # through the exact twiddle 1 and the negated half
    np.testing.assert_array_equal(run(device, SPEC, schedule, problem, {"x": x})["y"],
                                  run(device, SPEC, half, problem, {"x": x})["y"])  # fmt: skip
    assert oracle.certify(SPEC, schedule, problem, device).status is Status.OK


@pytest.mark.parametrize("n,radix", [(1024, 32), (1024, 16), (1024, 4), (512, 32), (256, 8), (64, 2)])
def test_fft_stage_twiddles_put_a_warps_lanes_on_consecutive_entries(n, radix):
    # Each point q of a stage reads entry base + (q - 1)·ns + k, k = j mod ns, and the entry is
    # exp(-2πi·k·m/n), m = q·n/(r·ns): the half table's t = k·m, its sign taken for t >= n/2.
    from farm.catalog.fft import twiddles
    from farm.catalog.fft_stockham import stage_radices, stage_twiddles, stockham_stages

    table = stage_twiddles(n, radix, twiddles(n))
    source = stockham_stages(n, radix, stage_table=True)
    exact = np.exp(-2j * np.pi * np.arange(n) / n)
    base, ns = 0, 1
    for r in stage_radices(n, radix):
        if ns > 1:
            for q in range(1, r):
                assert f"v{q} = select(cmul(v{q}, twiddle[{base + (q - 1) * ns}u + k]), v{q}, k0);" in source
                k = np.arange(ns)
                got = table[base + (q - 1) * ns + k]
                np.testing.assert_allclose(got[:, 0] + 1j * got[:, 1], exact[k * (q * n // (r * ns))], atol=1e-7)
            base += (r - 1) * ns
        ns *= r
    assert len(table) == max(base, 1) and "tw(" not in source and "k * " not in source


def test_fft_stage_twiddles_need_stockham_and_are_zero_one_or_two(device):
    problem = SPEC.problem(n=64, batch=2)
    with pytest.raises(InvalidSchedule, match=r"stage_twiddles 1 needs stockham > 0"):
        SPEC.check(Schedule.of(workgroup_size=64, stage_twiddles=1), problem, device.profile)
    with pytest.raises(InvalidSchedule, match=r"stage_twiddles 3 not in \(0, 1, 2\)"):
        SPEC.check(Schedule.of(workgroup_size=64, stockham=4, stage_twiddles=3), problem, device.profile)


# -- stage_twiddles 2: the power-of-two points' twiddles read, the others their products --

PRODUCTS = [Schedule.of(**s.as_dict(), stage_twiddles=2) for s in (*STOCKHAM_SCHEDULES, *SINGLE_SCHEDULES)]


@pytest.mark.parametrize("n", [4, 64, 512, 1024])
@pytest.mark.parametrize("schedule", PRODUCTS, ids=str)
def test_fft_twiddle_products_stay_within_a_few_ulps_of_the_table(device, schedule, n):
    problem = SPEC.problem(n=n, batch=5)
    table = Schedule.of(**schedule.as_dict() | {"stage_twiddles": 1})
    _skip_unless_runnable(device, schedule, table, problem)
    x = SPEC.generate(problem, 3)["x"]
    got, want = run(device, SPEC, schedule, problem, {"x": x})["y"], run(device, SPEC, table, problem, {"x": x})["y"]
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 64 * np.finfo(np.float32).eps * scale  # log2(n) stages, each a few ulps
    assert oracle.certify(SPEC, schedule, problem, device).status is Status.OK


@pytest.mark.parametrize("n,radix", [(1024, 32), (1024, 16), (256, 8), (64, 4)])
def test_fft_twiddle_products_read_log2_radix_entries_a_stage(n, radix):
    # w_q = w_h · w_(q-h), h the largest power of two under q: radix r reads log2(r) entries.
    from farm.catalog.fft import twiddles
    from farm.catalog.fft_stockham import stage_radices, stage_twiddles, stockham_stages

    source = stockham_stages(n, radix, stage_table=2)
    table = stage_twiddles(n, radix, twiddles(n))
    exact = np.exp(-2j * np.pi * np.arange(n) / n)
    reads, base, ns = 0, 0, 1
    for r in stage_radices(n, radix):
        if ns > 1:
            reads += r.bit_length() - 1
            w = {}
            for q in range(1, r):
                h = 1 << (q.bit_length() - 1)
                k = np.arange(ns)
                entry = table[base + (q - 1) * ns + k]
                w[q] = entry[:, 0] + 1j * entry[:, 1] if q == h else w[h] * w[q - h]
                np.testing.assert_allclose(w[q], exact[k * (q * n // (r * ns))], atol=1e-6)
                read = f"twiddle[{base + (q - 1) * ns}u + k]" if q == h else f"cmul(w{h}, w{q - h})"
                line = f"let w{q} = {read};"
                assert line in source and f"v{q} = select(cmul(v{q}, w{q}), v{q}, k0);" in source
            base += (r - 1) * ns
        ns *= r
    assert source.count("twiddle[") == reads
