"""ternary_gemv stage_x=4 (farm/catalog/ternary_split.py): its lane sums and early weight
loads give stage_x=3's outputs bit for bit with one split, on the exact test data and on
float data (where the f32 conversion of a lane's tile sums rounds, so only the same integers
per lane give the same bits), and the reference's exactly on the exact data with every
splits value (empty split ranges included), across ragged k, m not a multiple of a
workgroup's rows, threads_per_row 2-32, rows 2-8 and workgroups smaller and larger than a tile."""

import numpy as np
import pytest

from farm import catalog
from farm.catalog.ternary_gemv import pack_codes, split_schedule
from farm.catalog.ternary_split import planes_source
from farm.oracle.launch import run
from farm.schedule import InvalidSchedule, Schedule

SPEC = catalog.get("ternary_gemv")


# (wg, rows, vw, tpr, splits): large-GPU winners (wg128 rows4 vw4 tpr8, splits 1 and 8),
# workgroups of 256 and 512 (threads past the tile's 128 words stage nothing) and of 64 (two
# words each), threads_per_row 2, 4, 8 and 32, rows 2, 4 and 8, every splits value.
SCHEDULES = [
    split_schedule(128, 4, 4, 8, 1),
    split_schedule(128, 4, 4, 8, 8),
    split_schedule(256, 2, 4, 2, 2),
    split_schedule(512, 8, 4, 4, 4),
    split_schedule(128, 8, 4, 2, 4),
    split_schedule(64, 2, 1, 4, 2),
    split_schedule(64, 4, 1, 32, 8),
    split_schedule(256, 4, 1, 8, 1),
]
# k: 1020 (64 words, the last partial: one tile, so splits > 1 leave ranges empty), 4160
# (260 words: 3 tiles, the last of 4 words), 9019 (564 words, not a multiple of 16 codes:
# 5 tiles), 777 and 8193 (49 and 513 words: vector_width 1 only), 64 (one word-vector tile).
SHAPES = [(333, 1020), (67, 4160), (300, 9019), (1000, 777), (130, 8193), (5, 64)]


def float_inputs(m: int, k: int, positive: bool, seed: int) -> dict[str, np.ndarray]:
    """Normal x (all positive: no cancellation, every lane's tile sums large) with a wide
    range between tiles, codes 0-3 (3 decodes to 0), scales not powers of two."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(k).astype(np.float32) * np.float32(1e3) ** rng.integers(-1, 2, k).astype(np.float32)
    x = np.abs(x) if positive else x
    codes = rng.integers(0, 4, (m, k))
    return {"x": x, "w_packed": pack_codes(codes), "scale": rng.uniform(0.5, 2.0, m).astype(np.float32)}


def _stage_3(schedule: Schedule) -> Schedule:
    knobs = {k: v for k, v in schedule.as_dict().items() if k != "splits"}
    return Schedule.of(**knobs | {"stage_x": 3})


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
@pytest.mark.parametrize("m,k", SHAPES)
def test_the_split_kernel_gives_stage_x_3s_outputs_and_the_exact_reference(device, schedule, m, k):
    problem = SPEC.problem(m=m, k=k)
    try:
        SPEC.check(schedule, problem, device.profile)
    except InvalidSchedule:
        pytest.skip("vector_width 4 needs ceil(k/16) % 4 == 0")
    datasets = {
        "exact": SPEC.generate(problem, 0),
        "float": float_inputs(m, k, False, m + k),
        "positive": float_inputs(m, k, True, m * k),
    }
    for name, inputs in datasets.items():
        out = run(device, SPEC, schedule, problem, inputs)["out"]
        assert np.isfinite(out).all()
        if name == "exact":
            np.testing.assert_array_equal(out, SPEC.reference(problem, schedule, inputs)["out"])
        if schedule["splits"] == 1:  # more splits add the ranges' partial sums in another order
            plain = run(device, SPEC, _stage_3(schedule), problem, inputs)["out"]
            mismatch = np.flatnonzero(out.view(np.uint32) != plain.view(np.uint32))
            assert mismatch.size == 0, f"{name} data: rows {mismatch[:8]} differ from stage_x=3's"


def test_the_launch_binds_lane_sums_and_loads_weights_an_iteration_ahead():
    problem = SPEC.problem(m=300, k=9024)
    schedule = split_schedule(256, 4, 4, 8, 2)
    launch = SPEC.launch(schedule, problem, SPEC.generate(problem, 0))
    first, main, _ = launch.passes()
    names = [a.name for a in launch.args]
    sizes = {a.name: a.nbytes for a in launch.args}
    # pass 1 writes one vec4 per tile (5) and lane (8); pass 2 reads it and stages no digit sums
    assert names[9] == "tile_sums" and sizes["tile_sums"] == 16 * 5 * 8 and sizes["digit_sums"] == 16
    assert first.bindings == (0, 4, 5, 7, 9) and main.bindings == (1, 4, 5, 7, 8, 9)
    assert "let ts = tsum[tile * TPR + lane];" in main.source and "dsum" not in main.source + first.source
    assert "msum" not in main.source
    assert "const TPR: u32 = 8u;" in first.source and "const VW: u32 = 4u;" in first.source
    assert SPEC.workgroup_bytes(schedule, problem) == 4 * 256 + 3 * 16 * 144  # the planes, swizzle-padded
    # the loop a known count, one slot_of per vec4, the three-operation decode, a dot pair a statement
    assert "for (var i = 0u; i < TILE / VW / TPR; i++) {" in main.source and "let c = lane + i * TPR;" in main.source
    assert "let s0 = slot_of(q0);" in main.source and "(v0.x & 0xaaaaaaaau)" in main.source
    assert "a02 += dot4I8Packed(l0, pc.x) + dot4I8Packed(l2, pc.z);" in main.source
    # the first vectors before the tile loop, the next at the top of each iteration
    assert "    var n3 = w[wrow3 + min(first * TILE / VW + lane, nv - 1u)];" in main.source
    assert "n3 = w[wrow3 + min(t0 / VW + c + TPR, nv - 1u)];" in main.source
    assert "let v3 = w[wrow3 + min(t0 / VW + c, nv - 1u)];" not in main.source


def test_lane_sums_pass_depends_on_the_lanes_only():
    assert planes_source(8, 4) != planes_source(4, 4) != planes_source(4, 1)
