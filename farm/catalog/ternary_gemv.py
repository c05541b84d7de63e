"""ternary_gemv: out[o] = scale[o] * sum_{i<k} t(w[o][i]) * x[i] (BitNet-style GEMV).

Weights are 2-bit codes packed 16 per u32, low bits first, in m rows of
ceil(k/16) words: code 0 -> 0, 1 -> +1, 2 -> -1; the unused code 3 decodes to 0
(kernel and reference agree). Codes at positions >= k in a row's last word are
ignored. Bindings: 0 = x (k f32), 1 = w_packed (m*ceil(k/16) u32), 2 = scale (m
f32), 3 = out (m f32), 4 = params uniform (m, k, kw, groups).

Test vectors: for k <= EXACT_K the generator draws x as small integers and scales
as powers of two, so every partial sum is exact in f32 and certification demands
bit equality; larger k uses normal x and a summation-error tolerance.

Kernels (knob `stage_x`): 0 direct (the default), 1 x staged in workgroup memory, 2 a
pair lookup table, 3 integer dot products over x's digit planes, 4 the same over planes
built by a pass of their own with k split over several workgroups (split_launch, in
farm/catalog/ternary_split.py: its first pass also writes each tile's digit sums per lane
of the loop, and the loop loads each weight vector an iteration early).
Their WGSL emitters and tile layouts are in farm/catalog/ternary_variants.py; the design and
its bound: docs/decisions/006-ternary-gemv-bound.md.
"""

from __future__ import annotations

import inspect
import itertools

import numpy as np

from farm.catalog import KernelSpec, Launch, register, rng_for
from farm.catalog.ternary_split import SPLIT_EMITTERS, _args, split_launch
from farm.catalog.ternary_variants import (
    CODES_PER_WORD,
    DP4A_TILE_WORDS,
    EMITTERS,
    LUT_PAD,
    LUT_TILE_WORDS,
    SOURCE_FILE,
    STAGE_TILE_WORDS,
    UNROLLED,
    direct_source,
    dp4a_source,
    lut_group,
    lut_source,
    staged_source,
    tile_words,
)
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

