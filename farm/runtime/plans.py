"""A call's plan (built once per kernel, schedule, problem and input layout by
farm.runtime.calls' Caller): how each launch arg gets its buffer (`Slot`), the compiled
passes and cached bind groups (`CallPlan`), and the checks of a call's `out=` arrays
against the plan's outputs."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from farm.catalog import KernelSpec
from farm.gpu import MAX_GROUPS_PER_DIM, Buffer, GpuError, Pipeline, fold_groups
from farm.runtime.arrays import DeviceArray, check_host_array
from farm.runtime.pool import Slab
from farm.runtime.transfers import Read, reads_of
from farm.schedule import Problem, Schedule


@dataclass
class Slot:
    """How one launch arg gets its buffer in a call."""

    role: str  # "input" | "transformed" | "constant" | "output" | "scratch"
    name: str  # the input's name (input, transformed), else the arg's
    kind: str  # binding kind: read | storage | uniform
    nbytes: int
    dtype: np.dtype | None = None
    shape: tuple[int, ...] = ()
    buffer: Buffer | None = None  # constant and scratch: the plan's own


@dataclass
class CallPlan:
    spec: KernelSpec
    schedule: Schedule
    problem: Problem
    pipelines: list[Pipeline]
    passes: list  # (bindings, binding numbers, grid) per pass, in order
    slots: list[Slot]
    owned: list[Buffer]  # constants: the plan's own device buffers
    held: list[Slab]  # scratch: pool slabs the plan holds while it lives (they count in capacity_bytes)
    # slabs' serials -> ((pipeline, bind group, grid) per pass, the same as raw handles or None)
    bind_sets: OrderedDict = field(default_factory=OrderedDict)
    last: tuple = field(default=((), (), None), init=False)  # the last call's slabs and their bind_sets entry
    gpu_s: float = 0.0  # a call's GPU time as its winner's stored median, 0 when unknown (Caller's early submission)
    # What a call fills, in order: the inputs' slots (input and transformed), then the outputs'.
    inputs: list[Slot] = field(init=False)
    input_names: tuple[str, ...] = field(init=False)  # the inputs' names, in order
    outputs: list[Slot] = field(init=False)
    filled: list[int] = field(init=False)  # the index in `slots` of each of inputs + outputs
    transformed: bool = field(init=False)  # any arg recomputed on the host per call
    reads: list[Read] = field(init=False)  # the outputs in a numpy call's staging buffer
    read_bytes: int = field(init=False)

    def __post_init__(self):
        roles = [slot.role for slot in self.slots]
        self.inputs = [slot for slot in self.slots if slot.role in ("input", "transformed")]
        self.input_names = tuple(slot.name for slot in self.inputs)
        self.outputs = [slot for slot in self.slots if slot.role == "output"]
        self.filled = [i for i, r in enumerate(roles) if r in ("input", "transformed")]
        self.filled += [i for i, r in enumerate(roles) if r == "output"]
        self.transformed = "transformed" in roles
        self.reads, self.read_bytes = reads_of([(slot.name, slot.dtype, slot.shape) for slot in self.outputs])


def grid_of(groups: int | tuple[int, int, int]) -> tuple[int, int, int]:
    """A pass's dispatch grid (a linear count folded to 2-D past 65535, as the Device does)."""
    grid = fold_groups(groups) if isinstance(groups, int) else tuple(groups)
    if max(grid) > MAX_GROUPS_PER_DIM:
        raise GpuError("dispatch", f"grid {grid} exceeds {MAX_GROUPS_PER_DIM} per dimension")
    return grid


def same_bytes(data: np.ndarray, placeholder: np.ndarray) -> bool:
    """`data` is exactly `placeholder`'s bytes (the array itself or a full-size view of it)."""
    return (
        data.nbytes == placeholder.nbytes
        and data.flags.c_contiguous
        and data.__array_interface__["data"][0] == placeholder.__array_interface__["data"][0]
    )


def check_out(plan: CallPlan, inputs: dict, out: dict[str, DeviceArray], owner: object) -> None:
    """ValueError/TypeError unless each `out` array is this runtime's, live, of its output's
    shape and dtype, and shares no buffer with an input or another output."""
    slots = {slot.name: slot for slot in plan.outputs}
    for name, array in out.items():
        slot = slots[name]
        if not isinstance(array, DeviceArray):
            raise TypeError(f"out: expected a DeviceArray, got {type(array).__name__}")
        array.slab(owner, "out")
        if array.shape != slot.shape or array.dtype != slot.dtype:
            raise ValueError(
                f"out: expected a DeviceArray of shape {slot.shape} and dtype {slot.dtype}, "
                f"got {array.shape} {array.dtype}"
            )
        clash = [n for n, v in inputs.items() if isinstance(v, DeviceArray) and v.same_buffer(array)]
        others = [n for n, v in out.items() if n != name and v.same_buffer(array)]
        if clash or others:
            raise ValueError(f"out: must not share its buffer with {(clash + others)[0]} of the same call")


def check_host_out(plan: CallPlan, inputs: dict, out: dict) -> None:
    """TypeError/ValueError unless each numpy `out` array can take its output of a numpy
    call: every input numpy (a call on DeviceArrays doesn't wait, so it can't fill a numpy
    array), the output's shape and dtype, C-contiguous, writeable, sharing no memory with an
    input or another output."""
    if any(type(v) is DeviceArray for v in inputs.values()):
        raise TypeError("out: a numpy array takes a numpy call's result; with DeviceArray inputs pass a DeviceArray")
    slots = {slot.name: slot for slot in plan.outputs}
    for name, array in out.items():
        if type(array) is DeviceArray:
            raise TypeError("out: numpy arrays and DeviceArrays can't be mixed in one call")
        slot = slots[name]
        check_host_array(array, slot.shape, slot.dtype, "a numpy array or a DeviceArray")
        clash = [n for n, v in inputs.items() if isinstance(v, np.ndarray) and np.shares_memory(v, array)]
        clash += [n for n, v in out.items() if n != name and np.shares_memory(v, array)]
        if clash:
            raise ValueError(f"out: must not share memory with {clash[0]} of the same call")
