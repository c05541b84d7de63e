"""topk (per-block): the k largest values of each block of x, descending.

The block size is the schedule's workgroup_size, so the reference depends on the
schedule. For x of n f32 values and B = workgroup_size, the output has
ceil(n / B) * k values: block b contributes its k largest, descending; the tail
block is padded with -FLT_MAX first, so every block yields k values. 1 <= k <= B.

NaN rule (the kernel and reference agree bit for bit): every NaN counts as +NaN and
sorts above +Inf; a NaN in the output is the canonical quiet NaN 0x7fc00000. Otherwise values
are ordered as numbers (the kernel uses IEEE-754 total order, so -0.0 sorts just
below +0.0, which compares equal). -Inf sorts below the -FLT_MAX padding.
"""

from __future__ import annotations

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

PAD = np.float32(-3.4028234663852886e38)  # -FLT_MAX
CANONICAL_NAN_BITS = np.uint32(0x7FC00000)  # the default quiet NaN
# NaN, -NaN, NaN with a payload, +Inf, -Inf, +0, -0 (as f32 bit patterns).
SPECIAL_BITS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000], np.uint32)


def topk_blocks(x: np.ndarray, k: int, block_size: int) -> np.ndarray:
    """The per-block top-k of `x` (f32), descending, tail padded with -FLT_MAX, NaN largest."""
    x = np.asarray(x, np.float32).ravel()
    if x.size == 0:
        raise ValueError("topk input must be non-empty")
    if not 1 <= k <= block_size:
        raise ValueError(f"k must be in 1..=block_size ({block_size}); got {k}")
    blocks = -(-x.size // block_size)
    padded = np.full(blocks * block_size, PAD, np.float32)
    padded[: x.size] = x
    ordered = np.sort(padded.reshape(blocks, block_size), axis=1)  # NaN sorts last
    out = np.ascontiguousarray(ordered[:, ::-1][:, :k]).ravel()
    out.view(np.uint32)[np.isnan(out)] = CANONICAL_NAN_BITS
    return out


class TopK(KernelSpec):
    name = "topk"
    source_file = "topk.wgsl"
    dims = ("n", "k")
    space = {
        "workgroup_size": (32, 64, 128, 256, 512, 1024),
        "items_per_invocation": (1, 2, 4, 8),
        "vector_width": (1, 4),
    }
    exact = True
    schedule_dependent_reference = True  # the block size is the workgroup size

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(n=4096, k=8)]
        # 2**26 floats = 256 MiB, or as much as one storage binding allows.
        n = min(2**26, profile.limit("max-storage-buffer-binding-size") // 4)
        return [self.problem(n=n, k=8), self.problem(n=n, k=32)]

    def certify_problems(self) -> list[Problem]:
        return [self.problem(n=1, k=1), self.problem(n=1000, k=5), self.problem(n=4100, k=32)]

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        block, k, n = schedule.workgroup_size, problem["k"], problem["n"]
        if block & (block - 1):
            raise InvalidSchedule(self.name, schedule, f"workgroup_size {block} is not a power of two (bitonic sort)")
        if n < 1:
            raise InvalidSchedule(self.name, schedule, f"n={n} must be >= 1")
        if not 1 <= k <= block:
            raise InvalidSchedule(self.name, schedule, f"k={k} must be in 1..=block_size (workgroup_size {block})")
        ipi = schedule.items_per_invocation
        if ipi < 1:
            raise InvalidSchedule(self.name, schedule, f"items_per_invocation {ipi} < 1")
        vw = schedule.vector_width
        if vw not in (1, 4):
            raise InvalidSchedule(self.name, schedule, f"vector_width {vw} not in (1, 4)")
        if n % vw:
            raise InvalidSchedule(self.name, schedule, f"vector_width {vw} does not divide n={n}")

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        return 4 * schedule.workgroup_size * schedule.items_per_invocation  # ipi blocks of f32 keys

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        """Normal values with ties and ~1% specials: NaNs (negative, with payloads), ±Inf, ±0."""
        rng = rng_for(seed, self.name, problem.key())
        n = problem["n"]
        x = rng.standard_normal(n, dtype=np.float32)
        x[rng.random(n) < 0.05] = np.float32(1.5)  # ties
        marks = rng.random(n) < 0.01
        x.view(np.uint32)[marks] = SPECIAL_BITS[rng.integers(0, SPECIAL_BITS.size, int(marks.sum()))]
        return {"x": x}

    def reference(self, problem, schedule, inputs):
        return {"out": topk_blocks(inputs["x"], problem["k"], schedule.workgroup_size)}

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        n, k = problem["n"], problem["k"]
        block, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        blocks = -(-n // block)
        groups = -(-blocks // ipi)
        source = render(
            self.template(),
            {"WG": block, "IPI": ipi, "VW": vw, "VEC": "u32" if vw == 1 else "vec4<u32>", "LOAD": _load_body(vw)},
        )
        return Launch(
            source=source,
            args=[
                Arg("x", "read", np.ascontiguousarray(inputs["x"], np.float32)),
                Arg("out", "storage", dtype=np.float32, shape=(blocks * k,), output=True),
                Arg("params", "uniform", np.array([n, k, groups, blocks], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        """(one comparison per element, input read + output written at the default block of 64)."""
        n, k = problem["n"], problem["k"]
        return (float(n), 4.0 * (n + -(-n // self.default.workgroup_size) * k))


def _load_body(vw: int) -> str:
    """WGSL that turns x[first + v] (covering elements e..e+vw-1) into sort keys."""
    if vw == 1:
        return "if (e < p.n) { keys[e - base] = to_key(x[first + v]); } else { keys[e - base] = PAD_KEY; }"
    lanes = "xyzw"
    fill = " ".join(f"keys[e - base + {i}u] = to_key(q.{c});" for i, c in enumerate(lanes))
    pad = " ".join(f"keys[e - base + {i}u] = PAD_KEY;" for i in range(4))
    return f"if (e < p.n) {{ let q = x[first + v]; {fill} }} else {{ {pad} }}"


register(TopK())
