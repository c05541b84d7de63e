"""Recurrent attention, chunked forms (form=1: three passes over chunks of C steps; form=2:
one workgroup walking the chunks), against the float64 reference and the stepwise form, on
lavapipe-sized problems."""

import numpy as np
import pytest

from farm import catalog
from farm.catalog.recurrent import reference_recurrent, sweep_decay
from farm.catalog.recurrent_chunked import chunked_schedules, states_bytes
from farm.oracle import compare as oracle
from farm.oracle.launch import run
from farm.recurrent.cases import long_cases
from farm.recurrent.paths import fused_recurrent
from farm.recurrent.stepwise import stepwise_consistency, strict_summary
from farm.schedule import InvalidSchedule, Schedule, Status

SPEC = catalog.get("recurrent")
STEPWISE = SPEC.default


def chunked(wg=64, c=16, eb=16, form=1) -> Schedule:
    return Schedule.of(workgroup_size=wg, form=form, chunk_size=c, block_e=eb)


# Every chunk size and column block, at two workgroup sizes, in both forms (lavapipe's 32 KiB
# of workgroup memory refuses chunk 64 with 64 columns on the certify problems' L).
SCHEDULES = [
    chunked(wg, c, eb, form)
    for form in (1, 2)
    for wg in (64, 256)
    for c in (16, 32, 64)
    for eb in (16, 64)
    if (c, eb) != (64, 64)
]
FORMS = (1, 2)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=str)
def test_chunked_schedules_certify(device, schedule):
    for problem in SPEC.certify_problems():
        result = oracle.certify(SPEC, schedule, problem, device)
        assert result.status is Status.OK, f"{problem}: {result.message}"


@pytest.mark.parametrize(
    "dims",
    [
        dict(B=2, H=3, VH=3, T=37, L=19, E=36),  # partial last chunk, VH = H, odd L and E
        dict(B=1, H=2, VH=1, T=300, L=16, E=40),  # 19 chunks of 16: the scan's loads in batches of 8
        dict(B=1, H=1, VH=1, T=16, L=5, E=3),  # one full chunk, E below a column block
    ],
    ids=str,
)
@pytest.mark.parametrize("form", FORMS)
def test_chunked_matches_reference_over_many_chunks(device, dims, form):
    problem = SPEC.problem(**dims)
    for schedule in (chunked(64, 16, 16, form), chunked(256, 32, 64, form), chunked(128, 64, 32, form)):
        result = oracle.certify(SPEC, schedule, problem, device)
        assert result.status is Status.OK, f"{schedule}: {result.message}"


def test_chunked_without_rho_or_decay_equals_stepwise(device):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 2, 21, 8), dtype=np.float32)
    v = rng.standard_normal((1, 1, 21, 12), dtype=np.float32)
    for rho, decay in ((None, None), (None, sweep_decay(2))):
        want = reference_recurrent(q, v, rho, decay)
        for schedule in (STEPWISE, chunked(), chunked(form=2)):
            got = fused_recurrent(device, schedule, q, v, rho, decay)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4, err_msg=str(schedule))


