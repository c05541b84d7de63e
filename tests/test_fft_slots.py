"""fft's workgroup layouts (farm.catalog.fft_slots): the pad layout (swizzle 4) and the
stages' folded slot arithmetic, against the whole `slot` expression it stands for."""

import re

import pytest
from test_fft import _wavefronts

from farm import catalog
from farm.catalog.fft_slots import PAD, Slots, swizzle_expr, swizzled
from farm.catalog.fft_stockham import stage_radices, stockham_stages
from farm.oracle import compare as oracle
from farm.schedule import Schedule, Status

SPEC = catalog.get("fft")
LENGTHS = [2**p for p in range(1, 11)]
RADICES = (2, 4, 8, 16, 32)


def _python(expr: str):
    python = re.sub(r"(\d+)u\b", r"\1", expr).replace("countOneBits", "popcount")
    return lambda i: eval(python, {"i": i, "popcount": lambda v: bin(v).count("1")})


@pytest.mark.parametrize("swizzle", [0, 1, 2, 3, PAD])
@pytest.mark.parametrize("radix", RADICES)
def test_the_host_evaluates_every_layout_as_the_wgsl_does(swizzle, radix):
    wgsl = _python(swizzle_expr(swizzle, radix))
    assert [swizzled(swizzle, radix, i) for i in range(1024)] == [wgsl(i) for i in range(1024)]


@pytest.mark.parametrize("radix", RADICES)
def test_the_pad_layout_gives_each_point_its_own_slot_in_n_plus_n_over_r(radix):
    for n in LENGTHS:
        places = [swizzled(PAD, radix, i) for i in range(n)]
        assert len(set(places)) == n and max(places) < Slots(PAD, radix).span(n) == n + n // radix


def _index(expr: str, bases: dict[str, int], slot) -> int:
    """The value of an emitted slot index: folded ('rb ^ 17u', 'wb + 68u', 'rb', with the
    base slots' values in `bases`) or whole ('slot(tr, j + 64u)': `slot` of j's value + 64)."""
    whole = re.fullmatch(r"slot\(tr, (\w+) \+ (\d+)u\)", expr)
    if whole:
        return slot(bases[whole[1]] + int(whole[2]))
    base, *rest = expr.split(" ")
    if not rest:
        return bases[base]
    op, k = rest
    return bases[base] ^ int(k[:-1]) if op == "^" else bases[base] + int(k[:-1])


