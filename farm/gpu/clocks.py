"""The clock check: whether the GPU ran a timing at its clocks, read from a tiny fixed
kernel timed right after it (`ClockCheck`; farm.gpu.device re-times a timing it finds slow).

A GPU drops its clocks while the host feeds it only now and then (a host thread holding the
GIL is enough), and whole runs of a campaign's trials then read slow
(docs/decisions/002-clock-canary-and-heater.md). Warm-up rounds do not see it, because two
rounds at low clocks agree. A kernel whose time depends only on
the clock does: one workgroup running a dependent loop, timed by GPU timestamps in a
submission of its own once the timing's reads are done (the queue is empty then, so it
overlaps nothing). Its best time on this device is its time at full clocks; a check that
reads more than CLOCK_TOLERANCE over that best says the timing before it ran slow. Only
timings shorter than farm.gpu.device's CLOCK_CHECK_MAX_S are checked: long reps keep the
clocks up themselves, and a GPU held at its power limit by them is timed as it runs.
docs/decisions/002-clock-canary-and-heater.md records why.
"""

from __future__ import annotations

import os
import statistics
import sys
from typing import Any

import numpy as np

CLOCK_TOLERANCE = 1.2  # a check this much over its best on the device reads as low clocks
CANARY_STEPS = 2048  # the loop's dependent steps: a few microseconds at a large GPU's clocks


def _dependent_loop(threads: int, steps: int) -> str:
    """WGSL of `threads`-wide workgroups, each thread `steps` dependent multiply-adds, its
    result stored (so nothing is optimized away): a time set by the SM clock alone."""
    return f"""
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size({threads})
fn main(@builtin(local_invocation_index) lid: u32) {{
    var a = f32(lid) / {threads}.0;
    for (var i = 0u; i < {steps}u; i++) {{
        a = a * (a * 0.499) + 0.25;
    }}
    out[lid] = a;
}}
"""


CANARY_WGSL = _dependent_loop(64, CANARY_STEPS)
# The heater (ClockCheck.heater): the same kind of loop in HEATER_GROUPS workgroups of 256,
# enough to fill every SM of a large GPU (132 SMs x 8), ~0.1 ms a dispatch. Run before a
# re-timing, and while the canary reads slow before a report's timing or a re-measurement
# (farm.gpu.device, farm.tuning.runner): a short kernel's own few workgroups can't bring a GPU
# to its clocks (docs/decisions/002-clock-canary-and-heater.md).
HEATER_STEPS = 4096
HEATER_GROUPS = 1056
# A fresh canary's first reading would be its own best, so the first timing it checks could
# never read slow (the bench's first row): on a GPU the heater runs PRIME_S after that
# reading, and a second reading, at the clocks, sets the best.
PRIME_S = 0.2
HEATER_WGSL = _dependent_loop(256, HEATER_STEPS)


class ClockCheck:
    """The canary's pipeline, buffers and best time for one Device (made on first use)."""

    def __init__(self, device):
        self.device = device
        wgpu = device._wgpu
        self.pipeline = device.pipeline(CANARY_WGSL, label="clock-check")
        self.out = device.empty(4 * 64)
        self.bind_group = device.bind(self.pipeline, [self.out])
        self.query_set = device.device.create_query_set(type="timestamp", count=2)
        self.resolve = device.device.create_buffer(
            size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
        )
        self.best_ns = float("inf")
        self.checks = 0
        self._primed = False  # see PRIME_S
        self._heater: list | None = None
        self._heater_out = None

    def heater(self) -> list:
        """(pipeline, bind_group, groups) passes that keep every SM busy (HEATER_WGSL; one
        workgroup on a CPU adapter, where there are no clocks to raise)."""
        if self._heater is None:
            pipeline = self.device.pipeline(HEATER_WGSL, label="clock-heater")
            self._heater_out = self.device.empty(4 * 256)
            groups = 1 if self.device.profile.is_cpu else HEATER_GROUPS
            self._heater = [(pipeline, self.device.bind(pipeline, [self._heater_out]), groups)]
        return self._heater

    def read_ns(self) -> float:
        """The canary's GPU time now (one submission and a read back)."""
        encoder = self.device.device.create_command_encoder()
        writes = {"query_set": self.query_set, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        self.device._encode_pass(encoder, self.pipeline, self.bind_group, (1, 1, 1), writes)
        encoder.resolve_query_set(self.query_set, 0, 2, self.resolve, 0)
        self.device.device.queue.submit([encoder.finish()])
        stamps = np.frombuffer(bytes(self.device.device.queue.read_buffer(self.resolve)), dtype=np.uint64)
        self.checks += 1
        return float(max(int(stamps[1]) - int(stamps[0]), 0))

    def ratio(self) -> float | None:
        """The canary now against its best time on this device (which this reading may lower;
        on a GPU the first also primes it: PRIME_S): 1.0 at the clocks the device has shown;
        None when the canary could not be read."""
        ns = self.read_ns()
        if ns <= 0:
            return None
        if not self._primed:
            self._primed = True
            if not self.device.profile.is_cpu:
                self.device._busy_for(self.heater(), PRIME_S, None)
                if (primed := self.read_ns()) > 0:
                    self.best_ns = min(self.best_ns, primed)
        self.best_ns = min(self.best_ns, ns)
        return ns / self.best_ns

    def slow(self) -> bool:
        """Whether the GPU runs below its clocks now: the canary over CLOCK_TOLERANCE x its best."""
        ratio = self.ratio()
        return ratio is not None and ratio > CLOCK_TOLERANCE

    def close(self) -> None:
        if self._heater_out is not None:
            self.device.release(self._heater_out)
        self.device.release(self.out)
        self.resolve.destroy()
        self.query_set.destroy()


def trace_check(
    schedule: Any,
    samples: list[float],
    ratio: float | None,
    again: list[float] | None = None,
    after: float | None = None,
) -> None:
    """With FARM_CLOCK_TRACE=1: one line on stderr per clock-checked timing (its median, the
    canary's ratio; for a re-timed one the re-timing's median and the canary after it, and
    nvidia-smi's clocks). A diagnostic for trials that read slow."""
    if os.environ.get("FARM_CLOCK_TRACE", "") != "1":
        return
    line = f"farm clock: {schedule}: {statistics.median(samples) / 1e3:.1f} us, canary {ratio or 0:.2f}"
    if again is not None:
        from farm.gpu.nvidia import query_gpus

        smi = query_gpus(("clocks.sm", "clocks.mem", "power.draw", "clocks_event_reasons.active"))
        line += f"; re-timed {statistics.median(again) / 1e3:.1f} us, canary after {after or 0:.2f}; smi {smi}"
    print(line, file=sys.stderr, flush=True)
