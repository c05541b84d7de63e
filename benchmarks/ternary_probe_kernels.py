"""The kernels of benchmarks/ternary_probe.py besides the catalog's, and its inputs.

- load-only (`load_only_source`): the real kernels' weight read pattern (row r of
  workgroup g is g*SLOTS*R + r*SLOTS + slot, TPR lanes per row on interleaved weight
  vectors, per 32-word tile every load of the tile issued before any use, as the
  pair-table kernel does) with the decode replaced by XOR-folding the loaded words into
  one u32 per row, reduced over the lanes and written out.
- compute-only (`compute_only_source`): a catalog kernel's rendered WGSL with every
  weight load `w[...]` replaced by a cheap synthetic word of the load index (one
  multiply, a few ALU ops per vec4): x staging, decode / table build and lookups,
  reduction, no weight traffic.
- lut build-only: the pair-table kernel without weight loads and lookups (the table
  build, both barriers per tile, and one table read per row per tile so the build stays
  live). lut lookup-only: the table is built once (first tile) and never rebuilt; the
  weight loads, both barriers and all lookups remain. dp4a no-dot: compute-only with
  every dot product replaced by an XOR of its operands.
- decode kinds (`decode_source`): the decode alone from pseudo-random words made in
  registers (one multiply-add per word in all of them), against a 16 KiB workgroup table
  or x in registers; all lanes of a warp read the same block with random entries (the
  TPR=1 access pattern).

Derived variants are string substitutions in the source the spec renders
(spec.launch(schedule, problem, inputs).source); each substitution checks how many times
it matched (`substitute`), so a template change fails loudly instead of timing the wrong
kernel.
"""

from __future__ import annotations

import re

import numpy as np

from farm.catalog import render
from farm.catalog.ternary_gemv import LUT_TILE_WORDS, row_words
from farm.schedule import Schedule

LOAD_TILE_WORDS = LUT_TILE_WORDS  # words per row per tile whose loads are issued together

LOAD_WGSL = """
// Load-only probe: the ternary kernels' weight read pattern, words XOR-folded per row.
const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;
const TILE_WORDS: u32 = {{TILE_WORDS}}u;

struct Params { m: u32, kw: u32, groups: u32, unused: u32 }

@group(0) @binding(0) var<storage, read> w: array<{{VEC}}>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> partial: array<u32, WG>;

fn fold(v: {{VEC}}) -> u32 {
    return {{FOLD}};
}

fn finish(row: u32, h: u32, lid: u32, lane: u32) {
    partial[lid] = h;
    workgroupBarrier();
    if (lane == 0u && row < p.m) {
        var acc = 0u;
        for (var s = 0u; s < TPR; s++) {
            acc ^= partial[lid + s];
        }
        out[row] = acc;
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let lane = lid % TPR;
    let slot = lid / TPR;
    let nv = p.kw / VW;
{{ROWS}}
    for (var t0 = 0u; t0 < p.kw; t0 += TILE_WORDS) {
        let c = t0 / VW + lane;
{{LOADS}}
{{FOLDS}}
    }
{{REDUCE}}
}
"""

# Inserted before the entry point of compute-only kernels: a synthetic weight vector of the
# load index (arrayLength keeps binding 1 in the auto layout and is not a compile-time constant).
SYNTH_WGSL = """
fn synth(i: u32) -> {{VEC}} {
    let h = (i ^ arrayLength(&w)) * 2654435761u;
    return {{VALUE}};
}
"""
ENTRY = "\n@compute @workgroup_size(WG)\n"

