"""Where the time of ternary_gemv goes: a diagnostic that splits the kernel into parts.

For each of the two GPU shapes (m=16384,k=65536 and m=65536,k=16384: 256 MiB of packed
weights each) it times, on the same resident inputs:

- copy: farm bench's vec4 WGSL copy of as many bytes as the packed weights (its GB/s
  counts read + write, like `farm bench`): the bandwidth ceiling.
- load-only: the real kernels' weight read pattern (row r of workgroup g is
  g*SLOTS*R + r*SLOTS + slot, TPR lanes per row on interleaved weight vectors, per
  32-word tile every load of the tile issued before any use, as the pair-table kernel
  does) with the decode replaced by XOR-folding the loaded words into one u32 per row,
  reduced over the lanes and written out (checked against numpy's XOR of each row), for
  threads_per_row 1,2,4,8,32 x vector_width 1,4 x rows per thread 1,2 (workgroup size
  --load-wg, 128 by default). Whether the access pattern alone reaches the copy bandwidth.
- staged / lut / dp4a: the catalog kernels (stage_x=1, 2, 3) at the best known schedules,
  certified against the spec's reference before they are timed (on a GPU shape the
  reference is computed for a sample of 2048 rows; every row must also be written: the
  output is NaN-filled before the certifying dispatch).
- compute-only: the same rendered WGSL with every weight load `w[...]` replaced by a
  cheap synthetic word of the load index (one multiply, a few ALU ops per vec4): x
  staging, decode / table build and lookups, reduction, no weight traffic. Not certified.
- lut build-only: the pair-table kernel without weight loads and lookups (the table
  build, both barriers per tile, and one table read per row per tile so the build stays
  live). lut lookup-only: the table is built once (first tile) and never rebuilt; the
  weight loads, both barriers and all lookups remain. Not certified.

- decode word / bits / pair / byte: the decode alone at the shape's m * k codes, from
  pseudo-random words made in registers (one multiply-add per word in all four): `word`
  is that baseline, `bits` the staged kernel's two bit tests and predicated adds per code
  against x in registers, `pair` one read of a 16-entry block of a 16 KiB workgroup table
  per 2 codes, `byte` one read of a 256-entry block per 4 codes. All lanes of a warp read
  the same block with random entries (the TPR=1 access pattern): whether a byte table's
  bank conflicts eat its 2x fewer reads. Not certified (sums of table entries).

- split: the stage_x=4 kernel (x's planes from a pass of their own, k split over 1-8
  workgroups per row block and summed by a third pass) at every schedule of SPLIT_SPACE,
  certified like the catalog kernels; its time spans all passes (a smoke run on a CPU
  adapter: 6 of them); the tuned winners also compute-only (synthetic weights). `--only split` times
  just these (and the copy).

Derived variants are string substitutions in the source the spec renders
(spec.launch(schedule, problem, inputs).source); each substitution checks how many times
it matched, so a template change fails loudly instead of timing the wrong kernel.

Every time is the median of --reps GPU-timestamp samples (one dispatch each) after
--warmup dispatches and farm's warm-up-until-steady. GB/s is effective bandwidth over the
nominal bytes of one GEMV, the same for every kernel variant: packed weights + x + out
(4 * (m * ceil(k/16) + k + m)); "frac" is that over the copy kernel's GB/s. Prints one
table and writes ternary_probe.json under --out. Refuses a CPU adapter unless
--allow-cpu (then with small shapes: a smoke run, the numbers mean nothing).

    python benchmarks/ternary_probe.py --out benchmarks/results          # on the H200
    python benchmarks/ternary_probe.py --allow-cpu --out /tmp/probe      # smoke run
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from farm import catalog
from farm.catalog import check_launch, render
from farm.catalog.ternary_gemv import LUT_TILE_WORDS, SPLIT_SPACE, row_words, split_schedule
from farm.cli.bench import copy_bandwidth, settle_clocks
from farm.gpu import Buffer, CpuAdapterRefused, Device, GpuError, Timing, benchmark_device, refuse_cpu
from farm.oracle import compare as oracle
from farm.oracle.launch import Prepared, compile_launch
from farm.schedule import InvalidSchedule, Problem, Schedule

SPEC = catalog.get("ternary_gemv")
GPU_SHAPES = ((16384, 65536), (65536, 16384))  # (m, k): 256 MiB of packed weights each
CPU_SHAPES = ((512, 4096), (1024, 2048))  # 512 KiB each: a smoke run on lavapipe
LOAD_LAYOUTS = tuple((tpr, vw, r) for tpr in (1, 2, 4, 8, 32) for vw in (1, 4) for r in (1, 2))
LOAD_TILE_WORDS = LUT_TILE_WORDS  # words per row per tile whose loads are issued together
CERTIFY_SAMPLE = 2048  # rows whose reference is computed on shapes with more rows than this


def _schedule(wg: int, rows: int, vw: int, tpr: int, stage: int) -> Schedule:
    return Schedule.of(
        workgroup_size=wg, items_per_invocation=rows, vector_width=vw, threads_per_row=tpr, stage_x=stage
    )


DP4A_TUNED = _schedule(256, 8, 4, 8, 3)  # farm tune's stage_x=3 winner on both shapes (session 4)
# farm tune's stage_x=4 winners (session 5), tall and wide shape: (wg, rows, vw, tpr, splits);
# the probe also times them compute-only
SPLIT_WINNERS = ((256, 4, 4, 8, 1), (128, 4, 4, 8, 8))
# (variant, schedule): the best known staged (stage_x=1) and pair-table (stage_x=2) schedules.
REAL = (
    ("staged", _schedule(128, 1, 4, 1, 1)),
    ("staged", _schedule(256, 4, 4, 32, 1)),
    ("lut", _schedule(128, 2, 4, 1, 2)),
    ("lut", _schedule(256, 2, 4, 2, 2)),
    ("lut", _schedule(512, 2, 4, 4, 2)),
    # the integer dot-product kernel (stage_x=3): 32-128 rows per workgroup, vec4 loads
    ("dp4a", _schedule(256, 2, 4, 8, 3)),
    ("dp4a", _schedule(128, 2, 4, 4, 3)),
    ("dp4a", _schedule(256, 4, 4, 8, 3)),
    ("dp4a", _schedule(256, 1, 4, 4, 3)),
    ("dp4a", _schedule(256, 2, 4, 16, 3)),
    ("dp4a", _schedule(512, 2, 4, 8, 3)),
    ("dp4a", _schedule(256, 8, 4, 16, 3)),
    ("dp4a", _schedule(128, 8, 4, 8, 3)),
)
LUT_PARTS = ("lut build-only", "lut lookup-only")
DP4A_PARTS = ("dp4a no-dot",)
PARTS = {"lut": LUT_PARTS, "dp4a": DP4A_PARTS}

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
SPLIT_DECODE_KINDS = ("word", "dp4a", "dots", "alu")  # with --only split

LUT_BUILD = "        build(t0, lid, ta, tb);\n"
LUT_BUILD_BARRIER = LUT_BUILD + "        workgroupBarrier();\n"


class ProbeError(RuntimeError):
    """A source substitution that did not match as expected (the template changed)."""


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
    """Every weight load replaced by synth(index)."""
    vw = schedule.vector_width
    value = "h" if vw == 1 else "vec4<u32>(h, h ^ 0x9e3779b9u, h + 0x7f4a7c15u, h * 747796405u)"
    synth = render(SYNTH_WGSL, {"VEC": "u32" if vw == 1 else "vec4<u32>", "VALUE": value})
    out = substitute(source, W_LOAD, r"synth(\1)", weight_loads(schedule), "compute-only weight loads")
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


def split_space(cpu: bool) -> tuple:
    """SPLIT_SPACE, or on a CPU adapter (a smoke run) every 17th schedule of it and the winners."""
    return SPLIT_SPACE[::17] + SPLIT_WINNERS if cpu else SPLIT_SPACE


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


def certify_rows(m: int, seed: int = 0) -> np.ndarray:
    """Rows whose reference is computed: all of them, or the first and last 512 and 1024 others."""
    if m <= CERTIFY_SAMPLE:
        return np.arange(m)
    rng = np.random.default_rng(seed)
    ends = np.r_[np.arange(512), np.arange(m - 512, m)]
    middle = rng.choice(np.arange(512, m - 512), CERTIFY_SAMPLE - 1024, replace=False)
    return np.unique(np.r_[ends, middle])


def _label(schedule: Schedule) -> str:
    return (
        f"wg{schedule.workgroup_size} r{schedule.items_per_invocation} "
        f"vw{schedule.vector_width} tpr{schedule.get('threads_per_row', 1)}"
    )


class Probe:
    """One device, its results, and the resident buffers of the shape being probed."""

    def __init__(self, device: Device, warmup: int, reps: int, load_wg: int, only: str = "all"):
        self.device = device
        self.warmup = warmup
        self.reps = reps
        self.load_wg = load_wg
        self.only = only
        self.rows: list[dict] = []
        self.method = ""

    def run_shape(self, m: int, k: int) -> None:
        device = self.device
        problem = SPEC.problem(m=m, k=k)
        kw = row_words(k)
        nbytes = 4 * (m * kw + k + m)
        inputs = make_inputs(m, k)
        sample = certify_rows(m)
        sub = {
            "x": inputs["x"],
            "w_packed": inputs["w_packed"].reshape(m, kw)[sample],
            "scale": inputs["scale"][sample],
        }
        sub_problem = SPEC.problem(m=len(sample), k=k)
        expected = SPEC.reference(sub_problem, REAL[0][1], sub)
        buffers: list[Buffer] = []  # x, w_packed, scale, out: the catalog kernels' bindings 0-3
        try:
            for name in ("x", "w_packed", "scale"):
                buffers.append(device.upload(inputs[name], "read"))
            buffers.append(device.empty(4 * m, "storage"))
            w = buffers[1]
            copy = self._copy(problem, 4 * m * kw)
            xor = np.bitwise_xor.reduce(inputs["w_packed"].reshape(m, kw), axis=1)
            ctx = dict(problem=problem, nbytes=nbytes, copy=copy, xor=xor)
            if self.only == "all":
                for tpr, vw, rows in LOAD_LAYOUTS:
                    self._load_only(ctx, w, tpr, vw, rows)
                for variant, schedule in REAL:
                    self._catalog(ctx, variant, schedule, inputs, buffers, sample, sub_problem, expected)
                for kind in DECODE_KINDS:
                    self._decode(ctx, kind)
            else:  # the stage_x=3 winner, the split kernel's baseline, and the dot products' rate
                self._catalog(ctx, "dp4a", DP4A_TUNED, inputs, buffers, sample, sub_problem, expected)
                for kind in SPLIT_DECODE_KINDS:
                    self._decode(ctx, kind)
            for wg, rows, vw, tpr, splits in split_space(self.device.profile.is_cpu):
                self._split(
                    ctx, split_schedule(wg, rows, vw, tpr, splits), inputs, buffers, sample, sub_problem, expected
                )
        finally:
            device.release(*buffers)

    # -- variants --------------------------------------------------------------------
    def _copy(self, problem: Problem, weight_bytes: int) -> float:
        limit = self.device.profile.limit("max-storage-buffer-binding-size")
        size = min(weight_bytes, limit) // 16 * 16
        gbps = copy_bandwidth(self.device, size, self.reps)
        self._row(problem, "copy", "vec4 wg256", None, 2 * size / gbps, 2 * size, gbps, certified=None)
        return gbps

    def _load_only(self, ctx: dict, w: Buffer, tpr: int, vw: int, rows: int) -> None:
        """Time one load-only layout after checking its output: each row's words XOR-folded
        (when whole tiles cover the row; a clamped tail re-reads its last vector)."""
        device, problem = self.device, ctx["problem"]
        m, kw = problem["m"], row_words(problem["k"])
        wg = self.load_wg
        label = f"wg{wg} r{rows} vw{vw} tpr{tpr}"
        if kw % vw or wg % tpr:
            self._error(problem, "load-only", label, f"kw={kw} or wg={wg} does not fit vw={vw} tpr={tpr}")
            return
        groups = -(-m // (wg // tpr * rows))
        params = device.upload(np.array([m, kw, groups, 0], np.uint32), "uniform")
        out = device.upload(~ctx["xor"], "storage")  # every row wrong until written
        try:
            pipeline = device.pipeline(load_only_source(wg, tpr, vw, rows), label=f"ternary_probe load-only {label}")
            device.dispatch(pipeline, [w, out, params], groups)
            if kw % max(LOAD_TILE_WORDS, tpr * vw):
                note = "xor not checked (clamped tail)"
            else:
                bad = int((device.read(out, np.uint32, m) != ctx["xor"]).sum())
                if bad:
                    self._error(problem, "load-only", label, f"{bad} of {m} rows' XOR differ from numpy's")
                    return
                note = "xor of every row checked"
            timing = self._time(pipeline, [w, out, params], groups)
            self._row(problem, "load-only", label, None, timing, ctx["nbytes"], ctx["copy"], None, note)
        except GpuError as exc:
            self._error(problem, "load-only", label, str(exc))
        finally:
            device.release(params, out)

    def _decode(self, ctx: dict, kind: str) -> None:
        """Decode the shape's m * k codes (rounded up to whole threads) in registers and
        tables only; GB/s is over the shape's GEMV bytes, as for every variant."""
        device, problem = self.device, ctx["problem"]
        threads = -(-problem["m"] * problem["k"] // (16 * DECODE_WORDS))
        groups = -(-threads // 256)
        label = f"wg256 words{DECODE_WORDS}"
        params = device.upload(np.array([12345, threads, 0, 0], np.uint32), "uniform")
        out = device.empty(4 * threads, "storage")
        try:
            pipeline = device.pipeline(decode_source(kind), label=f"ternary_probe decode {kind}")
            timing = self._time(pipeline, [out, params], groups)
            values = device.read(out, np.float32, threads)
            if not np.isfinite(values).all():
                self._error(problem, f"decode {kind}", label, "non-finite sums")
                return
            note = f"{threads * 16 * DECODE_WORDS} codes, no weight loads, no table build"
            self._row(problem, f"decode {kind}", label, None, timing, ctx["nbytes"], ctx["copy"], None, note)
        except GpuError as exc:
            self._error(problem, f"decode {kind}", label, str(exc))
        finally:
            device.release(params, out)

    def _catalog(self, ctx, variant, schedule, inputs, buffers, sample, sub_problem, expected) -> None:
        """The catalog kernel (certified, then timed) and its derived variants."""
        device, problem = self.device, ctx["problem"]
        label = _label(schedule)
        try:
            SPEC.check(schedule, problem, device.profile)
            launch = SPEC.launch(schedule, problem, inputs)
            check_launch(SPEC, schedule, launch, device.profile)
        except InvalidSchedule as exc:
            for name in self._derived(variant):
                self._error(problem, name, label, exc.reason, schedule)
            return
        own = self._own_buffers(launch)
        bound = [*buffers, *own]
        try:
            cert = self._certify(problem, schedule, launch, bound, sample, sub_problem, expected)[1]
            self._timed(problem, variant, schedule, launch.source, bound, launch.groups, ctx, cert)
            sources = {f"{variant} compute-only": compute_only_source(launch.source, schedule)}
            if variant == "lut":
                sources["lut build-only"] = lut_build_only_source(launch.source, schedule)
                sources["lut lookup-only"] = lut_lookup_only_source(launch.source, schedule)
            if variant == "dp4a":
                compute = sources["dp4a compute-only"]
                sources["dp4a no-dot"] = dp4a_no_dot_source(compute, schedule)
            for name, source in sources.items():
                self._timed(problem, name, schedule, source, bound, launch.groups, ctx, None)
        finally:
            device.release(*own)

    def _split(self, ctx, schedule, inputs, buffers, sample, sub_problem, expected) -> None:
        """The multi-pass stage_x=4 kernel on the resident x, weights, scales and output
        (its own params and scratch buffers), certified on a NaN-filled output, then timed."""
        device, problem = self.device, ctx["problem"]
        label = _label(schedule) + f" s{schedule['splits']}"
        try:
            SPEC.check(schedule, problem, device.profile)
            launch = SPEC.launch(schedule, problem, inputs)
            check_launch(SPEC, schedule, launch, device.profile)
        except InvalidSchedule as exc:
            self._error(problem, "split", label, exc.reason, schedule)
            return
        own = self._own_buffers(launch)
        try:
            prepared, cert = self._certify(problem, schedule, launch, [*buffers, *own], sample, sub_problem, expected)
            if not cert[0]:
                self._error(problem, "split", label, cert[1], schedule, certified=False)
                return
            timing = prepared.time(self.warmup, self.reps)
            self.method = timing.method
            self._row(problem, "split", label, schedule, timing, ctx["nbytes"], ctx["copy"], True, cert[1])
            if schedule in {split_schedule(*w) for w in SPLIT_WINNERS}:  # no weight traffic, not certified
                synthetic = replace(launch, source=compute_only_source(launch.source, schedule))
                pipelines = compile_launch(device, SPEC, schedule, synthetic)
                timing = Prepared(SPEC, schedule, problem, synthetic, pipelines, prepared.buffers, device).time(
                    self.warmup, self.reps
                )
                self._row(problem, "split compute-only", label, schedule, timing, ctx["nbytes"], ctx["copy"], None)
        except GpuError as exc:
            self._error(problem, "split", label, str(exc), schedule)
        finally:
            device.release(*own)

    @staticmethod
    def _derived(variant: str) -> list[str]:
        return [variant, f"{variant} compute-only", *PARTS.get(variant, ())]

    def _own_buffers(self, launch) -> list[Buffer]:
        """A catalog launch's params and scratch buffers (bindings 4 on); bindings 0-3, x,
        weights, scales and output, are the probe's resident buffers."""
        names = [arg.name for arg in launch.args[:5]]
        if names != ["x", "w_packed", "scale", "out", "params"]:
            raise ProbeError(f"ternary_gemv bindings changed: {names}")
        device = self.device
        return [
            device.upload(a.data, a.kind) if a.data is not None else device.empty(a.nbytes, a.kind)
            for a in launch.args[4:]
        ]

    def _certify(self, problem, schedule, launch, bound, sample, sub_problem, expected):
        """(Prepared or None, (ok, message)): every pass compiled, run once on a NaN-filled
        output; every row written, the sampled rows equal to the reference."""
        device = self.device
        m = launch.args[3].shape[0]
        try:
            prepared = Prepared(
                SPEC, schedule, problem, launch, compile_launch(device, SPEC, schedule, launch), bound, device
            )
            device.write(bound[3], np.full(m, np.nan, np.float32))
            prepared.run()
            got = device.read(bound[3], np.float32, m)
        except GpuError as exc:
            return None, (False, str(exc))
        if not np.isfinite(got).all():
            return prepared, (False, f"{int((~np.isfinite(got)).sum())} of {m} rows not written (or not finite)")
        result = oracle.compare(SPEC, sub_problem, {"out": got[sample]}, expected)
        return prepared, (result.ok, result.message or f"{len(sample)} of {m} rows match the reference")

    def _timed(self, problem, variant, schedule, source, bound, groups, ctx, cert) -> None:
        label = _label(schedule)
        if cert is not None and not cert[0]:
            self._error(problem, variant, label, cert[1], schedule, certified=False)
            return
        try:
            pipeline = self.device.pipeline(source, label=f"ternary_probe {variant} {label}", schedule=schedule)
            timing = self._time(pipeline, bound, groups)
        except GpuError as exc:
            self._error(problem, variant, label, str(exc), schedule)
            return
        certified = None if cert is None else True
        message = "" if cert is None else cert[1]
        self._row(problem, variant, label, schedule, timing, ctx["nbytes"], ctx["copy"], certified, message)

    def _time(self, pipeline, buffers: list[Buffer], groups) -> Timing:
        calls = [(pipeline, self.device.bind(pipeline, buffers), groups)]
        timing = self.device.time_calls(calls, self.warmup, self.reps)
        self.method = timing.method
        return timing

    # -- rows ------------------------------------------------------------------------
    def _row(self, problem, variant, label, schedule, timing, nbytes, copy, certified, message="") -> None:
        """Record and print one timed row; `timing` is a Timing, or the copy's ns."""
        median = timing if isinstance(timing, float) else timing.median_ns
        gbps = nbytes / median
        timed = {
            "p20_ns": None if isinstance(timing, float) else timing.p20_ns,
            "p80_ns": None if isinstance(timing, float) else timing.p80_ns,
            "us": median / 1e3,
            "bytes": nbytes,
            "gbps": gbps,
            "fraction_of_copy": gbps / copy,
        }
        self._record(problem, variant, label, schedule, median, certified, message[:200], timed)

    def _error(self, problem, variant, label, message, schedule=None, certified=None) -> None:
        self._record(problem, variant, label, schedule, None, certified, message[:500], {})

    def _record(self, problem, variant, label, schedule, median, certified, message, timed: dict) -> None:
        row = {
            "shape": problem.key(),
            "m": problem["m"],
            "k": problem["k"],
            "variant": variant,
            "schedule": label,
            "schedule_key": schedule.key() if schedule is not None else None,
            "median_ns": median,
            **timed,
            "certified": certified,
            "message": message,
        }
        self.rows.append(row)
        print(_line(row), flush=True)


HEADER = f"{'shape':<17} {'variant':<20} {'schedule':<20} {'us':>10} {'GB/s':>8} {'frac':>6} cert"


def _line(row: dict) -> str:
    cert = {True: "yes", False: "FAIL", None: "-"}[row["certified"]]
    if row["median_ns"] is None:
        return (
            f"{row['shape']:<17} {row['variant']:<20} {row['schedule']:<20} {'-':>10} {'-':>8} {'-':>6} {cert}  "
            + (row["message"][:120])
        )
    return (
        f"{row['shape']:<17} {row['variant']:<20} {row['schedule']:<20} {row['us']:10.1f} {row['gbps']:8.1f} "
        f"{row['fraction_of_copy']:6.3f} {cert}"
    )


def _shape(text: str) -> tuple[int, int]:
    m, k = text.lower().split("x")
    return int(m), int(k)


def main(argv: list[str] | None = None, device: Device | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--load-wg", type=int, default=128, help="workgroup size of the load-only kernels")
    parser.add_argument("--shape", type=_shape, action="append", help="MxK, repeatable (default: per adapter)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--only", choices=("all", "split"), default="all", help="split: only the stage_x=4 rows")
    parser.add_argument("--settle-s", type=float, default=2.0, help="seconds of copies before the first shape")
    args = parser.parse_args(argv)
    if device is None:
        device = benchmark_device(args.allow_cpu)
        if device is None:
            return 2
    else:
        try:
            refuse_cpu(device.profile, args.allow_cpu, "benchmark")
        except CpuAdapterRefused as exc:
            print(exc, file=sys.stderr)
            return 2
    shapes = args.shape or (CPU_SHAPES if device.profile.is_cpu else GPU_SHAPES)
    start = time.perf_counter()
    probe = Probe(device, args.warmup, args.reps, args.load_wg, args.only)
    print(f"adapter: {device.profile.summary}")
    settle_clocks(device, args.settle_s)  # a machine just started: its first shape read 3x slow without it
    print(HEADER)
    for m, k in shapes:
        probe.run_shape(m, k)
    elapsed = time.perf_counter() - start
    failed = [r for r in probe.rows if r["median_ns"] is None]
    print(f"{len(probe.rows)} rows, {len(failed)} failed, {elapsed:.1f} s, timing: {probe.method}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "ternary_probe.json"
        payload = {
            "device": device.profile.summary,
            "adapter_type": device.profile.adapter_type,
            "timing": probe.method,
            "warmup": args.warmup,
            "reps": args.reps,
            "load_workgroup_size": args.load_wg,
            "bytes": "gbps counts 4 * (m * ceil(k/16) + k + m) bytes (weights + x + out) for every kernel "
            "variant and read + write bytes for the copy",
            "elapsed_s": elapsed,
            "rows": probe.rows,
        }
        path.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
