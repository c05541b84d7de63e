"""recurrent, chunked forms: the recurrence over chunks of C steps.

The schedule knob `form=1` selects three passes (every chunk's state contribution in
parallel, a scan over the chunks, every chunk's contexts in parallel); `form=2` one
workgroup per state block walking the chunks in order, its state in workgroup memory (one
dispatch, no scratch: for few chunks, where three passes' launches and scratch cost more
than the walk). farm.catalog.recurrent keeps the stepwise form, one dispatch whose T steps
run in order. Same inputs, outputs, reference and
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
from farm.catalog.unrolled import each, fetch_rounds, indent
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

FORM_STEPWISE, FORM_CHUNKED, FORM_WALK = 0, 1, 2
CHUNKED_FORMS = (FORM_CHUNKED, FORM_WALK)
CHUNK_SIZES = (16, 32, 64)
BLOCK_E = (16, 32, 64)
CHUNK_WORKGROUPS = (64, 128, 256)
SCAN_WG = 256  # threads per workgroup of the scan pass (one per state entry)
SCAN_AHEAD = 8  # chunk contributions the scan loads at once (AHEAD in kernels/recurrent.wgsl)
MAX_THREAD_FLOATS = 128  # accumulators per thread beyond which they spill
# attention_pass=1: every chunk's attention matrix computed once, by a pass of its own
# (section `chunk_attention_pass`), for all of the chunk's column blocks to read
ATTENTION_PASS = (0, 1)
STEPWISE_KNOBS = ("threads_per_column", "reduce", "chunk", "prefetch")
SOURCE_FILE = "recurrent.wgsl"


def chunked_schedules() -> list[Schedule]:
    """Every (workgroup_size, chunk_size, block_e) of the two chunked forms: three passes
    (form 1), and one workgroup walking the chunks (form 2); each with every column block
    computing its chunk's attention matrix, and with one pass computing them all first
    (attention_pass=1; the knob is left out at 0, so those keys are as before)."""
    return [
        Schedule.of(workgroup_size=wg, form=form, chunk_size=c, block_e=eb, **({"attention_pass": 1} if ap else {}))
        for form in CHUNKED_FORMS
        for ap in ATTENTION_PASS
        for wg, c, eb in itertools.product(CHUNK_WORKGROUPS, CHUNK_SIZES, BLOCK_E)
    ]


def chunk_count(problem: Problem, chunk: int) -> int:
    return -(-problem["T"] // chunk)


def states_bytes(problem: Problem, chunk: int) -> int:
    """The scratch that holds every chunk's state: B·H·NC·L·E floats."""
    b, h, l_dim, e = problem["B"], problem["H"], problem["L"], problem["E"]
    return 4 * b * h * chunk_count(problem, chunk) * l_dim * e


def attention_bytes(problem: Problem, chunk: int) -> int:
    """attention_pass=1's scratch: every chunk's C x C attention matrix, B·H·NC·C·C floats."""
    return 4 * problem["B"] * problem["H"] * chunk_count(problem, chunk) * chunk * chunk


