"""ForgeRuntime's input checks that farm/runtime/forge.py makes before any work:

- gemm's output-size check comes before anything is packed into u32 parameters
  (a (2^19, 1)·(1, 2^19) product must not reach numpy's OverflowError);
- recurrent_attention: L > 2048 (MAX_L) and outputs over the binding limit are ValueErrors
  naming query/value (not InvalidSchedule, and never the invalid default run with 513
  state floats per thread: the call path does not run spec.check);
- p64_project takes uint64 records of any layout (Fortran order, strided, reversed: not
  numpy's "the last axis must be contiguous");
- ternary_gemv's buffer-limit error names the argument packed_w, not the kernel's w_packed;
- topk's k error says which schedule's block size was in force;
- a schedules path that is a directory is a ValueError, not FileNotFoundError("does not
  exist").
Plus a fuzz of those categories (cases counted, same runtime right afterwards).
"""

from __future__ import annotations

import numpy as np
import pytest
import test_runtime_fuzz as fuzz

from farm import ForgeRuntime, catalog
from farm.catalog.p64_project import project_records
from farm.catalog.recurrent import MAX_L, reference_recurrent


@pytest.fixture(scope="module")
def rt(device, tmp_path_factory):
    runtime = ForgeRuntime(db=f"sqlite:///{tmp_path_factory.mktemp('inputs') / 'absent.db'}", device=device)
    yield runtime
    runtime.close()


def zeros(*shape):
    """A zero-stride array of any size (no memory behind it)."""
    return np.broadcast_to(np.zeros((), np.float32), shape)


def test_gemm_output_too_large_for_u32_params_is_a_value_error(rt):
    with pytest.raises(ValueError, match=r"^a, b: the output c would have shape \(524288, 524288\)"):
        rt.gemm(np.ones((2**19, 1), np.float32), np.ones((1, 2**19), np.float32))


def test_recurrent_l_above_max_l_is_a_value_error_naming_query(rt):
    with pytest.raises(ValueError, match=rf"^query: expected L \(its last axis\) <= {MAX_L}.*\(1, 1, 1, {MAX_L + 1}\)"):
        rt.recurrent_attention(np.ones((1, 1, 1, MAX_L + 1), np.float32), np.ones((1, 1, 1, 4), np.float32))
    q = np.full((1, 1, 2, MAX_L), 0.5, np.float32)  # the largest L runs
    context, state = rt.recurrent_attention(q, np.ones((1, 1, 2, 1), np.float32))
    want_context, want_state = reference_recurrent(q, np.ones((1, 1, 2, 1), np.float32))
    np.testing.assert_allclose(context, want_context, rtol=1e-5)
    np.testing.assert_allclose(state, want_state, rtol=1e-5)


def test_recurrent_outputs_over_the_binding_limit_name_query_and_value(rt):
    limit = rt.profile.limit("max-storage-buffer-binding-size")
    heads, e = 4097, limit // (4 * 4096)  # value [1,1,1,E] is small; context [1,H,1,E] is not
    with pytest.raises(ValueError, match=r"^query, value: the output context would have shape"):
        rt.recurrent_attention(zeros(1, heads, 1, 1), zeros(1, 1, 1, e))


@pytest.mark.parametrize("layout", ["fortran", "strided", "reversed", "transposed"])
def test_p64_uint64_records_of_any_layout(rt, layout):
    words = np.random.default_rng(1).integers(0, 2**32, (5, 16), dtype=np.uint64).astype(np.uint32)
    wide = np.ascontiguousarray(words).view("<u8").reshape(5, 8)
    given = {
        "fortran": np.asfortranarray(wide),
        "strided": np.repeat(wide, 2, axis=1)[:, ::2],
        "reversed": np.ascontiguousarray(wide[::-1])[::-1],
        "transposed": np.ascontiguousarray(wide.T).T,
    }[layout]
    weights = np.linspace(-1, 1, 16, dtype=np.float32)
    got = rt.p64_project(given, weights)
    np.testing.assert_allclose(got, project_records(words, weights), atol=catalog.get("p64_project").atol)


def test_ternary_limit_error_names_packed_w(rt):
    limit = rt.profile.limit("max-storage-buffer-binding-size")
    m = limit // 4 + 1
    packed = np.broadcast_to(np.zeros((), np.uint32), (m, 1))
    with pytest.raises(ValueError, match=r"^ternary_gemv: packed_w of shape"):
        rt.ternary_gemv(np.ones(16, np.float32), packed, zeros(m), m, 16)


def test_schedules_path_that_is_a_directory_is_a_value_error(device, tmp_path):
    with pytest.raises(ValueError, match=f"schedules: {tmp_path} is a directory"):
        ForgeRuntime(schedules=tmp_path, device=device)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ForgeRuntime(schedules=tmp_path / "absent.json", device=device)


# -- a fuzz of the categories above ------------------------------------------------------------


def pending_case(rng, rt, limit):
    kind = int(rng.integers(0, 5))
    if kind == 0:  # gemm output over the limit
        k = int(rng.integers(1, 4))
        m = int(rng.integers(2**14, 2**20))
        n = limit // (4 * m) + int(rng.integers(1, 2**12))
        return fuzz.Case("gemm", (zeros(m, k), zeros(k, n)), f"output {m}x{n}", name="a")
    if kind == 1:  # recurrent L > MAX_L
        l_dim = int(rng.integers(MAX_L + 1, 4 * MAX_L))
        return fuzz.Case("recurrent_attention", (zeros(1, 1, 2, l_dim), zeros(1, 1, 2, 3)), f"L={l_dim}", name="query")
    if kind == 2:  # recurrent outputs over the limit
        heads = int(rng.integers(2**10, 2**13))
        e = limit // (4 * heads) + int(rng.integers(1, 64))
        return fuzz.Case(
            "recurrent_attention", (zeros(1, heads, 1, 1), zeros(1, 1, 1, e)), f"H={heads} E={e}", name="value"
        )
    if kind == 3:  # uint64 records of any layout
        n = int(rng.choice([1, 3, 33]))
        words = rng.integers(0, 2**32, (n, 16), dtype=np.uint64).astype(np.uint32)
        wide, how = fuzz.layout(rng, np.ascontiguousarray(words).view("<u8").reshape(n, 8))
        weights = fuzz.values(rng, (16,))
        want = lambda: project_records(words, weights)  # noqa: E731
        tol = (catalog.get("p64_project").atol, 1e-6)
        return fuzz.Case("p64_project", (wide, weights), f"uint64 {how}", want=want, tolerance=tol)
    m = limit // 4 + int(rng.integers(1, 1000))  # ternary packed_w over the limit
    packed = np.broadcast_to(np.zeros((), np.uint32), (m, 1) if rng.random() < 0.5 else (m,))
    return fuzz.Case("ternary_gemv", (np.ones(16, np.float32), packed, zeros(m), m, 16), f"m={m}", name="packed_w")


def test_fuzz_the_checks_forge_py_now_calls(rt):
    rng = np.random.default_rng(1652)
    limit = rt.profile.limit("max-storage-buffer-binding-size")
    cases = [pending_case(rng, rt, limit) for _ in range(300)]
    for case in cases:
        fuzz.run_case(rt, case)
    assert len(cases) >= 300 and sum(c.want is not None for c in cases) >= 40
    np.testing.assert_allclose(rt.gemm(np.ones((2, 3), np.float32), np.ones((3, 1), np.float32)), [[3.0], [3.0]])
