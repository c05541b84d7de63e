import numpy as np
import pytest

from farm import catalog
from farm.catalog.ternary_gemv import EXACT_K, TernaryGemv, pack_codes, split_schedule, unpack_ternary
from farm.gpu import fold_groups
from farm.oracle import compare as oracle
from farm.oracle.launch import compile_launch, prepare, run
from farm.schedule import Schedule, Status

SPEC = catalog.get("ternary_gemv")
SCHEDULES = [
    SPEC.default,
    Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=1, threads_per_row=32),
    Schedule.of(workgroup_size=32, items_per_invocation=4, vector_width=1, threads_per_row=4),
    Schedule.of(workgroup_size=256, items_per_invocation=1, vector_width=1, threads_per_row=8),
]


def ternary_gemv(device, x, w_packed, scale, m, k, schedule=SPEC.default) -> np.ndarray:
    inputs = {
        "x": np.asarray(x, np.float32),
        "w_packed": np.asarray(w_packed, np.uint32),
        "scale": np.asarray(scale, np.float32),
    }
    return run(device, SPEC, schedule, SPEC.problem(m=m, k=k), inputs)["out"]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
@pytest.mark.parametrize("m,k", [(1, 1), (1000, 777), (3, 4097)])
def test_ternary_gemv_matches_numpy_exactly_on_small_integer_data(device, schedule, m, k):
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k), device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


def test_ternary_gemv_vec4_weight_loads(device):
    schedule = Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=4, threads_per_row=8)
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=333, k=1000), device)  # 63 words -> rejected
    assert result.status is Status.INVALID_SCHEDULE
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=333, k=1020), device)  # 64 words, last one partial
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


def test_ternary_gemv_float_data_within_tolerance_for_large_k(device):
    problem = SPEC.problem(m=3, k=EXACT_K + 17)
    assert SPEC.tolerance(problem)[0] > 0
    assert not np.all(SPEC.generate(problem, 0)["x"] == np.round(SPEC.generate(problem, 0)["x"]))
    result = oracle.certify(SPEC, Schedule.of(workgroup_size=64, threads_per_row=4), problem, device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs < 1e-2


def test_ternary_gemv_hand_checked(device):
    out = ternary_gemv(device, [1, 2, 3, 4], [0x55, 0xAA], [2, 10], m=2, k=4)
    np.testing.assert_array_equal(out, [20.0, -100.0])


def test_ternary_gemv_unused_code_three_decodes_to_zero(device):
    # row 0: codes 3,1,3,2 -> 0,+1,0,-1 ; row 1: all code 3 -> 0
    row0 = 3 | (1 << 2) | (3 << 4) | (2 << 6)
    out = ternary_gemv(device, [1, 2, 3, 4], [row0, 0xFF], [1, 1], m=2, k=4)
    np.testing.assert_array_equal(out, [2.0 - 4.0, 0.0])


def test_ternary_gemv_ignores_codes_past_k(device):
    # all 16 codes are +1, but only the first 4 are inside the row
    out = ternary_gemv(device, [1, 2, 3, 4], [0x55555555], [1], m=1, k=4)
    np.testing.assert_array_equal(out, [10.0])


def test_pack_and_unpack_round_trip_low_bits_first():
    codes = np.array([[1, 2, 0, 1, 2, 2, 1, 0, 0, 0, 1, 1, 2, 0, 1, 2, 1]], np.int8)
    packed = pack_codes(codes)
    assert packed.shape == (1, 2)
    assert packed[0, 0] & 3 == 1 and (packed[0, 0] >> 2) & 3 == 2 and packed[0, 1] == 1
    np.testing.assert_array_equal(unpack_ternary(packed, 1, 17), np.where(codes == 2, -1, codes))


@pytest.mark.parametrize(
    "schedule,k,reason",
    [
        (Schedule.of(workgroup_size=64, vector_width=4), 777, "vector_width 4 does not divide the row word count"),
        (Schedule.of(workgroup_size=64, threads_per_row=3), 64, "threads_per_row 3 is not a power of two"),
        (Schedule.of(workgroup_size=32, threads_per_row=64), 64, "threads_per_row 64 does not divide workgroup_size"),
        (Schedule.of(workgroup_size=64, vector_width=2), 64, "vector_width 2 not in (1, 4)"),
        (Schedule.of(workgroup_size=64, tile=4), 64, "unknown knob 'tile'"),
    ],
)
def test_ternary_gemv_rejects_impossible_schedules_naming_the_knob(device, schedule, k, reason):
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=10, k=k), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert reason in result.message


