"""Wrong runtime inputs, each refused with a clear error before anything touches the GPU:

1. `rt.run(kernel, dims, inputs)` holds the dims to the kernel's and every input to the dtype
   and shape its spec declares for them (unchecked, a gemv whose dims disagree with its
   arrays returns wrong numbers, a float64 input is cast, and KeyError, AttributeError or
   OverflowError surface); the keyword form of a built-in says where schedule= goes;
2. `rt.tuned_schedule(kernel, problem)` takes a Problem or a dict of exactly the kernel's dims;
3. `rt.empty` and `DeviceArray.view` check shape (no int64 overflow) and dtype;
4. the constructor's numeric arguments are checked by name;
5. recurrent_attention's `out=` must be a (context, rho) pair.
"""

from __future__ import annotations

import re
from unittest import mock

import numpy as np
import pytest

import farm
from farm import ForgeRuntime, catalog
from farm.catalog import _REGISTRY, register
from farm.catalog.gemv import Gemv
from farm.runtime import declared
from farm.schedule import Problem, Schedule

F32 = np.float32


@pytest.fixture(scope="module")
def rt(device, tmp_path_factory):
    runtime = ForgeRuntime(db=f"sqlite:///{tmp_path_factory.mktemp('audit') / 'absent.db'}", device=device)
    yield runtime
    runtime.close()


@pytest.fixture
def no_gpu(rt):
    """Fails the test if a call gets as far as the runtime's GPU path."""
    with mock.patch.object(type(rt), "_run", side_effect=AssertionError("reached the GPU path")):
        yield


def ones(*shape, dtype=F32):
    return np.ones(shape, dtype)


def check_message(info, words):
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value!r}"


# -- 1. run(kernel, dims, inputs) ------------------------------------------------------------

A8x4, X4 = ones(8, 4), ones(4)
RUN_CASES = [
    ("gemv", {"m": 8, "n": 400}, {"a": A8x4, "x": X4}, ValueError, ["a", "(8, 400)", "(8, 4)", "m=8, n=400"]),
    ("gemv", {"m": 100, "n": 4}, {"a": A8x4, "x": X4}, ValueError, ["a", "(100, 4)", "(8, 4)"]),
    ("gemv", {"m": 8, "n": 4}, {"a": A8x4, "x": ones(5)}, ValueError, ["x", "(4,)", "(5,)"]),
    ("gemv", {"m": 8, "n": 4}, {"a": A8x4.astype(np.float64), "x": X4}, TypeError, ["a", "float32", "float64"]),
    ("gemv", {"m": 8, "n": 4}, {"b": A8x4, "x": X4}, TypeError, ["'b'", "a (float32[m, n])", "x (float32[n])"]),
    ("gemv", {"m": 8, "n": 4}, {"a": A8x4}, TypeError, ["missing input 'x'"]),
    ("gemv", {"m": 8, "n": 4}, {"a": A8x4.tolist(), "x": X4}, TypeError, ["a", "list"]),
    ("gemv", {"m": -8, "n": 4}, {"a": A8x4, "x": X4}, ValueError, ["dims['m']", "-8"]),
    ("gemv", {"m": 0, "n": 4}, {"a": A8x4, "x": X4}, ValueError, ["dims['m']", "0"]),
    ("gemv", {"m": True, "n": 4}, {"a": A8x4, "x": X4}, TypeError, ["dims['m']", "bool"]),
    ("gemv", {"m": 8.0, "n": 4}, {"a": A8x4, "x": X4}, TypeError, ["dims['m']", "float"]),
    ("gemv", {"m": 8}, {"a": A8x4, "x": X4}, ValueError, ["exactly the dims m, n", "missing n"]),
    ("gemv", {"m": 8, "n": 4, "k": 2}, {"a": A8x4, "x": X4}, ValueError, ["unknown 'k'"]),
    ("gemv", [8, 4], {"a": A8x4, "x": X4}, TypeError, ["dims", "list"]),
    ("gemv", {"m": 8, "n": 4}, [A8x4, X4], TypeError, ["inputs", "list"]),
    ("gemm", {"m": 2, "k": 3, "n": 4}, {"a": ones(2, 3), "b": ones(4, 3)}, ValueError, ["b", "(3, 4)", "(4, 3)"]),
    ("topk", {"n": 10, "k": 2}, {"x": ones(10, 1)}, ValueError, ["x", "(10,)", "(10, 1)"]),
    (
        "ternary_gemv",
        {"m": 2, "k": 20},
        {"x": ones(20), "w_packed": np.zeros(4, np.uint32), "scale": ones(2)},
        ValueError,
        ["w_packed", "(2, 2)", "uint32[m, ceil(k / 16)] with m=2, k=20", "(4,)"],
    ),
    (
        "p64_project",
        {"n": 2},
        {"records": np.zeros((2, 16), np.int32), "weights": ones(16)},
        TypeError,
        ["records", "uint32", "int32"],
    ),
    ("fft", {"n": 8, "batch": 2}, {"x": ones(2, 8)}, ValueError, ["x", "(2, 8, 2)", "got (2, 8)"]),
    (
        "recurrent",
        dict(B=1, H=2, VH=3, T=3, L=4, E=4),
        {"query": ones(1, 2, 3, 4), "value": ones(1, 3, 3, 4)},
        ValueError,
        ["VH", "1", "H"],
    ),
    (
        "recurrent",
        dict(B=1, H=2, VH=1, T=3, L=4, E=4),
        {"query": ones(1, 2, 3, 4), "value": ones(1, 1, 3, 4), "rho": ones(1, 2, 4, 5)},
        ValueError,
        ["rho", "(1, 2, 4, 4)", "(1, 2, 4, 5)"],
    ),
    (
        "recurrent",
        dict(B=1, H=2, VH=1, T=3, L=4, E=4),
        {"query": ones(1, 2, 3, 4), "rho_in": ones(1, 2, 4, 4)},
        TypeError,
        ["unknown input 'rho_in'", "rho (float32[B, H, L, E], optional)"],
    ),
]


