"""Bad input never reaches the GPU: every ForgeRuntime method raises ValueError (or TypeError
for a dtype) naming the argument, the expected and the actual shape, and the runtime keeps
working afterwards."""

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm import ForgeRuntime


@pytest.fixture(scope="module")
def runtime(device, tmp_path_factory):
    return ForgeRuntime(db=f"sqlite:///{tmp_path_factory.mktemp('rtv') / 'absent.db'}", device=device)


def f32(*shape):
    return np.ones(shape, np.float32)


def huge(limit, *tail, dtype=np.float32):
    """A zero-stride array just over `limit` bytes: validation must reject it without copying."""
    row = int(np.prod(tail, dtype=np.int64)) * np.dtype(dtype).itemsize
    return np.broadcast_to(np.zeros((), dtype), (limit // row + 1, *tail))


# -- hand-written cases: the message names the argument, expected and actual --------------


@pytest.mark.parametrize(
    "method,args,error,words",
    [
        ("gemv", (np.ones((2, 3)), f32(3)), TypeError, ["a", "float32", "float64"]),
        ("gemv", (f32(2, 3), f32(4)), ValueError, ["x", "(3,)", "(4,)"]),
        ("gemv", (f32(2, 3), [1.0, 1.0, 1.0]), TypeError, ["x", "list"]),
        ("gemv", (f32(0, 3), f32(3)), ValueError, ["a", "non-empty", "(0, 3)"]),
        ("gemv", (f32(6), f32(3)), ValueError, ["a", "2-D", "(6,)"]),
        ("gemm", (f32(2, 3), f32(4, 2)), ValueError, ["b", "(3, n)", "(4, 2)"]),
        ("gemm", (f32(2, 3), np.ones((3, 2), np.float16)), TypeError, ["b", "float16"]),
        ("topk", (f32(10), 0), ValueError, ["k", "1..", "got 0"]),
        ("topk", (f32(10), 65), ValueError, ["k", "1..10", "65"]),
        ("topk", (f32(10), 2.0), TypeError, ["k", "integer", "float"]),
        ("topk", (f32(10), True), TypeError, ["k", "bool"]),
        ("topk", (f32(2, 5), 1), ValueError, ["x", "1-D", "(2, 5)"]),
        ("ternary_gemv", (f32(4), np.zeros(3, np.uint32), f32(2), 2, 4), ValueError, ["packed_w", "(2,)", "(3,)"]),
        ("ternary_gemv", (f32(4), np.zeros(2, np.int32), f32(2), 2, 4), TypeError, ["packed_w", "uint32", "int32"]),
        ("ternary_gemv", (f32(5), np.zeros(2, np.uint32), f32(2), 2, 4), ValueError, ["x", "(4,)", "(5,)"]),
        ("ternary_gemv", (f32(4), np.zeros(2, np.uint32), f32(2), 0, 4), ValueError, ["m", ">= 1", "0"]),
        ("p64_project", (np.zeros((2, 15), np.uint32), f32(16)), ValueError, ["records", "(2, 16)", "(2, 15)"]),
        ("p64_project", (np.zeros((2, 16), np.int64), f32(16)), TypeError, ["records", "uint32 or uint64"]),
        ("p64_project", (bytes(65), f32(16)), ValueError, ["records", "n*64", "65"]),
        ("p64_project", (np.zeros((1, 16), np.uint32), f32(15)), ValueError, ["weights", "(16,)", "(15,)"]),
        ("fft", (np.ones(12, np.complex64),), ValueError, ["signal", "power of two", "n=12"]),
        ("fft", (np.ones(2048, np.complex64),), ValueError, ["signal", "2..1024", "n=2048"]),
        ("fft", (f32(3, 9),), ValueError, ["signal", "even", "(3, 9)"]),
        ("fft", (np.ones(8, np.complex128),), TypeError, ["signal", "complex64", "complex128"]),
        ("fft", (np.ones(1, np.complex64),), ValueError, ["signal", "n=1"]),
        ("recurrent_attention", (f32(1, 2, 3, 4), f32(1, 3, 3, 5)), ValueError, ["value", "1 or 2", "(1, 3, 3, 5)"]),
        ("recurrent_attention", (f32(1, 2, 3, 4), f32(1, 1, 2, 5)), ValueError, ["value", "(1, 1, 3, 5)"]),
        (
            "recurrent_attention",
            (f32(1, 2, 3, 4), f32(1, 1, 3, 5), f32(1, 2, 5, 4)),
            ValueError,
            ["rho", "(1, 2, 4, 5)", "(1, 2, 5, 4)"],
        ),
        ("recurrent_attention", (f32(1, 2, 3, 4), f32(1, 1, 3, 5), None, f32(3)), ValueError, ["decay", "(2,)"]),
    ],
)
def test_bad_input_message_names_argument_expected_and_actual(runtime, method, args, error, words):
    with pytest.raises(error) as info:
        getattr(runtime, method)(*args)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"


def test_arrays_over_the_binding_limit_are_refused_before_any_copy(runtime):
    limit = runtime.profile.limit("max-storage-buffer-binding-size")
    with pytest.raises(ValueError, match=r"gemv: a of shape .* exceeds .*max-storage-buffer-binding-size"):
        runtime.gemv(huge(limit, 8), f32(8))
    with pytest.raises(ValueError, match=r"fft: signal .* exceeds"):
        runtime.fft(huge(limit, 64, dtype=np.complex64))
    with pytest.raises(ValueError, match=r"topk: x .* exceeds"):
        runtime.topk(huge(limit), 3)


def test_output_over_the_binding_limit_is_refused(runtime):
    side = int(np.sqrt(runtime.profile.limit("max-storage-buffer-binding-size") // 4)) + 1
    in_use = runtime.device.memory()["in_use"]
    with pytest.raises(ValueError, match=r"output c (of|would have) shape .*max-storage-buffer-binding-size"):
        runtime.gemm(f32(side, 1), f32(1, side))
    assert runtime.device.memory()["in_use"] == in_use


# -- property: random bad inputs, only ValueError/TypeError, the GPU never touched -----------

dims = st.integers(1, 6)
bad_dtypes = st.sampled_from([np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_, np.complex128])
not_arrays = st.sampled_from([None, "abc", 3, 2.5, [1.0, 2.0], (1, 2), {"a": 1}, b"\x00" * 4])
bad_counts = st.one_of(st.integers(-10, 0), st.sampled_from([2.5, "3", None, True, np.float32(2)]))


@st.composite
def broken(draw, good: np.ndarray, ranks: tuple[int, ...], limit: int):
    """`good` spoiled one way: wrong dtype, rank, emptiness, type, or size over `limit` bytes."""
    how = draw(st.sampled_from(["dtype", "rank", "empty", "type", "huge"]))
    if how == "dtype":
        return good.real.astype(draw(bad_dtypes.filter(lambda d: np.dtype(d) != good.dtype)))
    if how == "rank":
        rank = draw(st.integers(0, 5).filter(lambda r: r not in ranks))
        return np.ones(draw(st.lists(dims, min_size=rank, max_size=rank)), good.dtype)
    if how == "empty":
        shape = list(good.shape)
        shape[draw(st.integers(0, good.ndim - 1))] = 0
        return np.ones(shape, good.dtype)
    if how == "type":
        return draw(not_arrays)
    return huge(limit, *good.shape[1:], dtype=good.dtype)


def replace(draw, args: list, index: int, value) -> list:
    args = list(args)
    args[index] = value
    return args


@st.composite
def bad_gemv(draw, limit):
    m, n, d = draw(dims), draw(dims), draw(st.integers(1, 3))
    args = [f32(m, n), f32(n)]
    case = draw(st.sampled_from(["a", "x", "mismatch"]))
    if case == "mismatch":
        return [f32(m, n), f32(n + d)]
    i = 0 if case == "a" else 1
    return replace(draw, args, i, draw(broken(args[i], (2,) if i == 0 else (1,), limit)))


@st.composite
def bad_gemm(draw, limit):
    m, k, n, d = draw(dims), draw(dims), draw(dims), draw(st.integers(1, 3))
    args = [f32(m, k), f32(k, n)]
    case = draw(st.sampled_from(["a", "b", "mismatch"]))
    if case == "mismatch":
        return [f32(m, k), f32(k + d, n)]
    i = 0 if case == "a" else 1
    return replace(draw, args, i, draw(broken(args[i], (2,), limit)))


@st.composite
def bad_topk(draw, limit):
    n = draw(st.integers(1, 200))
    if draw(st.booleans()):
        return [draw(broken(f32(n), (1,), limit)), draw(st.integers(1, 8))]
    return [f32(n), draw(st.one_of(bad_counts, st.integers(n + 1, 5000)))]


@st.composite
def bad_ternary(draw, limit):
    m, k, d = draw(dims), draw(st.integers(1, 40)), draw(st.integers(1, 3))
    words = -(-k // 16)
    args = [f32(k), np.zeros((m, words), np.uint32), f32(m), m, k]
    case = draw(st.sampled_from(["x", "packed_w", "scale", "m", "k", "mismatch"]))
    if case in ("m", "k"):
        return replace(draw, args, 3 if case == "m" else 4, draw(bad_counts))
    if case == "mismatch":
        which = draw(st.sampled_from([0, 1, 2]))
        wrong = [f32(k + d), np.zeros((m, words + d), np.uint32), f32(m + d)][which]
        return replace(draw, args, which, wrong)
    i = {"x": 0, "packed_w": 1, "scale": 2}[case]
    return replace(draw, args, i, draw(broken(args[i], (1, 2) if i == 1 else (1,), limit)))


@st.composite
def bad_p64(draw, limit):
    n = draw(dims)
    wide = draw(st.booleans())
    records = np.zeros((n, 8), np.uint64) if wide else np.zeros((n, 16), np.uint32)
    case = draw(st.sampled_from(["records", "weights", "words", "bytes"]))
    if case == "records":
        return [draw(broken(records, (2,), limit)), f32(16)]
    if case == "weights":
        weights = draw(st.one_of(broken(f32(16), (1,), limit), dims.filter(lambda w: w != 16).map(f32)))
        return [records, weights]
    if case == "words":
        width = draw(st.integers(1, 20).filter(lambda w: w != (8 if wide else 16)))
        return [np.zeros((n, width), records.dtype), f32(16)]
    size = draw(st.integers(0, 300).filter(lambda b: b == 0 or b % 64))
    return [bytes(size), f32(16)]


@st.composite
def bad_fft(draw, limit):
    lead = draw(st.lists(dims, max_size=2))
    case = draw(st.sampled_from(["length", "odd", "array"]))
    if case == "length":
        n = draw(
            st.one_of(
                st.integers(1, 3000).filter(lambda v: v < 2 or v > 1024 or v & (v - 1)), st.sampled_from([2048, 4096])
            )
        )
        return [np.ones((*lead, n), np.complex64)]
    if case == "odd":
        return [f32(*lead, 2 * draw(dims) + 1)]
    return [draw(broken(np.ones((*lead, 8), np.complex64), tuple(range(1, 33)), limit))]


@st.composite
def bad_recurrent(draw, limit):
    b, h, t, l_dim, e = (draw(dims) for _ in range(5))
    d = draw(st.integers(1, 3))
    args = [f32(b, h, t, l_dim), f32(b, 1, t, e), None, None]
    case = draw(st.sampled_from(["query", "value", "rho", "decay", "value_shape", "rho_shape", "decay_shape"]))
    if case in ("query", "value"):
        i = 0 if case == "query" else 1
        return replace(draw, args, i, draw(broken(args[i], (4,), limit)))
    if case == "rho":  # None is valid for the optional rho and decay: spoil them otherwise
        return replace(draw, args, 2, draw(broken(f32(b, h, l_dim, e), (4,), limit).filter(lambda v: v is not None)))
    if case == "decay":
        return replace(draw, args, 3, draw(broken(f32(h), (1,), limit).filter(lambda v: v is not None)))
    if case == "value_shape":
        vh = draw(st.integers(2, 8).filter(lambda v: v != h))
        shape = draw(st.sampled_from([(b, vh, t, e), (b + d, 1, t, e), (b, 1, t + d, e)]))
        return replace(draw, args, 1, f32(*shape))
    if case == "rho_shape":
        return replace(draw, args, 2, f32(b, h, l_dim + d, e))
    return replace(draw, args, 3, f32(h + d))


BAD_INPUTS = {
    "gemv": bad_gemv,
    "gemm": bad_gemm,
    "topk": bad_topk,
    "ternary_gemv": bad_ternary,
    "p64_project": bad_p64,
    "fft": bad_fft,
    "recurrent_attention": bad_recurrent,
}
GOOD_CALLS = {
    "gemv": ((f32(2, 3), f32(3)), [3.0, 3.0]),
    "gemm": ((f32(2, 3), f32(3, 1)), [[3.0], [3.0]]),
    "topk": ((np.array([3, 9, 1, 7, 5], np.float32), 3), [9.0, 7.0, 5.0]),
    "ternary_gemv": ((f32(4), np.array([0x55, 0xAA], np.uint32), f32(2), 2, 4), [4.0, -4.0]),
    "p64_project": ((np.ones((1, 16), np.uint32), f32(16)), [16.0]),
    "fft": ((np.ones(4, np.complex64),), [4, 0, 0, 0]),
    "recurrent_attention": ((f32(1, 1, 2, 1), f32(1, 1, 2, 1)), None),
}


@pytest.mark.parametrize("method", sorted(BAD_INPUTS))
def test_random_bad_inputs_raise_only_value_or_type_errors(runtime, method):
    limit = runtime.profile.limit("max-storage-buffer-binding-size")
    calls = []

    @settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(args=BAD_INPUTS[method](limit))
    def check(args):
        calls.append(1)
        with pytest.raises((ValueError, TypeError)):
            getattr(runtime, method)(*args)

    def gpu_touched(*_args, **_kw):
        raise AssertionError(f"{method} reached the GPU with bad input")

    in_use = runtime.device.memory()["in_use"]
    with (
        mock.patch.object(runtime._caller, "plan", gpu_touched),
        mock.patch.object(runtime._pool, "take", gpu_touched),
        mock.patch.object(runtime.device, "upload", gpu_touched),
    ):
        check()
    assert len(calls) >= 1000
    assert runtime.device.memory()["in_use"] == in_use
    args, want = GOOD_CALLS[method]
    out = getattr(runtime, method)(*args)
    if want is not None:
        np.testing.assert_allclose(out, want, atol=1e-5)
    else:
        np.testing.assert_allclose(out[0], [[[[0.0], [1.0]]]])  # context: step 1 sees q0*v0 = 1


@pytest.mark.parametrize(
    "method,args,name",
    [
        ("gemv", (np.ma.masked_array(f32(2, 3), mask=True), f32(3)), "a"),
        ("gemm", (f32(2, 3), np.ma.masked_array(f32(3, 2))), "b"),  # even with nothing masked
        ("topk", (np.ma.masked_invalid(np.array([1, np.nan], np.float32)), 1), "x"),
        ("p64_project", (np.ones((1, 16), np.uint32), np.ma.masked_array(f32(16), mask=[1] * 16)), "weights"),
        ("p64_project", (np.ma.masked_array(np.ones((1, 8), np.uint64)), f32(16)), "records"),
        ("fft", (np.ma.masked_array(np.ones(8, np.complex64)),), "signal"),
        ("recurrent_attention", (f32(1, 1, 2, 3), f32(1, 1, 2, 4), np.ma.masked_array(f32(1, 1, 3, 4))), "rho"),
    ],
)
def test_masked_arrays_are_refused_not_unmasked(runtime, method, args, name):
    """A masked array is refused: its data would go to the GPU with its mask ignored."""
    with pytest.raises(TypeError, match=f"^{name}: .*masked array"):
        getattr(runtime, method)(*args)


# -- schedules, knobs, out= and reshape: the argument named, ValueError or TypeError ---------


@pytest.mark.parametrize("kernel", ["topk", "ternary_gemv", "p64_project", "gemm", "gemv", "fft", "recurrent"])
def test_a_bad_schedule_is_an_invalid_schedule_naming_the_knob(runtime, kernel):
    from farm import catalog
    from farm.schedule import InvalidSchedule, Schedule

    spec = catalog.get(kernel)
    problem = spec.certify_problems()[0]
    dims, inputs = problem.as_dict(), spec.generate(problem, 0)
    knobs = spec.default.as_dict()
    for knob, value in (("items_per_invocation", -1), ("vector_width", 0), ("workgroup_size", "64")):
        bad = Schedule(**{**{k: knobs[k] for k in ("workgroup_size", "items_per_invocation", "vector_width")},
                          knob: value}, knobs=spec.default.knobs)  # fmt: skip
        with pytest.raises(InvalidSchedule, match=f"{knob} must be an integer >= 1, got {value!r}"):
            runtime.run(kernel, dims, inputs, schedule=bad)
    with pytest.raises(TypeError, match="schedule: knob workgroup_size: expected an integer, got NoneType"):
        Schedule.of(workgroup_size=None)
    with pytest.raises(ValueError, match="schedule: knob tile_m: expected an integer, got 'big'"):
        Schedule.of(tile_m="big")


def test_asarray_refuses_a_masked_array_as_the_kernels_do(runtime):
    masked = np.ma.masked_array(f32(4), mask=[1, 0, 0, 0])
    with pytest.raises(TypeError, match="array: expected a plain numpy array, got a masked array"):
        runtime.asarray(masked)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix, on purpose
def test_out_must_be_a_plain_array(runtime):
    signal = np.ones((2, 8), np.complex64)
    with pytest.raises(TypeError, match="out: expected a plain numpy array, got numpy.matrix"):
        runtime.fft(signal, out=np.matrix(np.zeros((2, 8), np.complex64)))
    with pytest.raises(TypeError, match="out: expected a plain numpy array, got numpy.ma"):
        runtime.fft(signal, out=np.ma.masked_array(np.zeros((2, 8), np.complex64)))


@pytest.mark.parametrize("shape", [None, "4", 2.5, (2, None), (True, 8)])
def test_reshape_names_the_bad_dimension(runtime, shape):
    array = runtime.asarray(f32(4, 4))
    with pytest.raises(TypeError, match=r"reshape: shape\[[01]\]: expected an integer"):
        array.reshape(shape)


def test_an_unknown_adapter_names_the_argument_passed(monkeypatch):
    monkeypatch.setenv("FARM_ADAPTER", "0")
    with pytest.raises(ValueError, match=r"adapter='99': index 99 out of range"):
        ForgeRuntime(adapter="99")
    with pytest.raises(ValueError, match=r"no adapter matches adapter='no-such-gpu'"):
        ForgeRuntime(adapter="no-such-gpu")
    with pytest.raises(TypeError, match="adapter: expected an index or a name substring as a string, got int"):
        ForgeRuntime(adapter=0)