@pytest.mark.parametrize("swizzle", [0, 1, 2, 3, PAD])
@pytest.mark.parametrize("radix", RADICES)
def test_folded_accesses_reach_the_slots_the_whole_expression_gives(swizzle, radix):
    # Every stage of every length, every unit j of transforms 0 and 2, every q: each emitted
    # index (the base slot combined with the host's constant, or the whole expression where
    # the pad layout can't fold) is slot(tr, point). Swizzles 0-3 always fold.
    slots = Slots(swizzle=swizzle, radix=radix)
    folded = 0
    for n in LENGTHS:
        span = slots.span(n)
        ns = 1
        for r in stage_radices(n, radix):
            stride = n // r
            (reads_before, reads), (writes_before, writes) = slots.reads(stride, r), slots.writes(ns, r)
            folded += bool(reads_before) + bool(writes_before)
            assert swizzle == PAD or (reads_before and writes_before)
            for tr in (0, 2):
                slot = lambda i, tr=tr, span=span: tr * span + swizzled(swizzle, radix, i)  # noqa: E731
                for j in range(stride):
                    o = (j // ns) * ns * r + j % ns
                    bases = {"j": j, "o": o, "rb": slot(j), "wb": slot(o)}
                    for q in range(r):
                        assert _index(reads[q], bases, slot) == slot(j + q * stride), (n, r, j, q, reads[q])
                        assert _index(writes[q], bases, slot) == slot(o + q * ns), (n, r, ns, j, q, writes[q])
            ns *= r
    assert folded > 0


def test_folded_stages_name_one_base_slot_and_immediate_offsets():
    source = stockham_stages(1024, 16, single=True, stage_table=2, slots=Slots(swizzle=PAD, radix=16))
    assert "let wb = slot(tr, o);" in source and "s0[wb + 17u] = y1;" in source  # first stage: 16j + q
    assert "let rb = slot(tr, j);" in source and "v1 = s0[rb + 68u];" in source  # j + 64: 64 + 4 pads
    assert "slot(tr, j + " not in source and "slot(tr, o + " not in source


@pytest.mark.parametrize("radix,reads_take", [(4, 2), (8, 2), (16, 1), (32, 1)])
def test_the_pad_layout_makes_the_first_stage_writes_conflict_free(radix, reads_take):
    # At n = 1024: the first stage's unit j writes r·j + q, the next stage reads j + q·n/r;
    # consecutive lanes are consecutive units. The writes land (r + 1)·j apart: one wavefront
    # (unpadded: min(r, 16)). The reads cross a pad slot every r lanes: radix 16 and 32 within
    # a half warp at most once, in one wavefront; radix 4 and 8 take two (swizzle 2 is theirs).
    n = 1024
    writes = [[radix * j + q for j in range(32)] for q in range(radix)]
    reads = [[j + q * n // radix for j in range(32)] for q in range(radix)]
    assert _wavefronts(swizzle_expr(PAD, radix), writes) == 1
    assert _wavefronts(swizzle_expr(0, radix), writes) == min(radix, 16)
    assert _wavefronts(swizzle_expr(PAD, radix), reads) == reads_take


PAD_SCHEDULES = [
    Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=2, stockham=16, swizzle=PAD, single_buffer=1,
                stage_twiddles=2),  # fmt: skip
    Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=2, stockham=32, swizzle=PAD, single_buffer=1),
    Schedule.of(workgroup_size=128, items_per_invocation=3, vector_width=2, stockham=8, swizzle=PAD, stage_twiddles=1),
    Schedule.of(workgroup_size=256, items_per_invocation=2, vector_width=1, stockham=4, swizzle=PAD),
]


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("schedule", PAD_SCHEDULES, ids=str)
def test_pad_schedules_certify_for_every_power_of_two_length(device, schedule, n):
    problem = SPEC.problem(n=n, batch=5)  # partial last workgroups where items > 1
    result = oracle.certify(SPEC, schedule, problem, device)
    if SPEC.workgroup_bytes(schedule, problem) > device.profile.limit("max-compute-workgroup-storage-size"):
        assert result.status is Status.INVALID_SCHEDULE, result.message
    else:
        assert result.status is Status.OK, result.message


def test_pad_schedules_take_the_pad_slots_in_workgroup_memory():
    problem = SPEC.problem(n=1024, batch=4)
    schedule = PAD_SCHEDULES[0]
    assert SPEC.workgroup_bytes(schedule, problem) == 8 * (1024 + 64)
    source = SPEC.launch(schedule, problem, SPEC.generate(problem, 0)).source
    assert "var<workgroup> s0: array<vec2<f32>, T * 1088u>;" in source
    assert "return tr * 1088u + (i + (i >> 4u));" in source


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=2, stockham=16, swizzle=1, single_buffer=1,
                    stage_twiddles=2),  # fmt: skip
        Schedule.of(workgroup_size=64, items_per_invocation=2, vector_width=2, stockham=32, swizzle=3, single_buffer=1),
        Schedule.of(workgroup_size=256, items_per_invocation=2, vector_width=2, stockham=4, swizzle=2),
        Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, stockham=8, swizzle=0),
        Schedule.of(workgroup_size=128, items_per_invocation=1, vector_width=2, stockham=8, swizzle=PAD),
    ],
    ids=str,
)
def test_folded_stages_certify_with_each_swizzle(device, schedule):
    result = oracle.certify(SPEC, schedule, SPEC.problem(n=1024, batch=5), device)
    assert result.status is Status.OK, result.message
