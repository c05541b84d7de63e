"""ternary_gemv stage_x=4's launch: `split_launch` and the host code that renders its
passes from the //// planes, split and split_sum sections of kernels/ternary_gemv.wgsl
(farm/catalog/ternary_gemv.py holds the spec; the loop's body and conversion are
stage_x=3's, from farm/catalog/ternary_variants.py). `SPLIT_EMITTERS` is what the spec's
`host_source` hashes after ternary_variants' EMITTERS.

Two switches of its own, the spec's class attributes `TernaryGemv.tile_sums` (on) and
`TernaryGemv.prefetch` (off: it lost on the H200), and `TernaryGemv.lean`,
`TernaryGemv.unroll` and `TernaryGemv.chain` (stage_x=3's too: the loop body's, see
ternary_variants._dp4a_body and _dp4a_unrolled; unroll stays 1, 2 and 4 lost on the H200;
chain adds each dot product to its accumulator alone), and `TernaryGemv.ahead` (stage_x=4
only: weight vectors loaded one loop iteration ahead, `_ahead`); benchmarks/ternary_hooks.py A/Bs
them, and tile_sums, prefetch and lean False is the kernel before them:
- tile_sums: pass 1 writes, per tile and lane of pass 2 (threads_per_row lanes, each
  reading every TPR-th weight vector of vector_width words), the sum of the digit sums of
  the words that lane reads (//// lane_sums); each lane takes its own off per tile, instead
  of pass 2 staging every word's digit sums in workgroup memory and adding them up per word
  (a 16-byte workgroup load and three adds per word and thread). The same integers: bit
  for bit the same results. Pass 1 then depends on threads_per_row and vector_width.
- prefetch: pass 2 loads the next tile's planes (and, without tile_sums, digit sums) into
  registers after a tile's second barrier, so their loads overlap the tile's body, and
  stores them to workgroup memory between the next barrier pair.
"""

from __future__ import annotations

import numpy as np

from farm.catalog import Arg, Launch, Pass, render, sections
from farm.catalog.ternary_variants import CODES_PER_WORD, DP4A_TILE_WORDS, SOURCE_FILE, _dp4a_values, _lines


