"""Recurrent linear attention on the GPU: the fused catalog kernel, the op-by-op baseline
a tensor framework would run, like-for-like timing, and stepwise consistency.

Both paths take numpy inputs (query [B,H,T,L], value [B,VH,T,E], optional rho
[B,H,L,E] and decay [H]) and return numpy (context [B,H,T,E], rho [B,H,L,E]).
The math and the float64 reference live in `farm.catalog.recurrent`; stepwise consistency
(`stepwise_consistency`, `strict_summary`) in `farm.recurrent.stepwise`; the scaling sweep
that times these paths against each other (`farm sweep recurrent`) in `farm.recurrent.sweep`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from farm import catalog
from farm.catalog.recurrent import check_shapes, reference_recurrent, sections, sweep_decay
from farm.gpu import Buffer, Device, Pipeline, Timing, fold_groups
from farm.oracle.launch import Prepared, prepare
from farm.schedule import Problem, Schedule

__all__ = [
    "BaselinePlan",
    "baseline_recurrent",
    "fused_recurrent",
    "prepare_fused",
    "reference_recurrent",
    "recurrent_problem",
    "sweep_decay",
]

OPS_FILE = "recurrent_ops.wgsl"
OPS_WORKGROUP = 256
BIG_SUBMISSION = 1024  # passes from which BaselinePlan.run leaves fresh encoders behind it


def recurrent_problem(query: np.ndarray, value: np.ndarray, rho=None, decay=None) -> Problem:
    """The catalog problem (B, H, VH, T, L, E) for these inputs; ValueError on bad shapes."""
    b, h, vh, t, l_dim, e = check_shapes(query, value, rho, decay)
    return catalog.get("recurrent").problem(B=b, H=h, VH=vh, T=t, L=l_dim, E=e)


# -- fused -----------------------------------------------------------------------------
def prepare_fused(device: Device, schedule: Schedule, query, value, rho=None, decay=None) -> Prepared:
    """Compile (cached) and upload the fused kernel's launch; the caller releases it."""
    spec = catalog.get("recurrent")
    problem = recurrent_problem(query, value, rho, decay)
    inputs = {"query": query, "value": value}
    if rho is not None:
        inputs["rho"] = rho
    if decay is not None:
        inputs["decay"] = decay
    return prepare(device, spec, schedule, problem, inputs)


def fused_recurrent(
    device: Device, schedule: Schedule, query, value, rho=None, decay=None
) -> tuple[np.ndarray, np.ndarray]:
    """(context, rho) from one dispatch of the fused kernel under `schedule`."""
    with prepare_fused(device, schedule, query, value, rho, decay) as prepared:
        prepared.run()
        out = prepared.outputs()
    return out["context"], out["rho"]


def fused_calls(device: Device, prepared: Prepared) -> list:
    """The fused launch as a one-pass call list for `Device.time_calls`."""
    return prepared.calls()


# -- baseline --------------------------------------------------------------------------
def _ops_pipeline(device: Device, op: str) -> Pipeline:
    parts = sections(OPS_FILE)
    if op in ("mul", "add"):
        source = catalog.render(parts["binary"], {"OP": "*" if op == "mul" else "+"})
    else:
        source = parts[op]
    return device.pipeline(source, label=f"recurrent_ops.{op}")