LUT_MAX_WORDS = 64  # weight words a stage_x=2 thread holds in registers per tile (R * 32 / TPR)
# stage_x=2 schedules: (workgroup_size, items_per_invocation, vector_width, threads_per_row)
# that check_knobs accepts, with 64-512 rows per workgroup (the table build is amortized
# over the rows; fewer rows leave it dominant, more leave too few workgroups for the SMs);
# 512 threads only with vec4 loads and <= 32 weight words per thread (<= 128 registers).
LUT_SPACE = tuple(
    (wg, rows, vw, tpr)
    for wg, rows, vw, tpr in itertools.product((64, 128, 256, 512), (1, 2, 4), (1, 4), (1, 2, 4, 8))
    if tpr * vw <= LUT_TILE_WORDS
    and rows * LUT_TILE_WORDS // tpr <= LUT_MAX_WORDS
    and 64 <= wg * rows // tpr <= 512
    and (wg < 512 or (vw == 4 and rows * LUT_TILE_WORDS // tpr <= 32))
)
# stage_x=3 schedules: (workgroup_size, items_per_invocation, vector_width, threads_per_row)
# with 16-256 rows per workgroup (the per-tile planes are built once per workgroup: fewer
# rows leave them dominant; more leave too few workgroups on the 16384-row shape) and 2-8
# rows per thread (each row a thread adds amortizes its per-word plane reads).
DP4A_SPACE = tuple(
    (wg, rows, vw, tpr)
    for wg, rows, vw, tpr in itertools.product((64, 128, 256, 512), (2, 4, 8), (1, 4), (1, 2, 4, 8, 16, 32))
    if tpr * vw <= DP4A_TILE_WORDS // 4 and 16 <= wg * rows // tpr <= 256 and wg % tpr == 0
)
# stage_x=4 schedules: (workgroup_size, items_per_invocation, vector_width, threads_per_row,
# splits). The planes come from a pass of their own, so rows per workgroup no longer
# amortize them: 8-256 rows per workgroup, vec4 loads (stage_x=3's winners have them), and
# k split over 1-8 workgroups per row block (the 16384-row shape has only 64 workgroups of
# 256 rows for a GPU's 100+ SMs).
SPLITS = (1, 2, 4, 8)
SPLIT_SPACE = tuple(
    (wg, rows, 4, tpr, splits)
    for wg, rows, tpr, splits in itertools.product((128, 256, 512), (2, 4, 8), (2, 4, 8), SPLITS)
    if 8 <= wg * rows // tpr <= 256
)
EXACT_K = 65536  # |x| <= 8 keeps |partial sums| <= 8 * 65536 = 2**19 < 2**24: exact in f32


def row_words(k: int) -> int:
    """u32 words per packed row: ceil(k / 16)."""
    return -(-k // CODES_PER_WORD)


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """Pack an (m, k) array of 2-bit codes into (m, ceil(k/16)) u32 words, low bits first.
    Four codes a byte, four bytes a little-endian word: bytes, not u32 lanes per code
    (65536 x 16384 codes packed in ~2 s instead of ~15 s and 8 GB)."""
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (m, k); got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() > 3):
        raise ValueError(f"codes must be in 0..3; got range {codes.min()}..{codes.max()}")
    m, k = codes.shape
    padded = np.zeros((m, row_words(k) * CODES_PER_WORD), np.uint8)
    padded[:, :k] = codes
    quads = padded.reshape(m, -1, 4)
    packed = quads[..., 0] | (quads[..., 1] << 2) | (quads[..., 2] << 4) | (quads[..., 3] << 6)
    return np.ascontiguousarray(packed).view("<u4").astype(np.uint32, copy=False).reshape(m, row_words(k))


def unpack_ternary(w_packed: np.ndarray, m: int, k: int) -> np.ndarray:
    """The (m, k) int8 matrix of ternary values {-1, 0, +1} held in packed rows (code 3 -> 0)."""
    words = np.ascontiguousarray(np.asarray(w_packed, np.uint32).reshape(m, row_words(k)), "<u4")
    data = words.view(np.uint8).reshape(m, -1, 1)
    codes = ((data >> np.array([0, 2, 4, 6], np.uint8)) & np.uint8(3)).reshape(m, -1)[:, :k].view(np.int8)
    return (codes & 1) - (codes >> 1)


def ternary_dots(w_packed: np.ndarray, x: np.ndarray, m: int, k: int, rows: int = 2048) -> np.ndarray:
    """Each row's float64 dot product with x, unpacked a block of rows at a time (the whole
    matrix in float64 is 8 bytes a code: 8 GB at 65536 x 16384)."""
    words = np.asarray(w_packed, np.uint32).reshape(m, row_words(k))
    x64 = np.asarray(x, np.float64)
    out = np.empty(m, np.float64)
    for start in range(0, m, rows):
        block = words[start : start + rows]
        out[start : start + rows] = unpack_ternary(block, len(block), k).astype(np.float64) @ x64
    return out


class TernaryGemv(KernelSpec):
    name = "ternary_gemv"
    source_file = SOURCE_FILE
    dims = ("m", "k")
    space = {
        "workgroup_size": (32, 64, 128, 256),
        "items_per_invocation": (1, 2, 4),
        "vector_width": (1, 4),
        "threads_per_row": (1, 4, 8, 32),
        "stage_x": (0, 1, 2, 3, 4),
        "splits": SPLITS,
    }  # stage_x=2, 3 and 4 also take threads_per_row 2 and workgroup_size 512 (LUT_SPACE, DP4A_SPACE,
    # SPLIT_SPACE); stage_x=4 adds the knob `splits`

    def schedules(self) -> list[Schedule]:
        """The original direct space (without `stage_x`, so its keys and winners carry over),
        the staged kernel at 64-256 threads, the pair-table kernel over LUT_SPACE and the
        integer dot-product kernel over DP4A_SPACE."""
        out = []
        for stage in (0, 1):
            sizes = self.space["workgroup_size"] if stage == 0 else (64, 128, 256)
            for wg, ipi, vw, tpr in itertools.product(
                sizes, self.space["items_per_invocation"], self.space["vector_width"], self.space["threads_per_row"]
            ):
                knobs = {"stage_x": 1} if stage else {}
                out.append(
                    Schedule.of(
                        workgroup_size=wg, items_per_invocation=ipi, vector_width=vw, threads_per_row=tpr, **knobs
                    )
                )
        for stage, space in ((2, LUT_SPACE), (3, DP4A_SPACE)):
            for wg, rows, vw, tpr in space:
                out.append(
                    Schedule.of(
                        workgroup_size=wg,
                        items_per_invocation=rows,
                        vector_width=vw,
                        threads_per_row=tpr,
                        stage_x=stage,
                    )
                )
        for wg, rows, vw, tpr, splits in SPLIT_SPACE:
            out.append(split_schedule(wg, rows, vw, tpr, splits))
        return out

    def host_source(self) -> str:
        """The host code that unrolls the staged and pair-table bodies, and its constants."""
        host = [*EMITTERS, *SPLIT_EMITTERS]
        consts = repr((STAGE_TILE_WORDS, LUT_TILE_WORDS, LUT_PAD, DP4A_TILE_WORDS, UNROLLED))
        return "".join(inspect.getsource(f) for f in host) + consts

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(m=256, k=1024)]
        # 65536 x 16384 codes = 256 MiB of packed weights.
        return [self.problem(m=65536, k=16384), self.problem(m=16384, k=65536)]

    def certify_problems(self) -> list[Problem]:
        return [
            self.problem(m=1, k=1),
            self.problem(m=1000, k=777),
            self.problem(m=129, k=1024),
            self.problem(m=3, k=EXACT_K + 17),
        ]

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        m, k = problem["m"], problem["k"]
        if m < 1 or k < 1:
            raise InvalidSchedule(self.name, schedule, f"ternary_gemv needs m > 0 and k > 0; got m={m}, k={k}")
        tpr = schedule.get("threads_per_row", 1)
        if tpr < 1 or tpr & (tpr - 1):
            raise InvalidSchedule(self.name, schedule, f"threads_per_row {tpr} is not a power of two")
        if schedule.workgroup_size % tpr:
            raise InvalidSchedule(self.name, schedule, f"threads_per_row {tpr} does not divide workgroup_size")
        if schedule.items_per_invocation < 1:
            raise InvalidSchedule(self.name, schedule, f"items_per_invocation {schedule.items_per_invocation} < 1")
        vw = schedule.vector_width
        if vw not in (1, 4):
            raise InvalidSchedule(self.name, schedule, f"vector_width {vw} not in (1, 4)")
        if row_words(k) % vw:
            raise InvalidSchedule(
                self.name, schedule, f"vector_width {vw} does not divide the row word count ceil(k/16)={row_words(k)}"
            )
        stage = schedule.get("stage_x", 0)
        if stage not in self.space["stage_x"]:
            raise InvalidSchedule(self.name, schedule, f"stage_x {stage} not in {self.space['stage_x']}")
        if stage == 2:
            self._check_lut(schedule, tpr, vw)
        splits = schedule.get("splits", 1) if stage == 4 else 1
        if splits not in SPLITS or ("splits" in dict(schedule.knobs) and stage != 4):
            raise InvalidSchedule(self.name, schedule, f"splits {splits} needs stage_x=4 and one of {SPLITS}")
        if stage in (3, 4) and tpr * vw > DP4A_TILE_WORDS:
            raise InvalidSchedule(
                self.name,
                schedule,
                f"threads_per_row {tpr} x vector_width {vw} exceeds the {DP4A_TILE_WORDS} packed words "
                f"of a stage_x={stage} tile",
            )

    def _check_lut(self, schedule: Schedule, tpr: int, vw: int) -> None:
        """The pair-table kernel's layout rules (stage_x=2)."""
        wg, rows = schedule.workgroup_size, schedule.items_per_invocation
        if wg % 16:
            raise InvalidSchedule(
                self.name,
                schedule,
                f"workgroup_size {wg} is not a multiple of 16 (stage_x=2 builds one table nibble per thread)",
            )
        if tpr * vw > LUT_TILE_WORDS:
            raise InvalidSchedule(
                self.name,
                schedule,
                f"threads_per_row {tpr} x vector_width {vw} exceeds the {LUT_TILE_WORDS} packed words "
                "of a stage_x=2 tile",
            )
        held = rows * LUT_TILE_WORDS // tpr
        if held > LUT_MAX_WORDS:
            raise InvalidSchedule(
                self.name,
                schedule,
                f"items_per_invocation {rows} with threads_per_row {tpr} holds {held} weight words per thread "
                f"per stage_x=2 tile (> {LUT_MAX_WORDS} registers)",
            )

    def exact_data(self, problem: Problem) -> bool:
        """Whether generated inputs keep every f32 partial sum exact (then tolerance is 0)."""
        return problem["k"] <= EXACT_K

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        partial = 4 * schedule.workgroup_size  # one partial sum per thread
        stage = schedule.get("stage_x", 0)
        if stage == 1:
            return partial + 64 * tile_words(row_words(problem["k"]))  # 16 f32 of x per packed word
        if stage == 2:
            vw, tpr = schedule.vector_width, schedule.get("threads_per_row", 1)
            return partial + 4 * (LUT_TILE_WORDS // vw) * lut_group(vw, tpr)
        if stage in (3, 4):  # three digit planes and (stage_x=3) the digit sums, a vec4 per word
            vecs = 3 if stage == 4 else 4
            planes = vecs * 16 * (DP4A_TILE_WORDS + DP4A_TILE_WORDS // 8)  # swizzle padding
            return partial + planes + (8 if stage == 3 else 0)  # stage_x=3: two maxima
        return partial

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        m, k = problem["m"], problem["k"]
        w = pack_codes(rng.integers(0, 3, (m, k), dtype=np.uint8))
        if self.exact_data(problem):
            x = rng.integers(-8, 9, k).astype(np.float32)
            scale = np.exp2(rng.integers(-4, 5, m)).astype(np.float32)
        else:
            x = rng.standard_normal(k, dtype=np.float32)
            scale = rng.uniform(0.5, 2.0, m).astype(np.float32)
        return {"x": x, "w_packed": w, "scale": scale}

    def reference(self, problem, schedule, inputs):
        m, k = problem["m"], problem["k"]
        dots = ternary_dots(inputs["w_packed"], inputs["x"], m, k)
        return {"out": (inputs["scale"].astype(np.float64) * dots).astype(np.float32)}

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        if self.exact_data(problem):
            return (0.0, 0.0)
        # f32 accumulation error of k terms ~ sqrt(k) * eps * |x|, times scale <= 2.
        return (2e-6 * np.sqrt(problem["k"]) * 8, 1e-4)

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        m, k = problem["m"], problem["k"]
        kw = row_words(k)
        _check_inputs(inputs, m, k)
        wg, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        tpr = schedule.get("threads_per_row", 1)
        groups = -(-m // ((wg // tpr) * ipi))
        if schedule.get("stage_x", 0) == 4:
            return split_launch(inputs, m, k, wg, tpr, ipi, vw, schedule.get("splits", 1))
        if schedule.get("stage_x", 0) == 3:
            source = dp4a_source(wg, tpr, ipi, vw, kw)
        else:
            source = (direct_source, staged_source, lut_source)[schedule.get("stage_x", 0)](wg, tpr, ipi, vw, kw)
        return Launch(source=source, args=_args(inputs, m, [m, k, kw, groups]), groups=groups)

    def work(self, problem: Problem) -> tuple[float, float]:
        m, k = problem["m"], problem["k"]
        return (2.0 * m * k, 4.0 * (m * row_words(k) + k + 2 * m))

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        m, k = problem["m"], problem["k"]
        return {"x": 4 * k, "w_packed": 4 * m * row_words(k), "scale": 4 * m, "out": 4 * m}


def split_schedule(wg: int, rows: int, vw: int, tpr: int, splits: int) -> Schedule:
    return Schedule.of(
        workgroup_size=wg, items_per_invocation=rows, vector_width=vw, threads_per_row=tpr, stage_x=4, splits=splits
    )


def _check_inputs(inputs: dict[str, np.ndarray], m: int, k: int) -> None:
    want = {"x": k, "w_packed": m * row_words(k), "scale": m}
    for name, size in want.items():
        got = np.size(inputs[name])
        if got != size:
            raise ValueError(f"ternary_gemv {name} must have {size} elements for m={m}, k={k}; got {got}")


register(TernaryGemv())
