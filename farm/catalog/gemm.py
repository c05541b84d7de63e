"""gemm: C = A·B, row-major f32, (m×k)·(k×n).

Schedule knobs (see kernels/gemm.wgsl):
- `tile_m`, `tile_n` (BM×BN): the block of C one workgroup computes;
- `reg_m`, `reg_n` (TM×TN): the register tile each thread computes, so the thread layout
  is (BM/TM)×(BN/TN) and `workgroup_size` must equal (BM/TM)·(BN/TN);
- `items_per_invocation`: the C elements each thread computes, which must equal TM·TN
  (it is derived, kept so schedules stay comparable across kernels);
- `tile_k` (BK): the depth of the A and B slices staged in workgroup memory;
- `double_buffer`: 1 keeps two slices in workgroup memory and fetches the next one into
  registers while multiplying the current one (one barrier per slice), 0 keeps one;
- `vector_width`: 1 or 4; with 4, A and B are read as vec4<f32>. When k or n is not a
  multiple of 4, `launch` pads A to (m, ⌈k⌉₄) and B to (⌈k⌉₄, ⌈n⌉₄) with zeros on the host
  (one copy), so every problem size runs under every accepted schedule.
Knobs added for speed; each is 0 by default (a schedule that leaves one out gets 0, which
emits the original kernel):
- `shared_vec4`: 1 declares the workgroup tiles as vec4<f32> and gives each thread
  contiguous groups of 4 rows and 4 columns (4-row group i at rows (i·THM + ty)·4.., 4-column
  group j at columns (j·THN + tx)·4..), so per k step a thread reads TM/4 + TN/4 vec4s from
  workgroup memory instead of TM + TN scalars; needs reg_m and reg_n multiples of 4. B is
  stored with vec4 stores when vector_width is 4;
- `pad_shared`: 1 pads every k-row of the (k-major) A tile, by 1 float (4 with
  shared_vec4, to keep vec4 alignment), so the transposing stores of A into workgroup
  memory stop hitting one bank (BK-way conflicts unpadded with vector_width 1);
- `warp_cols`: 0 lays threads out row-major over the THM×THN thread grid; 4, 8 or 16 tiles
  it with blocks of 32 consecutive threads (one NVIDIA warp) of (32/warp_cols)×warp_cols,
  so a warp's workgroup reads touch fewer distinct B words; needs workgroup_size, THN and
  THM divisible by 32, warp_cols and 32/warp_cols.
Workgroup memory is NBUF·BK·(BM+pad+BN)·4 bytes and is checked against the adapter's limit.
"""

from __future__ import annotations

import inspect
import itertools
import os
from dataclasses import dataclass

import numpy as np

from farm import parallel
from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

TILES = (8, 16, 32, 64, 128)
REG_TILES = (1, 2, 4, 8)
THREADS = (64, 128, 256)
WARP = 32
WARP_COLS = (0, 4, 8, 16)
MAX_SPACE_WORKGROUP_BYTES = 48 * 1024  # the largest limit we target (H200); adapters may reject more
# The speed knobs: absent from the default and from the original space's schedules, 0 = off.
SPEED_KNOBS = {"shared_vec4": 0, "pad_shared": 0, "warp_cols": 0}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Tiling:
    """The knob values one kernel is emitted for (see the module docstring)."""

    threads: int
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    vw: int
    double_buffer: int = 0
    shared_vec4: int = 0
    pad_shared: int = 0
    warp_cols: int = 0

    @property
    def pad(self) -> int:
        """Floats added to each k-row of the A tile."""
        return (4 if self.shared_vec4 else 1) if self.pad_shared else 0

    @property
    def nbuf(self) -> int:
        return 2 if self.double_buffer else 1


