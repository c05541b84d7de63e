"""`out=` with numpy arrays: a numpy call writes its result into the caller's arrays (no
fresh output array, whose pages fault on first touch) and returns them; what can't take
the result is refused naming why, before anything reaches the GPU."""

import numpy as np
import pytest
from runtime_cases import f32, method_cases

from farm import ForgeRuntime


@pytest.fixture
def rt(device, tmp_path):
    runtime = ForgeRuntime(db=f"sqlite:///{tmp_path / 'absent.db'}", device=device)
    yield runtime
    runtime.close()


@pytest.mark.parametrize("method", sorted(method_cases(recurrent_state=True)))
def test_every_method_fills_numpy_out_arrays_and_returns_them(rt, method):
    args, kwargs = method_cases(recurrent_state=True)[method]
    want = getattr(rt, method)(*args, **kwargs)
    wants = want if isinstance(want, tuple) else (want,)
    outs = tuple(np.full_like(w, np.nan) for w in wants)
    got = getattr(rt, method)(*args, **kwargs, out=outs if isinstance(want, tuple) else outs[0])
    gots = got if isinstance(got, tuple) else (got,)
    for g, o, w in zip(gots, outs, wants, strict=True):
        assert g is o
        np.testing.assert_array_equal(g, w)
    again = getattr(rt, method)(*args, **kwargs, out=outs if isinstance(want, tuple) else outs[0])  # reused
    for g, w in zip(again if isinstance(again, tuple) else (again,), wants, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: np.empty(8, np.float32), ValueError, r"out: expected a numpy array of shape \(9,\) and dtype float32"),
        (lambda: np.empty(9, np.float64), ValueError, r"dtype float32, got \(9,\) float64"),
        (lambda: np.empty(18, np.float32)[::2], ValueError, "C-contiguous and writeable"),
        (lambda: np.frombuffer(bytes(36), np.float32), ValueError, "C-contiguous and writeable"),
        (lambda: [0.0] * 9, TypeError, "out: expected a numpy array or a DeviceArray, got list"),
    ],
    ids=["shape", "dtype", "strided", "read-only", "list"],
)
def test_a_numpy_out_that_cannot_take_the_result_is_refused(rt, make, error, message):
    with pytest.raises(error, match=message):
        rt.gemv(f32(9, 4), f32(4), out=make())


def test_a_numpy_out_must_not_alias_an_input_nor_take_a_device_arrays_result(rt):
    a = f32(4, 4)
    x = f32(4)
    with pytest.raises(ValueError, match="out: must not share memory with x"):
        rt.gemv(a, x, out=x)
    with pytest.raises(TypeError, match="with DeviceArray inputs pass a DeviceArray"):
        rt.gemv(rt.asarray(a), x, out=np.empty(4, np.float32))
    q, v = f32(1, 2, 6, 5), f32(1, 2, 6, 7, seed=1)
    with pytest.raises(TypeError, match="can't be mixed"):
        rt.recurrent_attention(q, v, out=(np.empty((1, 2, 6, 7), np.float32), rt.empty((1, 2, 5, 7), np.float32)))
    with pytest.raises(ValueError, match=r"out: expected a numpy array of shape \(3, 16\) and dtype complex64"):
        rt.fft((f32(3, 16) + 1j * f32(3, 16)).astype(np.complex64), out=np.empty((3, 16), np.complex128))


def test_run_takes_numpy_out_by_output_name(rt):
    a, x = f32(6, 5), f32(5, seed=1)
    y = np.empty(6, np.float32)
    got = rt.run("gemv", {"m": 6, "n": 5}, {"a": a, "x": x}, out={"y": y})
    assert got["y"] is y
    np.testing.assert_array_equal(y, rt.gemv(a, x))


def test_a_device_array_reads_back_into_a_numpy_out(rt):
    host = f32(3, 8)
    d = rt.asarray(host)
    into = np.empty((3, 8), np.float32)
    assert d.numpy(out=into) is into
    np.testing.assert_array_equal(into, host)
    for bad, error, message in (
        (np.empty((8, 3), np.float32), ValueError, r"out: expected a numpy array of shape \(3, 8\) and dtype float32"),
        (np.empty((3, 16), np.float32)[:, ::2], ValueError, "C-contiguous and writeable"),
        (rt.empty((3, 8), np.float32), TypeError, "out: expected a numpy array, got DeviceArray"),
    ):
        with pytest.raises(error, match=message):
            d.numpy(out=bad)