# Decode-rate probe: the cost of turning packed codes into a sum, without weight traffic or
# table builds. Each thread decodes WORDS pseudo-random words (an LCG per thread: one
# multiply-add per word, in every variant) against a 16 KiB workgroup table or 16 x values
# in registers, so all lanes of a warp read the same table block at the same time with
# random entries, as the real kernels' TPR=1 lookups do.
DECODE_WGSL = """
const WORDS: u32 = {{WORDS}}u;

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> p: vec4<u32>;  // seed, threads, unused, unused

var<workgroup> tbl: array<f32, 4096>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    for (var i = lid; i < 4096u; i += 256u) {
        tbl[i] = f32(i % 17u) - 8.0;
    }
    workgroupBarrier();
    let t = (wid.x + wid.y * nwg.x) * 256u + lid;
    var h = (t ^ p.x) * 2654435761u;
    var acc = 0.0;
    var neg = 0.0;
{{SETUP}}
    for (var j = 0u; j < WORDS; j++) {
        h = h * 1664525u + 1013904223u;
        let w = h;
{{DECODE}}
    }
{{FINISH}}
    if (t < p.y) {
        out[t] = acc - neg;
    }
}
"""
DECODE_WORDS = 64  # words per thread


def decode_source(kind: str) -> str:
    """A decode-rate kernel: `word` (the LCG alone), `bits` (the staged kernel's two bit tests
    per code), `pair` (one 16-entry table read per 2 codes), `byte` (one 256-entry read per
    4), `dp4a` (the dp4a kernels' decode and 12 dot products per word, one row), `dots`
    (12 independent dot products per word) and `alu` (12 independent logic ops per word):
    dots against alu is the dot product's issue rate against the ALU's."""
    setup, body = [], []
    if kind == "word":
        body = ["acc += bitcast<f32>((w & 0x007fffffu) | 0x3f800000u);"]
    elif kind == "bits":
        setup = [f"let x{i} = tbl[{i * 37}u];" for i in range(16)]
        for i in range(16):
            body.append(f"if ((w & 0x{1 << 2 * i:x}u) != 0u) {{ acc += x{i}; }}")
            body.append(f"if ((w & 0x{2 << 2 * i:x}u) != 0u) {{ neg += x{i}; }}")
    elif kind == "pair":  # 32 word slots x 8 pairs x 16 entries
        body = ["let pb = (j & 31u) * 128u;"]
        body += [f"acc += tbl[pb + {16 * i}u + ((w >> {4 * i}u) & 15u)];" for i in range(8)]
    elif kind == "byte":  # 4 word slots x 4 groups x 256 entries
        body = ["let bb = (j & 3u) * 1024u;"]
        body += [f"acc += tbl[bb + {256 * i}u + ((w >> {8 * i}u) & 255u)];" for i in range(4)]
    elif kind == "dp4a":  # the dp4a kernels' per-word decode and 12 dots against planes in registers
        setup = [f"let p{i} = bitcast<u32>(tbl[{i * 37}u]) * 0x01010101u;" for i in range(12)]
        setup += [f"var a{i} = 0u;" for i in range(6)]
        body = [
            "let u = (w & 0x55555555u) + 0x55555555u - ((w >> 1u) & 0x55555555u);",
            "let hh = u >> 4u;",
            "let l0 = u & 0x03030303u;",
            "let l1 = u & 0x0c0c0c0cu;",
            "let l2 = hh & 0x03030303u;",
            "let l3 = hh & 0x0c0c0c0cu;",
        ]
        body += [
            f"a{i} += dot4U8Packed(l{2 * (i % 2)}, p{2 * i}) + dot4U8Packed(l{2 * (i % 2) + 1}, p{2 * i + 1});"
            for i in range(6)
        ]
        setup_end = " ^ ".join(f"a{i}" for i in range(6))
        return _decode_render(setup, body, f"acc += f32(({setup_end}) & 1023u);")
    elif kind in ("dots", "alu"):  # 12 dot products / 12 three-input logic ops per word, independent sums
        setup = [f"var a{i} = 0u;" for i in range(12)]
        if kind == "dots":
            body = [f"a{i} += dot4U8Packed(w, 0x{0x01010101 * (i + 1):08x}u);" for i in range(12)]
        else:
            body = [f"a{i} = a{i} ^ (w & 0x{0x01010101 * (i + 1):08x}u);" for i in range(12)]
        return _decode_render(setup, body, "acc += f32((" + " ^ ".join(f"a{i}" for i in range(12)) + ") & 1023u);")
    else:
        raise ValueError(f"decode kind {kind!r} not in {', '.join(DECODE_KINDS)}")
    return _decode_render(setup, body, "")