class Gemm(KernelSpec):
    name = "gemm"
    source_file = "gemm.wgsl"
    dims = ("m", "k", "n")
    space = {
        "workgroup_size": THREADS,
        "items_per_invocation": (1, 2, 4, 8, 16, 32, 64),
        "vector_width": (1, 4),
        "tile_m": TILES,
        "tile_n": TILES,
        "reg_m": REG_TILES,
        "reg_n": REG_TILES,
        "tile_k": (8, 16, 32),
        "double_buffer": (0, 1),
        "shared_vec4": (0, 1),
        "pad_shared": (0, 1),
        "warp_cols": WARP_COLS,
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
        host = [unrolled_blocks, _layout, _tiles, _puts, _multiply, _write, Tiling]
        return "".join(inspect.getsource(f) for f in host)

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
        plus `speed_schedules()`."""
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
        return out + self.speed_schedules()

    def speed_schedules(self) -> list[Schedule]:
        """The speed variants worth timing (~210): vec4 global loads, register tiles of 4 or
        8 (4×4, 4×8, 8×4, 8×8), tiles of 32..128 within 2:1, tile_k 8 or 16; shared_vec4
        with and without pad_shared, pad_shared alone for 8-wide register tiles (the
        scalar-read layout that won before), warp_cols 8 with both only where the row-major
        layout is wider than 8 threads (elsewhere it is the same layout)."""
        out = []
        tiles = (32, 64, 128)
        variants = ((1, 0, 0), (1, 1, 0), (0, 1, 0), (1, 1, 8))
        for bm, bn, tm, tn, bk, db in itertools.product(tiles, tiles, (4, 8), (4, 8), (8, 16), (0, 1)):
            if max(bm, bn) > 2 * min(bm, bn) or bm // tm < 4 or bn // tn < 4:
                continue
            threads = (bm // tm) * (bn // tn)
            for vec4, pad, wc in variants:
                tiling = Tiling(threads, bm, bn, bk, tm, tn, 4, db, vec4, pad, wc)
                if (not vec4 and max(tm, tn) < 8) or (wc and bn // tn <= wc):
                    continue
                if threads in THREADS and _wgmem(tiling) <= MAX_SPACE_WORKGROUP_BYTES and not _first_problem(tiling):
                    out.append(_schedule(tiling))
        return out

    def knobs(self, schedule: Schedule) -> dict[str, int]:
        """Every kernel knob, taking the default's value (0 for the speed knobs) for any
        the schedule leaves out."""
        defaults = self.default.as_dict() | SPEED_KNOBS
        return {name: schedule.get(name, defaults[name]) for name in self.space}

    def tiling(self, schedule: Schedule) -> Tiling:
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
        )

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        k = self.knobs(schedule)
        reject = _first_problem(self.tiling(schedule), k["items_per_invocation"])
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
        groups = -(-m // t.bm) * groups_n
        values = {
            "WG": t.threads,
            "BM": t.bm,
            "BN": t.bn,
            "BK": t.bk,
            "TM": t.tm,
            "TN": t.tn,
            "VW": t.vw,
            "NBUF": t.nbuf,
            "PAD": t.pad,
            "VEC": "f32" if t.vw == 1 else "vec4<f32>",
        }
        values |= unrolled_blocks(t)
        return Launch(
            source=render(self.template(), values),
            args=[
                Arg("a", "read", a),
                Arg("b", "read", b),
                Arg("c", "storage", dtype=np.float32, shape=(m, n), output=True),
                Arg("params", "uniform", np.array([m, n, kp, np_, groups_n, groups, 0, 0], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        m, k, n = problem["m"], problem["k"], problem["n"]
        return (2.0 * m * n * k, 4.0 * (m * k + k * n + m * n))


def workgroup_bytes(tile_m: int, tile_n: int, tile_k: int, double_buffer: int, pad: int = 0) -> int:
    """Workgroup memory a schedule declares: NBUF slices of A (BK×(BM+pad)) and B (BK×BN), f32."""
    return (2 if double_buffer else 1) * tile_k * (tile_m + pad + tile_n) * 4


def _wgmem(t: Tiling) -> int:
    return workgroup_bytes(t.bm, t.bn, t.bk, t.double_buffer, t.pad)


def _schedule(t: Tiling) -> Schedule:
    """The schedule for tiling `t`, leaving out speed knobs that are 0."""
    speed = {"shared_vec4": t.shared_vec4, "pad_shared": t.pad_shared, "warp_cols": t.warp_cols}
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


def unrolled_blocks(t: Tiling) -> dict[str, str]:
    """The WGSL the template leaves to the host: the thread layout, the workgroup tiles,
    the register tile, the staged loads and the C stores written out as straight-line code
    over named scalars, so no private array is indexed in a loop (drivers may put those in
    local memory)."""
    loads_a = -(-t.bm * t.bk // (t.vw * t.threads))
    loads_b = -(-t.bk * t.bn // (t.vw * t.threads))
    vec = "f32" if t.vw == 1 else "vec4<f32>"
    declare = [f"var acc_{i}_{j} = 0.0;" for i in range(t.tm) for j in range(t.tn)]
    declare += [f"var a_next_{i}: {vec};" for i in range(loads_a)]
    declare += [f"var b_next_{i}: {vec};" for i in range(loads_b)]
    fetch = [f"a_next_{i} = load_a(slice, row0, lid + {i * t.threads}u);" for i in range(loads_a)]
    fetch += [f"b_next_{i} = load_b(slice, col0, lid + {i * t.threads}u);" for i in range(loads_b)]
    stash = [f"put_a(buf, lid + {i * t.threads}u, a_next_{i});" for i in range(loads_a)]
    stash += [f"put_b(buf, lid + {i * t.threads}u, b_next_{i});" for i in range(loads_b)]
    blocks = {"DECLARE": declare, "FETCH": fetch, "STASH": stash, "MULTIPLY": _multiply(t), "WRITE": _write(t)}
    blocks |= {"LAYOUT": _layout(t)} | _puts(t)
    return {name: "\n    ".join(lines) for name, lines in blocks.items()} | {"TILES": "\n".join(_tiles(t))}


def _layout(t: Tiling) -> list[str]:
    """tx, ty: the thread's column and row in the THM×THN thread grid."""
    if not t.warp_cols:
        return ["let tx = lid % THN;", "let ty = lid / THN;"]
    wc, rows = t.warp_cols, WARP // t.warp_cols
    return [
        f"let warp = lid / {WARP}u;",
        f"let lane = lid % {WARP}u;",
        f"let tx = (warp % (THN / {wc}u)) * {wc}u + lane % {wc}u;",
        f"let ty = (warp / (THN / {wc}u)) * {rows}u + lane / {wc}u;",
    ]


def _tiles(t: Tiling) -> list[str]:
    """The workgroup tile declarations: A k-major with rows of AS = BM + PAD floats."""
    if t.shared_vec4:
        return [
            "var<workgroup> a_tile: array<vec4<f32>, NBUF * BK * AS / 4u>;",
            "var<workgroup> b_tile: array<vec4<f32>, NBUF * BK * BN / 4u>;",
        ]
    return ["var<workgroup> a_tile: array<f32, NBUF * BK * AS>;", "var<workgroup> b_tile: array<f32, NBUF * BK * BN>;"]


def _puts(t: Tiling) -> dict[str, list[str]]:
    """PUT_A / PUT_B: one loaded value (its lanes) into the tiles at float offset `at`."""
    lanes = ["v"] if t.vw == 1 else ["v.x", "v.y", "v.z", "v.w"]
    if not t.shared_vec4:
        put_a = [f"a_tile[at + {q * (t.bm + t.pad)}u] = {lane};" for q, lane in enumerate(lanes)]
        put_b = [f"b_tile[at + {q}u] = {lane};" for q, lane in enumerate(lanes)]
        return {"PUT_A": put_a, "PUT_B": put_b}
    offsets = [f"at + {q * (t.bm + t.pad)}u" for q in range(len(lanes))]
    put_a = [f"a_tile[({at}) / 4u][({at}) % 4u] = {lane};" for at, lane in zip(offsets, lanes, strict=True)]
    put_b = ["b_tile[at / 4u][at % 4u] = v;"] if t.vw == 1 else ["b_tile[at / 4u] = v;"]
    return {"PUT_A": put_a, "PUT_B": put_b}


def _multiply(t: Tiling) -> list[str]:
    """One slice's k loop: read the thread's A and B values, TM·TN fmas."""
    if not t.shared_vec4:
        step = ["let a_base = (buf * BK + kk) * AS + ty;", "let b_base = (buf * BK + kk) * BN + tx;"]
        step += [f"let a_{i} = a_tile[a_base + {i * (t.bm // t.tm)}u];" for i in range(t.tm)]
        step += [f"let b_{j} = b_tile[b_base + {j * (t.bn // t.tn)}u];" for j in range(t.tn)]
        step += [f"acc_{i}_{j} = fma(a_{i}, b_{j}, acc_{i}_{j});" for i in range(t.tm) for j in range(t.tn)]
    else:
        lane = "xyzw"
        step = ["let a_base = (buf * BK + kk) * (AS / 4u) + ty;", "let b_base = (buf * BK + kk) * (BN / 4u) + tx;"]
        step += [f"let a_{i} = a_tile[a_base + {i * (t.bm // t.tm)}u];" for i in range(t.tm // 4)]
        step += [f"let b_{j} = b_tile[b_base + {j * (t.bn // t.tn)}u];" for j in range(t.tn // 4)]
        step += [
            f"acc_{i}_{j} = fma(a_{i // 4}.{lane[i % 4]}, b_{j // 4}.{lane[j % 4]}, acc_{i}_{j});"
            for i in range(t.tm)
            for j in range(t.tn)
        ]
    return ["for (var kk = 0u; kk < BK; kk++) {", *("    " + line for line in step), "}"]


def _write(t: Tiling) -> list[str]:
    """The C stores of the register tile (bounds-checked in store_c)."""
    thm, thn = t.bm // t.tm, t.bn // t.tn
    if not t.shared_vec4:
        return [
            f"store_c(row0 + ty + {i * thm}u, col0 + tx + {j * thn}u, acc_{i}_{j});"
            for i in range(t.tm)
            for j in range(t.tn)
        ]
    return [
        f"store_c(row0 + (ty + {i // 4 * thm}u) * 4u + {i % 4}u, "
        f"col0 + (tx + {j // 4 * thn}u) * 4u + {j % 4}u, acc_{i}_{j});"
        for i in range(t.tm)
        for j in range(t.tn)
    ]


def _first_problem(t: Tiling, items: int | None = None) -> str:
    """The first reason the knob values can't form a kernel, or '' when they can."""
    bm, bn, tm, tn, bk, vw = t.bm, t.bn, t.tm, t.tn, t.bk, t.vw
    if min(bm, bn, tm, tn, bk) < 1:
        return f"tile sizes must be >= 1 (tile_m={bm}, tile_n={bn}, reg_m={tm}, reg_n={tn}, tile_k={bk})"
    if bm % tm:
        return f"reg_m {tm} does not divide tile_m {bm}"
    if bn % tn:
        return f"reg_n {tn} does not divide tile_n {bn}"
    threads = (bm // tm) * (bn // tn)
    if t.threads != threads:
        return f"workgroup_size {t.threads} != (tile_m/reg_m)*(tile_n/reg_n) = {threads}"
    if items is not None and items != tm * tn:
        return f"items_per_invocation {items} != reg_m*reg_n = {tm * tn}"
    if vw not in (1, 4):
        return f"vector_width {vw} not in (1, 4)"
    if bk % vw:
        return f"vector_width {vw} does not divide tile_k {bk}"
    if bn % vw:
        return f"vector_width {vw} does not divide tile_n {bn}"
    if t.double_buffer not in (0, 1):
        return f"double_buffer {t.double_buffer} not in (0, 1)"
    return _speed_problem(t)


def _speed_problem(t: Tiling) -> str:
    """The first reason the speed knobs can't apply to this tiling, or ''."""
    for name in ("shared_vec4", "pad_shared"):
        if getattr(t, name) not in (0, 1):
            return f"{name} {getattr(t, name)} not in (0, 1)"
    if t.shared_vec4 and (t.tm % 4 or t.tn % 4):
        return f"shared_vec4 needs reg_m and reg_n multiples of 4 (reg_m={t.tm}, reg_n={t.tn})"
    wc = t.warp_cols
    if wc not in WARP_COLS:
        return f"warp_cols {wc} not in {WARP_COLS}"
    if wc and t.threads % WARP:
        return f"warp_cols {wc} needs workgroup_size {t.threads} a multiple of {WARP}"
    if wc and ((t.bn // t.tn) % wc or (t.bm // t.tm) % (WARP // wc)):
        return (
            f"warp_cols {wc} needs tile_n/reg_n = {t.bn // t.tn} divisible by {wc} "
            f"and tile_m/reg_m = {t.bm // t.tm} divisible by {WARP // wc}"
        )
    return ""


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
    actor of num_cpus=1), so its BLAS is single-threaded and a 4096^3 reference took 2.5 s
    on the H200 host (each worker of a 2-GPU campaign waited 1.5 s for it). There, and when
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
