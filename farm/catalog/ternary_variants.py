"""ternary_gemv's kernels, one per value of the knob `stage_x`: the host code that renders
each from its //// section of kernels/ternary_gemv.wgsl and unrolls its per-word body
(farm/catalog/ternary_gemv.py holds the spec: knobs, schedules, checks, data, reference,
launch). The tile sizes below are the kernels' layouts; the spec checks schedules against
them. `EMITTERS` is the unrolling code the spec's `host_source` hashes, in its order.

Kernels (knob `stage_x`):
- 0 (default, absent from the original schedules' keys): each thread reads x from the
  storage buffer for every code and decodes t(c) through int->float conversions;
  items_per_invocation = row groups per workgroup, one after another.
- 1: x is staged in workgroup memory in tiles of STAGE_TILE_WORDS packed words (shared
  by every row of the workgroup), items_per_invocation rows per thread are accumulated
  together (each x read serves all of them), codes decode by bit tests into two sums
  (no conversions), and vector_width 4 loads 64 codes per vec4<u32>.
- 2: a pair lookup table. Per tile of LUT_TILE_WORDS packed words (256 code pairs, 512 x
  values) the workgroup builds, for every pair p and 4-bit nibble n = c0 | (c1 << 2),
  tbl[p][n] = t(c0) * x[2p] + t(c1) * x[2p+1] in workgroup memory (16 KiB, plus 16 floats
  of padding per weight vector when threads_per_row > 1: neighbouring lanes then read
  opposite bank halves); each thread then adds one entry per code pair, indexed by
  (word >> 4j) & 15 (~3 ops per 2 codes instead of ~6 per code). items_per_invocation
  rows per thread, threads_per_row lanes per row (interleaved weight vectors),
  vector_width 1 or 4; a thread's weights of a tile are loaded before the build so the
  loads overlap it. The build costs 8 table entries per x value per workgroup, so the
  schedules keep 64-512 rows per workgroup (LUT_SPACE, 55 schedules).
- 3: integer dot products (`dot4U8Packed`/`dot4I8Packed`, one instruction per 4 codes and
  digit plane). Per tile of DP4A_TILE_WORDS packed words the workgroup writes x in block
  floating point: one exponent per tile (its largest |x|), each x as a 24-bit integer in
  three base-256 digit planes, packed so that the bytes of a plane word line up with the
  2-bit fields that a byte mask selects from a weight word. The weights decode to t + 1
  (0..2, no borrows) in 4 ops per word; the offset is removed exactly with the digit sums.
  Integer sums are exact within a tile, so the only rounding beyond f32 adds across tiles
  is x's quantization to 23 bits below its tile's largest |x| (relative to that element:
  at most 2^-23 of the tile's largest |x|), inside the oracle's tolerance and exact on the
  exact test data (small-integer x). DP4A_SPACE: 16-256 rows per workgroup.
- 4: stage_x=3's loop and row sums over x's planes written by a pass of their own, k
  split over `splits` workgroups per row block; `split_launch` (farm/catalog/ternary_split.py,
  the launch being three passes) renders it from `_dp4a_values` and the //// planes and split
  sections. Pass 1 also writes each tile's digit sums per lane of pass 2, whose body then
  adds none (`_dp4a_body` without word_sums).
- 3 and 4 decode a weight word in three operations, take the slots of a vec4's words from
  one slot_of and loop a known count (see _dp4a_body and _dp4a_loop).
The design and its bound: docs/decisions/006-ternary-gemv-bound.md.
"""

from __future__ import annotations

from farm.catalog import render, sections

SOURCE_FILE = "ternary_gemv.wgsl"
CODES_PER_WORD = 16  # 2-bit codes per packed u32 word, low bits first
STAGE_TILE_WORDS = 256  # packed words per staged x tile: 4096 x values, 16 KiB of workgroup memory
LUT_TILE_WORDS = 32  # packed words per pair-table tile: 256 pairs * 16 entries = 16 KiB of f32
LUT_PAD = 16  # floats after each weight vector's table block when threads_per_row > 1 (bank halves)
DP4A_TILE_WORDS = 128  # packed words per stage_x=3 tile: 2048 x values share one exponent


