"""gemm's bounds (farm.catalog.gemm_tiling.guards) and folded A stores: only the bounds a
problem's shape can cross are tested, and the kernels certify on shapes that divide the
tiles and on shapes that don't."""

import pytest
from test_gemm import gemm_schedule as schedule

from farm import catalog
from farm.catalog.gemm_tiling import guards
from farm.oracle import compare as oracle
from farm.schedule import Status

SPEC = catalog.get("gemm")
BOUNDS = ("A_INSIDE", "B_INSIDE", "PUT_A_INSIDE", "PUT_B_INSIDE", "C_INSIDE")


# Large-GPU winner shapes at 1024^3 (at lavapipe's 32 KiB: tile_k 16) and 2048^3, and
# kernels without vec4 tiles, with a partial last tile load (idx < A_VECS), and with split_k.
SCHEDULES = [
    schedule(64, 128, 8, 4, 16, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8, unroll_k=1),
    schedule(128, 128, 8, 8, 8, db=1, vw=4, shared_vec4=1, pad_shared=1, warp_cols=8, unroll_k=1),
    schedule(64, 64, 4, 4, 8, db=2, vw=4, shared_vec4=1, pad_shared=1),
    schedule(32, 64, 2, 4, 32, vw=1),
    schedule(64, 32, 4, 2, 8, vw=4, pad_shared=1),
    schedule(32, 32, 4, 4, 8, db=1, vw=1, split_k=2),
]


def test_a_shape_that_divides_the_tiles_tests_no_bound():
    t = SPEC.tiling(SCHEDULES[0])
    assert guards(t, 1024, 1024, 1024, 1024) == dict.fromkeys(BOUNDS, "true")


def test_a_shape_keeps_exactly_the_bounds_it_can_cross():
    t = SPEC.tiling(SCHEDULES[0])  # 64 x 128 tiles, k slices of 16
    ragged_m = guards(t, 100, 1024, 1024, 1024)
    assert ragged_m["A_INSIDE"] == "row < p.m" and ragged_m["C_INSIDE"] == "row < p.m"
    assert ragged_m["B_INSIDE"] == "true"
    ragged_k = guards(t, 1024, 1024, 1000, 1024)  # k padded to 1000: not a multiple of 16
    assert ragged_k["A_INSIDE"] == "kvi < kv" and ragged_k["B_INSIDE"] == "krow < p.kp"
    assert ragged_k["C_INSIDE"] == "true"
    ragged_n = guards(t, 1024, 1000, 1024, 1000)
    assert ragged_n["B_INSIDE"] == "nvi < nv" and ragged_n["C_INSIDE"] == "col < p.n"
    partial = guards(SPEC.tiling(schedule(32, 64, 2, 4, 8, vw=4)), 64, 64, 64, 64)  # 64 and 128 vecs, 256 threads
    assert partial["A_INSIDE"] == partial["PUT_A_INSIDE"] == "idx < A_VECS"
    assert partial["B_INSIDE"] == partial["PUT_B_INSIDE"] == "idx < B_VECS" and partial["C_INSIDE"] == "true"


def test_the_rendered_kernel_drops_the_bounds_and_stores_a_from_one_division():
    problem = SPEC.problem(m=128, k=64, n=128)
    source = SPEC.launch(SCHEDULES[0], problem, SPEC.generate(problem, 0)).source
    assert "row < p.m" not in source and "if (true)" in source
    assert "let a4 = at / 4u;" in source and "a_tile[a4 + 17u][am] = v.y;" in source  # AS = 64 + 4 floats


@pytest.mark.parametrize(
    "dims",
    [dict(m=128, k=64, n=128), dict(m=128, k=64, n=100), dict(m=100, k=61, n=128), dict(m=37, k=129, n=65)],
    ids=["divides", "ragged_n", "ragged_m_k", "ragged_all"],
)
@pytest.mark.parametrize("s", SCHEDULES, ids=str)
def test_kernels_with_only_the_bounds_they_need_certify(device, s, dims):
    problem = SPEC.problem(**dims)
    result = oracle.certify(SPEC, s, problem, device)
    if SPEC.workgroup_bytes(s, problem) > device.profile.limit("max-compute-workgroup-storage-size"):
        pytest.skip("too much workgroup memory on this adapter")
    assert result.status is Status.OK, result.message
