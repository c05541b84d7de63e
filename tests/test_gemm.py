import numpy as np
import pytest

from farm import catalog
from farm.catalog.gemm import workgroup_bytes
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.schedule import InvalidSchedule, Problem, Schedule, Status

SPEC = catalog.get("gemm")


def gemm_schedule(bm, bn, tm, tn, bk=8, db=0, vw=1, threads=None, items=None, **speed) -> Schedule:
    return Schedule.of(
        **speed,
        workgroup_size=threads if threads is not None else (bm // tm) * (bn // tn),
        items_per_invocation=items if items is not None else tm * tn,
        vector_width=vw,
        tile_m=bm,
        tile_n=bn,
        reg_m=tm,
        reg_n=tn,
        tile_k=bk,
        double_buffer=db,
    )


SCHEDULES = [
    SPEC.default,
    gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4),
    gemm_schedule(128, 64, 8, 4, bk=8, db=1, vw=4),
    gemm_schedule(32, 64, 2, 4, bk=32, db=0, vw=1),
    gemm_schedule(16, 32, 1, 2, bk=16, db=1, vw=1),
    gemm_schedule(64, 32, 4, 2, bk=8, db=0, vw=4),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_gemm_matches_numpy_on_sizes_that_are_not_tile_multiples(device, schedule):
    problem = SPEC.problem(m=37, k=129, n=65)
    SPEC.check(schedule, problem, device.profile)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs < 1e-4


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (64, 64, 64), (3, 5, 130)])
def test_gemm_register_tiled_vec4_schedule_matches_numpy(device, m, k, n):
    schedule = gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4)
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k, n=n), device)
    assert result.status is Status.OK, result.message


@pytest.mark.parametrize(
    "schedule",
    [
        SPEC.default,
        gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4),
        gemm_schedule(64, 64, 8, 8, vw=4, shared_vec4=1, pad_shared=1),
    ],
    ids=str,
)
def test_gemm_hand_checked_2x3_times_3x2(device, schedule):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = np.array([[7, 8], [9, 10], [11, 12]], np.float32)
    out = run(device, SPEC, schedule, SPEC.problem(m=2, k=3, n=2), {"a": a, "b": b})
    np.testing.assert_array_equal(out["c"], [[58.0, 64.0], [139.0, 154.0]])


def test_gemm_folds_more_than_65535_workgroups(device):
    # 8×8 tiles over 4100×1100 outputs: 513 × 138 = 70,794 workgroups, folded into 2-D.
    problem = SPEC.problem(m=4100, k=3, n=1100)
    result = oracle.certify(SPEC, SPEC.default, problem, device)
    assert result.status is Status.OK, result.message


def test_gemm_rejects_workgroup_storage_over_the_adapter_limit(device):
    schedule = gemm_schedule(128, 128, 8, 8, bk=32, db=1, vw=4)
    need = workgroup_bytes(128, 128, 32, 1)
    assert need == 2 * 32 * 256 * 4
    limit = device.profile.limit("max-compute-workgroup-storage-size")
    assert need > limit
    problem = SPEC.problem(m=64, k=64, n=64)
    with pytest.raises(InvalidSchedule, match="max-compute-workgroup-storage-size"):
        SPEC.check(schedule, problem, device.profile)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.INVALID_SCHEDULE
    assert f"needs {need} bytes" in result.message