def _decode_render(setup: list[str], body: list[str], finish: str) -> str:
    return render(
        DECODE_WGSL,
        {
            "WORDS": DECODE_WORDS,
            "SETUP": "\n".join("    " + line for line in setup),
            "DECODE": "\n".join("        " + line for line in body),
            "FINISH": "    " + finish,
        },
    )


DECODE_KINDS = ("word", "bits", "pair", "byte", "dp4a", "dots", "alu")

LUT_BUILD = "        build(t0, lid, ta, tb);\n"
LUT_BUILD_BARRIER = LUT_BUILD + "        workgroupBarrier();\n"


class ProbeError(RuntimeError):
    """A rendered catalog kernel, or its launch's bindings, not as the probe expects (the template changed)."""


def substitute(source: str, pattern: str, repl: str, count: int, what: str, flags: int = 0) -> str:
    """`source` with every match of regex `pattern` replaced by `repl`; exactly `count` must match."""
    out, found = re.subn(pattern, repl, source, flags=flags)
    if found != count:
        raise ProbeError(f"{what}: expected {count} matches of {pattern!r} in the rendered source, found {found}")
    return out


def weight_loads(schedule: Schedule) -> int:
    """How many `w[...]` loads the rendered kernel of `schedule` has: one per row per body
    for stage_x=1, 3 and 4, one per row per held weight vector of a tile for stage_x=2."""
    rows, vw, tpr = schedule.items_per_invocation, schedule.vector_width, schedule.get("threads_per_row", 1)
    if schedule.get("stage_x", 0) in (1, 3, 4):
        return rows
    return rows * (LUT_TILE_WORDS // (vw * tpr))


W_LOAD = r"\bw\[([^\[\]]+)\]"


def compute_only_source(source: str, schedule: Schedule) -> str:
    """Every weight load replaced by synth(index): with TernaryGemv.ahead (stage_x=4) twice as
    many, each row's first vector before the tile loop and its next one in the loop."""
    vw = schedule.vector_width
    loads = weight_loads(schedule) * (2 if "\n    var n0 = w[" in source else 1)
    value = "h" if vw == 1 else "vec4<u32>(h, h ^ 0x9e3779b9u, h + 0x7f4a7c15u, h * 747796405u)"
    synth = render(SYNTH_WGSL, {"VEC": "u32" if vw == 1 else "vec4<u32>", "VALUE": value})
    out = substitute(source, W_LOAD, r"synth(\1)", loads, "compute-only weight loads")
    return substitute(out, re.escape(ENTRY), lambda _: synth + ENTRY, 1, "compute-only entry point")


def lut_build_only_source(source: str, schedule: Schedule) -> str:
    """The pair-table kernel with its weight loads and lookups removed; after the build's
    barrier each row's sum reads one table entry, so the build is not dead code."""
    rows, vw = schedule.items_per_invocation, schedule.vector_width
    loads = weight_loads(schedule)
    out = substitute(source, r"^ *let v\d+_\d+ = w\[.*;\n", "", loads, "build-only loads", re.MULTILINE)
    out = substitute(out, r"^ *acc\d+ \+= tbl\[.*;\n", "", loads * vw, "build-only lookups", re.MULTILINE)
    keep = "".join(f"        acc{r} += tbl[lane % GROUPS][(lid + {r}u + wlen) % GROUP];\n" for r in range(rows))
    out = substitute(out, re.escape(LUT_BUILD_BARRIER), lambda _: LUT_BUILD_BARRIER + keep, 1, "build-only anchor")
    # binding 1 must stay in the auto layout: its length (a runtime value, 0 added) joins the index
    use = "    let wlen = arrayLength(&w) * 0u;\n"
    return substitute(out, r"^    let nv = p\.kw / VW;\n", lambda m: m.group(0) + use, 1, "build-only w use", re.M)


def lut_lookup_only_source(source: str, schedule: Schedule) -> str:
    """The pair-table kernel building its table only for the first tile (then left as
    written); weight loads, both barriers per tile and every lookup remain."""
    once = "        if (t0 == 0u) {\n    " + LUT_BUILD + "        }\n"
    return substitute(source, re.escape(LUT_BUILD), lambda _: once, 1, "lookup-only build")


DOT = r"dot4([UI])8Packed\((\w+), (\w+\.[xyzw])\)"


def dp4a_no_dot_source(source: str, schedule: Schedule) -> str:
    """The compute-only dp4a kernel with every dot product replaced by an XOR of its operands:
    what the kernel costs besides its 12 dot products per word and row."""
    count = 12 * schedule.items_per_invocation * schedule.vector_width

    def xor(match: re.Match) -> str:
        value = f"({match.group(2)} ^ {match.group(3)})"
        return value if match.group(1) == "U" else f"bitcast<i32>{value}"

    return substitute(source, DOT, xor, count, "no-dot dot products")


def load_only_source(wg: int, tpr: int, vw: int, rows: int) -> str:
    tile = max(LOAD_TILE_WORDS, tpr * vw)
    per_row = tile // (vw * tpr)
    vec = "u32" if vw == 1 else "vec4<u32>"
    setup, loads, folds, reduce = [], [], [], []
    for r in range(rows):
        setup += [
            f"    let row{r} = group * SLOTS * R + {r}u * SLOTS + slot;",
            f"    let wrow{r} = min(row{r}, p.m - 1u) * nv;",
            f"    var h{r} = 0u;",
        ]
        reduce.append(f"    finish(row{r}, h{r}, lid, lane);")
    for i in range(per_row):
        for r in range(rows):
            loads.append(f"        let v{r}_{i} = w[wrow{r} + min(c + {i * tpr}u, nv - 1u)];")
    for r in range(rows):
        folds.append(f"        h{r} ^= " + " ^ ".join(f"fold(v{r}_{i})" for i in range(per_row)) + ";")
    return render(
        LOAD_WGSL,
        {
            "WG": wg,
            "TPR": tpr,
            "R": rows,
            "VW": vw,
            "TILE_WORDS": tile,
            "VEC": vec,
            "FOLD": "v" if vw == 1 else "v.x ^ v.y ^ v.z ^ v.w",
            "ROWS": "\n".join(setup),
            "LOADS": "\n".join(loads),
            "FOLDS": "\n".join(folds),
            "REDUCE": "\n".join(reduce),
        },
    )


def _half_words() -> np.ndarray:
    """The 3**8 16-bit halves whose eight 2-bit codes all lie in 0..2 (low bits first)."""
    c = np.arange(3**8)
    return sum(((c // 3**j) % 3) << (2 * j) for j in range(8)).astype(np.uint16)


def make_inputs(m: int, k: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The spec's distribution (codes uniform in 0..2, x integers in [-8, 8], scales powers
    of two), drawn 8 codes at a time: 256 MiB of weights in seconds, not minutes."""
    rng = np.random.default_rng(seed)
    kw = row_words(k)
    w = _half_words()[rng.integers(0, 3**8, 2 * m * kw, dtype=np.uint16)].view(np.uint32)
    if k % 16:  # codes past k are zero, as pack_codes leaves them
        w.reshape(m, kw)[:, -1] &= np.uint32((1 << (2 * (k % 16))) - 1)
    x = rng.integers(-8, 9, k).astype(np.float32)
    scale = np.exp2(rng.integers(-4, 5, m)).astype(np.float32)
    return {"x": x, "w_packed": w, "scale": scale}
