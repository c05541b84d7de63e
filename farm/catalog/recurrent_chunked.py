"""recurrent, chunked form: the recurrence as three passes over chunks of C steps.

The schedule knob `form=1` selects it (farm.catalog.recurrent keeps the stepwise form,
one dispatch whose T steps run in order). Same inputs, outputs, reference and
certification; the farm picks the form, C and the tiling per problem. Within a chunk the
contexts are a small matrix product (q·qᵀ masked below the diagonal and decay-weighted,
times v) plus the carried state's part; the state is carried between chunks by a scan
whose steps are elementwise, so a long sequence is parallel over its chunks instead of a
chain of T dependent steps. The math and the pass layout are in kernels/recurrent.wgsl
(section `chunked_common`).

Non-finite inputs: the chunked algebra groups the terms differently from the stepwise
chain (a ±Inf value meets the state through one product q_s·q_j instead of L row
updates), so where numpy's context is ±Inf the chunked form may give NaN or the other way
round, and an infinite decay can turn an exact 0 into NaN (Inf·0). Finite inputs carry the
stepwise form's tolerance.
"""

from __future__ import annotations

import itertools

import numpy as np

from farm.catalog import Arg, Launch, Pass, render, sections
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

FORM_STEPWISE, FORM_CHUNKED = 0, 1
CHUNK_SIZES = (16, 32, 64)
BLOCK_E = (16, 32, 64)
CHUNK_WORKGROUPS = (64, 128, 256)
SCAN_WG = 256  # threads per workgroup of the scan pass (one per state entry)
MAX_THREAD_FLOATS = 128  # accumulators per thread beyond which they spill
STEPWISE_KNOBS = ("threads_per_column", "reduce", "chunk")
SOURCE_FILE = "recurrent.wgsl"


def chunked_schedules() -> list[Schedule]:
    """Every (workgroup_size, chunk_size, block_e) of the chunked form."""
    return [
        Schedule.of(workgroup_size=wg, form=FORM_CHUNKED, chunk_size=c, block_e=eb)
        for wg, c, eb in itertools.product(CHUNK_WORKGROUPS, CHUNK_SIZES, BLOCK_E)
    ]


def chunk_count(problem: Problem, chunk: int) -> int:
    return -(-problem["T"] // chunk)


def states_bytes(problem: Problem, chunk: int) -> int:
    """The scratch that holds every chunk's state: B·H·NC·L·E floats."""
    b, h, l_dim, e = problem["B"], problem["H"], problem["L"], problem["E"]
    return 4 * b * h * chunk_count(problem, chunk) * l_dim * e


def chunked_workgroup_bytes(schedule: Schedule, problem: Problem) -> int:
    """The larger pass's workgroup memory: the output pass's padded q rows, the value
    columns, the masked attention matrix and the decay powers."""
    c, eb, l_dim = schedule["chunk_size"], schedule["block_e"], problem["L"]
    return 4 * (c * (l_dim + 1) + c * eb + c * c + c + 1)


def check_chunked(kernel: str, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
    """InvalidSchedule naming the knob when the chunked form can't run `problem`."""
    knobs = schedule.as_dict()
    stray = [k for k in STEPWISE_KNOBS if k in knobs]
    if stray or schedule.items_per_invocation != 1 or schedule.vector_width != 1:
        reason = f"form 1 (chunked) takes workgroup_size, chunk_size and block_e only; got {schedule}"
        raise InvalidSchedule(kernel, schedule, reason)
    c, eb, wg = schedule.get("chunk_size", 0), schedule.get("block_e", 0), schedule.workgroup_size
    if c not in CHUNK_SIZES:
        raise InvalidSchedule(kernel, schedule, f"chunk_size {c} not in {list(CHUNK_SIZES)}")
    if eb not in BLOCK_E or wg % eb:
        raise InvalidSchedule(kernel, schedule, f"block_e {eb} must be in {list(BLOCK_E)} and divide workgroup_size")
    rows = wg // eb
    floats = max(-(-problem["L"] // rows), -(-c // rows))
    if floats > MAX_THREAD_FLOATS:
        reason = f"{floats} accumulators per thread > {MAX_THREAD_FLOATS} (L={problem['L']}, {rows} thread rows)"
        raise InvalidSchedule(kernel, schedule, reason)
    need, limit = states_bytes(problem, c), profile.limit("max-storage-buffer-binding-size")
    if need > limit:
        reason = f"chunk states need {need} bytes > max-storage-buffer-binding-size {limit}: use a larger chunk_size"
        raise InvalidSchedule(kernel, schedule, reason)


def chunked_launch(schedule: Schedule, problem: Problem, args: list[Arg]) -> Launch:
    """Three passes sharing the stepwise form's args 0-5 (query, value, rho_in, decay,
    context, rho) plus params (6) and the chunk states scratch (7)."""
    b, h, vh, t, l_dim, e = (problem[d] for d in ("B", "H", "VH", "T", "L", "E"))
    c, eb, wg = schedule["chunk_size"], schedule["block_e"], schedule.workgroup_size
    nc, eblocks = chunk_count(problem, c), -(-e // eb)
    groups, total = b * h * nc * eblocks, b * h * l_dim * e
    parts = sections(SOURCE_FILE)
    common = render(parts["chunked_common"], {"WG": wg, "C": c, "EB": eb, "L": l_dim})

    def source(name: str) -> str:
        return render(parts[name], {"COMMON": common})

    params = np.array([b, h, vh, t, l_dim, e, nc, eblocks, groups, total, 0, 0], np.uint32)
    return Launch(
        source=source("chunk_output"),
        args=[
            *args,
            Arg("params", "uniform", params),
            Arg("states", "storage", dtype=np.float32, shape=(b * h * nc * l_dim * e,)),
        ],
        groups=groups,
        bindings=(0, 1, 3, 4, 6, 7),
        prologue=[
            Pass(source("chunk_state"), groups, (0, 1, 3, 6, 7)),
            Pass(source("chunk_scan"), -(-total // SCAN_WG), (2, 3, 5, 6, 7)),
        ],
    )