@pytest.mark.parametrize(
    "schedule,reason",
    [
        (gemm_schedule(64, 64, 3, 4, threads=256, items=12), "reg_m 3 does not divide tile_m 64"),
        (gemm_schedule(64, 60, 4, 8, threads=128, items=32), "reg_n 8 does not divide tile_n 60"),
        (gemm_schedule(64, 64, 4, 4, threads=128), "workgroup_size 128 != (tile_m/reg_m)*(tile_n/reg_n) = 256"),
        (gemm_schedule(64, 64, 4, 4, items=4), "items_per_invocation 4 != reg_m*reg_n = 16"),
        (gemm_schedule(64, 64, 4, 4, vw=2), "vector_width 2 not in (1, 4)"),
        (gemm_schedule(64, 6, 4, 1, vw=4), "vector_width 4 does not divide tile_n 6"),
        (
            gemm_schedule(64, 64, 8, 2, vw=4, shared_vec4=1),
            "shared_vec4 needs reg_m and reg_n multiples of 4 (reg_m=8, reg_n=2)",
        ),
        (gemm_schedule(64, 64, 8, 8, shared_vec4=2), "shared_vec4 2 not in (0, 1)"),
        (gemm_schedule(64, 64, 8, 8, pad_shared=4), "pad_shared 4 not in (0, 1)"),
        (gemm_schedule(64, 64, 8, 8, warp_cols=6), "warp_cols 6 not in (0, 4, 8, 16)"),
        (gemm_schedule(8, 8, 2, 2, warp_cols=4), "warp_cols 4 needs workgroup_size 16 a multiple of 32"),
        (
            gemm_schedule(64, 32, 2, 8, warp_cols=8),
            "warp_cols 8 needs tile_n/reg_n = 4 divisible by 8 and tile_m/reg_m = 32 divisible by 4",
        ),
        (
            gemm_schedule(16, 128, 4, 4, warp_cols=4),
            "warp_cols 4 needs tile_n/reg_n = 32 divisible by 4 and tile_m/reg_m = 4 divisible by 8",
        ),
    ],
    ids=[
        "reg_m",
        "reg_n",
        "threads",
        "items",
        "vector_width",
        "vec4_tile_n",
        "shared_vec4_reg",
        "shared_vec4_value",
        "pad_shared",
        "warp_cols_value",
        "warp_cols_threads",
        "warp_cols_grid",
        "warp_cols_rows",
    ],
)
def test_gemm_rejects_inconsistent_knobs_naming_the_knob(device, schedule, reason):
    with pytest.raises(InvalidSchedule) as info:
        SPEC.check(schedule, SPEC.problem(m=37, k=129, n=65), device.profile)
    assert info.value.reason == reason


def test_gemm_space_holds_only_consistent_schedules(device):
    schedules = SPEC.schedules()
    assert 200 <= len(schedules) <= 1300
    assert len(set(schedules)) == len(schedules)
    twins = [s for s in schedules if s.get("unroll_k", 0) and s not in SPEC.deep_schedules()]
    assert len(twins) == 330 and all(s.get("shared_vec4", 0) for s in twins)
    assert sum(bool(s.get("split_k", 0)) for s in twins) == 54  # split_k's 30, 24 of them with warp_cols 8 too
    assert SPEC.default in schedules
    problem = SPEC.problem(m=37, k=129, n=65)
    storage_limit = device.profile.limit("max-compute-workgroup-storage-size")
    for schedule in schedules:
        assert schedule.items_per_invocation == schedule["reg_m"] * schedule["reg_n"]
        need = SPEC.workgroup_bytes(schedule, problem)
        if need <= storage_limit:
            SPEC.check(schedule, problem, device.profile)
        else:
            with pytest.raises(InvalidSchedule, match="workgroup storage"):
                SPEC.check(schedule, problem, device.profile)


def test_gemm_problem_rejects_empty_dimensions():
    with pytest.raises(ValueError, match="'k': 0"):
        SPEC.problem(m=4, k=0, n=4)