RUN_IDS = [f"{case[0]}-{i}" for i, case in enumerate(RUN_CASES)]


@pytest.mark.parametrize("kernel,dims,inputs,error,words", RUN_CASES, ids=RUN_IDS)
def test_run_checks_dims_and_inputs_before_the_gpu(rt, no_gpu, kernel, dims, inputs, error, words):
    with pytest.raises(error) as info:
        rt.run(kernel, dims, inputs)
    check_message(info, words)


def test_run_checks_device_arrays_out_schedule_and_the_form(rt, no_gpu, device, tmp_path):
    dims = {"m": 8, "n": 4}
    with pytest.raises(TypeError, match="a: expected dtype float32, got int32"):
        rt.run("gemv", dims, {"a": rt.asarray(np.ones((8, 4), np.int32)), "x": X4})
    with pytest.raises(ValueError, match=r"a: expected shape \(8, 4\) .*got \(4, 8\)"):
        rt.run("gemv", dims, {"a": rt.asarray(ones(4, 8)), "x": X4})
    other = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    with pytest.raises(ValueError, match="a: DeviceArray .* belongs to another ForgeRuntime"):
        rt.run("gemv", dims, {"a": other.asarray(A8x4), "x": X4})
    other.close()
    with pytest.raises(TypeError, match="gemv: out names 'c', not among its outputs y"):
        rt.run("gemv", dims, {"a": A8x4, "x": X4}, out={"c": ones(8)})
    with pytest.raises(TypeError, match="recurrent: out: expected a dict of context, rho"):
        rt.run(
            "recurrent",
            dict(B=1, H=1, VH=1, T=1, L=1, E=4),
            {"query": ones(1, 1, 1, 1), "value": ones(1, 1, 1, 4)},
            out=ones(4),
        )
    with pytest.raises(TypeError, match="schedule: expected a farm.schedule.Schedule or None, got str"):
        rt.run("gemv", dims, {"a": A8x4, "x": X4}, schedule="fast")
    with pytest.raises(TypeError, match=r"either as run\('gemv', dims, inputs\) or by name, not both"):
        rt.run("gemv", dims, a=A8x4, x=X4)
    schedule = catalog.get("gemv").default
    with pytest.raises(TypeError, match=r"schedule= takes the dims form, run\('gemv', dims, inputs, schedule=\.\.\.\)"):
        rt.run("gemv", a=A8x4, x=X4, schedule=schedule)


def test_run_computes_with_checked_arrays_numpy_and_device(rt):
    rng = np.random.default_rng(1)
    a, x = rng.standard_normal((8, 5), dtype=F32), rng.standard_normal(5, dtype=F32)
    want = a.astype(np.float64) @ x
    schedule = Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=1)
    got = rt.run("gemv", {"m": np.int64(8), "n": 5}, {"a": a, "x": x}, schedule=schedule)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    on_device = rt.run("gemv", {"n": 5, "m": 8}, {"x": rt.asarray(x), "a": rt.asarray(a)})["y"]  # any order
    np.testing.assert_allclose(on_device.numpy(), want, rtol=1e-5, atol=1e-5)
    y = np.empty(8, F32)
    assert rt.run("gemv", {"m": 8, "n": 5}, {"a": a, "x": x}, out=y)["y"] is y  # one array for one output
    np.testing.assert_allclose(rt.run("gemv", a=a, x=x), want, rtol=1e-5, atol=1e-5)  # keyword form: rt.gemv


