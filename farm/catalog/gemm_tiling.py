"""gemm's kernels: the knob values one kernel is emitted for (`Tiling`), which of them
can form a kernel (`first_problem`), and the host code that unrolls kernels/gemm.wgsl's
blocks for them (`unrolled_blocks`). farm/catalog/gemm.py holds the spec (space,
schedules, data, reference, launch). `EMITTERS` is the code the spec's `host_source`
hashes, in its order.

Schedule knobs (see kernels/gemm.wgsl):
- `tile_m`, `tile_n` (BM×BN): the block of C one workgroup computes;
- `reg_m`, `reg_n` (TM×TN): the register tile each thread computes, so the thread layout
  is (BM/TM)×(BN/TN) and `workgroup_size` must equal (BM/TM)·(BN/TN);
- `items_per_invocation`: the C elements each thread computes, which must equal TM·TN
  (it is derived, kept so schedules stay comparable across kernels);
- `tile_k` (BK): the depth of the A and B slices staged in workgroup memory;
- `double_buffer`: 1 keeps two slices in workgroup memory and fetches the next one into
  registers while multiplying the current one (one barrier per slice), 0 keeps one; 2 is
  1 with the slice loop unrolled by two, so every workgroup-memory index of a half is a
  compile-time offset (with 1 the buffer, (t - s0) % 2, is computed at run time);
- `vector_width`: 1 or 4; with 4, A and B are read as vec4<f32> (the spec's `launch` pads
  them with zeros when k or n is not a multiple of 4).
Knobs added for speed; each is 0 by default (a schedule that leaves one out gets 0, which
emits the original kernel):
- `shared_vec4`: 1 declares the workgroup tiles as vec4<f32> and gives each thread
  contiguous groups of 4 rows and 4 columns (4-row group i at rows (i·THM + ty)·4.., 4-column
  group j at columns (j·THN + tx)·4..), so per k step a thread reads TM/4 + TN/4 vec4s from
  workgroup memory instead of TM + TN scalars; needs reg_m and reg_n multiples of 4. B is
  stored with vec4 stores when vector_width is 4;
- `pad_shared`: 1 pads every k-row of the (k-major) A tile, by 1 float (4 with
  shared_vec4, to keep vec4 alignment), so the transposing stores of A into workgroup
  memory stop hitting one bank (BK-way conflicts unpadded with vector_width 1);
- `warp_cols`: 0 lays threads out row-major over the THM×THN thread grid; 4, 8 or 16 tiles
  it with blocks of 32 consecutive threads (one NVIDIA warp) of (32/warp_cols)×warp_cols,
  so a warp's workgroup reads touch fewer distinct B words; needs workgroup_size, THN and
  THM divisible by 32, warp_cols and 32/warp_cols;
- `split_k`: 0 (or 1) computes each C tile over all of k in one workgroup; 2, 4 or 8
  splits k's slices into that many ranges, one workgroup per (tile, range) writing a
  partial tile to a scratch of split_k·m·n floats, and a second pass sums the partials in
  range order into C: more workgroups where the tiles alone leave SMs idle (1024^3 at
  64×64: 256 tiles on 132 SMs);
- `unroll_k`: 0 leaves a slice's k steps in a WGSL loop (`for kk < BK`), for the driver to
  unroll or not; 1 writes the BK steps out as straight-line code, every workgroup-memory
  index a compile-time offset from one base per slice.
"""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32
WARP_COLS = (0, 4, 8, 16)
SPLIT_K = (0, 2, 4, 8)


@dataclass(frozen=True)
class Tiling:
    """The knob values one kernel is emitted for (see the module docstring)."""

    threads: int
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    vw: int
    double_buffer: int = 0
    shared_vec4: int = 0
    pad_shared: int = 0
    warp_cols: int = 0
    split_k: int = 0
    unroll_k: int = 0

    @property
    def splits(self) -> int:
        """k ranges per C tile (split_k 0 and 1: one)."""
        return max(1, self.split_k)

    @property
    def pad(self) -> int:
        """Floats added to each k-row of the A tile."""
        return (4 if self.shared_vec4 else 1) if self.pad_shared else 0

    @property
    def nbuf(self) -> int:
        return 2 if self.double_buffer else 1


