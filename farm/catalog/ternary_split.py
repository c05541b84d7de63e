"""ternary_gemv stage_x=4's launch: `split_launch` and the host code that renders its
passes from the //// planes, lane_sums, split and split_sum sections of
kernels/ternary_gemv.wgsl (farm/catalog/ternary_gemv.py holds the spec; the loop's body and
conversion are stage_x=3's, from farm/catalog/ternary_variants.py). `SPLIT_EMITTERS` is what
the spec's `host_source` hashes after ternary_variants' EMITTERS. The design and its bound:
docs/decisions/006-ternary-gemv-bound.md.

Beyond stage_x=3's loop:
- tile sums: pass 1 writes, per tile and lane of pass 2 (threads_per_row lanes, each
  reading every TPR-th weight vector of vector_width words), the sum of the digit sums of
  the words that lane reads (//// lane_sums); each lane takes its own off per tile, instead
  of pass 2 staging every word's digit sums in workgroup memory and adding them up per word
  (a 16-byte workgroup load and three adds per word and thread). The same integers: bit
  for bit the same results. Pass 1 therefore depends on threads_per_row and vector_width.
- weight vectors loaded one loop iteration ahead (`_ahead`), so each load has a whole
  iteration to arrive.
"""

from __future__ import annotations

import numpy as np

from farm.catalog import Arg, Launch, Pass, render, sections
from farm.catalog.ternary_variants import CODES_PER_WORD, DP4A_TILE_WORDS, SOURCE_FILE, _dp4a_values, _lines


def split_launch(
    inputs: dict[str, np.ndarray], m: int, k: int, wg: int, tpr: int, rows: int, vw: int, splits: int
) -> Launch:
    """stage_x=4: pass 1 writes x's digit planes once (one workgroup per DP4A_TILE_WORDS
    tile), pass 2 is the integer dot-product loop over `splits` ranges of tiles per row
    block, pass 3 (splits > 1) adds the ranges' partial sums. Scratch args: planes (three
    vec4<u32> per packed word), digit_sums (4 ints, unbound: it keeps the later args'
    binding numbers), tile scales, partial sums and the lane sums (a vec4<i32> per tile and
    lane, binding 9)."""
    kw = -(-k // CODES_PER_WORD)
    tiles = -(-kw // DP4A_TILE_WORDS)
    span = -(-tiles // splits)
    blocks = -(-m // ((wg // tpr) * rows))
    groups = blocks * splits
    parts = sections(SOURCE_FILE)
    sums = 9  # the lane sums' binding
    if splits == 1:
        outputs = (
            "@group(0) @binding(2) var<storage, read> scale: array<f32>;\n"
            "@group(0) @binding(3) var<storage, read_write> out: array<f32>;"
        )
        store, main_bindings = "out[row] = scale[row] * sum;", (1, 2, 3, 4, 5, 7)
    else:
        outputs = "@group(0) @binding(8) var<storage, read_write> part: array<f32>;"
        store, main_bindings = "part[split * p.m + row] = sum;", (1, 4, 5, 7, 8)
    values = _dp4a_values(wg, tpr, rows, vw, word_sums=False)
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
    return Launch(
        source=main,
        args=[
            *_args(inputs, m, [m, k, kw, groups, splits, span, tiles, blocks]),
            Arg("planes", "storage", dtype=np.uint32, shape=(12 * words,)),
            Arg("digit_sums", "storage", dtype=np.int32, shape=(4,)),
            Arg("tile_scales", "storage", dtype=np.float32, shape=(tiles,)),
            Arg("partials", "storage", dtype=np.float32, shape=(splits * m if splits > 1 else 1,)),
            Arg("tile_sums", "storage", dtype=np.int32, shape=(4 * tiles * tpr,)),
        ],
        groups=groups,
        bindings=tuple(sorted((*main_bindings, sums))),
        prologue=[Pass(planes_source(tpr, vw), tiles, tuple(sorted((0, 4, 5, 7, sums))))],
        epilogue=epilogue,
    )


def planes_source(tpr: int, vw: int) -> str:
    """Pass 1: the digit planes, tile scales and digit sums per tile and lane of a pass 2
    with `tpr` lanes of `vw`-word vectors."""
    parts = sections(SOURCE_FILE)
    sums = render(parts["lane_sums"], {"TPR": tpr, "VW": vw})
    return render(parts["planes"], {"TILE_WORDS": DP4A_TILE_WORDS, "DIGITS": parts["digits"], "SUMS": sums})


def _ahead(values: dict[str, object], rows: int) -> dict[str, object]:
    """The loop's weight vectors loaded one iteration ahead: registers n0.. hold this lane's
    next vector of every row, the first loaded before the tile loop (FIRST_LOADS), each
    iteration takes them and at once loads the vectors TPR further on. The last iteration
    of a tile loads the next tile's first vectors (t0 / VW + c + TPR is (t0 + TILE) / VW +
    lane), and past the split's last tile clamps to a row's last vector (unused). The same
    loads and values as loading each vector where it is used: bit for bit the same."""
    body, first = str(values["BODY"]), []
    for r in range(rows):
        load = f"let v{r} = w[wrow{r} + min(t0 / VW + c, nv - 1u)];"
        nxt = f"n{r} = w[wrow{r} + min(t0 / VW + c + TPR, nv - 1u)];"
        if load not in body:
            raise ValueError(f"ahead: no load of row {r} in the loop body")
        body = body.replace(load, f"let v{r} = n{r};\n            {nxt}")
        first.append(f"    var n{r} = w[wrow{r} + min(first * TILE / VW + lane, nv - 1u)];")
    return {"BODY": body, "FIRST_LOADS": "\n".join(first)}


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
SPLIT_EMITTERS = (split_launch, _ahead, planes_source)