@pytest.mark.parametrize("kernel", sorted(declared.BUILTIN))
def test_builtin_declarations_match_what_each_spec_generates_and_launches(rt, kernel):
    """The declared inputs are exactly generate()'s arrays for every certify problem (so the
    dims form accepts them: `farm bench` passes them), and the outputs launch()'s."""
    spec = catalog.get(kernel)
    for problem in spec.certify_problems():
        inputs = spec.generate(problem, 0)
        dims, checked, _ = declared.check_call(rt, spec, problem.as_dict(), inputs, None)
        assert dims == problem.as_dict() and list(checked) == list(inputs)
        _, outputs, optional = declared.expected(spec, tuple(dims.values()))
        required = {n: v for n, v in inputs.items() if n not in optional}
        assert list(declared.check_call(rt, spec, dims, required, None)[1]) == list(required)
        launch = spec.launch(spec.default, problem, inputs)
        assert tuple(arg.name for arg in launch.args if arg.output) == outputs


def test_a_spec_without_declared_shapes_is_held_to_what_it_generates(rt):
    class Undeclared(Gemv):
        name = "audit_undeclared"

    spec = register(Undeclared())
    try:
        with pytest.raises(ValueError, match=r"a: expected shape \(3, 4\) \(as generate\(\) makes it"):
            rt.run("audit_undeclared", {"m": 3, "n": 4}, {"a": ones(4, 3), "x": X4})
        got = rt.run(spec, {"m": 3, "n": 4}, {"a": ones(3, 4), "x": X4})["y"]
        np.testing.assert_array_equal(got, np.full(3, 4.0))
    finally:
        _REGISTRY.pop("audit_undeclared", None)