def test_gemm_launch_rejects_input_of_the_wrong_shape(device):
    a = np.ones((3, 4), np.float32)
    b = np.ones((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"input b has shape \(5, 2\); expected \(4, 2\)"):
        SPEC.launch(SPEC.default, SPEC.problem(m=3, k=4, n=2), {"a": a, "b": b})


def test_gemm_wrong_reference_does_not_certify(device, monkeypatch):
    problem = Problem.of(m=37, k=129, n=65)
    real = SPEC.reference

    def off_by_one_term(problem, schedule, inputs):
        c = real(problem, schedule, inputs)["c"].copy()
        c[5, 7] += inputs["a"][5, 0] * inputs["b"][0, 7] + 1e-2
        return {"c": c}

    monkeypatch.setattr(SPEC, "reference", off_by_one_term)
    result = oracle.certify(SPEC, SPEC.default, problem, device)
    assert result.status is Status.WRONG_RESULT


# -- speed knobs (shared_vec4, pad_shared, warp_cols) ---------------------------------

# Every 3rd speed schedule (79 of 236: each knob combination, both buffer modes), plus
# accepted schedules outside the space: scalar global loads, warp_cols 4 and 16.
SPEED_SAMPLE = SPEC.speed_schedules()[::3] + [
    gemm_schedule(32, 32, 4, 4, vw=1, shared_vec4=1),
    gemm_schedule(64, 64, 4, 8, bk=16, db=1, vw=1, shared_vec4=1, pad_shared=1),
    gemm_schedule(64, 64, 4, 4, bk=8, vw=4, shared_vec4=1, warp_cols=4),
    gemm_schedule(64, 128, 4, 8, bk=8, db=1, vw=4, shared_vec4=1, pad_shared=1, warp_cols=16),
    gemm_schedule(64, 64, 2, 2, bk=32, vw=1, pad_shared=1, warp_cols=8),
]


@pytest.mark.parametrize("m,k,n", [(37, 129, 65), (1, 1, 1)])
@pytest.mark.parametrize("schedule", SPEED_SAMPLE, ids=str)
def test_gemm_speed_variants_certify_at_odd_sizes(device, schedule, m, k, n):
    problem = SPEC.problem(m=m, k=k, n=n)
    result = oracle.certify(SPEC, schedule, problem, device)
    limit = device.profile.limit("max-compute-workgroup-storage-size")
    if SPEC.workgroup_bytes(schedule, problem) > limit:
        assert result.status is Status.INVALID_SCHEDULE, result.message
    else:
        assert result.status is Status.OK, result.message


@pytest.mark.parametrize(
    "schedule",
    [
        gemm_schedule(64, 64, 4, 4, bk=8, db=1, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8),
        gemm_schedule(64, 64, 4, 4, bk=16, vw=4, shared_vec4=1, warp_cols=16),
    ],
    ids=str,
)
def test_gemm_warp_tiled_schedule_covers_several_workgroups_each_way(device, schedule):
    # 3×3 workgroups, the last row and column partial: every thread's rows and columns
    # under the warp-tile layout must land on distinct C elements.
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=150, k=33, n=140), device)
    assert result.status is Status.OK, result.message


def test_gemm_speed_knobs_at_zero_emit_the_original_kernel():
    problem = SPEC.problem(m=37, k=129, n=65)
    inputs = SPEC.generate(problem, 0)
    plain = gemm_schedule(64, 64, 8, 8, vw=4)
    zeros = gemm_schedule(64, 64, 8, 8, vw=4, shared_vec4=0, pad_shared=0, warp_cols=0)
    assert SPEC.launch(zeros, problem, inputs).source == SPEC.launch(plain, problem, inputs).source
    assert "var<workgroup> a_tile: array<f32, NBUF * BK * AS>;" in SPEC.launch(plain, problem, inputs).source


def test_gemm_shared_vec4_reads_vec4s_from_workgroup_memory():
    problem = SPEC.problem(m=64, k=64, n=64)
    inputs = SPEC.generate(problem, 0)
    scalar = SPEC.launch(gemm_schedule(64, 64, 8, 8, vw=4), problem, inputs).source
    vec4 = SPEC.launch(gemm_schedule(64, 64, 8, 8, vw=4, shared_vec4=1), problem, inputs).source
    # Per k step: TM + TN = 16 scalar reads, against TM/4 + TN/4 = 4 vec4 reads.
    # four loop bodies: single-buffered, double-buffered, and the two halves of double_buffer 2
    assert scalar.count("= a_tile[a_base") + scalar.count("= b_tile[b_base") == 16 * 4
    assert vec4.count("= a_tile[a_base") + vec4.count("= b_tile[b_base") == 4 * 4
    assert "var<workgroup> a_tile: array<vec4<f32>, NBUF * BK * AS / 4u>;" in vec4
    assert "b_tile[at / 4u] = v;" in vec4  # vec4 global loads land with one vec4 store


