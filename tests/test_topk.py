import numpy as np
import pytest

from farm import catalog
from farm.catalog.topk import PAD, TopK, topk_blocks
from farm.gpu import fold_groups
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.schedule import Schedule, Status

SPEC = catalog.get("topk")
SCHEDULES = [
    SPEC.default,
    Schedule.of(workgroup_size=32, items_per_invocation=4, vector_width=1),
    Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=4),
    Schedule.of(workgroup_size=1024, items_per_invocation=8, vector_width=1),
]


def topk(device, values, k, schedule=SPEC.default) -> np.ndarray:
    x = np.asarray(values, np.float32)
    return run(device, SPEC, schedule, SPEC.problem(n=x.size, k=k), {"x": x})["out"]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (1000, 5), (4100, 32)])
def test_topk_matches_numpy(device, schedule, n, k):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=n, k=k), device)
    if n % schedule.vector_width:
        assert result.status is Status.INVALID_SCHEDULE, "vec4 loads need n % 4 == 0"
        return
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


def test_topk_generated_inputs_exercise_nan_inf_and_ties():
    x = SPEC.generate(SPEC.problem(n=4100, k=32), seed=0)["x"]
    bits = x.view(np.uint32)
    assert {0x7FC00000, 0xFFC00000, 0x7F800001} <= set(bits[np.isnan(x)].tolist())
    assert np.isposinf(x).any() and np.isneginf(x).any()
    assert (x == np.float32(1.5)).sum() > 100


def test_topk_hand_checked_single_tail_block(device):
    np.testing.assert_array_equal(topk(device, [3.0, 9.0, 1.0, 7.0, 5.0], 3), [9.0, 7.0, 5.0])
    np.testing.assert_array_equal(topk(device, [5.0, 1.0, 9.0, 2.0], 2), [9.0, 5.0])


def test_topk_concatenates_blocks_and_pads_the_tail(device):
    schedule = Schedule.of(workgroup_size=32)
    out = topk(device, np.arange(34, dtype=np.float32), 3, schedule)
    np.testing.assert_array_equal(out, [31.0, 30.0, 29.0, 33.0, 32.0, PAD])
    assert out[-1] == np.float32(-3.4028234663852886e38)


def test_topk_nan_sorts_largest_and_negative_infinity_below_padding(device):
    negative_nan = np.array([0xFFC00001], np.uint32).view(np.float32)[0]
    x = np.array([1.0, negative_nan, np.inf, -np.inf, -0.0, 2.0], np.float32)
    out = topk(device, x, 32, Schedule.of(workgroup_size=32))
    bits = out.view(np.uint32)
    assert bits[0] == 0x7FC00000  # every NaN comes back as the canonical quiet NaN, first
    np.testing.assert_array_equal(out[1:5], [np.inf, 2.0, 1.0, 0.0])
    np.testing.assert_array_equal(out[5:31], np.full(26, PAD))
    assert out[31] == -np.inf
    np.testing.assert_array_equal(out.view(np.uint32), topk_blocks(x, 32, 32).view(np.uint32))


def test_topk_ties_are_all_kept(device):
    out = topk(device, [2.0, 7.0, 7.0, 1.0, 7.0], 4)
    np.testing.assert_array_equal(out, [7.0, 7.0, 7.0, 2.0])


@pytest.mark.parametrize(
    "schedule,n,k,reason",
    [
        (Schedule.of(workgroup_size=64), 100, 65, "k=65 must be in 1..=block_size (workgroup_size 64)"),
        (Schedule.of(workgroup_size=64), 100, 0, "k=0 must be in 1..=block_size"),
        (Schedule.of(workgroup_size=96), 100, 4, "workgroup_size 96 is not a power of two"),
        (Schedule.of(workgroup_size=64, vector_width=4), 1001, 4, "vector_width 4 does not divide n=1001"),
        (Schedule.of(workgroup_size=2048), 4096, 4, "max-compute-invocations-per-workgroup"),
        (Schedule.of(workgroup_size=1024, items_per_invocation=16), 4096, 4, "max-compute-workgroup-storage-size"),
    ],
)
def test_topk_rejects_impossible_schedules_naming_the_limit(device, schedule, n, k, reason):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=n, k=k), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert reason in result.message


class AscendingTopK(TopK):
    """A wrong reference: the k largest, but in ascending order."""

    def reference(self, problem, schedule, inputs):
        out = super().reference(problem, schedule, inputs)["out"]
        return {"out": out.reshape(-1, problem["k"])[:, ::-1].ravel()}