def _contiguous(shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    return (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)


def _groups(count: int) -> int:
    return -(-count // OPS_WORKGROUP)


@dataclass(frozen=True)
class _Params:
    """One op's parameters: row `row` of the plan's uniform buffer, `size` bytes of it bound."""

    row: int
    size: int


@dataclass
class BaselinePlan:
    """The op-by-op recurrence, encoded once as a framework would run it: per step t
    slice q_t, slice+broadcast v_t, state·q_t (broadcast multiply), sum over L, write the
    context slice, q_t⊗v_t, add, decay multiply: one dispatch per op, intermediates in
    their own buffers (reused across steps like a caching allocator), one submission."""

    device: Device
    dims: tuple[int, int, int, int, int, int]
    inputs: list[Buffer]
    scratch: list[Buffer] = field(default_factory=list)
    uniforms: list[Buffer] = field(default_factory=list)
    calls: list = field(default_factory=list)
    context: Buffer | None = None
    final_rho: Buffer | None = None

    @classmethod
    def build(cls, device: Device, query, value, rho=None, decay=None) -> BaselinePlan:
        b, h, vh, t, l_dim, e = check_shapes(query, value, rho, decay)
        rho = np.zeros((b, h, l_dim, e), np.float32) if rho is None else rho
        bufs = [device.upload(np.ascontiguousarray(x, np.float32)) for x in (query, value, rho)]
        if decay is not None:
            bufs.append(device.upload(np.ascontiguousarray(decay, np.float32)))
        plan = cls(device, (b, h, vh, t, l_dim, e), bufs)
        try:
            plan._encode(decay is not None)
        except Exception:
            plan.release()
            raise
        return plan

    def _buffer(self, count: int) -> Buffer:
        buf = self.device.empty(4 * count, "storage")
        self.scratch.append(buf)
        return buf

    def _uniform(self, words: list[int]) -> _Params:
        """A new row of the uniform buffer holding `words` (at least 16 bytes of it bound)."""
        self._rows.append(words)
        return _Params(len(self._rows) - 1, max(16, 4 * len(words)))

    def _call(self, op: str, buffers: list, count: int) -> None:
        """One dispatch of `op`; bound in `_bind`, once every uniform row is known."""
        self._pending.append((_ops_pipeline(self.device, op), buffers, _groups(count)))

    def _bind(self) -> None:
        """The uniform buffer, as many aligned rows as `_uniform` made (counted, so nothing
        to keep in step with the ops), uploaded; then each pending dispatch's bind group,
        a _Params as its row's (Buffer, offset, size) range."""
        # Every op's parameters in one uniform buffer, each at its own aligned offset. With a
        # buffer per op (28k at T=4096) wgpu-core's finish() cost grew with T, per pass (lavapipe:
        # 6-7 us at T=256, 11 at 1024, 44-57 at 4096; one buffer: 4-5 at 4096): a timing encodes
        # T·8 passes per rep. The dispatches, and the bytes they read, are the same.
        align = max(64, int(self.device.device.limits.get("min-uniform-buffer-offset-alignment", 256)))
        params = np.zeros((len(self._rows), align // 4), np.uint32)
        for row, words in enumerate(self._rows):
            params[row, : len(words)] = words
        uniform = self.device.empty(params.nbytes, "uniform")
        self.uniforms.append(uniform)
        self.device.write(uniform, params)
        for pipeline, buffers, groups in self._pending:
            ranges = [(uniform, b.row * align, b.size) if isinstance(b, _Params) else b for b in buffers]
            self.calls.append((pipeline, self.device.bind(pipeline, ranges), groups))
        self._rows, self._pending = [], []  # the host rows are not needed after the upload

    def _copy(self, src: Buffer, dst: Buffer, shape, a_strides, a_off: int, out_strides, out_off: int) -> None:
        count = int(np.prod(shape))
        params = self._uniform([*shape, *a_strides, *out_strides, a_off, out_off, count, 0])
        self._call("strided_copy", [src, dst, params], count)

    def _binary(self, op: str, a: Buffer, b: Buffer, out: Buffer, shape, a_strides, b_strides) -> None:
        count = int(np.prod(shape))
        params = self._uniform([*shape, *a_strides, *b_strides, count, 0, 0, 0])
        self._call(op, [a, b, out, params], count)

    def _encode(self, has_decay: bool) -> None:
        b, h, vh, t, l_dim, e = self.dims
        query, value, rho = self.inputs[:3]
        q_t, v_t, ctx_t = self._buffer(b * h * l_dim), self._buffer(b * h * e), self._buffer(b * h * e)
        prod, outer, summed = (self._buffer(b * h * l_dim * e) for _ in range(3))
        states = [self._buffer(b * h * l_dim * e) for _ in range(2)]
        self.context = self._buffer(b * h * t * e)
        self._rows: list[list[int]] = []
        self._pending: list = []
        full = (b, h, l_dim, e)
        sum_params = self._uniform([b * h, l_dim, e, b * h * e])
        state = rho
        for step in range(t):
            self._copy(
                query,
                q_t,
                (b, h, 1, l_dim),
                (h * t * l_dim, t * l_dim, 0, 1),
                step * l_dim,
                (h * l_dim, l_dim, 0, 1),
                0,
            )
            v_head = t * e if vh == h else 0
            self._copy(value, v_t, (b, h, 1, e), (vh * t * e, v_head, 0, 1), step * e, (h * e, e, 0, 1), 0)
            self._binary("mul", state, q_t, prod, full, _contiguous(full), (h * l_dim, l_dim, 1, 0))
            self._call("sum_axis", [prod, ctx_t, sum_params], b * h * e)
            self._copy(ctx_t, self.context, (b, h, 1, e), (h * e, e, 0, 1), 0, (h * t * e, t * e, 0, 1), step * e)
            self._binary("mul", q_t, v_t, outer, full, (h * l_dim, l_dim, 1, 0), (h * e, e, 0, 1))
            nxt = states[step % 2]
            self._binary("add", state, outer, summed if has_decay else nxt, full, _contiguous(full), _contiguous(full))
            if has_decay:
                self._binary("mul", summed, self.inputs[3], nxt, full, _contiguous(full), (0, 1, 0, 0))
            state = nxt
        self.final_rho = state
        self._bind()

    def run(self) -> None:
        self.device.dispatch_many(self.calls)
        if len(self.calls) >= BIG_SUBMISSION:
            self.device.retire_encoders()

    def passes(self) -> list:
        """The plan's dispatches as (pipeline handle, bind group, folded grid), for an encoder
        of the caller's own (`farm.runtime.calls.encode_passes`): stepwise consistency records
        many steps of a T=1 plan, with copies between them, into one submission."""
        return [(pipeline.handle, bind_group, fold_groups(groups)) for pipeline, bind_group, groups in self.calls]

    def load(self, query, value, rho) -> None:
        """New inputs of the plan's own shapes into its buffers (decay stays), from the host:
        one T=1 plan serves every step rather than T plans (each a dozen buffers and bind
        groups made and freed: minutes at T=4096). Stepwise consistency copies its steps in
        on the device instead (farm.recurrent.stepwise)."""
        b, h, vh, t, l_dim, e = self.dims
        for buffer, array, shape in zip(
            self.inputs, (query, value, rho), ((b, h, t, l_dim), (b, vh, t, e), (b, h, l_dim, e)), strict=False
        ):
            if array.shape != shape:
                raise ValueError(f"BaselinePlan.load: expected shape {shape}, got {array.shape}")
            self.device.write(buffer, np.ascontiguousarray(array, np.float32))

    def outputs(self) -> tuple[np.ndarray, np.ndarray]:
        b, h, _, t, l_dim, e = self.dims
        context = self.device.read(self.context, np.float32, b * h * t * e).reshape(b, h, t, e)
        rho = self.device.read(self.final_rho, np.float32, b * h * l_dim * e).reshape(b, h, l_dim, e)
        return context, rho

    def time(self, warmup: int, reps: int) -> Timing:
        """`Device.time_calls` of the plan's passes, leaving fresh encoders behind it."""
        timing = self.device.time_calls(self.calls, warmup, reps)
        self.device.retire_encoders()
        return timing

    def release(self) -> None:
        self.device.release(*self.inputs, *self.scratch, *self.uniforms)
        self.inputs, self.scratch, self.uniforms, self.calls = [], [], [], []

    def __enter__(self) -> BaselinePlan:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def baseline_recurrent(device: Device, query, value, rho=None, decay=None) -> tuple[np.ndarray, np.ndarray]:
    """(context, rho) from the op-by-op path (one dispatch per elementary op per step)."""
    with BaselinePlan.build(device, query, value, rho, decay) as plan:
        plan.run()
        return plan.outputs()
