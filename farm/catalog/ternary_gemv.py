"""ternary_gemv: out[o] = scale[o] * sum_{i<k} t(w[o][i]) * x[i] (BitNet-style GEMV).

Weights are 2-bit codes packed 16 per u32, low bits first, in m rows of
ceil(k/16) words: code 0 -> 0, 1 -> +1, 2 -> -1; the unused code 3 decodes to 0
(kernel and reference agree). Codes at positions >= k in a row's last word are
ignored. Bindings: 0 = x (k f32), 1 = w_packed (m*ceil(k/16) u32), 2 = scale (m
f32), 3 = out (m f32), 4 = params uniform (m, k, kw, groups).

Test vectors: for k <= EXACT_K the generator draws x as small integers and scales
as powers of two, so every partial sum is exact in f32 and certification demands
bit equality; larger k uses normal x and a summation-error tolerance.

Kernels (knob `stage_x`):
- 0 (default, absent from the original schedules' keys): each thread reads x from the
  storage buffer for every code and decodes t(c) through int->float conversions;
  items_per_invocation = row groups per workgroup, one after another.
- 1: x is staged in workgroup memory in tiles of STAGE_TILE_WORDS packed words (shared
  by every row of the workgroup), items_per_invocation rows per thread are accumulated
  together (each x read serves all of them), codes decode by bit tests into two sums
  (no conversions), and vector_width 4 loads 64 codes per vec4<u32>.
"""

from __future__ import annotations

import itertools
import re
from functools import cache

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, read_source, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

CODES_PER_WORD = 16
STAGE_TILE_WORDS = 256  # packed words per staged x tile: 4096 x values, 16 KiB of workgroup memory
EXACT_K = 65536  # |x| <= 8 keeps |partial sums| <= 8 * 65536 = 2**19 < 2**24: exact in f32