def chunked_workgroup_bytes(schedule: Schedule, problem: Problem) -> int:
    """Form 1: the larger pass's workgroup memory. Pass 1: the chunk's q rows (padded to
    4), its value columns, the decay powers; pass 3 and form 2: q transposed, the carried
    state's columns, the value columns, the attention matrix, the decay powers."""
    c, eb, l_dim = schedule["chunk_size"], schedule["block_e"], problem["L"]
    output_pass = l_dim * c + l_dim * eb + c * eb + c * c + c + 1
    if schedule.get("form", 0) == FORM_WALK:
        return 4 * output_pass
    state_pass = c * 4 * -(-l_dim // 4) + c * eb + c + 1
    return 4 * max(state_pass, output_pass)


def _quads(schedule: Schedule, problem: Problem) -> tuple[int, int]:
    """(latent-row quads per thread in pass 1, step quads per thread in pass 3)."""
    rows = schedule.workgroup_size // (schedule["block_e"] // 4)
    quads_l = -(-problem["L"] // 4)
    return -(-quads_l // rows), -(-(schedule["chunk_size"] // 4) // rows)


def check_chunked(kernel: str, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
    """InvalidSchedule naming the knob when the chunked form can't run `problem`."""
    knobs = schedule.as_dict()
    stray = [k for k in STEPWISE_KNOBS if k in knobs]
    if stray or schedule.items_per_invocation != 1 or schedule.vector_width != 1:
        form = schedule.get("form", 0)
        allowed = "workgroup_size, chunk_size, block_e and attention_pass"
        reason = f"form {form} (chunked) takes {allowed} only; got {schedule}"
        raise InvalidSchedule(kernel, schedule, reason)
    c, eb, wg = schedule.get("chunk_size", 0), schedule.get("block_e", 0), schedule.workgroup_size
    if c not in CHUNK_SIZES:
        raise InvalidSchedule(kernel, schedule, f"chunk_size {c} not in {list(CHUNK_SIZES)}")
    if eb not in BLOCK_E or wg % (eb // 4):
        reason = f"block_e {eb} must be in {list(BLOCK_E)}, a quarter of it dividing workgroup_size"
        raise InvalidSchedule(kernel, schedule, reason)
    attention, limit = schedule.get("attention_pass", 0), profile.limit("max-storage-buffer-binding-size")
    if attention not in ATTENTION_PASS:
        raise InvalidSchedule(kernel, schedule, f"attention_pass {attention} not in {list(ATTENTION_PASS)}")
    if attention and attention_bytes(problem, c) > limit:
        reason = f"attention_pass needs {attention_bytes(problem, c)} bytes > max-storage-buffer-binding-size {limit}"
        raise InvalidSchedule(kernel, schedule, reason)
    if schedule.get("form", 0) == FORM_WALK:
        return  # no per-thread blocks, no chunk states: the workgroup memory check is the spec's
    floats = 16 * max(_quads(schedule, problem))
    if floats > MAX_THREAD_FLOATS:
        reason = f"{floats} accumulators per thread > {MAX_THREAD_FLOATS} (L={problem['L']}, block_e {eb})"
        raise InvalidSchedule(kernel, schedule, reason)
    need = states_bytes(problem, c)
    if need > limit:
        reason = f"chunk states need {need} bytes > max-storage-buffer-binding-size {limit}: use a larger chunk_size"
        raise InvalidSchedule(kernel, schedule, reason)


def chunked_sources(schedule: Schedule, problem: Problem) -> tuple[str, str, str]:
    """Form 1's WGSL: (chunk_state, chunk_scan, chunk_output); with attention_pass=1 the
    output pass reads the attention scratch (binding 8) that `attention_source` fills."""
    c, eb, wg, l_dim = schedule["chunk_size"], schedule["block_e"], schedule.workgroup_size, problem["L"]
    parts = sections(SOURCE_FILE)
    common = render(parts["chunked_common"], {"WG": wg, "C": c, "EB": eb, "L": l_dim})
    mq, ms = _quads(schedule, problem)
    snippets = _snippets(parts, wg, c, l_dim, eb) | _read_attention(schedule, FORM1_ATTENTION)

    def source(name: str, blocks: dict[str, str], out: str = "") -> str:
        put = render(parts["chunk_put"], {"OUT": out}) if out else ""
        tile = {"TILE": parts["chunk_tile"], "TILE_DECL": parts["chunk_tile_decl"].rstrip("\n"), "PUT": put}
        values = {"COMMON": common} | tile | snippets | blocks
        return render(parts[name], values)

    return (
        source("chunk_state", _state_blocks(mq), "states"),
        each(source("chunk_scan", {"AHEAD": SCAN_AHEAD}), SCAN_AHEAD, "$a"),
        source("chunk_output", _output_blocks(ms), "context"),
    )


FORM1_ATTENTION, WALK_ATTENTION = 8, 7  # the attention scratch's binding (= arg index) in each form


def attention_source(schedule: Schedule, problem: Problem, binding: int) -> str:
    """attention_pass=1's first pass (section `chunk_attention_pass`): a workgroup per (b, h,
    chunk) computing that chunk's attention matrix into the scratch at `binding`."""
    c, eb, wg, l_dim = schedule["chunk_size"], schedule["block_e"], schedule.workgroup_size, problem["L"]
    parts = sections(SOURCE_FILE)
    common = render(parts["chunked_common"], {"WG": wg, "C": c, "EB": eb, "L": l_dim})
    entry = render(parts["chunk_entry"], {"GROUPS": "agroups"}).rstrip("\n")  # a workgroup per (b, h, chunk)
    values = {"COMMON": common, "ATT_BINDING": binding} | _snippets(parts, wg, c, l_dim, eb) | {"ENTRY": entry}
    return render(parts["chunk_attention_pass"], values)


def _read_attention(schedule: Schedule, binding: int) -> dict[str, str]:
    """With attention_pass=1, the chunk's attention matrix read from the scratch (each
    thread's loads before its stores) in place of computing it; nothing otherwise."""
    if not schedule.get("attention_pass", 0):
        return {"ATT_DECL": ""}
    c, wg = schedule["chunk_size"], schedule.workgroup_size
    read = ["let abase = (bh * p.nc + c) * C * C4;"]
    read += fetch_rounds("a", "C * C4", c * c // 4, wg, ["let x{u} = attention[abase + {i}];"], "at[{i}] = {x};")
    declaration = f"@group(0) @binding({binding}) var<storage, read> attention: array<vec4<f32>>;"
    return {"ATT_DECL": declaration, "ATTENTION": indent(4, read)}


def chunked_launch(schedule: Schedule, problem: Problem, args: list[Arg]) -> Launch:
    """Three passes sharing the stepwise form's args 0-5 (query, value, rho_in, decay,
    context, rho) plus params (6) and the chunk states scratch (7); attention_pass=1 adds
    the attention pass first and its scratch (8)."""
    b, h, vh, t, l_dim, e = (problem[d] for d in ("B", "H", "VH", "T", "L", "E"))
    c, eb = schedule["chunk_size"], schedule["block_e"]
    nc, eblocks = chunk_count(problem, c), -(-e // eb)
    groups, total = b * h * nc * eblocks, b * h * l_dim * e
    params = np.array([b, h, vh, t, l_dim, e, nc, eblocks, groups, total, b * h * nc, 0], np.uint32)
    state, scan, output = chunked_sources(schedule, problem)
    extra, first = _attention_pass(schedule, problem, FORM1_ATTENTION)
    return Launch(
        source=output,
        args=[
            *args,
            Arg("params", "uniform", params),
            Arg("states", "storage", dtype=np.float32, shape=(b * h * nc * l_dim * e,)),
            *extra,
        ],
        groups=groups,
        bindings=(0, 1, 3, 4, 6, 7) + ((FORM1_ATTENTION,) if extra else ()),
        prologue=[
            *first,
            Pass(state, groups, (0, 1, 3, 6, 7)),
            Pass(scan, -(-total // SCAN_WG), (2, 3, 5, 6, 7)),
        ],
    )


def _attention_pass(schedule: Schedule, problem: Problem, binding: int) -> tuple[list[Arg], list[Pass]]:
    """attention_pass=1's scratch arg and its pass (B·H·NC workgroups); none otherwise."""
    if not schedule.get("attention_pass", 0):
        return [], []
    c = schedule["chunk_size"]
    count = problem["B"] * problem["H"] * chunk_count(problem, c)
    scratch = Arg("attention", "storage", dtype=np.float32, shape=(count * c * c,))
    return [scratch], [Pass(attention_source(schedule, problem, binding), count, (0, 3, 6, binding))]


def walk_launch(schedule: Schedule, problem: Problem, args: list[Arg]) -> Launch:
    """Form 2: one dispatch of B·H·ceil(E / block_e) workgroups, each walking the chunks
    with its block of the state in workgroup memory (kernels/recurrent.wgsl, `chunk_walk`);
    the stepwise form's args 0-5 plus params (6), no scratch; attention_pass=1 adds the
    attention pass first and its scratch (7)."""
    b, h, vh, t, l_dim, e = (problem[d] for d in ("B", "H", "VH", "T", "L", "E"))
    c, eb, wg = schedule["chunk_size"], schedule["block_e"], schedule.workgroup_size
    nc, eblocks = chunk_count(problem, c), -(-e // eb)
    groups = b * h * eblocks
    parts = sections(SOURCE_FILE)
    common = render(parts["chunked_common"], {"WG": wg, "C": c, "EB": eb, "L": l_dim})
    params = np.array([b, h, vh, t, l_dim, e, nc, eblocks, groups, b * h * l_dim * e, b * h * nc, 0], np.uint32)
    snippets = _snippets(parts, wg, c, l_dim, eb) | _read_attention(schedule, WALK_ATTENTION)
    extra, first = _attention_pass(schedule, problem, WALK_ATTENTION)
    return Launch(
        source=render(parts["chunk_walk"], {"COMMON": common} | snippets),
        args=[*args, Arg("params", "uniform", params), *extra],
        groups=groups,
        prologue=first,
    )


def _snippets(parts: dict[str, str], wg: int, chunk: int, l_dim: int, eb: int) -> dict[str, str]:
    """The code both chunked forms share (kernels/recurrent.wgsl): the passes' entry, the decay powers, the
    attention matrix, and the workgroup's loads (farm.catalog.unrolled: each thread's loads
    of a round issued before its stores) of a chunk's value rows (zeros past n steps and
    E), its query rows transposed (zeros past n), pass 1's query rows scaled by d^(n-j), and
    the carried state's columns from the chunk states (pass 3) or rho_in (form 2)."""
    tiled = "vs[({i} / EB) * TCOL + ({i} % EB) / 4u][{i} % 4u] = {x};"
    column = "let e{u} = blk * EB + {i} % EB;"
    loads = {
        "LOAD_V": fetch_rounds("v", "C * EB", chunk * eb, wg, [
            "let j{u} = {i} / EB;", column,
            "let x{u} = select(0.0, value[(vbh * p.t + t0 + min(j{u}, n - 1u)) * p.e + min(e{u}, p.e - 1u)], "
            "j{u} < n && e{u} < p.e);",
        ], tiled),
        "LOAD_Q": fetch_rounds("q", "C * LQ", chunk * l_dim, wg, [
            "let x{u} = select(0.0, query[(bh * p.t + t0) * LQ + min({i}, n * LQ - 1u)], {i} / LQ < n);",
        ], "qt[({i} % LQ) * C4 + ({i} / LQ) / 4u][({i} / LQ) % 4u] = {x};"),
        "LOAD_QS": fetch_rounds("k", "C * L4 * 4u", chunk * 4 * -(-l_dim // 4), wg, [
            "let j{u} = {i} / (L4 * 4u);", "let l{u} = {i} % (L4 * 4u);",
            "let x{u} = select(0.0, query[(bh * p.t + t0 + min(j{u}, n - 1u)) * LQ + min(l{u}, LQ - 1u)] "
            "* pw[n - min(j{u}, n)], j{u} < n && l{u} < LQ);",
        ], "qs[({i} / (L4 * 4u)) * L4 + ({i} % (L4 * 4u)) / 4u][{i} % 4u] = {x};"),
        "LOAD_S": fetch_rounds("s", "LQ * EB", l_dim * eb, wg, [
            column, "let x{u} = select(0.0, states[sbase + ({i} / EB) * p.e + min(e{u}, p.e - 1u)], e{u} < p.e);",
        ], tiled.replace("vs[", "ss[")),
        "LOAD_RHO": fetch_rounds("r", "LQ * EB", l_dim * eb, wg, [
            column, "let x{u} = select(0.0, rho_in[(bh * LQ + {i} / EB) * p.e + min(e{u}, p.e - 1u)], e{u} < p.e);",
        ], tiled.replace("vs[", "ss[")),
    }  # fmt: skip
    # at's 4 columns j0 + k of the block: row r's x{r} lane k, weighted d^(s-j) where j < s < n
    weighted = "select(0.0, x{r}.{lane} * pw[min(s0 + {r}u - j0 - {k}u, C)], j0 + {k}u < s0 + {r}u && s0 + {r}u < n)"
    columns = ["let s0 = sb * 4u;", "let j0 = jb * 4u;"]
    for k, lane in enumerate(_LANES):
        terms = ", ".join(weighted.format(r=r, lane=lane, k=k) for r in range(4))
        columns.append(f"at[(j0 + {k}u) * C4 + sb] = vec4<f32>({terms});")
    attention = render(parts["chunk_attention"], {"ATT_COLUMNS": indent(8, columns)})
    entry = render(parts["chunk_entry"], {"GROUPS": "groups"}).rstrip("\n")
    return {"ENTRY": entry, "POWERS": parts["chunk_powers"].rstrip("\n"), "ATTENTION": attention.rstrip("\n")} | {
        key: indent(4, lines) for key, lines in loads.items()
    }


# The per-thread 4 x 4 blocks, unrolled: m counts a thread's quads, r the rows of a quad.
_LANES = "xyzw"


def _stores(quads: int, index: str, acc: str, quad_limit: str, row_limit: str, row: str) -> str:
    """Each thread's 4 x 4 blocks written by `put`: quad m (index `{index}{m}`, live while
    tr + m·TROW < quad_limit) row r (4·index + r, kept while < row_limit) from `{acc}{m}_{r}`
    to the row whose offset `row` gives (with `{row}` the quad's row)."""
    lines = []
    for m in range(quads):
        lines.append(f"if (tr + {m}u * TROW < {quad_limit}) {{")
        for r in range(4):
            at = f"{index}{m} * 4u + {r}u"
            offset = row.format(row=at)
            lines += [f"    if ({at} < {row_limit}) {{", f"        put(({offset}) * p.e, e0, {acc}{m}_{r});", "    }"]
        lines.append("}")
    return indent(4, lines)


def _state_blocks(quads: int) -> dict[str, str]:
    """Pass 1: a{m}_{r} accumulates state row 4·(tr + m·TROW) + r over 4 columns."""
    quad = range(quads)
    decl = [f"let rq{m} = min(tr + {m}u * TROW, L4 - 1u);" for m in quad]
    decl += [f"var a{m}_{r} = vec4<f32>(0.0);" for m in quad for r in range(4)]
    fma = [f"let q{m} = qs[j * L4 + rq{m}];" for m in quad]
    fma += [f"a{m}_{r} += q{m}.{_LANES[r]} * v;" for m in quad for r in range(4)]
    store = _stores(quads, "rq", "a", "L4", "LQ", "base + {row}")
    return {"MQ": quads, "DECL": indent(4, decl), "FMA": indent(8, fma), "STORE": store}


def _output_blocks(quads: int) -> dict[str, str]:
    """Pass 3: o{m}_{r} accumulates the context of step 4·(tr + m·TROW) + r over 4 columns."""
    quad = range(quads)
    decl = [f"let sq{m} = min(tr + {m}u * TROW, C4 - 1u);" for m in quad]
    decl += [f"var o{m}_{r} = vec4<f32>(0.0);" for m in quad for r in range(4)]
    state = [f"let q{m} = qt[l * C4 + sq{m}];" for m in quad]
    state += [f"o{m}_{r} += q{m}.{_LANES[r]} * sv;" for m in quad for r in range(4)]
    scale = [f"o{m}_{r} *= pw[sq{m} * 4u + {r}u];" for m in quad for r in range(4)]
    att = [f"let a{m} = at[j * C4 + sq{m}];" for m in quad]
    att += [
        f"o{m}_{r} += select(vec4<f32>(0.0), a{m}.{_LANES[r]} * v, j < sq{m} * 4u + {r}u);"
        for m in quad
        for r in range(4)
    ]
    store = _stores(quads, "sq", "o", "C4", "n", "bh * p.t + t0 + {row}")
    return {
        "MS": quads,
        "DECL": indent(4, decl),
        "STATE_FMA": indent(8, state),
        "SCALE": indent(4, scale),
        "ATT_FMA": indent(8, att),
        "STORE": store,
    }