def test_ternary_gemv_rejects_inputs_of_the_wrong_size(device):
    with pytest.raises(ValueError, match="w_packed must have 4 elements for m=2, k=20; got 2"):
        ternary_gemv(device, np.ones(20), [0x55, 0xAA], [2, 10], m=2, k=20)


class SignFlippedTernary(TernaryGemv):
    """A wrong reference: code 2 decoded as +1."""

    def reference(self, problem, schedule, inputs):
        t = np.abs(unpack_ternary(inputs["w_packed"], problem["m"], problem["k"])).astype(np.float64)
        return {"out": (inputs["scale"] * (t @ inputs["x"].astype(np.float64))).astype(np.float32)}


def test_ternary_gemv_wrong_reference_does_not_certify(device):
    result = oracle.certify(SignFlippedTernary(), SPEC.default, SPEC.problem(m=100, k=77), device)
    assert result.status is Status.WRONG_RESULT
    assert result.metrics.max_abs > 1.0


def test_ternary_gemv_folds_more_than_65535_workgroups(device):
    # 70,001 rows at one row per 32-thread workgroup: a 35001 x 2 grid with one spare group.
    schedule = Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=1, threads_per_row=32)
    problem = SPEC.problem(m=70_001, k=16)
    launch = SPEC.launch(schedule, problem, SPEC.generate(problem, 0))
    assert launch.groups == 70_001 and fold_groups(launch.groups) == (35_001, 2, 1)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


STAGED = [
    Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_row=1, stage_x=1),
    Schedule.of(workgroup_size=128, items_per_invocation=4, vector_width=1, threads_per_row=8, stage_x=1),
    Schedule.of(workgroup_size=256, items_per_invocation=2, vector_width=1, threads_per_row=32, stage_x=1),
]
STAGED_VEC4 = Schedule.of(workgroup_size=64, items_per_invocation=4, vector_width=4, threads_per_row=4, stage_x=1)


def dp4a(wg: int, rows: int, vw: int, tpr: int) -> Schedule:
    return Schedule.of(workgroup_size=wg, items_per_invocation=rows, vector_width=vw, threads_per_row=tpr, stage_x=3)


# The integer dot-product kernel (stage_x=3): TPR 1 and > 1, R 1 and > 1, vec4 loads.
DP4A = [dp4a(64, 1, 1, 1), dp4a(128, 2, 1, 4), dp4a(64, 4, 1, 32)]
DP4A_VEC4 = [dp4a(128, 2, 4, 8), dp4a(256, 1, 4, 2)]
# The multi-pass kernel (stage_x=4): planes pass, the loop, and (splits > 1) the split sum;
# more splits than tiles leaves some workgroups without tiles (they add zeros).
SPLIT = [split_schedule(64, 1, 1, 1, 1), split_schedule(128, 2, 1, 4, 2), split_schedule(64, 4, 1, 32, 8)]
SPLIT_VEC4 = [split_schedule(128, 2, 4, 8, 1), split_schedule(256, 4, 4, 4, 4)]


@pytest.mark.parametrize("schedule", STAGED + DP4A + SPLIT, ids=str)
@pytest.mark.parametrize("m,k", [(1, 1), (1000, 777), (3, 4097), (130, 8193)])
def test_ternary_gemv_staged_and_dp4a_match_numpy_exactly(device, schedule, m, k):
    # Small-integer x: dp4a's digit planes hold x exactly, so its sums are exact too. k =
    # 4097 and 8193 end in a partial tile (staged: 4096 values, dp4a: 2048); 777 is less than one.
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k), device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


