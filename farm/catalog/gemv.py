"""gemv: y = A·x, row-major f32 (m×n)·(n)."""

from __future__ import annotations

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule


class Gemv(KernelSpec):
    name = "gemv"
    source_file = "gemv.wgsl"
    dims = ("m", "n")
    space = {
        "workgroup_size": (32, 64, 128, 256),
        "items_per_invocation": (1, 2, 4),
        "vector_width": (1, 4),
        "threads_per_row": (1, 4, 8, 32),
    }
    atol = 1e-4
    rtol = 1e-4

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(m=256, n=256)]
        return [self.problem(m=4096, n=4096), self.problem(m=16384, n=16384)]

    def certify_problems(self) -> list[Problem]:
        return [self.problem(m=1, n=1), self.problem(m=1000, n=777), self.problem(m=129, n=512)]

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        tpr = schedule.get("threads_per_row", 1)
        if schedule.workgroup_size % tpr:
            raise InvalidSchedule(self.name, schedule, f"threads_per_row {tpr} does not divide workgroup_size")
        if tpr & (tpr - 1):
            raise InvalidSchedule(self.name, schedule, f"threads_per_row {tpr} is not a power of two")
        if schedule.vector_width not in (1, 4):
            raise InvalidSchedule(self.name, schedule, f"vector_width {schedule.vector_width} not in (1, 4)")
        if problem["n"] % schedule.vector_width:
            raise InvalidSchedule(
                self.name, schedule, f"vector_width {schedule.vector_width} does not divide n={problem['n']}"
            )

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        return 4 * schedule.workgroup_size  # one partial sum per thread

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        a = rng.standard_normal((problem["m"], problem["n"]), dtype=np.float32)
        x = rng.standard_normal(problem["n"], dtype=np.float32)
        return {"a": a, "x": x}

    def reference(self, problem, schedule, inputs):
        y = inputs["a"].astype(np.float64) @ inputs["x"].astype(np.float64)
        return {"y": y.astype(np.float32)}

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        # f32 accumulation error grows like sqrt(n) * eps * |terms|.
        return (2e-6 * np.sqrt(problem["n"]) * 4, 1e-4)

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        m, n = problem["m"], problem["n"]
        wg, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        tpr = schedule.get("threads_per_row", 1)
        rows_per_group = (wg // tpr) * ipi
        groups = -(-m // rows_per_group)
        vec = "f32" if vw == 1 else "vec4<f32>"
        muladd = "a[base + c] * x[c]" if vw == 1 else "dot(a[base + c], x[c])"
        source = render(self.template(), {"WG": wg, "TPR": tpr, "IPI": ipi, "VW": vw, "VEC": vec, "MULADD": muladd})
        return Launch(
            source=source,
            args=[
                Arg("a", "read", np.ascontiguousarray(inputs["a"], np.float32)),
                Arg("x", "read", np.ascontiguousarray(inputs["x"], np.float32)),
                Arg("y", "storage", dtype=np.float32, shape=(m,), output=True),
                Arg("params", "uniform", np.array([m, n, groups, 0], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        m, n = problem["m"], problem["n"]
        return (2.0 * m * n, 4.0 * (m * n + n + m))

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        m, n = problem["m"], problem["n"]
        return {"a": 4 * m * n, "x": 4 * n, "y": 4 * m}


register(Gemv())
