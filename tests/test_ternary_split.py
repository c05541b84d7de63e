"""ternary_gemv stage_x=4's switches (TernaryGemv.tile_sums, TernaryGemv.prefetch,
farm/catalog/ternary_split.py; TernaryGemv.lean, stage_x=3's too): every combination gives the
plain kernel's outputs bit for bit, on the exact test data and on float data (where the f32 conversion of a lane's tile
sums rounds, so only the same integers per lane give the same bits), across ragged k, m
not a multiple of a workgroup's rows, every splits value (empty split ranges included),
threads_per_row 2-32, rows 2-8 and workgroups smaller and larger than a tile."""

import numpy as np
import pytest

from farm import catalog
from farm.catalog.ternary_gemv import TernaryGemv, pack_codes, split_schedule
from farm.catalog.ternary_split import planes_source
from farm.oracle.launch import run
from farm.schedule import InvalidSchedule, Schedule

SPEC = catalog.get("ternary_gemv")
# (tile_sums, prefetch, lean[, unroll[, chain[, ahead]]]); the first: plain (the kernel before them), the last: the
# catalog's (before it: session 20's catalog)
HOOKS = [(False, False, False), (True, False, False), (False, True, False), (True, True, False), (False, False, True),
         (True, True, True), (True, False, True, 2), (True, False, True, 4), (True, False, True, 1, True),
         (True, False, True, 2, True), (False, True, True, 1, True),
         (False, True, True, 1, True, True), (True, False, True), (True, False, True, 1, False, True)]  # fmt: skip
PLAIN = HOOKS[0]
_ARMS: dict[tuple, TernaryGemv] = {}


def arm(*hooks) -> TernaryGemv:
    """The spec with the switches (tile_sums, prefetch[, lean[, unroll[, chain[, ahead]]]]) set, trusted like the
    catalog's (the benchmark's arms)."""
    hooks = tuple(hooks) + (False, 1, False, False)[len(hooks) - 2 :]
    if hooks not in _ARMS:
        names = ("tile_sums", "prefetch", "lean", "unroll", "chain", "ahead")
        attrs = dict(zip(names, hooks, strict=True)) | {"runtime_checks": False}
        _ARMS[hooks] = type("Arm" + "".join(str(int(h)) for h in hooks), (TernaryGemv,), attrs)()
    return _ARMS[hooks]


# (wg, rows, vw, tpr, splits): the H200's winners (wg128 rows4 vw4 tpr8, splits 1 and 8),
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


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
@pytest.mark.parametrize("m,k", SHAPES)
def test_every_switch_gives_the_plain_kernels_outputs_bit_for_bit(device, schedule, m, k):
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
        outs = {hooks: run(device, arm(*hooks), schedule, problem, inputs)["out"] for hooks in HOOKS}
        plain = outs[PLAIN]
        assert np.isfinite(plain).all()
        for hooks, out in outs.items():
            mismatch = np.flatnonzero(out.view(np.uint32) != plain.view(np.uint32))
            assert mismatch.size == 0, f"{name} data, (tile_sums, prefetch, lean)={hooks}: rows {mismatch[:8]} differ"
        if name == "exact":
            np.testing.assert_array_equal(plain, SPEC.reference(problem, schedule, inputs)["out"])


DSUM, TSUM, MSUM = "> dsum: array<vec4<i32>>;", "> tsum: array<vec4<i32>>;", "var<workgroup> msum:"