DOUBLE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> params: vec4<u32>;
@compute @workgroup_size({{workgroup_size}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < params.x) { y[gid.x] = 2.0 * x[gid.x]; }
}
"""


def test_a_user_kernel_in_the_dims_form_is_held_to_its_declaration(rt):
    farm.Kernel("audit_double", DOUBLE, dims=("n",), inputs={"x": "f32[n]"}, outputs={"y": "f32[n]"},
                space={"workgroup_size": [32]}, grid="ceil(n / workgroup_size)", reference=lambda x: 2 * x,
                sizes=["n=8"])  # fmt: skip
    with pytest.raises(ValueError, match=r"x: expected shape \(9,\) \(float32\[n\] with n=9\), got \(8,\)"):
        rt.run("audit_double", {"n": 9}, {"x": ones(8)})
    with pytest.raises(TypeError, match="x: expected dtype float32, got float64"):
        rt.run("audit_double", {"n": 8}, {"x": ones(8, dtype=np.float64)})
    np.testing.assert_array_equal(rt.run("audit_double", {"n": 8}, {"x": ones(8)})["y"], np.full(8, 2.0))


# -- 2. tuned_schedule(kernel, problem) --------------------------------------------------------


def test_tuned_schedule_takes_a_problem_or_a_dict_of_exactly_the_kernels_dims(rt):
    gemm = catalog.get("gemm")
    want = rt.tuned_schedule("gemm", gemm.problem(m=64, k=32, n=16))
    assert rt.tuned_schedule("gemm", {"m": 64, "k": 32, "n": 16}) == want
    assert rt.tuned_schedule("gemm", {"n": 16, "m": 64, "k": np.int32(32)}) == want  # any order, numpy ints
    assert rt.tuned_schedule("gemm", Problem.of(n=16, k=32, m=64)) == want
    assert rt.tuned_schedule("gemm")[1] in ("tuned", "nearest", "same-device", "default")
    cases = [
        ({"m": 64}, ValueError, ["problem", "exactly the dims m, k, n", "missing k, n"]),
        (Problem.of(m=64), ValueError, ["problem", "missing k, n"]),
        (Problem.of(m=-64, k=2, n=2), ValueError, ["problem['m']", "-64"]),
        ({"m": 4, "k": 4, "n": 4, "batch": 2}, ValueError, ["unknown 'batch'"]),
        ({"m": 4, "k": 4.5, "n": 4}, TypeError, ["problem['k']", "float"]),
        ({"m": 4, "k": True, "n": 4}, TypeError, ["problem['k']", "bool"]),
        ("m=4,k=4,n=4", TypeError, ["problem", "dict of gemm's dims (m, k, n)", "farm.schedule.Problem", "str"]),
        ((4, 4, 4), TypeError, ["problem", "tuple"]),
    ]
    for problem, error, words in cases:
        with pytest.raises(error) as info:
            rt.tuned_schedule("gemm", problem)
        check_message(info, words)


# -- 3. empty and view -----------------------------------------------------------------------


def test_empty_checks_shape_and_dtype_and_never_overflows(rt, device, tmp_path):
    held = rt.memory()["held"]
    for shape in [(2**40, 2**40), (2**32, 2**32, 4), 2**62]:
        with pytest.raises(ValueError, match=r"empty: shape .* bytes\) exceeds .*max-storage-buffer-binding-size"):
            rt.empty(shape)
    cases = [
        ((3.5,), TypeError, ["shape", "float", "3.5"]),
        (((2, 2.5),), TypeError, ["shape[1]", "float"]),
        (((3, -1),), ValueError, ["shape[1]", "-1"]),
        (("3",), TypeError, ["shape", "str"]),
        ((None,), TypeError, ["shape", "NoneType"]),
        ((True,), TypeError, ["shape", "bool"]),
        ((3, object), TypeError, ["dtype", "numeric", "object"]),
        ((3, "U4"), TypeError, ["dtype", "<U4"]),
        ((3, None), TypeError, ["dtype", "None"]),
        ((3, "no such dtype"), TypeError, ["dtype", "'no such dtype'"]),
    ]
    for args, error, words in cases:
        with pytest.raises(error) as info:
            rt.empty(*args)
        check_message(info, words)
    assert rt.memory()["held"] == held  # nothing allocated
    for dtype in (np.bool_, np.int8, np.uint64, np.float16, np.complex64):  # what asarray takes
        with rt.empty((2, np.int64(3)), dtype) as array:
            assert (array.shape, array.dtype) == ((2, 3), np.dtype(dtype))
    small = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device, capacity_bytes=4096)
    with pytest.raises(ValueError, match=r"empty: shape \(2048,\) float32 \(8192 bytes\) exceeds capacity_bytes=4096"):
        small.empty(2048)
    small.close()


def test_view_refuses_dtypes_asarray_refuses(rt):
    with rt.empty(4, np.float64) as array:
        for dtype, shown in [(object, "object"), ("U2", "<U2"), ("datetime64[s]", "datetime64[s]"), (None, "None")]:
            with pytest.raises(TypeError, match=rf"view: dtype: expected a numeric dtype .*{re.escape(shown)}"):
                array.view(dtype)
        assert array.view(np.uint32).shape == (8,)


# -- 4. the constructor ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,error,words",
    [
        ({"capacity_bytes": "1G"}, TypeError, ["capacity_bytes", "'1G'"]),
        ({"capacity_bytes": 1.5}, TypeError, ["capacity_bytes", "1.5"]),
        ({"capacity_bytes": True}, TypeError, ["capacity_bytes", "True"]),
        ({"capacity_bytes": np.bool_(True)}, TypeError, ["capacity_bytes", "True"]),
        ({"capacity_bytes": -1}, ValueError, ["capacity_bytes", "-1"]),
        ({"request_tuning": "no"}, TypeError, ["request_tuning", "'no'"]),
        ({"request_tuning": 1}, TypeError, ["request_tuning", "1"]),
        ({"spin_wait_us": "5"}, ValueError, ["spin_wait_us", "'5'"]),
        ({"device": "cpu"}, TypeError, ["device", "str"]),
    ],
)
def test_constructor_arguments_are_checked_by_name_before_any_device_opens(kwargs, error, words):
    with mock.patch("farm.runtime.forge.choose_adapter", side_effect=AssertionError("opened a device")):
        with pytest.raises(error) as info:
            ForgeRuntime(db="sqlite:///:memory:", **kwargs)
    check_message(info, words)


def test_good_constructor_numbers_still_work(device):
    rt = ForgeRuntime(db="sqlite:///:memory:", device=device, capacity_bytes=np.int64(1 << 20), request_tuning=False)
    assert rt.memory()["capacity"] == 1 << 20 and isinstance(rt.memory()["capacity"], int)
    rt.close()


# -- 5. recurrent_attention's out= -----------------------------------------------------------


def test_recurrent_out_must_be_a_context_rho_pair(rt):
    q, v = ones(1, 2, 3, 4), ones(1, 1, 3, 5)
    pair = "pair (context, rho) of DeviceArrays or numpy arrays of shapes (1, 2, 3, 5) and (1, 2, 4, 5)"
    for out, shown in [(np.zeros(3), "ndarray of shape (3,) and dtype float64"),
                       ((ones(1, 2, 3, 5),) * 3, "a tuple of 3"), (rt.empty(3), "DeviceArray of shape (3,)"),
                       ({"context": None}, "dict")]:  # fmt: skip
        with pytest.raises(TypeError) as info:
            rt.recurrent_attention(q, v, out=out)
        check_message(info, ["out", pair, shown])
    context, rho = np.empty((1, 2, 3, 5), F32), np.empty((1, 2, 4, 5), F32)
    got = rt.recurrent_attention(q, v, out=[context, rho])
    assert got[0] is context and got[1] is rho
