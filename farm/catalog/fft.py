"""fft: batched forward radix-2 DIT DFT of interleaved complex f32 (matches numpy.fft.fft).

Problem: `n` points per transform (a power of two, 2 ≤ n ≤ 1024; n = 1 is rejected with
ValueError when the problem is built, and with InvalidSchedule if a problem built some
other way reaches `check`) and `batch` transforms in one dispatch. Inputs: `x` of shape
(batch, n, 2) (real, imaginary) or any array of batch·n·2 floats; output `y` (batch, n, 2).

Schedule knobs (see kernels/fft.wgsl):
- `workgroup_size`: threads sharing a workgroup's butterflies; each does
  ⌈items·n/2 / workgroup_size⌉ butterflies per stage, and threads beyond items·n/2 idle
  (accepted, not rejected: they are simply wasted);
- `items_per_invocation`: transforms per workgroup; workgroup memory is 8·n·items bytes,
  checked against the adapter's limit;
- `vector_width`: 1 (two f32 loads per point) or 2 (one vec2<f32> load); others rejected.
Twiddles are a host table exp(-2πi·t/n), t < n/2, computed in float64 and rounded to f32.
"""

from __future__ import annotations

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

MAX_N = 1024

_ACCESS = {
    1: (
        "f32",
        "return vec2<f32>(x[2u * point], x[2u * point + 1u]);",
        "y[2u * point] = v.x; y[2u * point + 1u] = v.y;",
    ),
    2: ("vec2<f32>", "return x[point];", "y[point] = v;"),
}


def length_problem(n: int) -> str:
    """Why `n` is not a valid transform length, or '' when it is."""
    if n < 2 or n > MAX_N or n & (n - 1):
        return f"fft length n={n} must be a power of two with 2 <= n <= {MAX_N}"
    return ""


class Fft(KernelSpec):
    name = "fft"
    source_file = "fft.wgsl"
    dims = ("n", "batch")
    space = {
        "workgroup_size": (32, 64, 128, 256, 512, 1024),
        "items_per_invocation": (1, 2, 4, 8),
        "vector_width": (1, 2),
    }
    default = Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1)

    # -- problems ------------------------------------------------------------------
    def problem(self, **dims: int) -> Problem:
        problem = super().problem(**dims)
        reason = length_problem(problem["n"])
        if reason:
            raise ValueError(reason)
        if problem["batch"] < 1:
            raise ValueError(f"fft batch must be >= 1; got batch={problem['batch']}")
        return problem

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(n=256, batch=16)]
        return [self.problem(n=1024, batch=16384)]

    def certify_problems(self) -> list[Problem]:
        return [
            self.problem(n=2, batch=3),
            self.problem(n=64, batch=5),
            self.problem(n=256, batch=7),
            self.problem(n=1024, batch=2),
        ]

    # -- schedules -----------------------------------------------------------------
    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        n = problem["n"]
        reason = length_problem(n)
        if reason:
            raise InvalidSchedule(self.name, schedule, reason)
        max_wg = profile.limit("max-compute-invocations-per-workgroup")
        if n > max_wg:
            raise InvalidSchedule(self.name, schedule, f"n={n} > max-compute-invocations-per-workgroup {max_wg}")
        if schedule.vector_width not in (1, 2):
            raise InvalidSchedule(self.name, schedule, f"vector_width {schedule.vector_width} not in (1, 2)")
        if schedule.items_per_invocation < 1:
            raise InvalidSchedule(self.name, schedule, f"items_per_invocation {schedule.items_per_invocation} < 1")

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        return workgroup_bytes(problem["n"], schedule.items_per_invocation)

    # -- data ----------------------------------------------------------------------
    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        return {"x": rng.standard_normal((problem["batch"], problem["n"], 2), dtype=np.float32)}

    def reference(self, problem, schedule, inputs):
        x = _as_signals(inputs["x"], problem).astype(np.float64)
        spectrum = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=-1)
        return {"y": np.stack([spectrum.real, spectrum.imag], axis=-1).astype(np.float32)}

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        # Outputs of unit-normal signals have magnitude ~sqrt(n); f32 rounding adds up over
        # log2(n) stages.
        n = problem["n"]
        return (2e-6 * float(np.sqrt(n)) * max(1, int(n).bit_length() - 1), 1e-4)

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        n, batch = problem["n"], problem["batch"]
        reason = length_problem(n)
        if reason:
            raise ValueError(reason)
        items = schedule.items_per_invocation
        groups = -(-batch // items)
        elem, load, store = _ACCESS[schedule.vector_width]
        values = {"WG": schedule.workgroup_size, "N": n, "LOGN": n.bit_length() - 1, "T": items}
        source = render(self.template(), values | {"ELEM": elem, "LOAD": load, "STORE": store})
        return Launch(
            source=source,
            args=[
                Arg("x", "read", _as_signals(inputs["x"], problem)),
                Arg("twiddle", "read", twiddles(n)),
                Arg("y", "storage", dtype=np.float32, shape=(batch, n, 2), output=True),
                Arg("params", "uniform", np.array([batch, groups, 0, 0], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        n, batch = problem["n"], problem["batch"]
        return (5.0 * n * np.log2(n) * batch, 16.0 * n * batch)


def workgroup_bytes(n: int, transforms: int) -> int:
    """Workgroup memory: every point of the workgroup's transforms as vec2<f32>."""
    return 8 * n * transforms


def twiddles(n: int) -> np.ndarray:
    """exp(-2πi·t/n) for t < n/2 as (n/2, 2) f32, computed in float64."""
    angle = -2.0 * np.pi * np.arange(n // 2, dtype=np.float64) / n
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1).astype(np.float32)


def _as_signals(value: np.ndarray, problem: Problem) -> np.ndarray:
    """`value` as a contiguous (batch, n, 2) f32 array; refuses any other element count."""
    batch, n = problem["batch"], problem["n"]
    array = np.asarray(value)
    if array.size != batch * n * 2:
        raise ValueError(
            f"fft input x has shape {array.shape}; expected (batch={batch}, n={n}, 2) or {batch * n * 2} floats"
        )
    return np.ascontiguousarray(array, dtype=np.float32).reshape(batch, n, 2)


register(Fft())