def _tuned(wg, rows, vw, tpr, stage):
    knobs = {"items_per_invocation": rows, "vector_width": vw, "threads_per_row": tpr, "stage_x": stage}
    return Schedule.of(workgroup_size=wg, **knobs)


# Vec4 schedules of the kind farm tune picks on a GPU (stage_x=1-3 leaders, a sample of
# SPLIT_SPACE and its winners' layouts), at sizes of several tiles and workgroups.
TUNED = [
    _tuned(128, 1, 4, 1, 1), _tuned(256, 4, 4, 32, 1),
    _tuned(128, 2, 4, 1, 2), _tuned(256, 2, 4, 2, 2), _tuned(512, 2, 4, 4, 2),
    _tuned(256, 2, 4, 8, 3), _tuned(128, 2, 4, 4, 3), _tuned(256, 4, 4, 8, 3), _tuned(256, 1, 4, 4, 3),
    _tuned(256, 2, 4, 16, 3), _tuned(512, 2, 4, 8, 3), _tuned(256, 8, 4, 16, 3), _tuned(128, 8, 4, 8, 3),
    *(split_schedule(*s) for s in ((128, 2, 4, 2, 1), (128, 4, 4, 4, 2), (256, 2, 4, 2, 4), (256, 4, 4, 8, 8))),
    split_schedule(256, 4, 4, 8, 1), split_schedule(128, 4, 4, 8, 8),
]  # fmt: skip


@pytest.mark.parametrize("schedule", TUNED, ids=str)
def test_ternary_gemv_tuned_kinds_of_schedule_certify_exactly_at_several_tiles(device, schedule):
    for m, k in ((512, 4096), (1024, 2048)):  # small-integer data: exact
        result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k), device)
        assert result.status is Status.OK, result.message
        assert result.metrics.max_abs == 0.0


def test_ternary_gemv_staged_declares_its_x_tile_in_workgroup_bytes():
    staged = Schedule.of(workgroup_size=256, stage_x=1)
    assert SPEC.workgroup_bytes(staged, SPEC.problem(m=8, k=65536)) == 4 * 256 + 64 * 256  # 4096 x values
    assert SPEC.workgroup_bytes(staged, SPEC.problem(m=8, k=17)) == 4 * 256 + 64 * 4  # 2 words, rounded to 4
    assert SPEC.workgroup_bytes(Schedule.of(workgroup_size=256), SPEC.problem(m=8, k=65536)) == 4 * 256


def test_ternary_gemv_rejects_unknown_stage_x(device):
    result = oracle.certify(SPEC, Schedule.of(workgroup_size=64, stage_x=5), SPEC.problem(m=10, k=64), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert "stage_x 5 not in (0, 1, 2, 3, 4)" in result.message


@pytest.mark.parametrize(
    "schedule",
    [split_schedule(64, 1, 1, 1, 3), Schedule.of(workgroup_size=64, stage_x=3, splits=2)],
    ids=["splits-3", "splits-on-stage-3"],
)
def test_ternary_gemv_rejects_splits_outside_the_split_kernel(device, schedule):
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=10, k=64), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert "splits" in result.message and "stage_x=4" in result.message