def row_words(k: int) -> int:
    """u32 words per packed row: ceil(k / 16)."""
    return -(-k // CODES_PER_WORD)


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """Pack an (m, k) array of 2-bit codes into (m, ceil(k/16)) u32 words, low bits first."""
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must be 2-D (m, k); got shape {codes.shape}")
    if codes.size and (codes.min() < 0 or codes.max() > 3):
        raise ValueError(f"codes must be in 0..3; got range {codes.min()}..{codes.max()}")
    m, k = codes.shape
    padded = np.zeros((m, row_words(k) * CODES_PER_WORD), np.uint32)
    padded[:, :k] = codes
    shifts = (2 * np.arange(CODES_PER_WORD, dtype=np.uint32))[None, None, :]
    return np.bitwise_or.reduce(padded.reshape(m, -1, CODES_PER_WORD) << shifts, axis=2).astype(np.uint32)


def unpack_ternary(w_packed: np.ndarray, m: int, k: int) -> np.ndarray:
    """The (m, k) matrix of ternary values {-1, 0, +1} held in packed rows (code 3 -> 0)."""
    words = np.asarray(w_packed, np.uint32).reshape(m, row_words(k))
    shifts = (2 * np.arange(CODES_PER_WORD, dtype=np.uint32))[None, None, :]
    codes = ((words[:, :, None] >> shifts) & np.uint32(3)).reshape(m, -1)[:, :k].astype(np.int8)
    return (codes & 1) - (codes >> 1)


class TernaryGemv(KernelSpec):
    name = "ternary_gemv"
    source_file = "ternary_gemv.wgsl"
    dims = ("m", "k")
    space = {
        "workgroup_size": (32, 64, 128, 256),
        "items_per_invocation": (1, 2, 4),
        "vector_width": (1, 4),
        "threads_per_row": (1, 4, 8, 32),
        "stage_x": (0, 1),
    }

    def schedules(self) -> list[Schedule]:
        """The original direct space (without `stage_x`, so its keys and winners carry over)
        plus the staged kernel at 64-256 threads."""
        out = []
        for stage in self.space["stage_x"]:
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
        return out

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
        if schedule.get("stage_x", 0) not in self.space["stage_x"]:
            raise InvalidSchedule(self.name, schedule, f"stage_x {schedule.get('stage_x', 0)} not in (0, 1)")

    def exact_data(self, problem: Problem) -> bool:
        """Whether generated inputs keep every f32 partial sum exact (then tolerance is 0)."""
        return problem["k"] <= EXACT_K

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        partial = 4 * schedule.workgroup_size  # one partial sum per thread
        if schedule.get("stage_x", 0) == 1:
            return partial + 64 * tile_words(row_words(problem["k"]))  # 16 f32 of x per packed word
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
        t = unpack_ternary(inputs["w_packed"], m, k).astype(np.float64)
        dots = t @ inputs["x"].astype(np.float64)
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
        source = (staged_source if schedule.get("stage_x", 0) == 1 else direct_source)(wg, tpr, ipi, vw, kw)
        return Launch(
            source=source,
            args=[
                Arg("x", "read", np.ascontiguousarray(inputs["x"], np.float32)),
                Arg("w_packed", "read", np.ascontiguousarray(inputs["w_packed"], np.uint32)),
                Arg("scale", "read", np.ascontiguousarray(inputs["scale"], np.float32)),
                Arg("out", "storage", dtype=np.float32, shape=(m,), output=True),
                Arg("params", "uniform", np.array([m, k, kw, groups], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        m, k = problem["m"], problem["k"]
        return (2.0 * m * k, 4.0 * (m * row_words(k) + k + 2 * m))


_SECTION = re.compile(r"^//// (\w+)\s*$", re.MULTILINE)


@cache
def sections() -> dict[str, str]:
    """ternary_gemv.wgsl's `//// name` sections: the direct and the staged kernel."""
    parts = _SECTION.split(read_source(TernaryGemv.source_file))
    return {parts[i]: parts[i + 1].strip("\n") + "\n" for i in range(1, len(parts), 2)}


def tile_words(kw: int) -> int:
    """Packed words per staged x tile: STAGE_TILE_WORDS, or kw rounded up to 4 when smaller."""
    return min(STAGE_TILE_WORDS, -(-kw // 4) * 4)


def direct_source(wg: int, tpr: int, ipi: int, vw: int, kw: int) -> str:
    """The original kernel (x read from storage per code, ipi row groups in turn)."""
    return render(
        sections()["direct"],
        {
            "WG": wg,
            "TPR": tpr,
            "IPI": ipi,
            "VW": vw,
            "VEC": "u32" if vw == 1 else "vec4<u32>",
            "ACCUMULATE": _accumulate(vw),
            "UNROLLED": _UNROLLED,
        },
    )


def staged_source(wg: int, tpr: int, rows: int, vw: int, kw: int) -> str:
    """The staged kernel: x tiles in workgroup memory, `rows` rows per thread at once."""
    return render(
        sections()["staged"],
        {
            "WG": wg,
            "TPR": tpr,
            "R": rows,
            "VW": vw,
            "VEC": "u32" if vw == 1 else "vec4<u32>",
            "TILE_WORDS": tile_words(kw),
            "SWIZZLE_SHIFT": 2 if vw == 1 else 4,
            "ROWS": _lines(_row_setup(rows), 4),
            "BODY": _lines(_staged_body(rows, vw), 12),
            "REDUCE": _lines((f"finish(row{r}, pos{r} - neg{r}, lid, lane);" for r in range(rows)), 4),
        },
    )


def _lines(lines, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in lines)


def _row_setup(rows: int) -> list[str]:
    """Row indices (rows past m read row m-1 and are not written) and the two sums per row."""
    out = []
    for r in range(rows):
        out += [
            f"let row{r} = group * SLOTS * R + {r}u * SLOTS + slot;",
            f"let wrow{r} = min(row{r}, p.m - 1u) * nv;",
            f"var pos{r} = 0.0;",
            f"var neg{r} = 0.0;",
        ]
    return out


def _staged_body(rows: int, vw: int) -> list[str]:
    """One weight vector (vw words) per row: load x once, decode every row's codes."""
    lines = ["let xb = c * (4u * VW);"]
    lines += [f"let x{q} = xs[swz(xb + {q}u)];" for q in range(4 * vw)]
    for r in range(rows):
        lines.append(f"let v{r} = w[wrow{r} + t0 / VW + c];")
        words = [f"v{r}"] if vw == 1 else [f"v{r}.{lane}" for lane in "xyzw"]
        for i, word in enumerate(words):
            for j in range(CODES_PER_WORD):
                value = f"x{4 * i + j // 4}.{'xyzw'[j % 4]}"
                lines.append(f"if (({word} & 0x{1 << 2 * j:x}u) != 0u) {{ pos{r} += {value}; }}")
                lines.append(f"if (({word} & 0x{2 << 2 * j:x}u) != 0u) {{ neg{r} += {value}; }}")
    return lines


def _check_inputs(inputs: dict[str, np.ndarray], m: int, k: int) -> None:
    want = {"x": k, "w_packed": m * row_words(k), "scale": m}
    for name, size in want.items():
        got = np.size(inputs[name])
        if got != size:
            raise ValueError(f"ternary_gemv {name} must have {size} elements for m={m}, k={k}; got {got}")


_UNROLLED = "\n            + ".join(f"ternary(word, {j}u) * x[first + {j}u]" for j in range(CODES_PER_WORD))


def _accumulate(vw: int) -> str:
    """WGSL adding the codes of v (one word, or a vec4 of words) for word index c."""
    if vw == 1:
        return "acc += word_dot(v, c * 16u);"
    return " ".join(f"acc += word_dot(v.{lane}, c * 64u + {16 * i}u);" for i, lane in enumerate("xyzw"))


register(TernaryGemv())
