"""p64_project: out[r] = sum_{w<16} weights[w] * f32(word[r][w]) over n P64 records.

A record is 16 u32 words (64 bytes). Bindings: 0 = records (n*16 u32), 1 = weights
(16 f32), 2 = out (n f32), 3 = params uniform (n, groups).

The reference converts each word to f32 first (as the GPU does), then sums in
float64. The GPU sums 16 f32 terms of magnitude up to 2**32, so its error is bounded
by about 17 * 2**-24 * sum_w |weights[w] * word[w]| (conversion + product + 15
additions); with generated weights in [-1, 1] that sum is at most 16 * 2**32, giving
a fixed absolute tolerance. A relative tolerance on the result alone would be wrong:
mixed-sign weights cancel, so a correct result can be small while its error is not.
"""

from __future__ import annotations

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

WORDS = 16
RECORD_BYTES = 4 * WORDS
# 17 roundings of 2**-24 relative to sum |terms| <= 16 * 2**32 (|weights| <= 1), plus slack.
ATOL = 18.0 * 2.0**-24 * WORDS * 2.0**32


def project_records(records: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """numpy reference: words converted to f32 first, then the weighted sum in float64."""
    words = np.asarray(records, np.uint32).reshape(-1, WORDS)
    as_f32 = words.astype(np.float32).astype(np.float64)
    return (as_f32 @ np.asarray(weights, np.float32).astype(np.float64)).astype(np.float32)


class P64Project(KernelSpec):
    name = "p64_project"
    source_file = "p64_project.wgsl"
    dims = ("n",)
    space = {
        "workgroup_size": (32, 64, 128, 256, 512),
        "items_per_invocation": (1, 2, 4, 8),
        "vector_width": (1, 4),
    }
    atol = ATOL
    rtol = 0.0

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(n=4096)]
        # 2**22 records = 256 MiB, or as many as one storage binding holds.
        return [self.problem(n=min(2**22, profile.limit("max-storage-buffer-binding-size") // RECORD_BYTES))]

    def certify_problems(self) -> list[Problem]:
        return [self.problem(n=1), self.problem(n=1000), self.problem(n=4097)]

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        if problem["n"] < 1:
            raise InvalidSchedule(self.name, schedule, f"p64_project needs n > 0 records; got n={problem['n']}")
        if schedule.items_per_invocation < 1:
            raise InvalidSchedule(self.name, schedule, f"items_per_invocation {schedule.items_per_invocation} < 1")
        if schedule.vector_width not in (1, 4):
            raise InvalidSchedule(self.name, schedule, f"vector_width {schedule.vector_width} not in (1, 4)")

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        """Full-range words (as bit-packed P64 fields are) and weights in [-1, 1]."""
        rng = rng_for(seed, self.name, problem.key())
        records = rng.integers(0, 2**32, (problem["n"], WORDS), dtype=np.uint32)
        weights = rng.uniform(-1.0, 1.0, WORDS).astype(np.float32)
        return {"records": records, "weights": weights}

    def reference(self, problem, schedule, inputs):
        return {"out": project_records(inputs["records"], inputs["weights"])}

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        n = problem["n"]
        _check_inputs(inputs, n)
        wg, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        groups = -(-n // (wg * ipi))
        source = render(
            self.template(),
            {"WG": wg, "IPI": ipi, "VW": vw, "VEC": "u32" if vw == 1 else "vec4<u32>", "PROJECT": _project_body(vw)},
        )
        return Launch(
            source=source,
            args=[
                Arg("records", "read", np.ascontiguousarray(inputs["records"], np.uint32).reshape(-1)),
                Arg("weights", "read", np.ascontiguousarray(inputs["weights"], np.float32)),
                Arg("out", "storage", dtype=np.float32, shape=(n,), output=True),
                Arg("params", "uniform", np.array([n, groups, 0, 0], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        n = problem["n"]
        return (2.0 * WORDS * n, float(RECORD_BYTES * n + 4 * WORDS + 4 * n))

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        n = problem["n"]
        return {"records": 4 * WORDS * n, "weights": 4 * WORDS, "out": 4 * n}


def _check_inputs(inputs: dict[str, np.ndarray], n: int) -> None:
    records, weights = inputs["records"], inputs["weights"]
    if np.size(records) != n * WORDS:
        raise ValueError(
            f"p64_project records must be n*16 = {n * WORDS} u32 words ({n * RECORD_BYTES} bytes); "
            f"got {np.size(records)} words of shape {np.shape(records)}"
        )
    if np.size(weights) != WORDS:
        raise ValueError(f"p64_project weights must have 16 elements; got {np.size(weights)}")


def _project_body(vw: int) -> str:
    """WGSL adding weights[w] * f32(word w) for w = 0..15 in order, from u32 or vec4 loads."""
    if vw == 1:
        return "\n    ".join(f"acc += weights[{w}] * f32(records[base + {w}u]);" for w in range(WORDS))
    lines = []
    for q in range(WORDS // 4):
        lines.append(f"let q{q} = records[base + {q}u];")
        lines += [f"acc += weights[{4 * q + i}] * f32(q{q}.{c});" for i, c in enumerate("xyzw")]
    return "\n    ".join(lines)


register(P64Project())