class WrongBlockTopK(TopK):
    """A wrong reference: blocks of half the schedule's workgroup size."""

    def reference(self, problem, schedule, inputs):
        full = topk_blocks(inputs["x"], problem["k"], schedule.workgroup_size // 2)
        return {"out": full[: -(-problem["n"] // schedule.workgroup_size) * problem["k"]]}


@pytest.mark.parametrize("wrong", [AscendingTopK(), WrongBlockTopK()], ids=lambda s: type(s).__name__)
def test_topk_wrong_reference_does_not_certify(device, wrong):
    result = oracle.certify(wrong, SPEC.default, SPEC.problem(n=1000, k=5), device)
    assert result.status is Status.WRONG_RESULT
    assert result.metrics.max_abs > 0


def test_topk_default_problems_fit_the_adapter(device):
    problems = SPEC.default_problems(device.profile)
    assert problems and all(p["n"] * 4 <= device.profile.limit("max-storage-buffer-binding-size") for p in problems)
    flops, nbytes = SPEC.work(SPEC.problem(n=4096, k=8))
    assert (flops, nbytes) == (4096.0, 4.0 * (4096 + 64 * 8))


def test_topk_folds_more_than_65535_workgroups(device):
    # 65,537 blocks of 32 at one block per workgroup fold to a 32769 x 2 grid with one spare group.
    schedule = Schedule.of(workgroup_size=32)
    problem = SPEC.problem(n=32 * 65_537 - 10, k=2)
    launch = SPEC.launch(schedule, problem, SPEC.generate(problem, 0))
    assert launch.groups == 65_537 and fold_groups(launch.groups) == (32_769, 2, 1)
    result = oracle.certify(SPEC, schedule, problem, device)
    assert result.status is Status.OK, result.message


SELECT = [
    Schedule.of(workgroup_size=32, algorithm=1, threads_per_block=1),
    Schedule.of(workgroup_size=64, vector_width=4, algorithm=1, threads_per_block=4),
    Schedule.of(workgroup_size=128, items_per_invocation=2, algorithm=1, threads_per_block=2),
    Schedule.of(workgroup_size=1024, vector_width=4, algorithm=1, threads_per_block=4),
]


@pytest.mark.parametrize("schedule", SELECT, ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (1000, 5), (3001, 3), (4100, 32), (4096, 8)])
def test_topk_select_matches_numpy_bit_for_bit(device, schedule, n, k):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=n, k=k), device)
    if n % schedule.vector_width:
        assert result.status is Status.INVALID_SCHEDULE and "vector_width 4 does not divide" in result.message
        return
    assert result.status is Status.OK, result.message
    assert result.metrics.max_abs == 0.0


@pytest.mark.parametrize("threads", [1, 4])
def test_topk_select_nan_inf_and_signed_zero_order_like_the_reference(device, threads):
    negative_nan = np.array([0xFFC00001], np.uint32).view(np.float32)[0]
    x = np.array([1.0, negative_nan, np.inf, -np.inf, -0.0, 2.0, 0.0, -1.0], np.float32)
    schedule = Schedule.of(workgroup_size=32, vector_width=4, algorithm=1, threads_per_block=threads)
    out = topk(device, x, 32, schedule)
    expected = np.array([np.inf, 2.0, 1.0, 0.0, -0.0, -1.0], np.float32)
    assert out.view(np.uint32)[0] == 0x7FC00000  # the canonical quiet NaN, first
    np.testing.assert_array_equal(out[1:7].view(np.uint32), expected.view(np.uint32))  # +0.0 before -0.0
    assert out[-1] == -np.inf
    np.testing.assert_array_equal(out.view(np.uint32), topk_blocks(x, 32, 32).view(np.uint32))


def test_topk_select_hand_checked_blocks_and_ties(device):
    schedule = Schedule.of(workgroup_size=32, algorithm=1, threads_per_block=2)
    out = topk(device, np.arange(34, dtype=np.float32), 3, schedule)
    np.testing.assert_array_equal(out, [31.0, 30.0, 29.0, 33.0, 32.0, PAD])
    out = topk(device, [2.0, 7.0, 7.0, 1.0, 7.0], 4, schedule)
    np.testing.assert_array_equal(out, [7.0, 7.0, 7.0, 2.0])


def test_topk_select_agrees_with_bitonic_on_adversarial_orders(device):
    ascending = np.arange(4096, dtype=np.float32)
    for x in (ascending, ascending[::-1].copy(), np.full(4096, 1.5, np.float32)):
        bitonic = topk(device, x, 16, Schedule.of(workgroup_size=256))
        select = topk(device, x, 16, Schedule.of(workgroup_size=256, algorithm=1, threads_per_block=4))
        np.testing.assert_array_equal(select.view(np.uint32), bitonic.view(np.uint32))


@pytest.mark.parametrize(
    "schedule,k,reason",
    [
        (Schedule.of(workgroup_size=64, algorithm=1), 33, "algorithm 1 (select) keeps k <= 32 in registers; got k=33"),
        (Schedule.of(workgroup_size=64, algorithm=1, threads_per_block=8), 4, "threads_per_block 8 must be a power"),
        (Schedule.of(workgroup_size=64, algorithm=1, threads_per_block=3), 4, "threads_per_block 3 must be a power"),
        (Schedule.of(workgroup_size=64, threads_per_block=2), 4, "threads_per_block 2 applies to algorithm 1 only"),
        (Schedule.of(workgroup_size=64, algorithm=2), 4, "algorithm 2 not in (0, 1)"),
    ],
)
def test_topk_select_rejects_impossible_combinations_naming_the_knob(device, schedule, k, reason):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=1000, k=k), device)
    assert result.status is Status.INVALID_SCHEDULE
    assert reason in result.message