def unrolled_blocks(t: Tiling) -> dict[str, str]:
    """The WGSL the template leaves to the host: the thread layout, the workgroup tiles,
    the register tile, the staged loads and the C stores written out as straight-line code
    over named scalars, so no private array is indexed in a loop (drivers may put those in
    local memory)."""
    loads_a = -(-t.bm * t.bk // (t.vw * t.threads))
    loads_b = -(-t.bk * t.bn // (t.vw * t.threads))
    vec = "f32" if t.vw == 1 else "vec4<f32>"
    declare = [f"var acc_{i}_{j} = 0.0;" for i in range(t.tm) for j in range(t.tn)]
    declare += [f"var a_next_{i}: {vec};" for i in range(loads_a)]
    declare += [f"var b_next_{i}: {vec};" for i in range(loads_b)]
    fetch = [f"a_next_{i} = load_a(slice, row0, lid + {i * t.threads}u);" for i in range(loads_a)]
    fetch += [f"b_next_{i} = load_b(slice, col0, lid + {i * t.threads}u);" for i in range(loads_b)]
    stash = [f"put_a(buf, lid + {i * t.threads}u, a_next_{i});" for i in range(loads_a)]
    stash += [f"put_b(buf, lid + {i * t.threads}u, b_next_{i});" for i in range(loads_b)]
    blocks = {"DECLARE": declare, "FETCH": fetch, "STASH": stash, "MULTIPLY": _multiply(t), "WRITE": _write(t)}
    blocks |= {"LAYOUT": _layout(t), "RANGE": _k_range(t)} | _puts(t)
    out = {name: "\n    ".join(lines) for name, lines in blocks.items()} | {"TILES": "\n".join(_tiles(t))}
    return out | _split_output(t)


def _k_range(t: Tiling) -> list[str]:
    """This workgroup's C tile (`tile`) and its slices s0..s1 of k: all of them, or with
    split_k one of `splits` ranges (the workgroups of range z follow those of range z - 1)."""
    if t.splits == 1:
        return ["let tile = group;", "let s0 = 0u;", "let s1 = (p.kp + BK - 1u) / BK;"]
    return [
        f"let tiles = p.groups / {t.splits}u;",
        "let kz = group / tiles;",
        "let tile = group % tiles;",
        "let slices = (p.kp + BK - 1u) / BK;",
        f"let per = (slices + {t.splits - 1}u) / {t.splits}u;",
        "let s0 = min(kz * per, slices);",
        "let s1 = min(s0 + per, slices);",
        "c_base = kz * p.m * p.n;",
    ]


def _split_output(t: Tiling) -> dict[str, str]:
    """Where the C tile goes: C itself (binding 2), or with split_k this range's partial
    tile in the scratch (binding 4, offset c_base)."""
    if t.splits == 1:
        return {"C_BINDING": "2", "C_BASE_DECL": "", "C_BASE": ""}
    return {"C_BINDING": "4", "C_BASE_DECL": "var<private> c_base: u32;", "C_BASE": "c_base + "}


def _layout(t: Tiling) -> list[str]:
    """tx, ty: the thread's column and row in the THM×THN thread grid."""
    if not t.warp_cols:
        return ["let tx = lid % THN;", "let ty = lid / THN;"]
    wc, rows = t.warp_cols, WARP // t.warp_cols
    return [
        f"let warp = lid / {WARP}u;",
        f"let lane = lid % {WARP}u;",
        f"let tx = (warp % (THN / {wc}u)) * {wc}u + lane % {wc}u;",
        f"let ty = (warp / (THN / {wc}u)) * {rows}u + lane / {wc}u;",
    ]


def _tiles(t: Tiling) -> list[str]:
    """The workgroup tile declarations: A k-major with rows of AS = BM + PAD floats."""
    if t.shared_vec4:
        return [
            "var<workgroup> a_tile: array<vec4<f32>, NBUF * BK * AS / 4u>;",
            "var<workgroup> b_tile: array<vec4<f32>, NBUF * BK * BN / 4u>;",
        ]
    return ["var<workgroup> a_tile: array<f32, NBUF * BK * AS>;", "var<workgroup> b_tile: array<f32, NBUF * BK * BN>;"]


def _puts(t: Tiling) -> dict[str, list[str]]:
    """PUT_A / PUT_B: one loaded value (its lanes) into the tiles at float offset `at`;
    with shared_vec4, A's lanes from one division of `at`."""
    lanes = ["v"] if t.vw == 1 else ["v.x", "v.y", "v.z", "v.w"]
    if not t.shared_vec4:
        put_a = [f"a_tile[at + {q * (t.bm + t.pad)}u] = {lane};" for q, lane in enumerate(lanes)]
        put_b = [f"b_tile[at + {q}u] = {lane};" for q, lane in enumerate(lanes)]
        return {"PUT_A": put_a, "PUT_B": put_b}
    put_b = ["b_tile[at / 4u][at % 4u] = v;"] if t.vw == 1 else ["b_tile[at / 4u] = v;"]
    # A's k-rows are AS = BM + PAD floats apart, a multiple of 4 (reg_m is): lane q of the
    # value lands AS/4 vec4s past lane 0, in the same component, so one division serves all.
    put_a = ["let a4 = at / 4u;", "let am = at % 4u;"]
    put_a += [f"a_tile[a4 + {q * (t.bm + t.pad) // 4}u][am] = {lane};" for q, lane in enumerate(lanes)]
    return {"PUT_A": put_a, "PUT_B": put_b}


def _multiply(t: Tiling) -> list[str]:
    """One slice's k loop: read the thread's A and B values, TM·TN fmas (with unroll_k,
    the BK steps written out: `_unrolled_multiply`)."""
    if t.unroll_k:
        return _unrolled_multiply(t)
    if not t.shared_vec4:
        step = ["let a_base = (buf * BK + kk) * AS + ty;", "let b_base = (buf * BK + kk) * BN + tx;"]
        step += [f"let a_{i} = a_tile[a_base + {i * (t.bm // t.tm)}u];" for i in range(t.tm)]
        step += [f"let b_{j} = b_tile[b_base + {j * (t.bn // t.tn)}u];" for j in range(t.tn)]
        step += [f"acc_{i}_{j} = fma(a_{i}, b_{j}, acc_{i}_{j});" for i in range(t.tm) for j in range(t.tn)]
    else:
        lane = "xyzw"
        step = ["let a_base = (buf * BK + kk) * (AS / 4u) + ty;", "let b_base = (buf * BK + kk) * (BN / 4u) + tx;"]
        step += [f"let a_{i} = a_tile[a_base + {i * (t.bm // t.tm)}u];" for i in range(t.tm // 4)]
        step += [f"let b_{j} = b_tile[b_base + {j * (t.bn // t.tn)}u];" for j in range(t.tn // 4)]
        step += [
            f"acc_{i}_{j} = fma(a_{i // 4}.{lane[i % 4]}, b_{j // 4}.{lane[j % 4]}, acc_{i}_{j});"
            for i in range(t.tm)
            for j in range(t.tn)
        ]
    return ["for (var kk = 0u; kk < BK; kk++) {", *("    " + line for line in step), "}"]


def _unrolled_multiply(t: Tiling) -> list[str]:
    """The BK k steps of `_multiply` as straight-line blocks: step kk reads A and B at
    kk rows past the slice's bases (one each, computed once), offsets known at compile time."""
    thm, thn, lane = t.bm // t.tm, t.bn // t.tn, "xyzw"
    vec = 4 if t.shared_vec4 else 1
    a_row, b_row = (t.bm + t.pad) // vec, t.bn // vec
    out = [f"let a_base = buf * {t.bk * a_row}u + ty;", f"let b_base = buf * {t.bk * b_row}u + tx;"]
    for kk in range(t.bk):
        step = [f"let a_{i} = a_tile[a_base + {kk * a_row + i * thm}u];" for i in range(t.tm // vec)]
        step += [f"let b_{j} = b_tile[b_base + {kk * b_row + j * thn}u];" for j in range(t.tn // vec)]
        if vec == 1:
            step += [f"acc_{i}_{j} = fma(a_{i}, b_{j}, acc_{i}_{j});" for i in range(t.tm) for j in range(t.tn)]
        else:
            step += [
                f"acc_{i}_{j} = fma(a_{i // 4}.{lane[i % 4]}, b_{j // 4}.{lane[j % 4]}, acc_{i}_{j});"
                for i in range(t.tm)
                for j in range(t.tn)
            ]
        out += ["{", *("    " + line for line in step), "}"]
    return out


def _write(t: Tiling) -> list[str]:
    """The C stores of the register tile (bounds-checked in store_c)."""
    thm, thn = t.bm // t.tm, t.bn // t.tn
    if not t.shared_vec4:
        return [
            f"store_c(row0 + ty + {i * thm}u, col0 + tx + {j * thn}u, acc_{i}_{j});"
            for i in range(t.tm)
            for j in range(t.tn)
        ]
    return [
        f"store_c(row0 + (ty + {i // 4 * thm}u) * 4u + {i % 4}u, "
        f"col0 + (tx + {j // 4 * thn}u) * 4u + {j % 4}u, acc_{i}_{j});"
        for i in range(t.tm)
        for j in range(t.tn)
    ]


def first_problem(t: Tiling, items: int | None = None) -> str:
    """The first reason the knob values can't form a kernel, or '' when they can."""
    bm, bn, tm, tn, bk, vw = t.bm, t.bn, t.tm, t.tn, t.bk, t.vw
    if min(bm, bn, tm, tn, bk) < 1:
        return f"tile sizes must be >= 1 (tile_m={bm}, tile_n={bn}, reg_m={tm}, reg_n={tn}, tile_k={bk})"
    if bm % tm:
        return f"reg_m {tm} does not divide tile_m {bm}"
    if bn % tn:
        return f"reg_n {tn} does not divide tile_n {bn}"
    threads = (bm // tm) * (bn // tn)
    if t.threads != threads:
        return f"workgroup_size {t.threads} != (tile_m/reg_m)*(tile_n/reg_n) = {threads}"
    if items is not None and items != tm * tn:
        return f"items_per_invocation {items} != reg_m*reg_n = {tm * tn}"
    if vw not in (1, 4):
        return f"vector_width {vw} not in (1, 4)"
    if bk % vw:
        return f"vector_width {vw} does not divide tile_k {bk}"
    if bn % vw:
        return f"vector_width {vw} does not divide tile_n {bn}"
    if t.double_buffer not in (0, 1, 2):
        return f"double_buffer {t.double_buffer} not in (0, 1, 2)"
    return _speed_problem(t)


def _speed_problem(t: Tiling) -> str:
    """The first reason the speed knobs can't apply to this tiling, or ''."""
    for name in ("shared_vec4", "pad_shared", "unroll_k"):
        if getattr(t, name) not in (0, 1):
            return f"{name} {getattr(t, name)} not in (0, 1)"
    if t.shared_vec4 and (t.tm % 4 or t.tn % 4):
        return f"shared_vec4 needs reg_m and reg_n multiples of 4 (reg_m={t.tm}, reg_n={t.tn})"
    if t.split_k not in SPLIT_K:
        return f"split_k {t.split_k} not in {SPLIT_K}"
    wc = t.warp_cols
    if wc not in WARP_COLS:
        return f"warp_cols {wc} not in {WARP_COLS}"
    if wc and t.threads % WARP:
        return f"warp_cols {wc} needs workgroup_size {t.threads} a multiple of {WARP}"
    if wc and ((t.bn // t.tn) % wc or (t.bm // t.tm) % (WARP // wc)):
        return (
            f"warp_cols {wc} needs tile_n/reg_n = {t.bn // t.tn} divisible by {wc} "
            f"and tile_m/reg_m = {t.bm // t.tm} divisible by {WARP // wc}"
        )
    return ""


def guards(t: Tiling, m: int, n: int, kp: int, np_: int) -> dict[str, str]:
    """The conditions kernels/gemm.wgsl tests before a global load, a tile store and a C
    store, as WGSL: each drops the parts the problem's shape makes always true (A_INSIDE's
    row < m when BM divides m, its k part when BK divides the padded k; B_INSIDE's likewise
    with BN and the padded n; the tile index when `threads` divides a tile's vectors; C's
    when the tiles cover C exactly). Every dropped test is one the launch's own shape makes
    true for every workgroup, so the trusted module (no runtime checks) still never reads or
    writes outside its buffers: the source is rendered per problem, and `launch` sizes the
    buffers and Params from that problem."""
    a_vecs, b_vecs = t.bm * t.bk // t.vw, t.bk * t.bn // t.vw

    def join(parts: list[tuple[str, bool]]) -> str:
        kept = [part for part, needed in parts if needed]
        return " && ".join(kept) or "true"

    a_idx, b_idx = ("idx < A_VECS", a_vecs % t.threads != 0), ("idx < B_VECS", b_vecs % t.threads != 0)
    k_ragged = kp % t.bk != 0
    return {
        "A_INSIDE": join([a_idx, ("row < p.m", m % t.bm != 0), ("kvi < kv", k_ragged)]),
        "B_INSIDE": join([b_idx, ("krow < p.kp", k_ragged), ("nvi < nv", np_ % t.bn != 0)]),
        "PUT_A_INSIDE": join([a_idx]),
        "PUT_B_INSIDE": join([b_idx]),
        "C_INSIDE": join([("row < p.m", m % t.bm != 0), ("col < p.n", n % t.bn != 0)]),
    }


# The unrolling code Gemm.host_source hashes, in this order.
EMITTERS = (
    guards,
    unrolled_blocks,
    _layout,
    _tiles,
    _puts,
    _multiply,
    _unrolled_multiply,
    _write,
    _k_range,
    _split_output,
    Tiling,
)
