"""gemm: C = A·B, row-major f32, (m×k)·(k×n).

The spec: knob space, schedules, data, reference and launch. The knobs, the WGSL they
unroll into and which values form a kernel are in farm/catalog/gemm_tiling.py. With
`vector_width` 4 and k or n not a multiple of 4, `launch` pads A to (m, ⌈k⌉₄) and B to
(⌈k⌉₄, ⌈n⌉₄) with zeros on the host (one copy), so every problem size runs under every
accepted schedule. Workgroup memory is NBUF·BK·(BM+pad+BN)·4 bytes and is checked
against the adapter's limit.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os

import numpy as np

from farm import parallel
from farm.catalog import Arg, KernelSpec, Launch, Pass, register, render, rng_for, sections
from farm.catalog.gemm_tiling import EMITTERS, SPLIT_K, WARP_COLS, Tiling, first_problem, guards, unrolled_blocks
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

TILES = (8, 16, 32, 64, 128)
REG_TILES = (1, 2, 4, 8)
THREADS = (64, 128, 256)
MAX_SPACE_WORKGROUP_BYTES = 48 * 1024  # the largest limit we target (NVIDIA's 48 KiB); adapters may reject more
# The speed knobs: absent from the default and from the original space's schedules, 0 = off.
SPEED_KNOBS = {"shared_vec4": 0, "pad_shared": 0, "warp_cols": 0, "split_k": 0, "unroll_k": 0}
SPLIT_SUM_WG = 256  # threads per workgroup of split_k's summing pass
# split_k's schedules: tilings that win 1024^3-4096^3 on large GPUs and their neighbours
# (bm, bn, tm, tn), where the tiles alone fill the GPU least.
SPLIT_TILINGS = ((32, 64, 4, 4), (64, 64, 4, 4), (64, 64, 8, 8), (64, 128, 8, 8), (128, 128, 8, 8))
# Past the 128x128 tile of 8x8 (a large-GPU winner at 2048^3 and 4096^3): 128x256 / 256x128
# tiles of 8x16 / 16x8 a thread in 256 threads. 24 operand loads for 128 FMAs (8x8: 16 for 64)
# and a third more FMAs per loaded slice; the risk is the 128 accumulators spilling, which the
# tuner measures. Not in the original space's loops.
BIG_TILINGS = ((128, 256, 8, 16), (256, 128, 16, 8))
# tile_k 32: 1024^3's best tilings (unroll_k 1, vec4 tiles) with slices twice as deep as the
# speed schedules' 16, so a workgroup crosses half the barriers a C tile; 8x8 tiles at k32 are
# left out (twice the straight-line code, and slower wherever they were measured).
DEEP_TILINGS = ((64, 64, 8, 4), (64, 128, 8, 4))


def _fitting(tilings) -> list[Schedule]:
    """The schedules of `tilings` that form a kernel within MAX_SPACE_WORKGROUP_BYTES."""
    return [_schedule(t) for t in tilings if _wgmem(t) <= MAX_SPACE_WORKGROUP_BYTES and not first_problem(t)]


def _split_fitting(warp_cols: tuple[int, ...], unroll_k: int) -> list[Schedule]:
    """split_k 2, 4, 8 on SPLIT_TILINGS (vec4 loads and tiles, padded A, tile_k 8 and 16,
    single-buffered) with each of `warp_cols` where it is another layout than row-major
    (tiles wider than that many threads), those that fit."""
    return _fitting(
        Tiling((bm // tm) * (bn // tn), bm, bn, bk, tm, tn, 4, 0, 1, 1, wc, split, unroll_k=unroll_k)
        for (bm, bn, tm, tn), bk, split, wc in itertools.product(SPLIT_TILINGS, (8, 16), SPLIT_K[1:], warp_cols)
        if not wc or bn // tn > wc
    )


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class Gemm(KernelSpec):
    name = "gemm"
    source_file = "gemm.wgsl"
    dims = ("m", "k", "n")
    space = {
        "workgroup_size": THREADS,
        "items_per_invocation": (1, 2, 4, 8, 16, 32, 64, 128),
        "vector_width": (1, 4),
        "tile_m": TILES + (256,),
        "tile_n": TILES + (256,),
        "reg_m": REG_TILES + (16,),
        "reg_n": REG_TILES + (16,),
        "tile_k": (8, 16, 32),
        "double_buffer": (0, 1, 2),
        "shared_vec4": (0, 1),
        "pad_shared": (0, 1),
        "warp_cols": WARP_COLS,
        "split_k": SPLIT_K,
        "unroll_k": (0, 1),
    }
    default = Schedule.of(
        workgroup_size=64,
        items_per_invocation=1,
        vector_width=1,
        tile_m=8,
        tile_n=8,
        reg_m=1,
        reg_n=1,
        tile_k=8,
        double_buffer=0,
    )
    atol = 1e-4
    rtol = 1e-4

    def host_source(self) -> str:
        """The host code that unrolls the template's blocks: it shapes every schedule's WGSL."""
        return "".join(inspect.getsource(f) for f in EMITTERS)

    # -- problems ------------------------------------------------------------------
    def problem(self, **dims: int) -> Problem:
        problem = super().problem(**dims)
        bad = {d: problem[d] for d in self.dims if problem[d] < 1}
        if bad:
            raise ValueError(f"gemm dimensions must be >= 1; got {bad}")
        return problem

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(m=64, k=64, n=64), self.problem(m=128, k=96, n=80)]
        return [self.problem(m=s, k=s, n=s) for s in (1024, 2048, 4096)]

    def certify_problems(self) -> list[Problem]:
        return [self.problem(m=37, k=129, n=65), self.problem(m=1, k=1, n=1), self.problem(m=64, k=64, n=64)]

    # -- schedules -----------------------------------------------------------------
    def schedules(self) -> list[Schedule]:
        """The original space (~550, speed knobs left out, so keys and winners carry over)
        plus `speed_schedules()`, `split_schedules()`, `big_schedules()` and `unroll_schedules()`."""
        out = []
        for bm, bn, tm, tn, bk, db, vw in itertools.product(
            TILES, TILES, REG_TILES, REG_TILES, self.space["tile_k"], (0, 1), (1, 4)
        ):
            if bm % tm or bn % tn or bm // tm < 4 or bn // tn < 4:
                continue
            if max(bm, bn) > 2 * min(bm, bn) or max(tm, tn) > 2 * min(tm, tn):
                continue
            threads = (bm // tm) * (bn // tn)
            if threads not in THREADS or workgroup_bytes(bm, bn, bk, db) > MAX_SPACE_WORKGROUP_BYTES:
                continue
            out.append(_schedule(Tiling(threads, bm, bn, bk, tm, tn, vw, db)))
        out += self.speed_schedules() + self.split_schedules() + self.big_schedules() + self.unroll_schedules()
        return out + self.deep_schedules()

    def speed_schedules(self) -> list[Schedule]:
        """The speed variants worth timing (354): double_buffer 0, 1 and 2, vec4 global loads, register tiles of 4 or
        8 (4×4, 4×8, 8×4, 8×8), tiles of 32..128 within 2:1, tile_k 8 or 16; shared_vec4
        with and without pad_shared, pad_shared alone for 8-wide register tiles (the
        scalar-read layout that won before), warp_cols 8 with both only where the row-major
        layout is wider than 8 threads (elsewhere it is the same layout)."""
        out = []
        tiles = (32, 64, 128)
        variants = ((1, 0, 0), (1, 1, 0), (0, 1, 0), (1, 1, 8))
        for bm, bn, tm, tn, bk, db in itertools.product(tiles, tiles, (4, 8), (4, 8), (8, 16), (0, 1, 2)):
            if max(bm, bn) > 2 * min(bm, bn) or bm // tm < 4 or bn // tn < 4:
                continue
            threads = (bm // tm) * (bn // tn)
            for vec4, pad, wc in variants:
                tiling = Tiling(threads, bm, bn, bk, tm, tn, 4, db, vec4, pad, wc)
                if (not vec4 and max(tm, tn) < 8) or (wc and bn // tn <= wc):
                    continue
                if threads in THREADS and _wgmem(tiling) <= MAX_SPACE_WORKGROUP_BYTES and not first_problem(tiling):
                    out.append(_schedule(tiling))
        return out

    def split_schedules(self) -> list[Schedule]:
        """split_k 2, 4, 8 on SPLIT_TILINGS (vec4 loads and tiles, padded A, tile_k 8 and 16,
        single-buffered as the winners were): 30 schedules."""
        return _split_fitting(warp_cols=(0,), unroll_k=0)

    def big_schedules(self) -> list[Schedule]:
        """BIG_TILINGS with vec4 loads and tiles, padded A, tile_k 8 and 16, single- and
        double-buffered: 6 (tile_k 16 double-buffered is over 48 KiB)."""
        return _fitting(
            Tiling((bm // tm) * (bn // tn), bm, bn, bk, tm, tn, 4, db, 1, 1, 0)
            for (bm, bn, tm, tn), bk, db in itertools.product(BIG_TILINGS, (8, 16), (0, 1))
        )

    def unroll_schedules(self) -> list[Schedule]:
        """unroll_k=1 twins of the speed, big and split schedules with vec4 workgroup tiles
        (the layout large-GPU winners have): 276 + 30, and 24 split ones with warp_cols 8
        where it is another layout (tiles 16 threads wide), 330 in all. unroll_k pays on large
        register tiles; with split_k it can win or lose by size, so both are searched."""
        twins = [s for s in self.speed_schedules() + self.big_schedules() if s.get("shared_vec4", 0)]
        return [Schedule.of(**s.as_dict(), unroll_k=1) for s in twins] + _split_fitting(warp_cols=(0, 8), unroll_k=1)

    def deep_schedules(self) -> list[Schedule]:
        """DEEP_TILINGS at tile_k 32 with vec4 loads and tiles, padded A, unroll_k 1, single-
        and double-buffered, row-major and warp_cols 8 (all these tiles are 16+ threads wide):
        those within MAX_SPACE_WORKGROUP_BYTES, 6."""
        return _fitting(
            Tiling((bm // tm) * (bn // tn), bm, bn, 32, tm, tn, 4, db, 1, 1, wc, unroll_k=1)
            for (bm, bn, tm, tn), db, wc in itertools.product(DEEP_TILINGS, (0, 1), (0, 8))
        )

    def knobs(self, schedule: Schedule) -> dict[str, int]:
        """Every kernel knob, taking the default's value (0 for the speed knobs) for any
        the schedule leaves out."""
        defaults = self.default.as_dict() | SPEED_KNOBS
        return {name: schedule.get(name, defaults[name]) for name in self.space}

    def tiling(self, schedule: Schedule) -> Tiling:
        return _tiling(self, schedule)

    def _build_tiling(self, schedule: Schedule) -> Tiling:
        k = self.knobs(schedule)
        return Tiling(
            threads=k["workgroup_size"],
            bm=k["tile_m"],
            bn=k["tile_n"],
            bk=k["tile_k"],
            tm=k["reg_m"],
            tn=k["reg_n"],
            vw=k["vector_width"],
            double_buffer=k["double_buffer"],
            shared_vec4=k["shared_vec4"],
            pad_shared=k["pad_shared"],
            warp_cols=k["warp_cols"],
            split_k=k["split_k"],
            unroll_k=k["unroll_k"],
        )

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        items = schedule.get("items_per_invocation", self.default.items_per_invocation)
        reject = first_problem(self.tiling(schedule), items)
        if reject:
            raise InvalidSchedule(self.name, schedule, reject)

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        return _wgmem(self.tiling(schedule))

    # -- data ----------------------------------------------------------------------
    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        a = rng.standard_normal((problem["m"], problem["k"]), dtype=np.float32)
        b = rng.standard_normal((problem["k"], problem["n"]), dtype=np.float32)
        return {"a": a, "b": b}

    def reference(self, problem, schedule, inputs):
        c = matmul64(inputs["a"], inputs["b"])
        return {"c": c.astype(np.float32)}

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        # Each output is a k-term f32 dot product of unit-normal values: its rounding error
        # grows like sqrt(k) (random walk), its magnitude like sqrt(k) too.
        return (4e-5 * float(np.sqrt(problem["k"])), 1e-4)

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        m, k, n = problem["m"], problem["k"], problem["n"]
        t = self.tiling(schedule)
        a = _as_matrix(inputs["a"], (m, k), "a")
        b = _as_matrix(inputs["b"], (k, n), "b")
        kp, np_ = _round_up(k, t.vw), _round_up(n, t.vw)
        a, b = _pad(a, (m, kp)), _pad(b, (kp, np_))
        groups_n = -(-n // t.bn)
        groups = -(-m // t.bm) * groups_n * t.splits
        values = {
            "WG": t.threads,
            "BM": t.bm,
            "BN": t.bn,
            "BK": t.bk,
            "TM": t.tm,
            "TN": t.tn,
            "VW": t.vw,
            "NBUF": t.nbuf,
            "STEP": 2 if t.double_buffer == 2 else 1,
            "PAD": t.pad,
            "VEC": "f32" if t.vw == 1 else "vec4<f32>",
        }
        values |= unrolled_blocks(t) | guards(t, m, n, kp, np_)
        parts = sections(self.source_file)
        args = [
            Arg("a", "read", a),
            Arg("b", "read", b),
            Arg("c", "storage", dtype=np.float32, shape=(m, n), output=True),
            Arg("params", "uniform", np.array([m, n, kp, np_, groups_n, groups, 0, 0], np.uint32)),
        ]
        if t.splits == 1:
            return Launch(source=render(parts["kernel"], values), args=args, groups=groups)
        # split_k: the ranges' partial tiles into a scratch, then one pass sums them into C
        args.append(Arg("partials", "storage", dtype=np.float32, shape=(t.splits * m * n,)))
        total = render(parts["split_sum"], {"SPLITS": t.splits, "WG": SPLIT_SUM_WG})
        return Launch(
            source=render(parts["kernel"], values),
            args=args,
            groups=groups,
            bindings=(0, 1, 3, 4),
            epilogue=[Pass(total, -(-m * n // SPLIT_SUM_WG), (2, 3, 4))],
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        m, k, n = problem["m"], problem["k"], problem["n"]
        return (2.0 * m * n * k, 4.0 * (m * k + k * n + m * n))

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        m, k, n = problem["m"], problem["k"], problem["n"]
        return {"a": 4 * m * k, "b": 4 * k * n, "c": 4 * m * n}  # a and b padded to the vector width at most


def workgroup_bytes(tile_m: int, tile_n: int, tile_k: int, double_buffer: int, pad: int = 0) -> int:
    """Workgroup memory a schedule declares: NBUF slices of A (BK×(BM+pad)) and B (BK×BN), f32."""
    return (2 if double_buffer else 1) * tile_k * (tile_m + pad + tile_n) * 4


@functools.lru_cache(maxsize=8192)
def _tiling(spec: Gemm, schedule: Schedule) -> Tiling:
    # a campaign's plan checks every schedule of the space for every problem, three tilings a check
    return spec._build_tiling(schedule)


def _wgmem(t: Tiling) -> int:
    return workgroup_bytes(t.bm, t.bn, t.bk, t.double_buffer, t.pad)


def _schedule(t: Tiling) -> Schedule:
    """The schedule for tiling `t`, leaving out speed knobs that are 0."""
    speed = {name: getattr(t, name) for name in SPEED_KNOBS}
    return Schedule.of(
        workgroup_size=t.threads,
        items_per_invocation=t.tm * t.tn,
        vector_width=t.vw,
        tile_m=t.bm,
        tile_n=t.bn,
        reg_m=t.tm,
        reg_n=t.tn,
        tile_k=t.bk,
        double_buffer=t.double_buffer,
        **{name: value for name, value in speed.items() if value},
    )


def _as_matrix(value: np.ndarray, shape: tuple[int, int], name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.size != shape[0] * shape[1]:
        raise ValueError(f"gemm input {name} has shape {array.shape}; expected {shape}")
    return np.ascontiguousarray(array, dtype=np.float32).reshape(shape)


def _pad(matrix: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """`matrix` zero-padded to `shape` (returned as is when it already has that shape)."""
    if matrix.shape == shape:
        return matrix
    out = np.zeros(shape, np.float32)
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return out


register(Gemm())


PARALLEL_REFERENCE_FLOPS = 1 << 30  # below this a float64 product takes milliseconds


def matmul64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float64. A Ray worker runs with OMP_NUM_THREADS=1 (Ray's setting for an
    actor of num_cpus=1), so its BLAS is single-threaded and a 4096^3 reference takes
    seconds, which every worker of a campaign would wait for. There, and when
    BLAS is limited to one thread otherwise, the product is split by rows over the shared
    numpy pool (farm.parallel); each row block is the same BLAS call on a slice."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    single = os.environ.get("OMP_NUM_THREADS") == "1" or os.environ.get("OPENBLAS_NUM_THREADS") == "1"
    blocks = min(parallel.THREADS, a64.shape[0])
    if not single or blocks < 2 or 2 * a64.shape[0] * a64.shape[1] * b64.shape[1] < PARALLEL_REFERENCE_FLOPS:
        return a64 @ b64
    out = np.empty((a64.shape[0], b64.shape[1]), np.float64)
    rows = -(-a64.shape[0] // blocks)
    pool = parallel.numpy_pool()
    list(pool.map(lambda i: np.matmul(a64[i : i + rows], b64, out=out[i : i + rows]), range(0, len(a64), rows)))
    return out
