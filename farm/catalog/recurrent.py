"""recurrent: fused recurrent linear attention, stepwise (one dispatch for all T steps)
or chunked (form=1, three passes; form=2, one workgroup walking the chunks:
farm.catalog.recurrent_chunked).

Math (exact), for t = 0..T-1 in order:
    context[b,h,t,e] = sum_l rho[b,h,l,e] * query[b,h,t,l]          (state before the update)
    rho[b,h,l,e]     = (rho[b,h,l,e] + query[b,h,t,l] * value[b,vh,t,e]) * decay[h]
with value heads VH = 1 (broadcast) or VH = H, rho zeros and decay ones when absent.
Problem dims are B, H, VH, T, L, E. Inputs: query [B,H,T,L], value [B,VH,T,E],
rho [B,H,L,E], decay [H]; outputs context [B,H,T,E] and rho [B,H,L,E].
NaN/Inf propagate as in the reference: the padding rows of a column (past L, when
threads_per_column doesn't divide L) keep a zero state, so an Inf in value or decay
never meets them as 0 · Inf. L is at most MAX_L (2048) for every schedule.
"""

from __future__ import annotations

import itertools

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for, sections
from farm.catalog.recurrent_chunked import (
    ATTENTION_PASS,
    BLOCK_E,
    CHUNK_SIZES,
    CHUNKED_FORMS,
    FORM_CHUNKED,
    FORM_WALK,
    check_chunked,
    chunked_launch,
    chunked_schedules,
    chunked_workgroup_bytes,
    walk_launch,
)
from farm.catalog.unrolled import each, fetch_rounds, indent
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

REDUCE_MODES = {0: "workgroup", 1: "subgroup", 2: "deferred"}  # deferred: chunked kernel only
MAX_REGISTER_FLOATS = 128  # per-thread state floats beyond which the state spills
MAX_TPC = 16  # the most threads a column's L rows are split over (space["threads_per_column"])
# The largest L any schedule can run: ceil(L / MAX_TPC) state floats per thread <= 128.
# ForgeRuntime.recurrent_attention refuses larger L with ValueError. Split L instead: each
# state row evolves on its own and context sums over the rows, so chunks of <= MAX_L rows
# run apart give the rows of rho and contexts to add.
MAX_L = MAX_REGISTER_FLOATS * MAX_TPC
_VEC = {1: "f32", 2: "vec2<f32>", 4: "vec4<f32>"}
PREFETCH = (0, 1)  # absent = 0
PREFETCH_FLOATS = 32  # the most floats a thread may hold for the next chunk (prefetch=1)
UNCHUNKED = 0xFFFFFFFF  # CT without chunking: one pass over all T steps
# Where a step reads its value vector i and query row l: storage, or the staged chunk.
_STEP_READS = {
    False: ("value[(vbh * p.t + t) * p.ev + min(col_{i}, p.ev - 1u)]", "query[(bh * p.t + t) * LQ + {l}]"),
    True: ("vs[s * COLS + {i}u * SLOTS + slot]", "qs[s * LQ + {l}]"),
}