def test_ternary_gemv_split_kernel_is_three_passes_with_scratch_and_deterministic(device):
    problem = SPEC.problem(m=300, k=9024)  # 564 words: 5 tiles over 4 splits of 2 (the last empty)
    inputs = SPEC.generate(problem, 0)
    launch = SPEC.launch(split_schedule(128, 2, 4, 8, 4), problem, inputs)
    assert [len(launch.prologue), len(launch.epilogue)] == [1, 1] and launch.groups == 10 * 4  # 32 rows per workgroup
    # tile sums (the default): the digit sums per tile and lane at binding 9, no per-word ones (6)
    assert [p.bindings for p in launch.passes()] == [(0, 4, 5, 7, 9), (1, 4, 5, 7, 8, 9), (2, 3, 4, 8)]
    scratch = [a.name for a in launch.args if a.data is None and not a.output]
    assert scratch == ["planes", "digit_sums", "tile_scales", "partials", "tile_sums"]
    one = SPEC.launch(split_schedule(128, 2, 4, 8, 1), problem, inputs)
    assert one.epilogue == [] and one.bindings == (1, 2, 3, 4, 5, 7, 9)
    # passes that don't depend on the schedule compile once (pass 1: once per threads_per_row
    # and vector_width, the lanes its tile sums are for); a trial binds once
    other = SPEC.launch(split_schedule(64, 4, 4, 8, 2), problem, inputs)
    pipelines = compile_launch(device, SPEC, split_schedule(128, 2, 4, 8, 4), launch)
    shared = compile_launch(device, SPEC, split_schedule(64, 4, 4, 8, 2), other)
    assert pipelines[0] is shared[0] and pipelines[2] is shared[2] and pipelines[1] is not shared[1]
    lanes = SPEC.launch(split_schedule(64, 4, 4, 4, 2), problem, inputs)
    assert compile_launch(device, SPEC, split_schedule(64, 4, 4, 4, 2), lanes)[0] is not pipelines[0]
    with prepare(device, SPEC, split_schedule(128, 2, 4, 8, 4), problem, inputs) as prepared:
        assert prepared.calls() is prepared.calls() and len(prepared.calls()) == 3
    first = run(device, SPEC, split_schedule(128, 2, 4, 8, 4), problem, inputs)["out"]
    again = run(device, SPEC, split_schedule(128, 2, 4, 8, 4), problem, inputs)["out"]
    np.testing.assert_array_equal(first, again)  # partial sums added in split order, not atomically


def test_ternary_gemv_schedules_keep_direct_keys_and_add_staged():
    schedules = SPEC.schedules()
    direct = [s for s in schedules if s.get("stage_x", 0) == 0]
    staged = [s for s in schedules if s.get("stage_x", 0) == 1]
    assert len(direct) == 4 * 3 * 2 * 4 and all(dict(s.knobs).keys() == {"threads_per_row"} for s in direct)
    assert len(staged) == 3 * 3 * 2 * 4 and min(s.workgroup_size for s in staged) == 64


def lut(wg: int, rows: int, vw: int, tpr: int) -> Schedule:
    return Schedule.of(workgroup_size=wg, items_per_invocation=rows, vector_width=vw, threads_per_row=tpr, stage_x=2)


# The pair-table kernel (stage_x=2): TPR 1 and > 1, R 1 and > 1, a padded table for TPR > 1.
LUT = [lut(64, 1, 1, 1), lut(128, 2, 1, 2), lut(256, 1, 1, 4), lut(128, 4, 1, 8)]
LUT_VEC4 = [lut(128, 1, 4, 1), lut(64, 2, 4, 2), lut(128, 4, 4, 8), lut(512, 1, 4, 4)]


@pytest.mark.parametrize("schedule", LUT, ids=str)
@pytest.mark.parametrize("m,k", [(1, 1), (1000, 777), (129, 1024), (3, 4097), (130, 8193)])
def test_ternary_gemv_pair_table_matches_numpy_exactly(device, schedule, m, k):
    # k = 777, 4097, 8193: not multiples of 16 nor of the 512-value tile (the last tile is
    # partial); m = 1000, 129, 130: not multiples of the 64-128 rows per workgroup.
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k), device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


@pytest.mark.parametrize(
    "schedule,reason",
    [
        (lut(40, 1, 1, 1), "workgroup_size 40 is not a multiple of 16"),
        (lut(256, 1, 4, 16), "threads_per_row 16 x vector_width 4 exceeds the 32 packed words of a stage_x=2 tile"),
        (lut(64, 4, 1, 1), "items_per_invocation 4 with threads_per_row 1 holds 128 weight words per thread"),
        (lut(64, 1, 4, 3), "threads_per_row 3 is not a power of two"),
    ],
)
def test_ternary_gemv_pair_table_rejects_impossible_layouts_naming_the_knob(device, schedule, reason):
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=10, k=1024), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert reason in result.message