@pytest.mark.parametrize("form", FORMS)
def test_chunked_strict_stepwise_consistency(device, form):
    """The seed's strict check: T one-step calls carrying rho equal the one-call result."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 24, 8), dtype=np.float32)
    v = rng.standard_normal((1, 1, 24, 16), dtype=np.float32)
    steps = stepwise_consistency(device, chunked(64, 16, 16, form), q, v, None, sweep_decay(2))
    summary = strict_summary(steps)
    assert summary["strict_pass"] is True, summary


@pytest.mark.parametrize("form", FORMS)
def test_chunked_nonfinite_where_numpy_is(device, form):
    """The chunked algebra may swap NaN and ±Inf (documented), but a non-finite input
    reaches exactly the outputs it reaches in numpy, and finite ones stay close."""
    rng = np.random.default_rng(16)
    b, h, t, l_dim, e = 1, 2, 21, 7, 8
    q = rng.standard_normal((b, h, t, l_dim)).astype(np.float32)
    v = rng.standard_normal((b, 1, t, e)).astype(np.float32)
    rho = (0.1 * rng.standard_normal((b, h, l_dim, e))).astype(np.float32)
    inf_v, inf_q, nan_rho = v.copy(), q.copy(), rho.copy()
    inf_v[0, 0, 1, 3], inf_v[0, 0, 18, 5] = np.inf, -np.inf
    inf_q[0, 1, 2, 6] = np.inf
    nan_rho[0, 0, 4, 2] = np.nan
    problem = SPEC.problem(B=b, H=h, VH=1, T=t, L=l_dim, E=e)
    for name, qq, vv, rr in (("value_inf", q, inf_v, rho), ("query_inf", inf_q, v, rho), ("rho_nan", q, v, nan_rho)):
        inputs = {"query": qq, "value": vv, "rho": rr, "decay": sweep_decay(h)}
        got = run(device, SPEC, chunked(64, 16, 16, form), problem, inputs)
        with np.errstate(invalid="ignore", over="ignore"):
            want = dict(zip(("context", "rho"), reference_recurrent(qq, vv, rr, sweep_decay(h)), strict=True))
        for out in ("context", "rho"):
            finite = np.isfinite(want[out])
            assert not finite.all(), f"{name} {out}: the case reaches no output"
            np.testing.assert_array_equal(np.isfinite(got[out]), finite, err_msg=f"{name} {out}")
            np.testing.assert_allclose(got[out][finite], want[out][finite], atol=1e-4, rtol=1e-4)


def test_chunked_knobs_are_checked(device):
    problem = SPEC.problem(B=1, H=8, VH=1, T=64, L=64, E=768)
    for bad, match in (
        (Schedule.of(workgroup_size=64, form=1, chunk_size=24, block_e=16), "chunk_size 24"),
        (Schedule.of(workgroup_size=64, form=1, chunk_size=16, block_e=128), "block_e 128"),
        (Schedule.of(workgroup_size=64, form=1, chunk_size=16, block_e=16, threads_per_column=4), "form 1"),
        (Schedule.of(workgroup_size=64, form=3), "form 3"),
        (Schedule.of(workgroup_size=64, form=2, chunk_size=16, block_e=16, chunk=8), "form 2"),
        (Schedule.of(workgroup_size=64, chunk_size=16), "form 0"),
    ):
        with pytest.raises(InvalidSchedule, match=match):
            SPEC.check(bad, problem, device.profile)
    big = SPEC.problem(B=64, H=64, VH=1, T=4096, L=64, E=768)
    with pytest.raises(InvalidSchedule, match="chunk states need"):
        SPEC.check(chunked(256, 16, 64), big, device.profile)
    assert states_bytes(problem, 16) == 4 * 8 * 4 * 64 * 768


def test_space_holds_both_forms_and_long_defaults():
    schedules = SPEC.schedules()
    assert set(chunked_schedules()) <= set(schedules)
    stepwise = [s for s in schedules if s.get("form", 0) == 0]
    assert all("form" not in s.as_dict() for s in stepwise)  # stored stepwise keys unchanged
    assert len(schedules) == len(stepwise) + 2 * 2 * 27  # each chunked form's 27, with and without the attention pass
    problems = [(p["B"], p["VH"], p["T"], p["E"]) for p in SPEC.default_problems(_GpuProfile())]
    for case in long_cases():
        assert (case.batch, case.value_heads, case.time, case.embd) in problems


class _GpuProfile:
    is_cpu = False


def test_chunk_states_are_held_from_the_runtimes_pool_and_count_in_its_capacity(device, tmp_path):
    """The chunked form's scratch (B·H·NC·L·E floats of chunk states) is a pool slab the
    call plan holds while it lives: a capacity below it is a ValueError naming the request,
    after a call it is all the pool holds, and closing the runtime gives it back."""
    from farm import ForgeRuntime
    from farm.catalog.recurrent_chunked import states_bytes
    from farm.runtime.pool import size_class

    dims = dict(B=1, H=2, VH=1, T=40, L=8, E=16)
    problem = SPEC.problem(**dims)
    inputs = SPEC.generate(problem, 0)
    schedule = chunked(64, 16, 16)
    slab = size_class(states_bytes(problem, 16), 1 << 30)  # 4 * 2 * 3 chunks * 8 * 16 = 3 KiB
    db = f"sqlite:///{tmp_path / 'absent.db'}"
    small = ForgeRuntime(db=db, device=device, capacity_bytes=slab - 4)
    with pytest.raises(ValueError, match=f"capacity_bytes={slab - 4}: a request of {slab} bytes does not fit"):
        small.run("recurrent", dims, inputs, schedule=schedule)
    small.close()
    rt = ForgeRuntime(db=db, device=device, capacity_bytes=1 << 22)
    out = rt.run("recurrent", dims, inputs, schedule=schedule)
    want = reference_recurrent(inputs["query"], inputs["value"], inputs["rho"], inputs["decay"])
    np.testing.assert_allclose(out["context"], want[0], atol=1e-4, rtol=1e-4)
    assert rt._caller.pool.held == slab  # numpy inputs and outputs went back; the plan keeps its scratch
    rt.close()
    assert rt._caller.pool.held == 0


def test_the_walked_form_runs_through_the_runtime_without_scratch(device, tmp_path):
    """form=2 binds only the stepwise form's buffers: the runtime runs it like any single
    dispatch (numpy and DeviceArrays), and its plan holds no scratch."""
    from farm import ForgeRuntime

    dims = dict(B=1, H=2, VH=1, T=40, L=8, E=16)
    problem = SPEC.problem(**dims)
    inputs = SPEC.generate(problem, 0)
    want = reference_recurrent(inputs["query"], inputs["value"], inputs["rho"], inputs["decay"])
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    out = rt.run("recurrent", dims, inputs, schedule=chunked(64, 16, 16, form=2))
    np.testing.assert_allclose(out["context"], want[0], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(out["rho"], want[1], atol=1e-4, rtol=1e-4)
    assert rt._caller.pool.held == 0
    rt.close()


@pytest.mark.parametrize("form", FORMS)
def test_the_attention_pass_computes_each_chunks_matrix_once_with_the_same_results(device, form):
    """attention_pass=1: one pass of B·H·NC workgroups writes every chunk's attention matrix
    to a scratch that the column blocks read, where each computed its own (48 copies at E=768
    with block_e 16); the same arithmetic in the same order, so the outputs are identical."""
    problem = SPEC.problem(B=2, H=3, VH=3, T=45, L=9, E=40)  # 3 chunks, the last partial; 3 column blocks
    inputs = SPEC.generate(problem, seed=7)
    plain = Schedule.of(workgroup_size=64, form=form, chunk_size=16, block_e=16)
    shared = Schedule.of(workgroup_size=64, form=form, chunk_size=16, block_e=16, attention_pass=1)
    passes = [len(SPEC.launch(s, problem, inputs).passes()) for s in (plain, shared)]
    assert passes[1] == passes[0] + 1
    scratch = [a for a in SPEC.launch(shared, problem, inputs).args if a.name == "attention"]
    assert [a.shape for a in scratch] == [(2 * 3 * 3 * 16 * 16,)]
    want, got = run(device, SPEC, plain, problem, inputs), run(device, SPEC, shared, problem, inputs)
    for out in ("context", "rho"):
        np.testing.assert_array_equal(got[out], want[out], err_msg=out)
    for bad, why in ((Schedule.of(**(shared.as_dict() | {"attention_pass": 2})), "attention_pass 2 not in"),
                     (Schedule.of(**(STEPWISE.as_dict() | {"attention_pass": 1})), "form 0")):  # fmt: skip
        with pytest.raises(InvalidSchedule, match=why):
            SPEC.check(bad, problem, device.profile)


@pytest.mark.parametrize("form", FORMS)
def test_the_attention_pass_runs_through_the_runtime_with_its_scratch_from_the_pool(device, tmp_path, form):
    """attention_pass=1's scratch (B·H·NC·C·C floats) is one more pool slab the call plan
    holds, next to form 1's chunk states; numpy and DeviceArray calls give the reference."""
    from farm import ForgeRuntime
    from farm.catalog.recurrent_chunked import attention_bytes
    from farm.runtime.pool import size_class

    dims = dict(B=1, H=2, VH=1, T=40, L=8, E=16)
    problem = SPEC.problem(**dims)
    inputs = SPEC.generate(problem, 0)
    schedule = Schedule.of(workgroup_size=64, form=form, chunk_size=16, block_e=16, attention_pass=1)
    rt = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    want = reference_recurrent(inputs["query"], inputs["value"], inputs["rho"], inputs["decay"])
    out = rt.run("recurrent", dims, inputs, schedule=schedule)
    on_device = rt.run("recurrent", dims, {k: rt.asarray(v) for k, v in inputs.items()}, schedule=schedule)
    for got in (out["context"], on_device["context"].numpy()):
        np.testing.assert_allclose(got, want[0], atol=1e-4, rtol=1e-4)
    scratch = size_class(attention_bytes(problem, 16), 1 << 30) + (
        size_class(states_bytes(problem, 16), 1 << 30) if form == 1 else 0
    )
    del on_device
    rt.synchronize()
    assert rt._caller.pool.held == scratch  # the arrays went back; the plan keeps its scratch
    rt.close()
    assert rt._caller.pool.held == 0