def reference_recurrent(
    query: np.ndarray,
    value: np.ndarray,
    rho: np.ndarray | None = None,
    decay: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The float64 reference: (context [B,H,T,E], final rho [B,H,L,E])."""
    b, h, vh, t, l_dim, e = check_shapes(query, value, rho, decay)
    q = np.asarray(query, np.float64)
    v = np.asarray(value, np.float64)
    v = np.broadcast_to(v, (b, h, t, e)) if vh == 1 else v
    state = np.zeros((b, h, l_dim, e)) if rho is None else np.array(rho, np.float64)
    d = None if decay is None else np.asarray(decay, np.float64).reshape(1, h, 1, 1)
    context = np.empty((b, h, t, e))
    for step in range(t):
        q_t = q[:, :, step, :]
        context[:, :, step, :] = np.einsum("bhle,bhl->bhe", state, q_t)
        state = state + q_t[..., None] * v[:, :, step, None, :]
        if d is not None:
            state = state * d
    return context, state


def check_shapes(
    query: np.ndarray, value: np.ndarray, rho: np.ndarray | None, decay: np.ndarray | None
) -> tuple[int, int, int, int, int, int]:
    """(B, H, VH, T, L, E) of consistent inputs; ValueError naming the offending shape otherwise."""
    if np.ndim(query) != 4:
        raise ValueError(f"query must be [B,H,T,L]; got shape {np.shape(query)}")
    if np.ndim(value) != 4:
        raise ValueError(f"value must be [B,VH,T,E]; got shape {np.shape(value)}")
    b, h, t, l_dim = np.shape(query)
    vb, vh, vt, e = np.shape(value)
    if vb != b or vt != t or vh not in (1, h):
        raise ValueError(f"value shape {np.shape(value)} does not fit query {np.shape(query)} (need [B, 1 or H, T, E])")
    if min(b, h, t, l_dim, e) < 1:
        raise ValueError(f"empty dimension in query {np.shape(query)} / value {np.shape(value)}")
    if rho is not None and np.shape(rho) != (b, h, l_dim, e):
        raise ValueError(f"rho must be [B,H,L,E] = {(b, h, l_dim, e)}; got shape {np.shape(rho)}")
    if decay is not None and np.shape(decay) != (h,):
        raise ValueError(f"decay must be [H] = {(h,)}; got shape {np.shape(decay)}")
    return b, h, vh, t, l_dim, e


def sweep_decay(heads: int) -> np.ndarray:
    """decay[h] = 0.85 + 0.1·h/H, the sweep's (and certification's) decay."""
    return (0.85 + 0.1 * np.arange(heads, dtype=np.float64) / heads).astype(np.float32)


class Recurrent(KernelSpec):
    name = "recurrent"
    source_file = "recurrent.wgsl"
    dims = ("B", "H", "VH", "T", "L", "E")
    space = {
        "workgroup_size": (32, 64, 128, 256),
        "items_per_invocation": (1, 2),
        "vector_width": (1, 2, 4),
        "threads_per_column": (1, 2, 4, 8, MAX_TPC),
        "reduce": (0, 1, 2),
        "chunk": (0, 8, 16, 32),
        "prefetch": PREFETCH,  # chunked stepwise: the next chunk's loads in registers during this one's steps
        # the chunked form (farm.catalog.recurrent_chunked): form=1 with its own two knobs
        "form": (0, FORM_CHUNKED, FORM_WALK),
        "chunk_size": CHUNK_SIZES,
        "block_e": BLOCK_E,
        "attention_pass": ATTENTION_PASS,  # chunked forms: the chunks' attention matrices computed once, first
    }
    STEPWISE = ("workgroup_size", "items_per_invocation", "vector_width", "threads_per_column", "reduce", "chunk")
    # The documented default (workgroup_size 64, like every kernel); `farm tune` finds better: the
    # per-step latency chain, not bandwidth, bounds this kernel, so large GPUs' winners take 16 lanes a column.
    default = Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1, threads_per_column=4, reduce=0)
    atol = 1e-3
    rtol = 1e-4

    def problem(self, **dims: int) -> Problem:
        p = super().problem(**dims)  # then the inputs' own shape check, on zero-stride views (no input yet)
        shapes = (p["B"], p["H"], p["T"], p["L"]), (p["B"], p["VH"], p["T"], p["E"])
        if min(shapes[0] + shapes[1]) >= 1:  # a dimension below 1: check_problem's message, as for every kernel
            check_shapes(*(np.broadcast_to(np.float32(0), s) for s in shapes), None, None)
        return p

    def schedules(self) -> list[Schedule]:
        """The stepwise knob product less what is invalid or a duplicate on every problem (a
        reduce mode with one thread per column: nothing to reduce; deferred without chunks),
        then the chunked form's schedules."""
        names = list(self.STEPWISE)
        out = []
        for values in itertools.product(*(self.space[n] for n in names)):
            knobs = dict(zip(names, values, strict=True))
            if knobs["threads_per_column"] == 1 and knobs["reduce"] != 0:
                continue
            if knobs["reduce"] == 2 and knobs["chunk"] == 0:
                continue
            out.append(Schedule.of(**knobs))
            if knobs["chunk"]:
                out.append(Schedule.of(**knobs, prefetch=1))
        return out + chunked_schedules()

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(B=1, H=2, VH=1, T=8, L=16, E=32)]
        # The recurrent sweep's eight default cases, so each gets its own tuned winner, and
        # its three long-sequence cases (farm.recurrent.cases.long_cases, VH = H).
        short = [self.problem(B=1, H=8, VH=1, T=64, L=64, E=e) for e in (96, 128, 192, 256, 384, 512, 640, 768)]
        long = [(1, 1024, 768), (8, 1024, 256), (1, 4096, 768)]
        return short + [self.problem(B=b, H=8, VH=8, T=t, L=64, E=e) for b, t, e in long]

    def certify_problems(self) -> list[Problem]:
        return [
            self.problem(B=1, H=1, VH=1, T=1, L=1, E=4),
            self.problem(B=1, H=2, VH=1, T=5, L=8, E=12),
            self.problem(B=2, H=3, VH=3, T=7, L=19, E=36),
        ]

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        form = schedule.get("form", 0)
        if form in CHUNKED_FORMS:
            return check_chunked(self.name, schedule, problem, profile)
        if form != 0 or {"chunk_size", "block_e", "attention_pass"} & set(schedule.as_dict()):
            reason = f"form {form}: 0 (stepwise), 1 or 2 (chunked, with chunk_size and block_e)"
            raise InvalidSchedule(self.name, schedule, reason)
        tpc = schedule.get("threads_per_column", 1)
        reduce = schedule.get("reduce", 0)
        vw, ipi = schedule.vector_width, schedule.items_per_invocation
        if tpc < 1 or tpc & (tpc - 1) or schedule.workgroup_size % tpc:
            reason = f"threads_per_column {tpc} must be a power of two dividing workgroup_size"
            raise InvalidSchedule(self.name, schedule, reason)
        if vw not in _VEC or problem["E"] % vw:
            reason = f"vector_width {vw} must be 1, 2 or 4 and divide E={problem['E']}"
            raise InvalidSchedule(self.name, schedule, reason)
        if reduce not in REDUCE_MODES:
            raise InvalidSchedule(self.name, schedule, f"reduce {reduce} not in {sorted(REDUCE_MODES)}")
        lanes = profile.subgroup_lanes()
        if reduce == 1 and tpc > 1 and tpc > lanes:
            reason = (
                f"subgroup reduce needs the subgroup feature and threads_per_column {tpc} <= "
                f"the adapter's smallest subgroup ({lanes or 'no subgroups'})"
            )
            raise InvalidSchedule(self.name, schedule, reason)
        chunk = schedule.get("chunk", 0)
        if chunk not in self.space["chunk"]:
            raise InvalidSchedule(self.name, schedule, f"chunk {chunk} not in {list(self.space['chunk'])}")
        if reduce == 2 and (chunk == 0 or tpc == 1):
            reason = f"reduce 2 (deferred) needs chunk > 0 and threads_per_column > 1; got chunk {chunk}, tpc {tpc}"
            raise InvalidSchedule(self.name, schedule, reason)
        prefetch = schedule.get("prefetch", 0)
        if prefetch not in PREFETCH or (prefetch and not chunk):
            raise InvalidSchedule(self.name, schedule, f"prefetch {prefetch} must be 0, or 1 with chunk > 0")
        ahead = prefetch_floats(schedule.workgroup_size, chunk, problem["L"], schedule.workgroup_size // tpc * ipi, vw)
        if prefetch and ahead > PREFETCH_FLOATS:
            reason = f"prefetch holds {ahead} floats per thread > {PREFETCH_FLOATS} (chunk {chunk}, L={problem['L']})"
            raise InvalidSchedule(self.name, schedule, reason)
        floats = -(-problem["L"] // tpc) * ipi * vw
        if floats > MAX_REGISTER_FLOATS:
            raise InvalidSchedule(
                self.name, schedule, f"{floats} state floats per thread > {MAX_REGISTER_FLOATS} (L={problem['L']})"
            )

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        if schedule.get("form", 0) in CHUNKED_FORMS:
            return chunked_workgroup_bytes(schedule, problem)
        tpc = schedule.get("threads_per_column", 1)
        wg, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        chunk = schedule.get("chunk", 0)
        staged = 4 * chunk * (problem["L"] + (wg // tpc) * ipi * vw)  # q rows + value columns
        mode = REDUCE_MODES.get(schedule.get("reduce", 0))
        if tpc > 1 and mode == "deferred":
            return staged + 4 * vw * chunk * tpc * ((wg // tpc) * ipi + 1)
        if tpc == 1 or mode != "workgroup":
            return staged
        return staged + 2 * wg * ipi * vw * 4

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        b, h, vh, t, l_dim, e = (problem[d] for d in self.dims)
        return {
            "query": rng.standard_normal((b, h, t, l_dim), dtype=np.float32),
            "value": rng.standard_normal((b, vh, t, e), dtype=np.float32),
            "rho": (0.1 * rng.standard_normal((b, h, l_dim, e))).astype(np.float32),
            "decay": sweep_decay(h),
        }

    def reference(self, problem, schedule, inputs):
        context, rho = reference_recurrent(inputs["query"], inputs["value"], inputs.get("rho"), inputs.get("decay"))
        return {"context": context.astype(np.float32), "rho": rho.astype(np.float32)}

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        b, h, vh, t, l_dim, e = (problem[d] for d in self.dims)
        rho = inputs.get("rho")
        rho = np.zeros((b, h, l_dim, e), np.float32) if rho is None else np.ascontiguousarray(rho, np.float32)
        decay = inputs.get("decay")
        decay = np.ones(h, np.float32) if decay is None else np.ascontiguousarray(decay, np.float32)
        args = [
            Arg("query", "read", np.ascontiguousarray(inputs["query"], np.float32)),
            Arg("value", "read", np.ascontiguousarray(inputs["value"], np.float32)),
            Arg("rho_in", "read", rho),
            Arg("decay", "read", decay),
            Arg("context", "storage", dtype=np.float32, shape=(b, h, t, e), output=True),
            Arg("rho", "storage", dtype=np.float32, shape=(b, h, l_dim, e), output=True),
        ]
        if schedule.get("form", 0) == FORM_CHUNKED:
            return chunked_launch(schedule, problem, args)
        if schedule.get("form", 0) == FORM_WALK:
            return walk_launch(schedule, problem, args)
        wg, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        tpc = schedule.get("threads_per_column", 1)
        mode = "none" if tpc == 1 else REDUCE_MODES[schedule.get("reduce", 0)]
        ev = e // vw
        col_blocks = -(-ev // ((wg // tpc) * ipi))
        groups = b * h * col_blocks
        chunk, prefetch = schedule.get("chunk", 0), bool(schedule.get("prefetch", 0))
        source = self.render_source(wg, tpc, ipi, vw, -(-l_dim // tpc), mode, chunk, l_dim, prefetch)
        params = np.array([b, h, vh, t, l_dim, ev, col_blocks, groups], np.uint32)
        return Launch(source=source, args=[*args, Arg("params", "uniform", params)], groups=groups)

    def render_source(
        self, wg: int, tpc: int, ipi: int, vw: int, rows: int, mode: str, chunk: int, l_dim: int, prefetch=False
    ) -> str:
        """WGSL for one schedule; chunk > 0 stages CT steps of q/v in workgroup memory, with
        `prefetch` loading each chunk into registers while the chunk before runs its steps."""
        parts = sections(self.source_file)
        vec = _VEC[vw]
        deferred = mode == "deferred"
        blocks = _thread_blocks(tpc, ipi, rows, l_dim, vec, bool(chunk))
        cols = (wg // tpc) * ipi
        first, stage = "", ""
        if chunk and prefetch:
            lines = _prefetch_lines(wg, chunk, l_dim, cols, vec)
            first = render(parts["prefetch_first"], {"DECL": indent(4, lines[0]), "LOAD": indent(8, lines[1])})
            stage = render(parts["stage_prefetch"], {"STORE": indent(8, lines[2]), "LOAD": indent(12, lines[1])})
        elif chunk:
            stage = render(parts["stage"], {"FETCH": _stage_fetch(wg, chunk, l_dim, cols)})
        return render(
            parts["kernel"],
            blocks
            | {
                "CT": chunk or UNCHUNKED,
                "L": l_dim,
                "WG": wg,
                "TPC": tpc,
                "IPI": ipi,
                "ROWS": rows,
                "VEC": vec,
                "REDUCE_NAME": mode,
                "REDUCE_DECL": render(parts[f"{mode}_decl"], {"VEC": vec}),
                "REDUCE": each(render(parts[mode], {"VEC": vec}), ipi),
                "CHUNK_DECL": render(parts["chunk_decl"], {"VEC": vec}) if chunk else "",
                "STAGE": stage,
                "PREFETCH": first,
                "STEP_WRITE": each(parts["deferred_write" if deferred else "step_write"], ipi),
                "CHUNK_END": render(parts["deferred_end"], {"VEC": vec}) if deferred else "",
            },
        )

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        # f32 error grows with the L-term dot products and the T-step accumulation.
        return (1e-5 * np.sqrt(problem["L"]) * np.sqrt(problem["T"]) + 1e-5, 1e-4)

    def work(self, problem: Problem) -> tuple[float, float]:
        b, h, vh, t, l_dim, e = (problem[d] for d in self.dims)
        flops = 5.0 * b * h * t * l_dim * e
        moved = 4.0 * (b * h * t * l_dim + b * vh * t * e + 2 * b * h * l_dim * e + b * h * t * e + h)
        return (flops, moved)

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        b, h, vh, t, l_dim, e = (problem[d] for d in self.dims)
        state = 4 * b * h * l_dim * e
        return {"query": 4 * b * h * t * l_dim, "value": 4 * b * vh * t * e, "rho_in": state,
                "decay": 4 * h, "context": 4 * b * h * t * e, "rho": state}  # fmt: skip


def _thread_blocks(tpc: int, ipi: int, rows: int, l_dim: int, vec: str, staged: bool) -> dict[str, str]:
    """A thread's columns, state rows and step, unrolled into named scalars (kernels/recurrent.wgsl):
    col_<i>/live_<i>, l<k>, r<k>_<i>, v<i>, acc<i>. Only the last row can lie past L (when
    TPC doesn't divide L): it alone is guarded (a padded row keeps its zero state: (0 + 0·v)·d
    would turn an Inf in v or d into NaN, and that NaN into the column's context, where
    numpy has no such row)."""
    cols, ks = range(ipi), range(rows)
    padded = {k for k in ks if (k + 1) * tpc > l_dim}
    v_at, q_at = _STEP_READS[staged]
    columns = [f"let col_{i} = (blk * IPI + {i}u) * SLOTS + slot;\nlet live_{i} = col_{i} < p.ev;" for i in cols]
    columns += [f"let l{k} = {k}u * TPC + lane;" for k in ks]
    load, step, store = [], [], []
    for k in ks:
        inside = f"l{k} < LQ && " if k in padded else ""
        for i in cols:
            at = f"(bh * LQ + l{k}) * p.ev + col_{i}"
            load += [f"var r{k}_{i} = {vec}(0.0);", f"if ({inside}live_{i}) {{ r{k}_{i} = rho_in[{at}]; }}"]
            store.append(f"if ({inside}live_{i}) {{ rho_out[{at}] = r{k}_{i}; }}")
    for i in cols:
        step += [f"let v{i} = {v_at.format(i=i)};", f"var acc{i} = {vec}(0.0);"]
    for k in ks:
        if k in padded:
            step.append(f"let q{k} = select(0.0, {q_at.format(l=f'min(l{k}, LQ - 1u)')}, l{k} < LQ);")
        else:
            step.append(f"let q{k} = {q_at.format(l=f'l{k}')};")
        for i in cols:
            update = f"(r{k}_{i} + q{k} * v{i}) * d"
            update = f"select(r{k}_{i}, {update}, l{k} < LQ)" if k in padded else update
            step += [f"acc{i} += r{k}_{i} * q{k};", f"r{k}_{i} = {update};"]
    return {
        "COLUMNS": indent(4, columns),
        "LOAD_STATE": indent(4, load),
        "STEP": indent(12, step),
        "STORE_STATE": indent(4, store),
    }


def _stage_fetch(wg: int, chunk: int, l_dim: int, cols: int) -> str:
    """The chunk's query rows and value columns into qs / vs, each thread's loads of a
    round issued before its stores (farm.catalog.unrolled)."""
    value = "let x{u} = value[(vbh * p.t + t0 + {i} / COLS) * p.ev + min(col0 + {i} % COLS, p.ev - 1u)];"
    lines = fetch_rounds("q", "n * LQ", chunk * l_dim, wg, ["let x{u} = query[qbase + {i}];"], "qs[{i}] = {x};")
    lines += fetch_rounds("v", "n * COLS", chunk * cols, wg, [value], "vs[{i}] = {x};")
    return indent(8, lines)


def prefetch_floats(wg: int, chunk: int, l_dim: int, cols: int, vw: int) -> int:
    """Floats a thread holds for the next chunk with prefetch=1: its query and value elements."""
    return -(-chunk * l_dim // wg) + -(-chunk * cols // wg) * vw


def _prefetch_lines(wg: int, chunk: int, l_dim: int, cols: int, vec: str) -> tuple[list[str], list[str], list[str]]:
    """(declarations, loads, stores) of prefetch=1: thread lid's elements lid + u·WG of the
    chunk starting at step tn (nn steps; indices clamped in bounds) into registers pq<u> and
    pv<u>, and from them into qs / vs for the chunk at t0 (n steps)."""
    decl, load, store = [], [], []
    for u in range(-(-chunk * l_dim // wg)):
        i = f"lid + {u * wg}u"
        decl.append(f"var pq{u} = 0.0;")
        load.append(f"pq{u} = query[(bh * p.t + tn) * LQ + min({i}, nn * LQ - 1u)];")
        store.append(f"if ({i} < n * LQ) {{ qs[{i}] = pq{u}; }}")
    for u in range(-(-chunk * cols // wg)):
        i = f"lid + {u * wg}u"
        decl.append(f"var pv{u} = {vec}(0.0);")
        at = f"(vbh * p.t + tn + iv{u} / COLS) * p.ev + min(col0 + iv{u} % COLS, p.ev - 1u)"
        load.append(f"let iv{u} = min({i}, nn * COLS - 1u);\npv{u} = value[{at}];")
        store.append(f"if ({i} < n * COLS) {{ vs[{i}] = pv{u}; }}")
    return decl, load, store


register(Recurrent())
