"""Test-only kernels that fail on purpose, one per fault the farm must survive.

Loaded in the test process by import and in Ray workers (and `farm tune` subprocesses)
through FARM_EXTRA_KERNELS=<path of this file>. Each one is gemv with one thing broken.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from farm.catalog import Arg, Launch, register, rng_for
from farm.catalog.gemv import Gemv
from farm.gpu import HardwareProfile
from farm.schedule import Problem, Schedule

PATH = os.path.abspath(__file__)
GEMV_SPACE = {"workgroup_size": (32, 64), "items_per_invocation": (1,), "vector_width": (1,), "threads_per_row": (1, 4)}


class CompileFault(Gemv):
    """WGSL with a syntax error: every schedule is a compile_error."""

    name = "fault_compile"
    space = GEMV_SPACE

    def launch(self, schedule, problem, inputs):
        launch = super().launch(schedule, problem, inputs)
        launch.source = launch.source.replace("fn main(", "fn main(((", 1)
        return launch


class WrongFault(Gemv):
    """A reference that disagrees with the (correct) kernel: wrong_result."""

    name = "fault_wrong"
    space = GEMV_SPACE

    def reference(self, problem, schedule, inputs):
        return {"y": super().reference(problem, schedule, inputs)["y"] + 1.0}


class RuntimeFault(Gemv):
    """A grid past the per-dimension limit: the dispatch step fails (runtime_error)."""

    name = "fault_runtime"
    space = GEMV_SPACE

    def launch(self, schedule, problem, inputs):
        launch = super().launch(schedule, problem, inputs)
        launch.groups = (70_000, 1, 1)
        return launch


class CrashFault(Gemv):
    """Kills its worker process when `crash=1`: worker_lost after bounded retries."""

    name = "fault_crash"
    space = GEMV_SPACE | {"crash": (0, 1)}

    def launch(self, schedule, problem, inputs):
        if schedule.get("crash", 0):
            os._exit(3)
        return super().launch(schedule, problem, inputs)


_SLOW_LAUNCH = threading.Lock()


def _slow_s() -> float:
    return float(os.environ.get("FARM_TEST_SLOW_S", "0.3"))


class SlowGemv(Gemv):
    """gemv that takes `FARM_TEST_SLOW_S` seconds (default 0.3) to launch, one launch at a
    time per process (a worker's overlapping batches don't speed it up): lets a test kill a
    `farm tune` driver mid-campaign."""

    name = "slow_gemv"
    space = GEMV_SPACE | {"workgroup_size": (32, 64, 128), "threads_per_row": (1, 4, 8)}

    def launch(self, schedule, problem, inputs):
        with _SLOW_LAUNCH:
            time.sleep(_slow_s())
        return super().launch(schedule, problem, inputs)

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        return [self.problem(m=64, n=64)]


class SlowInputs(Gemv):
    """gemv whose inputs take `FARM_TEST_SLOW_S` seconds (default 0.3) to generate, on any
    number of threads at once: shows a worker preparing two batches at the same time."""

    name = "slow_inputs"
    space = GEMV_SPACE

    def generate(self, problem, seed):
        start = time.time()
        time.sleep(_slow_s())
        log = os.environ.get("FARM_TEST_SLOW_LOG")
        if log:  # when each generation ran, for a test that checks two overlapped
            with open(log, "a") as f:
                f.write(f"{problem.key()} {start} {time.time()}\n")
        return super().generate(problem, seed)


SPIN_WGSL = """
struct Params { iters: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) wid: vec3<u32>) {
    var acc = x[0];
    for (var i = 0u; i < p.iters; i++) {
        acc = acc * 0.999999 + x[i % 4u];
    }
    if (wid.x == 0u && wid.y == 0u) {
        y[0] = select(acc, x[0], p.iters == 0u);
    }
}
"""


class HangFault(Gemv):
    """With `spin=1` the dispatch runs ~2.6e14 loop iterations: a hang the trial timeout must catch."""

    name = "fault_hang"
    dims = ("m", "n")
    space = {"workgroup_size": (1,), "items_per_invocation": (1,), "vector_width": (1,), "spin": (0, 1)}
    default = Schedule.of(workgroup_size=1, spin=0)

    def template(self) -> str:
        return SPIN_WGSL

    def check_knobs(self, schedule, problem, profile):
        return None

    def generate(self, problem, seed):
        return {"x": rng_for(seed, self.name).standard_normal(4, dtype=np.float32)}

    def reference(self, problem, schedule, inputs):
        return {"y": inputs["x"][:1].copy()}

    def launch(self, schedule, problem, inputs):
        # llvmpipe caps each loop at 65535 iterations, so the hang comes from the grid:
        # 65535 x 65535 workgroups of 60000 iterations each.
        spin = schedule.get("spin", 0)
        return Launch(
            source=SPIN_WGSL,
            args=[
                Arg("x", "read", inputs["x"]),
                Arg("y", "storage", dtype=np.float32, shape=(1,), output=True),
                Arg("params", "uniform", np.array([60_000 if spin else 0, 0, 0, 0], np.uint32)),
            ],
            groups=(65535, 65535, 1) if spin else 1,
        )


for spec in (CompileFault(), WrongFault(), RuntimeFault(), CrashFault(), SlowGemv(), SlowInputs(), HangFault()):
    register(spec)
