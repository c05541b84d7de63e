"""ForgeRuntime computes what numpy computes, on the caller's data, through the certified path."""

import numpy as np
import pytest

from farm import ForgeRuntime
from farm.catalog.p64_project import project_records
from farm.catalog.recurrent import reference_recurrent
from farm.catalog.ternary_gemv import pack_codes, unpack_ternary
from farm.catalog.topk import topk_blocks, topk_global


@pytest.fixture(scope="module")
def runtime(device, tmp_path_factory):
    # A database URL whose file doesn't exist: every kernel runs its default schedule.
    missing = tmp_path_factory.mktemp("rt") / "absent.db"
    return ForgeRuntime(db=f"sqlite:///{missing}", device=device)


def rng(seed):
    return np.random.default_rng(seed)


# -- the seed's hand-checked cases ---------------------------------------------------------


def test_topk_hand_checked(runtime):
    out = runtime.topk(np.array([3, 9, 1, 7, 5], np.float32), 3)
    np.testing.assert_array_equal(out, [9.0, 7.0, 5.0])


def test_ternary_gemv_hand_checked(runtime):
    x = np.array([1, 2, 3, 4], np.float32)
    packed = np.array([0x55, 0xAA], np.uint32)  # row 0: four +1 codes, row 1: four -1 codes
    out = runtime.ternary_gemv(x, packed, np.array([2, 10], np.float32), 2, 4)
    np.testing.assert_array_equal(out, [20.0, -100.0])


def test_gemm_hand_checked(runtime):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = np.array([[7, 8], [9, 10], [11, 12]], np.float32)
    np.testing.assert_array_equal(runtime.gemm(a, b).ravel(), [58.0, 64.0, 139.0, 154.0])


def test_gemv_hand_checked(runtime):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    np.testing.assert_array_equal(runtime.gemv(a, np.ones(3, np.float32)), [6.0, 15.0])


def test_fft_of_impulse_is_all_ones(runtime):
    signal = np.zeros(16, np.float32)  # 8 interleaved complex points
    signal[0] = 1.0
    spectrum = runtime.fft(signal)
    np.testing.assert_allclose(spectrum[0::2], np.ones(8), atol=1e-6)
    np.testing.assert_allclose(spectrum[1::2], np.zeros(8), atol=1e-6)


def test_p64_project_reads_u64_fields_low_word_first(runtime):
    records = np.zeros((1, 8), np.uint64)
    records[0, 0] = 1
    records[0, 1] = 5 << 32  # field 1's high word is word 3
    weights = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(runtime.p64_project(records, weights), [0.0 * 1 + 3.0 * 5])


# -- random shapes (not tile multiples) against numpy ------------------------------------


@pytest.mark.parametrize("m,n", [(1, 1), (37, 129), (130, 3), (5, 1030)])
def test_gemv_matches_numpy(runtime, m, n):
    r = rng(m * n)
    a = r.standard_normal((m, n), dtype=np.float32)
    x = r.standard_normal(n, dtype=np.float32)
    np.testing.assert_allclose(runtime.gemv(a, x), a.astype(np.float64) @ x, atol=1e-4 * np.sqrt(n), rtol=1e-4)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 129, 65), (3, 70, 17), (65, 8, 100)])
def test_gemm_matches_numpy(runtime, m, k, n):
    r = rng(m * k * n)
    a = r.standard_normal((m, k), dtype=np.float32)
    b = r.standard_normal((k, n), dtype=np.float32)
    c = runtime.gemm(a, b)
    assert c.shape == (m, n) and c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, atol=1e-4 * np.sqrt(k), rtol=1e-4)


def test_gemm_accepts_non_contiguous_views(runtime):
    r = rng(7)
    a = r.standard_normal((40, 30), dtype=np.float32)[::2, 1:]  # strided rows, offset columns
    b = r.standard_normal((29, 50), dtype=np.float32).T.copy().T  # Fortran order
    np.testing.assert_allclose(runtime.gemm(a, b), a.astype(np.float64) @ b, atol=1e-3)


@pytest.mark.parametrize("n,k", [(1, 1), (5, 3), (1000, 7), (129, 64), (5000, 300)])
def test_topk_is_the_k_largest_of_the_whole_array(runtime, n, k):
    x = rng(n).standard_normal(n, dtype=np.float32)
    out = runtime.topk(x, k)
    assert out.shape == (k,)
    np.testing.assert_array_equal(out, np.sort(x)[::-1][:k])