def test_topk_schedules_keep_the_bitonic_keys_and_add_select_without_workgroup_memory():
    schedules = SPEC.schedules()
    bitonic = [s for s in schedules if s.get("algorithm", 0) == 0]
    select = [s for s in schedules if s.get("algorithm", 0) == 1]
    assert len(bitonic) == 6 * 4 * 2 and all(not s.knobs for s in bitonic)
    assert SPEC.default in bitonic
    assert len(select) == 6 * 3 * 2 * 2 and len(set(select)) == len(select)
    problem = SPEC.problem(n=4096, k=8)
    assert {SPEC.workgroup_bytes(s, problem) for s in select} == {0}
    assert SPEC.workgroup_bytes(Schedule.of(workgroup_size=256, items_per_invocation=2), problem) == 2048


def _sorted_blocks(x, k, block):
    """The plain per-block reference: a full lexsort of every block (the kernel's order:
    NaN largest, -0.0 below +0.0), descending, first k."""
    from farm.catalog.topk import CANONICAL_NAN_BITS

    blocks = -(-x.size // block)
    padded = np.full(blocks * block, PAD, np.float32).reshape(blocks, block)
    padded.reshape(-1)[: x.size] = x
    order = np.lexsort((~np.signbit(padded), padded), axis=1)
    out = np.ascontiguousarray(np.take_along_axis(padded, order, axis=1)[:, ::-1][:, :k]).ravel()
    out.view(np.uint32)[np.isnan(out)] = CANONICAL_NAN_BITS
    return out


def test_reference_by_partition_equals_a_full_sort_bit_for_bit():
    """topk_blocks partitions order keys (O(n) a block size) instead of sorting every block:
    the same bits as sorting, with NaN payloads, ±Inf, ±0 and ties, full and partial blocks."""
    rng = np.random.default_rng(9)
    specials = np.array([0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0, 0x80000000], np.uint32)
    for n in (1, 7, 1000, 4100, 70001):
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.random(n) < 0.05] = 1.5
        marks = rng.random(n) < 0.05
        x.view(np.uint32)[marks] = rng.choice(specials, int(marks.sum()))
        for block in (32, 64, 1024):
            for k in (1, 5, 32):
                if k <= block:
                    got, want = topk_blocks(x, k, block), _sorted_blocks(x, k, block)
                    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"{n} {block} {k}")


def test_every_block_sizes_reference_from_one_pass_is_each_block_sizes_own():
    """topk_levels (what a tuning worker computes on a topk problem's first reference) gives
    bit for bit what topk_blocks gives one block size at a time, over specials, ties and
    lengths that leave partial and empty last blocks."""
    from farm.catalog.topk import SPECIAL_BITS, topk_levels

    rng = np.random.default_rng(3)
    for n in (1, 7, 31, 33, 1000, 4100, 70001):
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.random(n) < 0.05] = np.float32(1.5)
        marks = rng.random(n) < 0.02
        x.view(np.uint32)[marks] = SPECIAL_BITS[rng.integers(0, SPECIAL_BITS.size, int(marks.sum()))]
        for k in (1, 5, 32, 64):
            levels = topk_levels(x, k, TopK.space["workgroup_size"])
            assert sorted(levels) == [b for b in TopK.space["workgroup_size"] if b >= k]
            for block, out in levels.items():
                np.testing.assert_array_equal(out.view(np.uint32), topk_blocks(x, k, block).view(np.uint32))
    with pytest.raises(ValueError, match="must each divide the next"):
        topk_levels(np.ones(8, np.float32), 1, (32, 48))