def _layout(wg: int, tpr: int, vw: int) -> dict[str, object]:
    """The placeholders every ternary kernel has: threads, threads per row, weight vector
    width and type, and the //// common section (bindings, x reader, row reduction)."""
    vec = "u32" if vw == 1 else "vec4<u32>"
    parts = sections(SOURCE_FILE)
    common = render(parts["common"], {"VEC": vec, "ROW_SUM": parts["row_sum"]})
    return {"COMMON": common, "WG": wg, "TPR": tpr, "VW": vw, "VEC": vec}


def tile_words(kw: int) -> int:
    """Packed words per staged x tile: STAGE_TILE_WORDS, or kw rounded up to 4 when smaller."""
    return min(STAGE_TILE_WORDS, -(-kw // 4) * 4)


def direct_source(wg: int, tpr: int, ipi: int, vw: int, kw: int) -> str:
    """The original kernel (x read from storage per code, ipi row groups in turn)."""
    return render(
        sections(SOURCE_FILE)["direct"],
        _layout(wg, tpr, vw)
        | {
            "IPI": ipi,
            "ACCUMULATE": _accumulate(vw),
            "UNROLLED": UNROLLED,
        },
    )


def staged_source(wg: int, tpr: int, rows: int, vw: int, kw: int) -> str:
    """The staged kernel: x tiles in workgroup memory, `rows` rows per thread at once."""
    return render(
        sections(SOURCE_FILE)["staged"],
        _layout(wg, tpr, vw)
        | {
            "R": rows,
            "TILE_WORDS": tile_words(kw),
            "SWIZZLE_SHIFT": 2 if vw == 1 else 4,
            "ROWS": _lines(_row_setup(rows), 4),
            "BODY": _lines(_staged_body(rows, vw), 12),
            "REDUCE": _lines((f"finish(row{r}, pos{r} - neg{r}, lid, lane);" for r in range(rows)), 4),
        },
    )


def lut_group(vw: int, tpr: int) -> int:
    """Floats per weight vector in the pair table: 16 per pair, 8 * vw pairs, padded by
    LUT_PAD when threads_per_row > 1 so neighbouring lanes' vectors sit in opposite bank halves."""
    return 128 * vw + (LUT_PAD if tpr > 1 else 0)


def lut_source(wg: int, tpr: int, rows: int, vw: int, kw: int) -> str:
    """The pair-table kernel: per tile a workgroup-built table of pair sums, one lookup per code pair."""
    return render(
        sections(SOURCE_FILE)["lut"],
        _layout(wg, tpr, vw)
        | {
            "R": rows,
            "TILE_WORDS": LUT_TILE_WORDS,
            "GROUP": lut_group(vw, tpr),
            "ROWS": _lines(_row_setup(rows, ("acc",)), 4),
            "LOADS": _lines(_lut_loads(rows, vw, tpr), 8),
            "LOOKUPS": _lines(_lut_lookups(rows, vw, tpr), 8),
            "REDUCE": _lines((f"finish(row{r}, acc{r}, lid, lane);" for r in range(rows)), 4),
        },
    )


def _dp4a_values(wg: int, tpr: int, rows: int, vw: int, word_sums: bool = True) -> dict[str, object]:
    """The placeholders the stage_x=3 and stage_x=4 loops share (layout, rows, loop, body;
    without `word_sums` the body adds no digit sums: stage_x=4's tile sums)."""
    return _layout(wg, tpr, vw) | {
        "LOOP": _lines(_dp4a_loop(), 8),
        "R": rows,
        "TILE_WORDS": DP4A_TILE_WORDS,
        "ROWS": _lines(_row_setup(rows, ("acc",)), 4),
        "SUMS": _lines(
            (f"var {n}{r}{p} = {'0' if p == 2 else '0u'};" for r in range(rows) for n in "ab" for p in range(3)), 8
        ),
        "BODY": _lines(_dp4a_body(rows, vw, word_sums), 12),
        "CONVERT": _lines(_dp4a_convert(rows), 8),
    }


def dp4a_source(wg: int, tpr: int, rows: int, vw: int, kw: int) -> str:
    """The integer dot-product kernel: x as three int8 digit planes per tile, 4 codes per dot."""
    parts = sections(SOURCE_FILE)
    return render(
        parts["dp4a"],
        _dp4a_values(wg, tpr, rows, vw)
        | {
            "DIGITS": parts["digits"],
            "REDUCE": _lines((f"finish(row{r}, acc{r}, lid, lane);" for r in range(rows)), 4),
        },
    )


def _dp4a_loop() -> list[str]:
    """The loop over this lane's weight vectors c = lane, lane + TPR, ... of a tile, as a
    count the driver knows (TILE / VW / TPR iterations, exact: powers of two with
    TPR * VW <= TILE) rather than a bound on c, which starts at the runtime lane."""
    return ["for (var i = 0u; i < TILE / VW / TPR; i++) {", "    let c = lane + i * TPR;"]


def _dp4a_body(rows: int, vw: int, word_sums: bool = True) -> list[str]:
    """One weight vector (vw words) per row: per word its three plane vectors and (with
    `word_sums`) digit sums once (16-byte loads from the tile in workgroup memory; the digit
    sums added to m0-m2), then per row U (t + 1 per field) and 12 dot products (4 field
    groups x 3 planes; groups 1 and 3 are left shifted by 2 and summed in the b accumulators).
    U = w + 0x55555555 - B3, where B3 holds each field's high bit in both its bits (one
    select: (w >> 1) & 0x55555555 | w & 0xaaaaaaaa), so U = sum of 4^f (c_f + 1 - 3 b1_f) =
    sum of 4^f (t_f + 1) with every field in 0..2 (the carries and borrows in between cancel:
    the total is the same integer); and the words of a vec4 sit in consecutive slots
    (slot_of(4c + u) = slot_of(4c) + u for u < 4)."""
    lines = ["let q0 = c * VW;"]
    lines += [f"let v{r} = w[wrow{r} + min(t0 / VW + c, nv - 1u)];" for r in range(rows)]
    lines.append("let s0 = slot_of(q0);")
    for u in range(vw):
        lines += [
            "{",
            f"    let s = s0 + {u}u;" if u else "    let s = s0;",
            "    let pa = xp[s];",
            "    let pb = xp[PAD + s];",
            "    let pc = xp[2u * PAD + s];",
        ]
        if word_sums:
            lines += ["    let ms = msum[s];", "    m0 += ms.x;", "    m1 += ms.y;", "    m2 += ms.z;"]
        for r in range(rows):
            word = f"v{r}" if vw == 1 else f"v{r}.{'xyzw'[u]}"
            decode = f"{word} + 0x55555555u - ((({word} >> 1u) & 0x55555555u) | ({word} & 0xaaaaaaaau))"
            lines += [
                "    {",
                f"        let t = {decode};",
                "        let h = t >> 4u;",
                "        let l0 = t & 0x03030303u;",
                "        let l1 = t & 0x0c0c0c0cu;",
                "        let l2 = h & 0x03030303u;",
                "        let l3 = h & 0x0c0c0c0cu;",
                *_dots(r),
                "    }",
            ]
        lines.append("}")
    return lines


def _dots(r: int) -> list[str]:
    """Row r's 12 dot products of a word: per plane p (pa, pb, pc; the top plane signed) the
    field groups 0 and 2 into a{r}p, 1 and 3 into b{r}p, a pair a statement."""
    lines = []
    for p, (plane, dot) in enumerate((("pa", "dot4U8Packed"), ("pb", "dot4U8Packed"), ("pc", "dot4I8Packed"))):
        for acc, (f, g), (x, y) in (("a", (0, 2), "xz"), ("b", (1, 3), "yw")):
            d, e = f"{dot}(l{f}, {plane}.{x})", f"{dot}(l{g}, {plane}.{y})"
            lines.append(f"        {acc}{r}{p} += " + d + " + " + e + ";")
    return lines


def _dp4a_convert(rows: int) -> list[str]:
    """A tile's integer sums to f32, per row: D_p = a + b / 4 - (digit sums read), exact."""
    lines = []
    for r in range(rows):
        lines += [
            f"let d{r}0 = i32(a{r}0 + (b{r}0 >> 2u)) - m0;",
            f"let d{r}1 = i32(a{r}1 + (b{r}1 >> 2u)) - m1;",
            f"let d{r}2 = a{r}2 + (b{r}2 >> 2u) - m2;",
            f"acc{r} += f * (f32(d{r}0) + 256.0 * f32(d{r}1) + 65536.0 * f32(d{r}2));",
        ]
    return lines


def _lut_loads(rows: int, vw: int, tpr: int) -> list[str]:
    """Every weight vector a thread needs for one tile (vector index c + i * TPR of each row;
    indices past the row end clamp to its last vector and look up the zero entries past k)."""
    return [
        f"let v{r}_{i} = w[wrow{r} + min(c + {i * tpr}u, nv - 1u)];"
        for i in range(LUT_TILE_WORDS // (vw * tpr))
        for r in range(rows)
    ]


def _lut_lookups(rows: int, vw: int, tpr: int) -> list[str]:
    """One table read per code pair: pair j of word q of vector g is entry q * 128 + j * 16 + nibble."""
    lines = []
    for i in range(LUT_TILE_WORDS // (vw * tpr)):
        lines.append(f"let g{i} = lane + {i * tpr}u;")
        for r in range(rows):
            words = [f"v{r}_{i}"] if vw == 1 else [f"v{r}_{i}.{lane}" for lane in "xyzw"]
            for q, word in enumerate(words):
                terms = [f"tbl[g{i}][{_entry(q * 128 + j * 16, word, j)}]" for j in range(CODES_PER_WORD // 2)]
                lines.append(f"acc{r} += " + " + ".join(terms) + ";")
    return lines


def _entry(offset: int, word: str, j: int) -> str:
    """WGSL for table index offset + nibble j of word (no mask on the top nibble, no shift on the first)."""
    if j == 0:
        nibble = f"({word} & 15u)"
    elif j == CODES_PER_WORD // 2 - 1:
        nibble = f"({word} >> {4 * j}u)"
    else:
        nibble = f"(({word} >> {4 * j}u) & 15u)"
    return f"{offset}u + {nibble}" if offset else nibble[1:-1]


def _lines(lines, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in lines)


def _row_setup(rows: int, sums: tuple[str, ...] = ("pos", "neg")) -> list[str]:
    """Row indices (rows past m read row m-1 and are not written) and the sums per row."""
    out = []
    for r in range(rows):
        out += [
            f"let row{r} = group * SLOTS * R + {r}u * SLOTS + slot;",
            f"let wrow{r} = min(row{r}, p.m - 1u) * nv;",
            *(f"var {name}{r} = 0.0;" for name in sums),
        ]
    return out


def _staged_body(rows: int, vw: int) -> list[str]:
    """One weight vector (vw words) per row: load x once, decode every row's codes."""
    lines = ["let xb = c * (4u * VW);"]
    lines += [f"let x{q} = xs[swz(xb + {q}u)];" for q in range(4 * vw)]
    for r in range(rows):
        lines.append(f"let v{r} = w[wrow{r} + t0 / VW + c];")
        words = [f"v{r}"] if vw == 1 else [f"v{r}.{lane}" for lane in "xyzw"]
        for i, word in enumerate(words):
            for j in range(CODES_PER_WORD):
                value = f"x{4 * i + j // 4}.{'xyzw'[j % 4]}"
                lines.append(f"if (({word} & 0x{1 << 2 * j:x}u) != 0u) {{ pos{r} += {value}; }}")
                lines.append(f"if (({word} & 0x{2 << 2 * j:x}u) != 0u) {{ neg{r} += {value}; }}")
    return lines


UNROLLED = "\n            + ".join(f"ternary(word, {j}u) * x[first + {j}u]" for j in range(CODES_PER_WORD))


def _accumulate(vw: int) -> str:
    """WGSL adding the codes of v (one word, or a vec4 of words) for word index c."""
    if vw == 1:
        return "acc += word_dot(v, c * 16u);"
    return " ".join(f"acc += word_dot(v.{lane}, c * 64u + {16 * i}u);" for i, lane in enumerate("xyzw"))


# The unrolling code TernaryGemv.host_source hashes (with split_launch and the constants), in this order.
EMITTERS = (
    _row_setup,
    _staged_body,
    _lut_loads,
    _lut_lookups,
    _entry,
    _accumulate,
    tile_words,
    lut_group,
    _dp4a_loop,
    _dp4a_body,
    _dots,
    _dp4a_convert,
    _dp4a_values,
)