def split_launch(
    inputs: dict[str, np.ndarray],
    m: int,
    k: int,
    wg: int,
    tpr: int,
    rows: int,
    vw: int,
    splits: int,
    tile_sums: bool = True,
    prefetch: bool = False,
    lean: bool = True,
    unroll: int = 1,
    chain: bool = False,
    ahead: bool = False,
) -> Launch:
    """stage_x=4: pass 1 writes x's digit planes once (one workgroup per DP4A_TILE_WORDS
    tile), pass 2 is the integer dot-product loop over `splits` ranges of tiles per row
    block, pass 3 (splits > 1) adds the ranges' partial sums. Scratch args: planes (three
    vec4<u32> per packed word), digit sums (a vec4<i32> per word; with tile_sums unbound,
    4 ints), tile scales, partial sums, and with tile_sums the lane sums (a vec4<i32> per
    tile and lane, binding 9)."""
    kw = -(-k // CODES_PER_WORD)
    tiles = -(-kw // DP4A_TILE_WORDS)
    span = -(-tiles // splits)
    blocks = -(-m // ((wg // tpr) * rows))
    groups = blocks * splits
    parts = sections(SOURCE_FILE)
    sums = 9 if tile_sums else 6  # the digit sums' binding
    if splits == 1:
        outputs = (
            "@group(0) @binding(2) var<storage, read> scale: array<f32>;\n"
            "@group(0) @binding(3) var<storage, read_write> out: array<f32>;"
        )
        store, main_bindings = "out[row] = scale[row] * sum;", (1, 2, 3, 4, 5, 7)
    else:
        outputs = "@group(0) @binding(8) var<storage, read_write> part: array<f32>;"
        store, main_bindings = "part[split * p.m + row] = sum;", (1, 4, 5, 7, 8)
    values = _dp4a_values(wg, tpr, rows, vw, word_sums=not tile_sums, lean=lean, unroll=unroll, chain=chain)
    values |= _split_values(wg, tile_sums, prefetch)
    if ahead:
        if not lean or unroll != 1:
            raise ValueError(f"ahead needs lean and unroll 1; got lean={lean}, unroll={unroll}")
        values |= _ahead(values, rows)
    main = render(
        parts["split"],
        values
        | {
            "OUT_BINDINGS": outputs,
            "ROW_SUM": parts["row_sum"],
            "STORE": store,
            "REDUCE": _lines((f"finish(row{r}, acc{r}, lid, lane, split);" for r in range(rows)), 4),
        },
    )
    words = tiles * DP4A_TILE_WORDS
    epilogue = [Pass(parts["split_sum"], -(-m // 256), (2, 3, 4, 8))] if splits > 1 else []
    lane_sums = [Arg("tile_sums", "storage", dtype=np.int32, shape=(4 * tiles * tpr,))] if tile_sums else []
    return Launch(
        source=main,
        args=[
            *_args(inputs, m, [m, k, kw, groups, splits, span, tiles, blocks]),
            Arg("planes", "storage", dtype=np.uint32, shape=(12 * words,)),
            Arg("digit_sums", "storage", dtype=np.int32, shape=(4 if tile_sums else 4 * words,)),
            Arg("tile_scales", "storage", dtype=np.float32, shape=(tiles,)),
            Arg("partials", "storage", dtype=np.float32, shape=(splits * m if splits > 1 else 1,)),
            *lane_sums,
        ],
        groups=groups,
        bindings=tuple(sorted((*main_bindings, sums))),
        prologue=[Pass(planes_source(tpr, vw, tile_sums), tiles, tuple(sorted((0, 4, 5, 7, sums))))],
        epilogue=epilogue,
    )


def planes_source(tpr: int, vw: int, tile_sums: bool) -> str:
    """Pass 1: the digit planes, tile scales and digit sums, per word or (tile_sums) per
    tile and lane of a pass 2 with `tpr` lanes of `vw`-word vectors."""
    parts = sections(SOURCE_FILE)
    sums = render(parts["lane_sums"], {"TPR": tpr, "VW": vw}) if tile_sums else parts["word_sums"]
    return render(parts["planes"], {"TILE_WORDS": DP4A_TILE_WORDS, "DIGITS": parts["digits"], "SUMS": sums})


def _split_values(wg: int, tile_sums: bool, prefetch: bool) -> dict[str, object]:
    """Pass 2's placeholders for the digit sums and the staging of a tile's words."""
    if tile_sums:
        binding = "@group(0) @binding(9) var<storage, read> tsum: array<vec4<i32>>;"
        digit_sums = ["let ts = tsum[tile * TPR + lane];", "let m0 = ts.x;", "let m1 = ts.y;", "let m2 = ts.z;"]
    else:
        binding = (
            "@group(0) @binding(6) var<storage, read> dsum: array<vec4<i32>>;\n"
            "var<workgroup> msum: array<vec4<i32>, PAD>;"
        )
        digit_sums = ["var m0 = 0;", "var m1 = 0;", "var m2 = 0;"]
    if not prefetch:
        stage = ["for (var q = lid; q < TILE; q += WG) {", "    let s = slot_of(q);", "    let at = t0 + q;"]
        stage += [f"    xp[{_plane(i)}s] = planes[3u * at{f' + {i}u' if i else ''}];" for i in range(3)]
        stage += ([] if tile_sums else ["    msum[s] = dsum[at];"]) + ["}"]
        first, after = [], []
    else:
        stage = _guarded(wg, "", _stores(wg, tile_sums))
        first = [f"var n{n}{j} = vec4<{t}>();" for j in range(_held(wg)) for n, t in _registers(tile_sums)]
        first += _guarded(wg, "first < last", _fetch(wg, tile_sums, "first"))
        after = ["// the next tile's words: loads in flight during this tile's body"]
        after += _guarded(wg, "tile + 1u < last", _fetch(wg, tile_sums, "(tile + 1u)"))
    return {
        "SUM_BINDING": binding,
        "DIGIT_SUMS": _lines(digit_sums, 8),
        "STAGE": _lines(stage, 8),
        "PREFETCH": _lines(first, 4),
        "NEXT": _lines(after, 8),
    }


def _ahead(values: dict[str, object], rows: int) -> dict[str, object]:
    """The loop's weight vectors loaded one iteration ahead (TernaryGemv.ahead): registers
    n0.. hold this lane's next vector of every row, the first loaded before the tile loop,
    each iteration takes them and at once loads the vectors TPR further on. The last
    iteration of a tile loads the next tile's first vectors (t0 / VW + c + TPR is
    (t0 + TILE) / VW + lane), and past the split's last tile clamps to a row's last vector
    (unused). The same loads and values: bit for bit the kernel without it."""
    body, first = str(values["BODY"]), [str(values["PREFETCH"])] if values["PREFETCH"] else []
    for r in range(rows):
        load = f"let v{r} = w[wrow{r} + min(t0 / VW + c, nv - 1u)];"
        nxt = f"n{r} = w[wrow{r} + min(t0 / VW + c + TPR, nv - 1u)];"
        if load not in body:
            raise ValueError(f"ahead: no load of row {r} in the loop body")
        body = body.replace(load, f"let v{r} = n{r};\n            {nxt}")
        first.append(f"    var n{r} = w[wrow{r} + min(first * TILE / VW + lane, nv - 1u)];")
    return {"BODY": body, "PREFETCH": "\n".join(first)}


def _held(wg: int) -> int:
    """Words of a tile each thread stages: q = lid, lid + WG, ... < TILE (1 when WG >= TILE)."""
    return max(1, DP4A_TILE_WORDS // wg)


def _registers(tile_sums: bool) -> list[tuple[str, str]]:
    """(name, element type) of the registers holding a staged word: three planes (a, b, c)
    and, without tile_sums, its digit sums (m)."""
    return [("a", "u32"), ("b", "u32"), ("c", "u32")] + ([] if tile_sums else [("m", "i32")])


def _plane(i: int) -> str:
    return ("", "PAD + ", "2u * PAD + ")[i]


def _word(wg: int, j: int) -> str:
    return f"lid + {j * wg}u" if j else "lid"


def _fetch(wg: int, tile_sums: bool, tile: str) -> list[str]:
    """The loads of the staged words of `tile` into the registers n*j."""
    lines = []
    for j in range(_held(wg)):
        lines.append(f"let at{j} = {tile} * TILE + {_word(wg, j)};")
        lines += [f"n{'abc'[i]}{j} = planes[3u * at{j}{f' + {i}u' if i else ''}];" for i in range(3)]
        lines += [] if tile_sums else [f"nm{j} = dsum[at{j}];"]
    return lines


def _stores(wg: int, tile_sums: bool) -> list[str]:
    """The registers n*j stored to the tile's slots in workgroup memory."""
    lines = []
    for j in range(_held(wg)):
        lines.append(f"let s{j} = slot_of({_word(wg, j)});")
        lines += [f"xp[{_plane(i)}s{j}] = n{'abc'[i]}{j};" for i in range(3)]
        lines += [] if tile_sums else [f"msum[s{j}] = nm{j};"]
    return lines


def _guarded(wg: int, condition: str, body: list[str]) -> list[str]:
    """`body` in an if block on `condition`, and on lid < TILE when WG > TILE (threads past
    the tile's words stage nothing); a plain block when there is no condition."""
    terms = [c for c in (condition, "lid < TILE" if wg > DP4A_TILE_WORDS else "") if c]
    return [f"if ({' && '.join(terms)}) {{" if terms else "{", *("    " + line for line in body), "}"]


def _args(inputs: dict[str, np.ndarray], m: int, params: list[int]) -> list[Arg]:
    """Bindings 0-4 of every ternary kernel: x, w_packed, scale, out, params."""
    return [
        Arg("x", "read", np.ascontiguousarray(inputs["x"], np.float32)),
        Arg("w_packed", "read", np.ascontiguousarray(inputs["w_packed"], np.uint32)),
        Arg("scale", "read", np.ascontiguousarray(inputs["scale"], np.float32)),
        Arg("out", "storage", dtype=np.float32, shape=(m,), output=True),
        Arg("params", "uniform", np.array(params, np.uint32)),
    ]


# The stage_x=4 host code TernaryGemv.host_source hashes (after EMITTERS), in this order.
SPLIT_EMITTERS = (
    split_launch,
    _ahead,
    planes_source,
    _split_values,
    _held,
    _registers,
    _plane,
    _word,
    _fetch,
    _stores,
    _guarded,
)