def test_ternary_gemv_pair_table_declares_its_table_in_workgroup_bytes():
    problem = SPEC.problem(m=8, k=65536)
    assert SPEC.workgroup_bytes(lut(256, 1, 1, 1), problem) == 4 * 256 + 4 * 4096  # 256 pairs x 16 entries
    assert SPEC.workgroup_bytes(lut(64, 2, 1, 2), problem) == 4 * 64 + 4 * 32 * (128 + 16)  # padded per word
    assert SPEC.workgroup_bytes(lut(64, 2, 4, 2), problem) == 4 * 64 + 4 * 8 * (512 + 16)  # padded per vec4


@pytest.mark.parametrize(
    "stage,count,rows_per_workgroup",
    [(2, (30, 60), (64, 512)), (3, (60, 100), (16, 256)), (4, (50, 100), (8, 256))],
    ids=["lut", "dp4a", "split"],
)
def test_ternary_gemv_table_and_dp4a_spaces_are_valid_for_the_default_problems(
    device, stage, count, rows_per_workgroup
):
    schedules = [s for s in SPEC.schedules() if s.get("stage_x", 0) == stage]
    assert count[0] <= len(schedules) <= count[1] and len(set(schedules)) == len(schedules)
    for schedule in schedules:
        rows = schedule.workgroup_size * schedule.items_per_invocation // schedule.get("threads_per_row", 1)
        assert rows_per_workgroup[0] <= rows <= rows_per_workgroup[1], schedule
        for problem in (SPEC.problem(m=65536, k=16384), SPEC.problem(m=16384, k=65536)):
            SPEC.check(schedule, problem, device.profile)


# -- the staged, pair-table and dp4a kernels alike ----------------------------------------
@pytest.mark.parametrize("schedule", [STAGED_VEC4, *LUT_VEC4, *DP4A_VEC4, *SPLIT_VEC4], ids=str)
@pytest.mark.parametrize("m,k", [(333, 1020), (67, 4160), (5, 64), (129, 1024)])
def test_ternary_gemv_vec4_kernels_decode_64_codes_per_load_exactly(device, schedule, m, k):
    # 4160 = 260 words: 8 full pair-table tiles and a 4-word one, whose lanes past the row end clamp.
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k), device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


@pytest.mark.parametrize("schedule", [STAGED[1], LUT[1], DP4A[1], SPLIT[1]], ids=str)
def test_ternary_gemv_staged_pair_table_and_dp4a_float_data_within_tolerance_for_large_k(device, schedule):
    problem = SPEC.problem(m=3, k=EXACT_K + 17)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message
    assert 0 < result.metrics.max_abs < SPEC.tolerance(problem)[0]


@pytest.mark.parametrize("schedule", [DP4A[0], SPLIT[1]], ids=str)
def test_ternary_gemv_dp4a_error_is_bounded_by_each_tiles_largest_x(device, schedule):
    # Wide dynamic range: tile 0 holds values near 1e4 and near 1e-3, tile 1 only near 1e-3.
    # Each x is rounded to 2^-23 of its tile's largest |x| at most, so tile 1 keeps its
    # precision whatever tile 0 holds; the sum's error is bounded by the rounding of every x.
    rng = np.random.default_rng(1)
    k, m = 4096, 64
    x = (rng.standard_normal(k) * 1e-3).astype(np.float32)
    x[:8] = 1e4
    codes = rng.integers(0, 3, (m, k))
    scale = np.ones(m, np.float32)
    got = ternary_gemv(device, x, pack_codes(codes), scale, m, k, schedule)
    t = unpack_ternary(pack_codes(codes), m, k).astype(np.float64)
    want = t @ x.astype(np.float64)
    tile_max = np.repeat([np.abs(x[:2048]).max(), np.abs(x[2048:]).max()], 2048)
    bound = np.abs(t) @ (tile_max * 2.0**-23) + 4 * np.abs(t) @ np.abs(x) * 2.0**-24
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)
    # tile 1 alone (all weights of tile 0 zero): relative error at f32 level
    codes[:, :2048] = 0
    got = ternary_gemv(device, x, pack_codes(codes), scale, m, k, schedule)
    want = unpack_ternary(pack_codes(codes), m, k).astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("schedule", [DP4A[0], SPLIT[2]], ids=str)