def test_the_switches_shape_the_launch_and_the_source_hash():
    problem = SPEC.problem(m=300, k=9024)
    inputs = SPEC.generate(problem, 0)
    schedule = split_schedule(256, 4, 4, 8, 2)
    launches = {hooks: arm(*hooks).launch(schedule, problem, inputs) for hooks in HOOKS}
    for hooks, launch in launches.items():
        tile_sums, prefetch, lean, unroll, chain, ahead = hooks + (1, False, False)[len(hooks) - 3 :]
        unrolled = unroll > 1
        first, main, _ = launch.passes()
        names = [a.name for a in launch.args]
        sizes = {a.name: a.nbytes for a in launch.args}
        if tile_sums:  # pass 1 writes one vec4 per tile (5) and lane (8); pass 2 reads it, no msum
            assert names[9] == "tile_sums" and sizes["tile_sums"] == 16 * 5 * 8 and sizes["digit_sums"] == 16
            assert first.bindings == (0, 4, 5, 7, 9) and main.bindings == (1, 4, 5, 7, 8, 9)
            assert "let ts = tsum[tile * TPR + lane];" in main.source and DSUM not in main.source + first.source
            assert MSUM not in main.source and "ms = msum[s]" not in main.source
            assert "const TPR: u32 = 8u;" in first.source and "const VW: u32 = 4u;" in first.source
        else:
            assert len(names) == 9 and sizes["digit_sums"] == 16 * 5 * 128
            assert first.bindings == (0, 4, 5, 6, 7) and main.bindings == (1, 4, 5, 6, 7, 8)
            assert MSUM in main.source and "ms = msum[s]" in main.source and DSUM in main.source + first.source
            assert ("msum[s0] = nm0;" if prefetch else "msum[s] = dsum[at];") in main.source
            assert TSUM not in main.source + first.source
        # prefetch: registers loaded before the loop and after a tile's second barrier; 256
        # threads: those past the tile's 128 words stage nothing
        assert ("if (tile + 1u < last && lid < TILE) {" in main.source) is prefetch
        assert ("if (first < last && lid < TILE) {" in main.source) is prefetch
        assert ("for (var q = lid; q < TILE; q += WG) {" in main.source) is not prefetch
        assert ("var nm0 = vec4<i32>();" in main.source) is (prefetch and not tile_sums)
        vecs = 3 if tile_sums else 4  # workgroup memory per tile word: planes (and msum)
        assert arm(tile_sums, prefetch).workgroup_bytes(schedule, problem) == 4 * 256 + vecs * 16 * 144
        # lean: the loop a count, one slot_of per vec4, the decode's select
        assert ("for (var i = 0u; i < TILE / VW / TPR; i++) {" in main.source) is (lean and not unrolled)
        # unroll 2 and 4 with 4 vectors a lane a tile (tpr 8, vec4): every trip's weights loaded first
        assert (f"i += {unroll}u) {{" in main.source) is unrolled
        assert ("let v3_1 = w[wrow3 + min(t0 / VW + c1, nv - 1u)];" in main.source) is unrolled
        assert ("for (var c = lane; c < TILE / VW; c += TPR) {" in main.source) is not lean
        assert ("let s0 = slot_of(q0);" in main.source) is lean
        assert ("let c = lane + i * TPR;" in main.source) is (lean and not unrolled)
        assert ("(v0.x & 0xaaaaaaaau)" in main.source) is lean
        # chain: a dot a statement; otherwise a pair
        pair = "a02 += dot4I8Packed(l0, pc.x) + dot4I8Packed(l2, pc.z);"
        assert ("a02 += dot4I8Packed(l0, pc.x);" in main.source and pair not in main.source) is chain
        assert ("b31 += dot4U8Packed(l3, pb.w);" in main.source) is chain
        # ahead: the first vectors before the tile loop, the next at the top of each iteration
        assert ("    var n3 = w[wrow3 + min(first * TILE / VW + lane, nv - 1u)];" in main.source) is ahead
        assert ("n3 = w[wrow3 + min(t0 / VW + c + TPR, nv - 1u)];" in main.source) is ahead
        own_load = "let v3 = w[wrow3 + min(t0 / VW + c, nv - 1u)];"
        assert (own_load in main.source) is (not ahead and not unrolled)
    assert len({arm(*hooks).source_hash() for hooks in HOOKS}) == len(HOOKS)  # stored trials of one don't serve another
    # a workgroup of 64 stages two words per thread, with no guard
    small = arm(True, True).launch(split_schedule(64, 2, 1, 4, 2), problem, inputs).source
    assert "let at1 = (tile + 1u) * TILE + lid + 64u;" in small and "if (tile + 1u < last) {" in small
    assert "lid < TILE" not in small


def test_ahead_needs_the_lean_loop_of_one_vector():
    problem = SPEC.problem(m=300, k=9024)
    inputs = SPEC.generate(problem, 0)
    for hooks in ((True, False, False, 1, False, True), (True, False, True, 2, False, True)):
        with pytest.raises(ValueError, match="ahead needs lean and unroll 1"):
            arm(*hooks).launch(split_schedule(128, 4, 4, 8, 1), problem, inputs)


def test_lane_sums_pass_depends_on_the_lanes_only():
    assert planes_source(8, 4, True) != planes_source(4, 4, True) != planes_source(4, 1, True)
    assert planes_source(8, 4, False) == planes_source(2, 1, False)  # per-word sums: one pass for every schedule


def test_the_default_spec_has_tile_sums_and_lean_on_and_prefetch_off():
    assert SPEC.tile_sums and SPEC.lean and not SPEC.prefetch and not SPEC.runtime_checks


@pytest.mark.parametrize("knobs", [(128, 4, 4, 8), (64, 2, 1, 32), (256, 8, 4, 2)], ids=str)
def test_lean_gives_stage_x_3_the_same_outputs_bit_for_bit(device, knobs):
    wg, rows, vw, tpr = knobs
    knobs = {"items_per_invocation": rows, "vector_width": vw, "threads_per_row": tpr, "stage_x": 3}
    schedule = Schedule.of(workgroup_size=wg, **knobs)
    for m, k in ((333, 1020), (300, 9019), (67, 4160)):
        problem = SPEC.problem(m=m, k=k)
        if vw == 4 and -(-k // 16) % 4:
            continue
        inputs = float_inputs(m, k, False, m + k)
        plain, lean = (run(device, arm(False, False, lean), schedule, problem, inputs)["out"] for lean in (False, True))
        assert np.array_equal(plain.view(np.uint32), lean.view(np.uint32)), (m, k)
        assert "let s0 = slot_of(q0);" in arm(False, False, True).launch(schedule, problem, inputs).source
