"""Turn a (spec, schedule, problem, inputs) into device work: the one path shared by
certification, tuning and the runtime library."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from farm.catalog import KernelSpec, Launch, check_launch
from farm.gpu import Buffer, Device, GpuError, PendingRead, Pipeline, Timing
from farm.schedule import Problem, Schedule


@dataclass
class Prepared:
    """A launch's compiled pipelines (one per pass) with its buffers uploaded, ready to
    dispatch many times."""

    spec: KernelSpec
    schedule: Schedule
    problem: Problem
    launch: Launch
    pipelines: list[Pipeline]
    buffers: list[Buffer]
    device: Device
    _calls: list | None = field(default=None, init=False, repr=False, compare=False)

    def calls(self) -> list:
        """(pipeline, bind_group, groups) per pass, for the Device's multi-pass methods;
        the bind groups are made once (a trial runs, times and may re-measure)."""
        if self._calls is None:
            bind = self.device.bind
            self._calls = [
                (pipeline, bind(pipeline, self.buffers, self.schedule, step.bindings, step.numbers), step.groups)
                for pipeline, step in zip(self.pipelines, self.launch.passes(), strict=True)
            ]
        return self._calls

    def run(self) -> None:
        self.device.dispatch_many(self.calls(), self.schedule)

    def outputs(self) -> dict[str, np.ndarray]:
        return self.device.submit_reads(self._reads()).collect()

    def submit_run(self) -> PendingRead:
        """One submission: zero the outputs (a kernel that writes nothing can't pass on
        stale data), run once, copy the outputs to staging buffers; doesn't wait."""
        clear = [b for arg, b in zip(self.launch.args, self.buffers, strict=True) if arg.output]
        return self.device.run_and_read(self.calls(), clear, self._reads(), self.schedule)

    def _reads(self) -> list:
        return [
            (arg.name, buffer, arg.dtype, int(np.prod(arg.shape, dtype=np.int64)), arg.shape)
            for arg, buffer in zip(self.launch.args, self.buffers, strict=True)
            if arg.output
        ]

    def time(self, warmup: int = 2, reps: int = 10, beat_ns: float | None = None) -> Timing:
        return self.device.time_calls(self.calls(), warmup, reps, self.schedule, beat_ns)

    def warm_until_clocks(self, least_s: float, most_s: float, unless_hot: bool = False) -> float:
        """This launch back to back for `least_s` (with `unless_hot`: not when the GPU is hot),
        then the heater while the clock canary reads slow, until `most_s` (Device.warm_until_clocks);
        the seconds spent, 0 on a CPU adapter."""
        return self.device.warm_until_clocks(self.calls(), least_s, most_s, self.schedule, unless_hot)

    def release(self) -> None:
        self.device.release(*self.buffers)
        self.buffers = []
        self._calls = None

    def __enter__(self) -> Prepared:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def compile_launch(device: Device, spec: KernelSpec, schedule: Schedule, launch: Launch) -> list[Pipeline]:
    """The pipeline of every pass of `launch`, in order (cached by the device). Prologue
    and epilogue passes are labelled without the schedule: the device caches by label and
    source, and such passes are often the same for many schedules (ternary_gemv stage_x=4's
    planes pass: one per threads_per_row for all 68), so they compile once."""
    out, checked = [], spec.runtime_checks
    for i, step in enumerate(launch.passes()):
        main = i == len(launch.prologue)
        label = f"{spec.name}[{schedule}]" if main else f"{spec.name} pass {i}"
        try:
            out.append(device.pipeline(step.source, step.entry_point, step.constants, label, schedule, checked))
        except GpuError as exc:
            where = spec.source_name(i)
            if where is None or exc.step != "compile":
                raise
            # the compiler says "wgsl:LINE:COL"; the rendered WGSL keeps the file's lines
            message = re.sub(r"\bwgsl:(\d+:\d+)", lambda m, where=where: f"{where}:{m.group(1)}", str(exc))
            raise GpuError("compile", message.split(": ", 1)[1], label, schedule) from exc
    return out


def prepare(
    device: Device,
    spec: KernelSpec,
    schedule: Schedule,
    problem: Problem,
    inputs: dict[str, np.ndarray],
) -> Prepared:
    """Validate (InvalidSchedule before compiling), compile (cached), upload inputs."""
    spec.check(schedule, problem, device.profile)
    launch = spec.launch(schedule, problem, inputs)
    check_launch(spec, schedule, launch, device.profile)
    pipelines = compile_launch(device, spec, schedule, launch)
    buffers: list[Buffer] = []
    try:
        for arg in launch.args:
            if arg.data is not None:
                buffers.append(device.upload(arg.data, arg.kind))
            else:
                buffers.append(device.empty(arg.nbytes, arg.kind))
    except Exception:
        device.release(*buffers)
        raise
    return Prepared(spec, schedule, problem, launch, pipelines, buffers, device)


def run(
    device: Device,
    spec: KernelSpec,
    schedule: Schedule,
    problem: Problem,
    inputs: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """One dispatch on `inputs`; every device buffer is released before returning."""
    with prepare(device, spec, schedule, problem, inputs) as prepared:
        prepared.run()
        return prepared.outputs()