@pytest.mark.parametrize("n,k,block", [(1, 1, 32), (1000, 7, 64), (129, 64, 64), (4100, 32, 1024)])
def test_topk_with_a_block_matches_per_block_reference(runtime, n, k, block):
    x = rng(n).standard_normal(n, dtype=np.float32)
    out = runtime.topk(x, k, block=block)
    assert out.shape == (-(-n // block) * k,)
    np.testing.assert_array_equal(out, topk_blocks(x, k, block))


def test_topk_orders_nan_above_inf_like_the_kernel_documents(runtime):
    x = np.array([1.0, np.nan, np.inf, -np.inf, 2.0], np.float32)
    out = runtime.topk(x, 4)
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == 2.0 and out[3] == 1.0
    np.testing.assert_array_equal(out.view(np.uint32), topk_global(x, 4).view(np.uint32))


@pytest.mark.parametrize("m,k", [(1, 1), (33, 100), (7, 16), (200, 33)])
def test_ternary_gemv_matches_numpy(runtime, m, k):
    r = rng(m + k)
    packed = pack_codes(r.integers(0, 4, (m, k)))  # includes the unused code 3 (decodes to 0)
    x = r.standard_normal(k, dtype=np.float32)
    scale = r.uniform(0.5, 2, m).astype(np.float32)
    want = scale.astype(np.float64) * (unpack_ternary(packed, m, k) @ x.astype(np.float64))
    np.testing.assert_allclose(runtime.ternary_gemv(x, packed, scale, m, k), want, atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(
        runtime.ternary_gemv(x, packed.ravel(), scale, m, k), runtime.ternary_gemv(x, packed, scale, m, k)
    )


@pytest.mark.parametrize("n", [1, 3, 130])
def test_p64_project_matches_numpy_for_every_record_form(runtime, n):
    r = rng(n)
    words = r.integers(0, 2**32, (n, 16), dtype=np.uint32)
    weights = r.uniform(-1, 1, 16).astype(np.float32)
    want = project_records(words, weights)
    atol = 18.0 * 2.0**-24 * 16 * 2.0**32
    for records in (words, words.view("<u8"), words.tobytes()):
        np.testing.assert_allclose(runtime.p64_project(records, weights), want, atol=atol, rtol=0)


@pytest.mark.parametrize("shape", [(2,), (3, 64), (2, 3, 256), (1024,)])
def test_fft_complex_matches_numpy(runtime, shape):
    r = rng(int(np.prod(shape)))
    z = (r.standard_normal(shape) + 1j * r.standard_normal(shape)).astype(np.complex64)
    y = runtime.fft(z)
    assert y.shape == shape and y.dtype == np.complex64
    n = shape[-1]
    np.testing.assert_allclose(y, np.fft.fft(z.astype(np.complex128)), atol=1e-5 * np.sqrt(n) * np.log2(n) + 1e-6)


def test_fft_interleaved_float_matches_numpy(runtime):
    z = rng(3).standard_normal((5, 32, 2)).astype(np.float32)
    y = runtime.fft(z.reshape(5, 64))
    assert y.shape == (5, 64) and y.dtype == np.float32
    want = np.fft.fft(z[..., 0].astype(np.float64) + 1j * z[..., 1])
    np.testing.assert_allclose(y[:, 0::2], want.real, atol=1e-4)
    np.testing.assert_allclose(y[:, 1::2], want.imag, atol=1e-4)


@pytest.mark.parametrize("vh", [1, 3])
@pytest.mark.parametrize("with_state", [False, True])
def test_recurrent_attention_matches_float64_reference(runtime, vh, with_state):
    r = rng(vh + 10 * with_state)
    b, h, t, l_dim, e = 2, 3, 5, 7, 9
    query = r.standard_normal((b, h, t, l_dim), dtype=np.float32)
    value = r.standard_normal((b, vh, t, e), dtype=np.float32)
    rho = (0.1 * r.standard_normal((b, h, l_dim, e))).astype(np.float32) if with_state else None
    decay = np.array([0.85, 0.9, 0.95], np.float32) if with_state else None
    context, state = runtime.recurrent_attention(query, value, rho, decay)
    want_context, want_state = reference_recurrent(query, value, rho, decay)
    assert context.shape == (b, h, t, e) and state.shape == (b, h, l_dim, e)
    np.testing.assert_allclose(context, want_context, atol=1e-4)
    np.testing.assert_allclose(state, want_state, atol=1e-4)


def test_recurrent_attention_with_large_latent_picks_a_valid_schedule(runtime):
    # L = 600 exceeds the default schedule's register budget: a valid schedule of the
    # space is used instead of failing the call.
    r = rng(11)
    query = r.standard_normal((1, 1, 3, 600), dtype=np.float32)
    value = r.standard_normal((1, 1, 3, 4), dtype=np.float32)
    context, _ = runtime.recurrent_attention(query, value)
    np.testing.assert_allclose(context, reference_recurrent(query, value)[0], atol=1e-3)


# -- NaN / Inf compute like numpy ------------------------------------------------------------


def test_gemv_propagates_nan_and_inf_like_numpy(runtime):
    a = np.ones((4, 3), np.float32)
    a[0, 1] = np.nan
    a[1, 2] = np.inf
    a[2, 0], a[2, 1] = np.inf, -np.inf  # inf - inf = nan
    x = np.array([1.0, 2.0, 3.0], np.float32)
    with np.errstate(invalid="ignore"):
        want = a @ x
    np.testing.assert_array_equal(runtime.gemv(a, x), want)  # [nan, inf, nan, 6]


def test_gemm_propagates_nan_and_inf_like_numpy(runtime):
    a = np.array([[1, 2], [np.inf, 1], [0, 1]], np.float32)
    b = np.array([[np.nan, 1, 0], [1, 1, 1]], np.float32)
    with np.errstate(invalid="ignore"):
        want = a @ b  # inf * 0 = nan in row 1, col 2
    np.testing.assert_array_equal(runtime.gemm(a, b), want)


def test_import_farm_does_not_import_wgpu_until_the_runtime_is_used():
    import subprocess
    import sys

    code = (
        "import sys, farm; assert 'wgpu' not in sys.modules, 'eager'; "
        "from farm import ForgeRuntime; assert ForgeRuntime.__module__ == 'farm.runtime.forge'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