@pytest.mark.parametrize(
    "speed,pad",
    [({}, 0), ({"pad_shared": 1}, 1), ({"shared_vec4": 1}, 0), ({"shared_vec4": 1, "pad_shared": 1}, 4)],
)
def test_gemm_pad_shared_widens_each_a_row_in_workgroup_memory(speed, pad):
    schedule = gemm_schedule(64, 32, 8, 4, bk=16, db=1, vw=4, **speed)
    problem = SPEC.problem(m=64, k=64, n=64)
    assert SPEC.workgroup_bytes(schedule, problem) == workgroup_bytes(64, 32, 16, 1, pad) == 2 * 16 * (96 + pad) * 4
    assert f"const PAD: u32 = {pad}u;" in SPEC.launch(schedule, problem, SPEC.generate(problem, 0)).source


def test_gemm_speed_space_uses_each_knob_and_only_valid_layouts(device):
    speed = SPEC.speed_schedules()
    assert 300 <= len(speed) <= 400
    added = len(speed) + len(SPEC.split_schedules()) + len(SPEC.big_schedules()) + len(SPEC.unroll_schedules())
    added += len(SPEC.deep_schedules())
    original = SPEC.schedules()[:-added]
    assert not set(speed) & set(original)
    combos = {(s.get("shared_vec4", 0), s.get("pad_shared", 0), s.get("warp_cols", 0)) for s in speed}
    assert combos == {(1, 0, 0), (1, 1, 0), (0, 1, 0), (1, 1, 8)}
    for schedule in speed:
        if schedule.get("warp_cols", 0):
            assert schedule["tile_n"] // schedule["reg_n"] > schedule["warp_cols"]
        SPEC.check_knobs(schedule, SPEC.problem(m=37, k=129, n=65), device.profile)


def test_source_hash_covers_the_host_code_and_is_computed_once_per_spec(monkeypatch):
    spec, other = type(catalog.get("gemm"))(), type(catalog.get("gemm"))()  # fresh: nothing cached
    real = spec.host_source
    calls = []
    monkeypatch.setattr(spec, "host_source", lambda: calls.append(1) or real())
    first = spec.source_hash()
    assert spec.source_hash() == first == catalog.get("gemm").source_hash() and calls == [1]
    monkeypatch.setattr(other, "host_source", lambda: real() + "# one more line of emitter code")
    assert other.source_hash() != first