def test_ternary_gemv_dp4a_propagates_non_finite_x(device, schedule):
    x = np.ones(64, np.float32)
    x[5] = np.nan
    out = ternary_gemv(device, x, np.full(4, 0x55555555, np.uint32), [1.0], 1, 64, schedule)
    assert np.isnan(out).all()
    x[5] = np.inf
    out = ternary_gemv(device, x, np.full(4, 0x55555555, np.uint32), [1.0], 1, 64, schedule)
    assert not np.isfinite(out).any()


@pytest.mark.parametrize(
    "schedule", [STAGED[0], STAGED[2], LUT[0], LUT[2], DP4A[0], DP4A[2], SPLIT[0], SPLIT[2]], ids=str
)
def test_ternary_gemv_staged_pair_table_and_dp4a_hand_checked_code_three_and_codes_past_k(device, schedule):
    np.testing.assert_array_equal(ternary_gemv(device, [1, 2, 3, 4], [0x55, 0xAA], [2, 10], 2, 4, schedule), [20, -100])
    row0 = 3 | (1 << 2) | (3 << 4) | (2 << 6)
    np.testing.assert_array_equal(ternary_gemv(device, [1, 2, 3, 4], [row0, 0xFF], [1, 1], 2, 4, schedule), [-2, 0])
    np.testing.assert_array_equal(ternary_gemv(device, [1, 2, 3, 4], [0x55555555], [1], 1, 4, schedule), [10])


def test_a_pass_binding_an_arg_the_launch_lacks_is_refused_before_compiling(device):
    from farm.catalog import check_launch

    problem = SPEC.problem(m=64, k=1024)
    launch = SPEC.launch(split_schedule(64, 2, 4, 4, 2), problem, SPEC.generate(problem, 0))
    launch.epilogue[0].bindings = (2, 3, 4, 10)
    with pytest.raises(ValueError, match=r"pass binds \(2, 3, 4, 10\), launch has 10 args"):
        check_launch(SPEC, split_schedule(64, 2, 4, 4, 2), launch, device.profile)


def test_packing_is_the_word_layout_and_dots_go_by_blocks():
    """pack_codes packs bytes (4 codes each) into little-endian words: the same words as
    16 codes shifted into a u32 one by one; ternary_dots equals the whole-matrix product."""
    from farm.catalog.ternary_gemv import row_words, ternary_dots

    rng = np.random.default_rng(21)
    for m, k in ((1, 1), (3, 17), (7, 16), (64, 1000)):
        codes = rng.integers(0, 4, (m, k)).astype(np.uint8)
        padded = np.zeros((m, row_words(k) * 16), np.uint64)
        padded[:, :k] = codes
        words = (padded.reshape(m, -1, 16) << (2 * np.arange(16, dtype=np.uint64))).sum(axis=2).astype(np.uint32)
        packed = pack_codes(codes)
        assert packed.dtype == np.uint32
        np.testing.assert_array_equal(packed, words)
        values = unpack_ternary(packed, m, k)
        np.testing.assert_array_equal(values, np.select([codes == 1, codes == 2], [1, -1], 0))
        x = rng.standard_normal(k).astype(np.float32)
        np.testing.assert_allclose(ternary_dots(packed, x, m, k, rows=3), values @ x.astype(np.float64), rtol=1e-12)
