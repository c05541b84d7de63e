"""Stepwise consistency: the T steps run one at a time on both paths, each carrying its own
state, and every step's context and state compared (`stepwise_consistency`), with the
seed's strict verdict over them (`strict_summary`, STRICT_THRESHOLDS).

The baseline side is one T=1 op-by-op plan (farm.recurrent.paths.BaselinePlan). Its steps
are recorded CHUNK_BYTES of states at a time into one submission: per step, that step's
query and value rows copied into the plan's inputs on the device (the inputs are uploaded
once, time-major), the plan's dispatches, then its context and state copied into the
chunk's output buffers and the state into the plan's rho for the next step. The fused side
through a ForgeRuntime (the caller's, else one of its own on the same device) is a
DeviceArray chain: each step's rho output is the next step's rho input and stays on the
GPU; its outputs are kept until the chunk's end, then copied into one buffer each and read
back in one submission. So a chunk costs three waits (the
runtime's synchronize, a read per side) rather than five a step (the op-by-op step's
submission, a read per output of each side), and the comparisons (numpy, step by step)
run on threads while the next chunk runs: at thousands of steps, per-step waits would
dominate the sweep. Both
sides compute exactly what they did step by step from the host: the copies move the same
bytes the host did, so the metrics are the same numbers.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from farm.catalog.recurrent import check_shapes
from farm.gpu import Device, PendingRead
from farm.oracle.compare import error_metrics
from farm.recurrent.paths import BaselinePlan, recurrent_problem
from farm.runtime.calls import encode_passes
from farm.runtime.forge import ForgeRuntime
from farm.schedule import Schedule
from farm.trial import ErrorMetrics

__all__ = ["STRICT_THRESHOLDS", "StepMetrics", "chunk_steps", "stepwise_consistency", "strict_summary"]

STRICT_THRESHOLDS = {"context_max_abs": 1e-3, "context_rmse_max": 2e-4, "rho_max_abs": 1e-3, "rho_rmse_max": 2e-4}
CHUNK_BYTES = 64 << 20  # states per chunk and side (B8 H8 L64 E256: 16 steps; E768 with B1: 42)
MAX_CHUNK_STEPS = 256
METRIC_THREADS = max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class StepMetrics:
    step: int
    context: ErrorMetrics
    rho: ErrorMetrics

    def as_dict(self) -> dict:
        out: dict = {"step": self.step}
        for name, metrics in (("context", self.context), ("rho", self.rho)):
            out |= {f"{name}_{k}": v for k, v in metrics.as_dict().items()}
        return out


def strict_summary(steps: list[StepMetrics]) -> dict:
    """Maxima over steps and the strict verdict (every maximum within STRICT_THRESHOLDS)."""
    summary = {
        "context_max_abs": max((s.context.max_abs for s in steps), default=0.0),
        "context_rmse_max": max((s.context.rmse for s in steps), default=0.0),
        "rho_max_abs": max((s.rho.max_abs for s in steps), default=0.0),
        "rho_rmse_max": max((s.rho.rmse for s in steps), default=0.0),
    }
    summary["strict_pass"] = all(summary[k] <= limit for k, limit in STRICT_THRESHOLDS.items())
    return summary


def chunk_steps(state_bytes: int) -> int:
    """Steps per chunk: CHUNK_BYTES of states (at least 1, at most MAX_CHUNK_STEPS)."""
    return max(1, min(MAX_CHUNK_STEPS, CHUNK_BYTES // max(state_bytes, 1)))


def stepwise_consistency(
    device: Device, schedule: Schedule, query, value, rho=None, decay=None, runtime=None, chunk: int | None = None
) -> list[StepMetrics]:
    """Run both paths one step at a time, each carrying its own state, and compare the
    fused step's context and state with the baseline's at every step. The fused steps are a
    DeviceArray chain through `runtime` (a ForgeRuntime on `device`; None: one of its own,
    opened on `device` and closed here, reading no store since `schedule` is given): the
    state stays on the GPU from step to step (read back only to be compared, a chunk at a
    time). `chunk`: steps per submission (default: `chunk_steps` of the state's bytes)."""
    b, h, _, t, l_dim, e = check_shapes(query, value, rho, decay)
    start = np.zeros((b, h, l_dim, e), np.float32) if rho is None else np.ascontiguousarray(rho, np.float32)
    if chunk is not None and chunk < 1:
        raise ValueError(f"stepwise chunk must be >= 1 steps, got {chunk}")
    chunk = min(chunk or chunk_steps(start.nbytes), max(t, 1))  # no buffers for steps past T
    if runtime is None:
        with ForgeRuntime(db="sqlite://", device=device, request_tuning=False) as own:
            return stepwise_consistency(device, schedule, query, value, start, decay, own, chunk)
    device.retire_encoders()  # the fused warm-up's batches before: up to 4096 passes a submission
    steps: list[StepMetrics] = []
    baseline = _BaselineSteps(device, query, value, start, decay, chunk)
    try:
        fused = _ChainSteps(runtime, schedule, query, value, start, decay, chunk)
    except Exception:
        baseline.release()
        raise
    try:
        with ThreadPoolExecutor(METRIC_THREADS, thread_name_prefix="farm-stepwise") as pool:
            previous: list = []
            for first in range(0, t, chunk):
                last = min(first + chunk, t)
                fused.record(first, last)  # submitted: the GPU starts while the baseline is recorded
                base_read = baseline.submit(first, last)
                fused_ctx, fused_rho = fused.collect()
                base = base_read.collect()
                steps += [future.result() for future in previous]  # at most two chunks' states held
                pairs = zip(fused_ctx, base["context"], fused_rho, base["rho"], strict=True)
                previous = [pool.submit(_step_metrics, first + j, *arrays) for j, arrays in enumerate(pairs)]
            steps += [future.result() for future in previous]
    finally:
        baseline.release()
        fused.release()
    return steps


def _step_metrics(step: int, ctx, base_ctx, state, base_state) -> StepMetrics:
    return StepMetrics(step, error_metrics(ctx, base_ctx), error_metrics(state, base_state))


def _reads(context: object, rho: object, steps: int, b: int, h: int, l_dim: int, e: int) -> list:
    """submit_reads entries for `steps` contexts [B,H,E] and states [B,H,L,E] laid end to end."""
    return [
        ("context", context, np.float32, steps * b * h * e, (steps, b, h, e)),
        ("rho", rho, np.float32, steps * b * h * l_dim * e, (steps, b, h, l_dim, e)),
    ]


class _BaselineSteps:
    """The op-by-op side: one T=1 plan, its steps recorded a chunk per submission (module doc)."""

    def __init__(self, device: Device, query, value, start: np.ndarray, decay, chunk: int):
        self.device = device
        self.dims = check_shapes(query, value, start, decay)
        b, h, vh, _, l_dim, e = self.dims
        self.sizes = (4 * b * h * l_dim, 4 * b * vh * e, 4 * b * h * e, 4 * b * h * l_dim * e)  # q, v, ctx, state
        self.plan = BaselinePlan.build(device, query[:, :, :1], value[:, :, :1], start, decay)
        self.buffers = []
        try:
            self.passes = self.plan.passes()
            for rows in (query, value):  # [B, H|VH, T, L|E] -> time-major [T, B, H|VH, L|E]
                self.buffers.append(device.upload(np.ascontiguousarray(rows.transpose(2, 0, 1, 3), np.float32)))
            self.buffers += [device.empty(chunk * self.sizes[2]), device.empty(chunk * self.sizes[3])]
        except Exception:
            self.release()
            raise

    def submit(self, first: int, last: int) -> PendingRead:
        q_size, v_size, ctx_size, state_size = self.sizes
        q_rows, v_rows, ctx_out, rho_out = (buffer.handle for buffer in self.buffers)
        q_in, v_in, rho_in = (buffer.handle for buffer in self.plan.inputs[:3])
        context, state = self.plan.context.handle, self.plan.final_rho.handle
        encoder = self.device.device.create_command_encoder()
        for slot, step in enumerate(range(first, last)):
            encoder.copy_buffer_to_buffer(q_rows, step * q_size, q_in, 0, q_size)
            encoder.copy_buffer_to_buffer(v_rows, step * v_size, v_in, 0, v_size)
            encode_passes(encoder, self.passes)
            encoder.copy_buffer_to_buffer(context, 0, ctx_out, slot * ctx_size, ctx_size)
            encoder.copy_buffer_to_buffer(state, 0, rho_out, slot * state_size, state_size)
            encoder.copy_buffer_to_buffer(state, 0, rho_in, 0, state_size)  # the next step's state
        b, h, _, _, l_dim, e = self.dims
        return self.device.submit_reads(_reads(self.buffers[2], self.buffers[3], last - first, b, h, l_dim, e), encoder)

    def release(self) -> None:
        self.device.release(*self.buffers)
        self.buffers = []
        self.plan.release()


class _ChainSteps:
    """The fused side through a ForgeRuntime: a DeviceArray chain, read back a chunk at a time."""

    def __init__(self, runtime, schedule: Schedule, query, value, start: np.ndarray, decay, chunk: int):
        self.runtime, self.schedule, self.query, self.value = runtime, schedule, query, value
        self.device = runtime.device
        self.dims = check_shapes(query, value, start, decay)
        b, h, _, _, l_dim, e = self.dims
        self.sizes = (4 * b * h * e, 4 * b * h * l_dim * e)
        self.problem = recurrent_problem(query[:, :, :1], value[:, :, :1]).as_dict()
        self.state = runtime.asarray(start)
        self.shared = {} if decay is None else {"decay": runtime.asarray(decay)}
        self.outputs: list[dict] = []
        self.buffers = [self.device.empty(chunk * self.sizes[0]), self.device.empty(chunk * self.sizes[1])]

    def record(self, first: int, last: int) -> None:
        for step in range(first, last):
            inputs = {
                "query": np.ascontiguousarray(self.query[:, :, step : step + 1]),
                "value": np.ascontiguousarray(self.value[:, :, step : step + 1]),
                "rho": self.state,
            }
            out = self.runtime.run("recurrent", self.problem, inputs | self.shared, schedule=self.schedule)
            self.outputs.append(out)
            self.state = out["rho"]

    def collect(self) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's contexts and states: copied into one buffer each, one read, then the
        chunk's arrays back to the pool (all but the last state, which the chain carries on)."""
        self.runtime.synchronize()  # the runtime's recorded calls submitted (its numpy-input calls already are)
        ctx_size, state_size = self.sizes
        ctx_out, rho_out = self.buffers
        encoder = self.device.device.create_command_encoder()
        for slot, out in enumerate(self.outputs):
            context, state = out["context"].slab(self.runtime, "context"), out["rho"].slab(self.runtime, "rho")
            encoder.copy_buffer_to_buffer(context.handle, 0, ctx_out.handle, slot * ctx_size, ctx_size)
            encoder.copy_buffer_to_buffer(state.handle, 0, rho_out.handle, slot * state_size, state_size)
        b, h, _, _, l_dim, e = self.dims
        read = self.device.submit_reads(_reads(ctx_out, rho_out, len(self.outputs), b, h, l_dim, e), encoder).collect()
        for out in self.outputs:
            out["context"].release()
            if out["rho"] is not self.state:
                out["rho"].release()
        self.outputs = []
        return read["context"], read["rho"]

    def release(self) -> None:
        for out in self.outputs:
            for array in out.values():
                array.release()
        for array in (self.state, *self.shared.values()):
            array.release()
        self.outputs = []
        self.device.release(*self.buffers)
        self.buffers = []