def test_reference_matmul_splits_rows_over_threads_when_blas_is_single_threaded(monkeypatch):
    # Ray workers run with OMP_NUM_THREADS=1: the float64 reference is split by rows over
    # the shared numpy pool there, and must equal the one-call product.
    from farm import parallel
    from farm.catalog.gemm import matmul64

    blocks = []
    pool = parallel.numpy_pool()

    class Spy:  # the real pool, counting the row blocks it is given
        def map(self, fn, starts):
            starts = list(starts)
            blocks.append(len(starts))
            return pool.map(fn, starts)

    rng = np.random.default_rng(3)
    a = rng.standard_normal((1030, 1024), dtype=np.float32)
    b = rng.standard_normal((1024, 1000), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    monkeypatch.setattr(parallel, "numpy_pool", lambda: Spy())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(parallel, "THREADS", 4)  # row blocks even on a 1-core machine
    np.testing.assert_allclose(matmul64(a, b), want, rtol=1e-12, atol=1e-10)
    assert blocks == [4]
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    np.testing.assert_array_equal(matmul64(a, b), want)
    assert blocks == [4]  # multi-threaded BLAS: one call, no split


def test_split_k_schedules_sum_their_ranges_partials_into_c(device):
    """split_k: one workgroup per (C tile, range of k's slices) into a scratch of partial
    tiles, then a pass that sums them in range order: certified like any schedule, also
    where a range is empty (k = 1 split 8 ways) or k's slices don't split evenly."""
    splits = SPEC.split_schedules()
    assert len(splits) == 30 and {s["split_k"] for s in splits} == {2, 4, 8}
    assert set(splits) <= set(SPEC.schedules()) and not set(splits) & set(SPEC.speed_schedules())
    problems = [*SPEC.certify_problems(), SPEC.problem(m=130, k=300, n=70)]
    for schedule in splits[::7]:
        for problem in problems:
            if not SPEC.invalid_reason(schedule, problem, device.profile):
                result = oracle.certify(SPEC, schedule, problem, device)
                assert result.status is Status.OK, f"{schedule} {problem}: {result.message}"
    problem = SPEC.problem(m=64, k=64, n=64)
    launch = SPEC.launch(splits[0], problem, SPEC.generate(problem, 0))
    assert [a.name for a in launch.args] == ["a", "b", "c", "params", "partials"]
    assert launch.args[-1].nbytes == 4 * splits[0]["split_k"] * 64 * 64 and launch.bindings == (0, 1, 3, 4)
    assert len(launch.epilogue) == 1 and "sum += partials[z * count + i];" in launch.epilogue[0].source
    with pytest.raises(InvalidSchedule, match="split_k 3"):
        SPEC.check(Schedule.of(**(splits[0].as_dict() | {"split_k": 3})), problem, device.profile)


def test_a_split_k_winner_runs_through_the_runtime(device, tmp_path):
    from farm import ForgeRuntime

    schedule = SPEC.split_schedules()[0]
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 72), dtype=np.float32), rng.standard_normal((72, 24), dtype=np.float32)
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    out = rt.run("gemm", {"m": 40, "k": 72, "n": 24}, {"a": a, "b": b}, schedule=schedule)
    np.testing.assert_allclose(out["c"], a.astype(np.float64) @ b, atol=1e-4, rtol=1e-4)
    rt.close()


@pytest.mark.parametrize("m,k,n", [(300, 70, 270), (37, 129, 65)])
@pytest.mark.parametrize("schedule", SPEC.big_schedules(), ids=str)
def test_gemm_big_tiles_certify_over_several_workgroups_and_a_partial_one(device, schedule, m, k, n):
    # 128x256 / 256x128 tiles, 8x16 / 16x8 a thread: 300x270 is 2-3 tiles each way, the
    # last partial, and k=70 leaves a partial slice; 37x65 is inside one tile.
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=m, k=k, n=n), device)
    assert result.status is Status.OK, result.message
    assert schedule in SPEC.schedules() and schedule["items_per_invocation"] == 128


UNROLLED = [
    gemm_schedule(64, 64, 4, 4, bk=16, db=2, vw=4),
    gemm_schedule(32, 64, 2, 4, bk=8, db=2, vw=1),
    gemm_schedule(64, 128, 8, 4, bk=16, db=2, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8),
]


@pytest.mark.parametrize("k", [1, 8, 16, 24, 129])  # one slice, an even and an odd count of them
@pytest.mark.parametrize("schedule", UNROLLED, ids=str)
def test_gemm_double_buffer_2_certifies_for_odd_and_even_slice_counts(device, schedule, k):
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=70, k=k, n=130), device)
    assert result.status is Status.OK, result.message


def test_gemm_double_buffer_2_with_split_k_sums_every_range(device):
    # k=160, tile_k 16: 10 slices in ranges of 3, 3, 3 and 1: ranges starting past slice 0
    # that reach the loop's second trip (t = s0 + 2), an odd count, and a one-slice range
    schedule = Schedule.of(**UNROLLED[2].as_dict(), split_k=4)
    result = oracle.certify(SPEC, schedule, SPEC.problem(m=64, k=160, n=128), device)
    assert result.status is Status.OK, result.message


def test_gemm_double_buffer_2_unrolls_the_slice_loop_by_two():
    problem = SPEC.problem(m=64, k=64, n=64)
    inputs = SPEC.generate(problem, 0)
    source = SPEC.launch(UNROLLED[0], problem, inputs).source
    assert "const STEP: u32 = 2u;" in source and "const NBUF: u32 = 2u;" in source
    assert (
        "const STEP: u32 = 1u;" in SPEC.launch(gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4), problem, inputs).source
    )
    assert SPEC.workgroup_bytes(UNROLLED[0], problem) == SPEC.workgroup_bytes(
        gemm_schedule(64, 64, 4, 4, bk=16, db=1, vw=4), problem
    )
    assert sum(s.get("double_buffer", 0) == 2 for s in SPEC.schedules()) > 100


