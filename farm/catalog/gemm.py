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
Workgroup memory is NBUF·BK·(BM+BN)·4 bytes and is checked against the adapter's limit.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

TILES = (8, 16, 32, 64, 128)
REG_TILES = (1, 2, 4, 8)
THREADS = (64, 128, 256)
MAX_SPACE_WORKGROUP_BYTES = 48 * 1024  # the largest limit we target (H200); adapters may reject more


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


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

    def source_hash(self) -> str:
        """Hash of the template and of the host code that unrolls its blocks: a change to
        either changes the WGSL every schedule emits, so old winners go stale."""
        text = self.template() + inspect.getsource(unrolled_blocks)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

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
        """Only sensible combinations (~550): threads = (BM/TM)·(BN/TN) in THREADS, the
        thread layout at least 4 wide each way, BM:BN and TM:TN within 2:1 either way, and
        workgroup memory within 48 KiB (adapters with less reject the rest in `check`)."""
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
            out.append(
                Schedule.of(
                    workgroup_size=threads,
                    items_per_invocation=tm * tn,
                    vector_width=vw,
                    tile_m=bm,
                    tile_n=bn,
                    reg_m=tm,
                    reg_n=tn,
                    tile_k=bk,
                    double_buffer=db,
                )
            )
        return out

    def knobs(self, schedule: Schedule) -> dict[str, int]:
        """Every kernel knob, taking the default's value for any the schedule leaves out."""
        return {name: schedule.get(name, self.default[name]) for name in self.space}

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        k = self.knobs(schedule)
        bm, bn, tm, tn, bk = k["tile_m"], k["tile_n"], k["reg_m"], k["reg_n"], k["tile_k"]
        reject = _first_problem(k, bm, bn, tm, tn, bk)
        if reject:
            raise InvalidSchedule(self.name, schedule, reject)

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        k = self.knobs(schedule)
        return workgroup_bytes(k["tile_m"], k["tile_n"], k["tile_k"], k["double_buffer"])

    # -- data ----------------------------------------------------------------------
    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        a = rng.standard_normal((problem["m"], problem["k"]), dtype=np.float32)
        b = rng.standard_normal((problem["k"], problem["n"]), dtype=np.float32)
        return {"a": a, "b": b}

    def reference(self, problem, schedule, inputs):
        c = inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)
        return {"c": c.astype(np.float32)}

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        # Each output is a k-term f32 dot product of unit-normal values: its rounding error
        # grows like sqrt(k) (random walk), its magnitude like sqrt(k) too.
        return (4e-5 * float(np.sqrt(problem["k"])), 1e-4)

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        m, k, n = problem["m"], problem["k"], problem["n"]
        knobs = self.knobs(schedule)
        vw, bm, bn, bk = schedule.vector_width, knobs["tile_m"], knobs["tile_n"], knobs["tile_k"]
        db = knobs["double_buffer"]
        a = _as_matrix(inputs["a"], (m, k), "a")
        b = _as_matrix(inputs["b"], (k, n), "b")
        kp, np_ = _round_up(k, vw), _round_up(n, vw)
        a, b = _pad(a, (m, kp)), _pad(b, (kp, np_))
        groups_n = -(-n // bn)
        groups = -(-m // bm) * groups_n
        values = {
            "WG": schedule.workgroup_size,
            "BM": bm,
            "BN": bn,
            "BK": bk,
            "TM": knobs["reg_m"],
            "TN": knobs["reg_n"],
            "VW": vw,
            "NBUF": 2 if db else 1,
            "VEC": "f32" if vw == 1 else "vec4<f32>",
        }
        values |= unrolled_blocks(schedule.workgroup_size, bm, bn, bk, knobs["reg_m"], knobs["reg_n"], vw)
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


def workgroup_bytes(tile_m: int, tile_n: int, tile_k: int, double_buffer: int) -> int:
    """Workgroup memory a schedule declares: NBUF slices of A (BK×BM) and B (BK×BN), f32."""
    return (2 if double_buffer else 1) * tile_k * (tile_m + tile_n) * 4


def unrolled_blocks(threads: int, bm: int, bn: int, bk: int, tm: int, tn: int, vw: int) -> dict[str, str]:
    """The WGSL the template leaves to the host: the register tile, the staged loads and
    the C stores written out as straight-line code over named scalars, so no private
    array is indexed in a loop (drivers may put those in local memory)."""
    loads_a = -(-bm * bk // (vw * threads))
    loads_b = -(-bk * bn // (vw * threads))
    vec = "f32" if vw == 1 else "vec4<f32>"
    declare = [f"var acc_{i}_{j} = 0.0;" for i in range(tm) for j in range(tn)]
    declare += [f"var a_next_{i}: {vec};" for i in range(loads_a)]
    declare += [f"var b_next_{i}: {vec};" for i in range(loads_b)]
    fetch = [f"a_next_{i} = load_a(slice, row0, lid + {i * threads}u);" for i in range(loads_a)]
    fetch += [f"b_next_{i} = load_b(slice, col0, lid + {i * threads}u);" for i in range(loads_b)]
    stash = [f"put_a(buf, lid + {i * threads}u, a_next_{i});" for i in range(loads_a)]
    stash += [f"put_b(buf, lid + {i * threads}u, b_next_{i});" for i in range(loads_b)]
    step = ["let a_base = (buf * BK + kk) * BM + ty;", "let b_base = (buf * BK + kk) * BN + tx;"]
    step += [f"let a_{i} = a_tile[a_base + {i * (bm // tm)}u];" for i in range(tm)]
    step += [f"let b_{j} = b_tile[b_base + {j * (bn // tn)}u];" for j in range(tn)]
    step += [f"acc_{i}_{j} = fma(a_{i}, b_{j}, acc_{i}_{j});" for i in range(tm) for j in range(tn)]
    multiply = ["for (var kk = 0u; kk < BK; kk++) {", *("    " + line for line in step), "}"]
    write = [
        f"store_c(row0 + ty + {i * (bm // tm)}u, col0 + tx + {j * (bn // tn)}u, acc_{i}_{j});"
        for i in range(tm)
        for j in range(tn)
    ]
    lanes = ["v"] if vw == 1 else ["v.x", "v.y", "v.z", "v.w"]
    put_a = [f"a_tile[at + {q * bm}u] = {lane};" for q, lane in enumerate(lanes)]
    put_b = [f"b_tile[at + {q}u] = {lane};" for q, lane in enumerate(lanes)]
    blocks = {"DECLARE": declare, "FETCH": fetch, "STASH": stash, "MULTIPLY": multiply, "WRITE": write}
    blocks |= {"PUT_A": put_a, "PUT_B": put_b}
    return {name: "\n    ".join(lines) for name, lines in blocks.items()}


def _first_problem(knobs: dict[str, int], bm: int, bn: int, tm: int, tn: int, bk: int) -> str:
    """The first reason the knob values can't form a kernel, or '' when they can."""
    vw = knobs["vector_width"]
    if min(bm, bn, tm, tn, bk) < 1:
        return f"tile sizes must be >= 1 (tile_m={bm}, tile_n={bn}, reg_m={tm}, reg_n={tn}, tile_k={bk})"
    if bm % tm:
        return f"reg_m {tm} does not divide tile_m {bm}"
    if bn % tn:
        return f"reg_n {tn} does not divide tile_n {bn}"
    threads = (bm // tm) * (bn // tn)
    if knobs["workgroup_size"] != threads:
        return f"workgroup_size {knobs['workgroup_size']} != (tile_m/reg_m)*(tile_n/reg_n) = {threads}"
    if knobs["items_per_invocation"] != tm * tn:
        return f"items_per_invocation {knobs['items_per_invocation']} != reg_m*reg_n = {tm * tn}"
    if vw not in (1, 4):
        return f"vector_width {vw} not in (1, 4)"
    if bk % vw:
        return f"vector_width {vw} does not divide tile_k {bk}"
    if bn % vw:
        return f"vector_width {vw} does not divide tile_n {bn}"
    if knobs["double_buffer"] not in (0, 1):
        return f"double_buffer {knobs['double_buffer']} not in (0, 1)"
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
