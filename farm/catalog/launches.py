"""What a kernel's `launch()` returns: the buffers (`Arg`), the dispatches (`Pass`) and the
ready-to-dispatch `Launch` that certification, tuning and the runtime all turn into device
work (farm.oracle.launch), and `check_launch`, the limits every launch respects before it
compiles. Re-exported by farm.catalog."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from farm.gpu import MAX_GROUPS_PER_DIM, HardwareProfile
from farm.schedule import InvalidSchedule, Schedule


@dataclass
class Arg:
    """One binding, in binding order. Inputs carry `data`; outputs carry dtype+shape."""

    name: str
    kind: str  # "read" | "storage" | "uniform"
    data: np.ndarray | None = None
    dtype: type = np.float32
    shape: tuple[int, ...] = ()
    output: bool = False

    @property
    def nbytes(self) -> int:
        if self.data is not None:
            return int(self.data.nbytes)
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))


@dataclass
class Pass:
    """One dispatch of a multi-pass launch: its module, groups and the args it binds
    (indices into Launch.args), each at the @binding of the same place in `numbers`, or
    at its index when `numbers` is None (every pass's WGSL declares an arg at the same @binding)."""

    source: str
    groups: int | tuple[int, int, int]
    bindings: tuple[int, ...]
    constants: dict[str, float] = field(default_factory=dict)
    entry_point: str = "main"
    numbers: tuple[int, ...] | None = None


@dataclass
class Launch:
    """A ready-to-dispatch kernel: rendered source, override constants, bindings, groups.

    The fields describe the main dispatch, which binds every arg in order unless
    `bindings` names a subset. A kernel that needs more than one dispatch (a pass that
    prepares an operand once for all workgroups, a split-k sum) adds `prologue` passes
    run before it and `epilogue` passes after, in one submission: args without data and
    not `output` are device scratch shared by the passes. Timings span all passes."""

    source: str
    args: list[Arg]
    groups: int | tuple[int, int, int]
    constants: dict[str, float] = field(default_factory=dict)
    entry_point: str = "main"
    bindings: tuple[int, ...] | None = None
    numbers: tuple[int, ...] | None = None  # the @binding of each of `bindings` (None: its index)
    prologue: list[Pass] = field(default_factory=list)
    epilogue: list[Pass] = field(default_factory=list)

    def passes(self) -> list[Pass]:
        """Every dispatch in order; the main one is `Pass(self.source, ...)`."""
        bindings = self.bindings if self.bindings is not None else tuple(range(len(self.args)))
        main = Pass(self.source, self.groups, bindings, self.constants, self.entry_point, self.numbers)
        return [*self.prologue, main, *self.epilogue]


def check_launch(spec, schedule: Schedule, launch: Launch, profile: HardwareProfile) -> None:
    """Limits every launch must respect, checked before compiling."""
    max_binding = profile.limit("max-storage-buffer-binding-size")
    for arg in launch.args:
        if arg.kind != "uniform" and arg.nbytes > max_binding:
            raise InvalidSchedule(
                spec.name,
                schedule,
                f"buffer {arg.name} of {arg.nbytes} bytes > max-storage-buffer-binding-size {max_binding}",
            )
    for step in launch.passes():
        groups = step.groups
        count = groups if isinstance(groups, int) else groups[0] * groups[1] * groups[2]
        if count > MAX_GROUPS_PER_DIM * MAX_GROUPS_PER_DIM:
            raise InvalidSchedule(spec.name, schedule, f"{count} workgroups > {MAX_GROUPS_PER_DIM}^2")
        if any(not 0 <= i < len(launch.args) for i in step.bindings):
            raise ValueError(f"{spec.name}: pass binds {step.bindings}, launch has {len(launch.args)} args")