# -- unroll_k: a slice's k steps written out ------------------------------------------

UNROLL_K = [
    gemm_schedule(64, 64, 8, 4, bk=16, db=2, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8),
    gemm_schedule(64, 128, 8, 4, bk=16, db=0, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8),
    gemm_schedule(128, 128, 8, 8, bk=8, db=1, vw=4, shared_vec4=1, pad_shared=1),
    gemm_schedule(32, 64, 2, 4, bk=8, db=0, vw=1, pad_shared=1),
    gemm_schedule(16, 32, 1, 2, bk=32, db=1, vw=1),
    gemm_schedule(128, 128, 8, 8, bk=16, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8, split_k=4),  # 1024^3's
]


@pytest.mark.parametrize("m,k,n", [(70, 129, 130), (1, 1, 1), (64, 48, 128)])
@pytest.mark.parametrize("schedule", UNROLL_K, ids=str)
def test_gemm_unroll_k_gives_the_loop_s_results_bit_for_bit(device, schedule, m, k, n):
    # The same fmas in the same order: only where the indices come from changes.
    problem = SPEC.problem(m=m, k=k, n=n)
    if SPEC.workgroup_bytes(schedule, problem) > device.profile.limit("max-compute-workgroup-storage-size"):
        pytest.skip("too much workgroup memory on this adapter")
    unrolled = Schedule.of(**schedule.as_dict(), unroll_k=1)
    inputs = SPEC.generate(problem, 5)
    np.testing.assert_array_equal(run(device, SPEC, unrolled, problem, inputs)["c"],
                                  run(device, SPEC, schedule, problem, inputs)["c"])  # fmt: skip
    assert oracle.certify(SPEC, unrolled, problem, device).status is Status.OK


def test_gemm_unroll_k_writes_every_k_step_with_constant_offsets(device):
    problem = SPEC.problem(m=64, k=64, n=64)
    inputs = SPEC.generate(problem, 0)
    schedule = Schedule.of(**UNROLL_K[1].as_dict(), unroll_k=1)  # 64x128, 8x4, bk 16, vec4 tiles, A rows padded
    source = SPEC.launch(schedule, problem, inputs).source
    assert "for (var kk" not in source and "kk" not in source
    # A's k-rows are (64 + 4) / 4 = 17 vec4s apart, B's 128 / 4 = 32; THM = 8, THN = 32
    assert "let a_base = buf * 272u + ty;" in source and "let b_base = buf * 512u + tx;" in source
    assert "let a_1 = a_tile[a_base + 263u];" in source  # step 15: 15 * 17 + 1 * 8
    assert "let b_0 = b_tile[b_base + 480u];" in source  # step 15: 15 * 32
    with pytest.raises(InvalidSchedule, match=r"unroll_k 2 not in \(0, 1\)"):
        SPEC.check(Schedule.of(**UNROLL_K[1].as_dict(), unroll_k=2), problem, device.profile)


@pytest.mark.parametrize("m,k,n", [(70, 129, 130), (64, 32, 128)])  # partial slices and tiles; one slice
@pytest.mark.parametrize("schedule", SPEC.deep_schedules(), ids=str)
def test_gemm_tile_k_32_schedules_certify(device, schedule, m, k, n):
    problem = SPEC.problem(m=m, k=k, n=n)
    if SPEC.workgroup_bytes(schedule, problem) > device.profile.limit("max-compute-workgroup-storage-size"):
        pytest.skip("too much workgroup memory on this adapter")
    assert schedule["tile_k"] == 32 and schedule["unroll_k"] == 1 and schedule in SPEC.schedules()
    assert oracle.certify(SPEC, schedule, problem, device).status is Status.OK
