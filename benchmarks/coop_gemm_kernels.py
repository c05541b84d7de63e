"""The WGSL of benchmarks/coop_gemm.py: C = A·B with A (m, k) and B (k, n) f16 row-major, C (m, n)
row-major, f32 (or f16 for the `_f16acc` variants), on naga's `wgpu_cooperative_matrix` extension
as wgpu-native 29.0.1.1 / naga 29.0.3 spell it (read out of the installed library: the
predeclared types coop_mat8x8 and coop_mat16x16 only, roles A|B|C; coopLoad / coopStore read and
write column-major, coopLoadT / coopStoreT row-major, each `(pointer, stride)` with the stride in
elements between columns, resp. rows; coopMultiplyAdd(a, b, c) -> c' = a·b + c, the operands'
roles checked by naga's validator and not their scalar types, so f16 A/B into an f32 C passes
naga and is up to the driver: NVIDIA's Vulkan lists 16x16x16 f16·f16 -> f32 and -> f16).

Every cooperative op sits in uniform control flow (a Vulkan cooperative matrix has subgroup
scope: all 32 lanes of a subgroup take part, none may branch around it): no early returns,
loop bounds are constants, the problem sizes are WGSL constants baked in per size and must be
multiples of a variant's block (`Variant.fits`), so no bounds checks either. Indices and
strides are `let`s of their own (a third-party report had naga's SPIR-V go wrong on inline ones).

Variants (`VARIANTS`):
- `plain`: naga's example, one 16x16 tile of C per workgroup of one subgroup, A and B tiles
  loaded straight from storage with coopLoadT;
- `plain_cm`: the same with the column-major builtins only: a row-major X read column-major is
  X^T, so it computes C^T = B^T·A^T with B's tiles in the A role (a check on which of
  coopLoad / coopLoadT is the row-major one: if only one of the two certifies, that is the answer);
- `plain_f16acc`: `plain` with an f16 accumulator and f16 C;
- `direct_2x2`: one subgroup per workgroup, 2x2 tiles of C (four accumulators), A and B
  fragments straight from storage (each loaded fragment feeds two multiply-adds);
- `wg<BM>_<sgm>x<sgn>_t<tm>x<tn>[_f16acc]`: a BM x BN block of C per workgroup of sgm x sgn
  subgroups, each owning tm x tn tiles (register-blocked: tm + tn fragment loads feed tm * tn
  multiply-adds); BK = 32 deep slices of A and B go through workgroup memory (rows padded by 8
  halves), every thread copying 16-byte chunks (A and B bound as vec4<u32>, split into halves
  with unpack2x16float), and the next slice's chunks are loaded into registers while the
  current one is multiplied (two barriers a slice);
- `simt_f16`: no cooperative matrix (the control): 64x64 per workgroup of 16x16 threads, 4x4
  f32 FMAs a thread per k, f16 converted to f32 on the way into workgroup memory.
The host unrolls the accumulators into named vars (acc_i_j) and the copies into straight code.

Checked here without a cooperative-matrix device: naga 29.0.3 (the installed library's, with the
device's capabilities forced on under gdb) parses and validates every variant, and its SPIR-V
passes spirv-val 2025.5 --target-env vulkan1.3 (but for the ArrayStride naga puts on every
workgroup array, which the farm's other kernels carry too); coopLoadT/coopStoreT come out as
RowMajorKHR, coopLoad/coopStore as ColumnMajorKHR, scope Subgroup. Untested: the driver. One
caveat for the `wg` variants: naga switches such modules to the Vulkan memory model and emits
the workgroup-memory stores and loads without NonPrivatePointer, so that only the barriers'
AcquireRelease|WorkgroupMemory semantics order them; if those variants alone FAIL, suspect this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SG = 32  # lanes of a subgroup the multi-subgroup variants assume (NVIDIA's)
BK = 32  # the k depth of a workgroup-memory slice
PAD = 8  # halves of padding after each row in workgroup memory (16 bytes: rows stay 16-byte aligned)


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # plain | plain_cm | direct | wg | simt
    acc: str = "f32"  # the accumulator's (and C's) scalar type
    sgm: int = 1  # subgroups along m, along n (wg)
    sgn: int = 1
    tm: int = 1  # 16x16 tiles a subgroup owns along m, along n
    tn: int = 1

    @property
    def coop(self) -> bool:
        return self.kind != "simt"

    @property
    def block(self) -> tuple[int, int, int]:
        """(rows, cols, k step) of the block a workgroup computes."""
        if self.kind == "simt":
            return 64, 64, 16
        k = BK if self.kind == "wg" else 16
        return self.sgm * self.tm * 16, self.sgn * self.tn * 16, k

    @property
    def threads(self) -> int:
        return 256 if self.kind == "simt" else self.sgm * self.sgn * SG

    def fits(self, m: int, n: int, k: int) -> bool:
        bm, bn, bk = self.block
        return m % bm == 0 and n % bn == 0 and k % bk == 0

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        bm, bn, _ = self.block
        return n // bn, m // bm, 1

    def source(self, m: int, n: int, k: int) -> str:
        if not self.fits(m, n, k):
            raise ValueError(f"{self.name} needs m, n, k multiples of {self.block}, got {(m, n, k)}")
        body = {"plain": _plain, "plain_cm": _plain_cm, "direct": _direct, "wg": _wg, "simt": _simt}[self.kind]
        return body(self, m, n, k)


VARIANTS = (
    Variant("plain", "plain"),
    Variant("plain_cm", "plain_cm"),
    Variant("plain_f16acc", "plain", acc="f16"),
    Variant("direct_2x2", "direct", tm=2, tn=2),
    Variant("wg64_2x2_t2x2", "wg", sgm=2, sgn=2, tm=2, tn=2),
    Variant("wg128_2x4_t4x2", "wg", sgm=2, sgn=4, tm=4, tn=2),
    Variant("wg128_2x2_t4x4", "wg", sgm=2, sgn=2, tm=4, tn=4),
    Variant("wg128_2x4_t4x2_f16acc", "wg", acc="f16", sgm=2, sgn=4, tm=4, tn=2),
    Variant("simt_f16", "simt"),
)


def _head(v: Variant, m: int, n: int, k: int, packed: bool = False) -> str:
    ab = "vec4<u32>" if packed else "f16"
    ext = "enable wgpu_cooperative_matrix;\n" if v.coop else ""
    return f"""enable f16;
{ext}
const M: u32 = {m}u;
const N: u32 = {n}u;
const K: u32 = {k}u;
@group(0) @binding(0) var<storage, read> a: array<{ab}>;
@group(0) @binding(1) var<storage, read> b: array<{ab}>;
@group(0) @binding(2) var<storage, read_write> c: array<{v.acc}>;
"""


def _mat(v: Variant, role: str) -> str:
    return f"coop_mat16x16<{v.acc if role == 'C' else 'f16'}, {role}>"


def _plain(v: Variant, m: int, n: int, k: int, column_major: bool = False) -> str:
    """One 16x16 tile a workgroup, naga's example form: row-major loads (coopLoadT) of A's and
    B's tiles, or (`column_major`, variant plain_cm) column-major reads of the row-major
    buffers: B's (k0.., col0..) tile read with stride N is the 16(n) x 16(k) tile of B^T (the A
    role), A's (row0.., k0..) tile with stride K the 16(k) x 16(m) tile of A^T (the B role);
    their product, the C^T tile, stored column-major with stride N lands row-major in C."""
    load, store = ("coopLoad", "coopStore") if column_major else ("coopLoadT", "coopStoreT")
    first, second = ("b[ib], sb", "a[ia], sa") if column_major else ("a[ia], sa", "b[ib], sb")
    return _head(v, m, n, k) + f"""
@compute @workgroup_size({SG})
fn main(@builtin(workgroup_id) wid: vec3<u32>) {{
    let row0 = wid.y * 16u;
    let col0 = wid.x * 16u;
    let sa = K;
    let sb = N;
    var acc = {_mat(v, "C")}();
    for (var k0 = 0u; k0 < K; k0 += 16u) {{
        let ia = row0 * K + k0;
        let ib = k0 * N + col0;
        let ta = {load}<{_mat(v, "A")}>(&{first});
        let tb = {load}<{_mat(v, "B")}>(&{second});
        acc = coopMultiplyAdd(ta, tb, acc);
    }}
    let ic = row0 * N + col0;
    {store}(acc, &c[ic], sb);
}}
"""


def _plain_cm(v: Variant, m: int, n: int, k: int) -> str:
    return _plain(v, m, n, k, column_major=True)


def _tiles(v: Variant) -> list[tuple[int, int]]:
    return [(i, j) for i in range(v.tm) for j in range(v.tn)]


def _accumulate(v: Variant, a: str, b: str) -> str:
    """The tm*tn multiply-adds of fragments {a}{i} by {b}{j}."""
    return "\n".join(f"        acc_{i}_{j} = coopMultiplyAdd({a}{i}, {b}{j}, acc_{i}_{j});" for i, j in _tiles(v))


def _zero_and_store(v: Variant, row: str, col: str) -> tuple[str, str]:
    zero = "\n".join(f"    var acc_{i}_{j} = {_mat(v, 'C')}();" for i, j in _tiles(v))
    store = "\n".join(
        f"    let ic_{i}_{j} = ({row} + {16 * i}u) * N + {col} + {16 * j}u;\n"
        f"    coopStoreT(acc_{i}_{j}, &c[ic_{i}_{j}], sn);"
        for i, j in _tiles(v)
    )
    return zero, store


def _direct(v: Variant, m: int, n: int, k: int) -> str:
    bm, bn, _ = v.block
    zero, store = _zero_and_store(v, "row0", "col0")
    loads = [f"        let ia{i} = (row0 + {16 * i}u) * K + k0;\n"
             f"        let fa{i} = coopLoadT<{_mat(v, 'A')}>(&a[ia{i}], sk);" for i in range(v.tm)]  # fmt: skip
    loads += [f"        let ib{j} = k0 * N + col0 + {16 * j}u;\n"
              f"        let fb{j} = coopLoadT<{_mat(v, 'B')}>(&b[ib{j}], sn);" for j in range(v.tn)]  # fmt: skip
    return _head(v, m, n, k) + f"""
@compute @workgroup_size({SG})
fn main(@builtin(workgroup_id) wid: vec3<u32>) {{
    let row0 = wid.y * {bm}u;
    let col0 = wid.x * {bn}u;
    let sk = K;
    let sn = N;
{zero}
    for (var k0 = 0u; k0 < K; k0 += 16u) {{
{chr(10).join(loads)}
{_accumulate(v, "fa", "fb")}
    }}
{store}
}}
"""


def _chunks(v: Variant) -> tuple[int, int]:
    """16-byte chunks of the A slice (BM x BK) and the B slice (BK x BN) each thread copies."""
    bm, bn, _ = v.block
    ca, cb = bm * BK // 8, BK * bn // 8
    if ca % v.threads or cb % v.threads:
        raise ValueError(f"{v.name}: slices of {ca} and {cb} chunks do not split over {v.threads} threads")
    return ca // v.threads, cb // v.threads


def _wg(v: Variant, m: int, n: int, k: int) -> str:
    bm, bn, _ = v.block
    ca, cb = _chunks(v)
    a_stride, b_stride = BK + PAD, bn + PAD
    a_cols, b_cols = BK // 8, bn // 8  # chunks in a row of the A slice, of the B slice
    fetch, stash = [], []
    for name, count, cols, stride in (("a", ca, a_cols, a_stride), ("b", cb, b_cols, b_stride)):
        for e in range(count):
            q = f"(lid + {e * v.threads}u)"
            if name == "a":  # A slice row r, chunk cc: A row row0 + r, halves STEP*BK + 8*cc..
                src = f"(row0 + {q} / {cols}u) * (K / 8u) + STEP * {BK // 8}u + {q} % {cols}u"
            else:  # B slice row r (k = STEP*BK + r), chunk cc: B columns col0 + 8*cc..
                src = f"(STEP * {BK}u + {q} / {cols}u) * (N / 8u) + col0 / 8u + {q} % {cols}u"
            fetch.append(f"        p{name}{e} = {name}[{src}];")
            stash.append(f"        let o{name}{e} = ({q} / {cols}u) * {stride}u + ({q} % {cols}u) * 8u;")
            for h in range(4):
                stash.append(f"        let h{name}{e}_{h} = unpack2x16float(p{name}{e}.{'xyzw'[h]});")
                for half, comp in ((0, "x"), (1, "y")):
                    stash.append(f"        s{name}[o{name}{e} + {2 * h + half}u] = f16(h{name}{e}_{h}.{comp});")
    first = [line.replace("STEP", "0u")[4:] for line in fetch]  # slice 0, before the loop
    fetch = [line.replace("STEP", "next") for line in fetch]
    regs = [f"    var p{x}{e}: vec4<u32>;" for x, count in (("a", ca), ("b", cb)) for e in range(count)]
    compute = []
    for kk in range(BK // 16):
        for i in range(v.tm):
            compute.append(f"        let ja{kk}_{i} = (arow + {16 * i}u) * {a_stride}u + {16 * kk}u;\n"
                           f"        let fa{kk}_{i} = coopLoadT<{_mat(v, 'A')}>(&sa[ja{kk}_{i}], ssa);")  # fmt: skip
        for j in range(v.tn):
            compute.append(f"        let jb{kk}_{j} = {16 * kk * b_stride}u + bcol + {16 * j}u;\n"
                           f"        let fb{kk}_{j} = coopLoadT<{_mat(v, 'B')}>(&sb[jb{kk}_{j}], ssb);")  # fmt: skip
        compute.append(_accumulate(v, f"fa{kk}_", f"fb{kk}_"))
    zero, store = _zero_and_store(v, "crow", "ccol")
    return _head(v, m, n, k, packed=True) + f"""
var<workgroup> sa: array<f16, {bm * a_stride}>;
var<workgroup> sb: array<f16, {BK * b_stride}>;

@compute @workgroup_size({v.threads})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let row0 = wid.y * {bm}u;
    let col0 = wid.x * {bn}u;
    let sg = lid / {SG}u;
    let arow = (sg / {v.sgn}u) * {16 * v.tm}u;  // the subgroup's first row in the block
    let bcol = (sg % {v.sgn}u) * {16 * v.tn}u;  // its first column
    let crow = row0 + arow;
    let ccol = col0 + bcol;
    let ssa = {a_stride}u;
    let ssb = {b_stride}u;
    let sn = N;
{zero}
{chr(10).join(regs)}
{chr(10).join(first)}
    for (var s = 0u; s < K / {BK}u; s++) {{
        workgroupBarrier();
{chr(10).join(stash)}
        workgroupBarrier();
        let next = min(s + 1u, K / {BK}u - 1u);  // the last slice loads itself again
{chr(10).join(fetch)}
{chr(10).join(compute)}
    }}
{store}
}}
"""


def _simt(v: Variant, m: int, n: int, k: int) -> str:
    ij = [(i, j) for i in range(4) for j in range(4)]
    zero = "\n".join(f"    var acc_{i}_{j} = 0.0;" for i, j in ij)
    loads = []
    for e in range(4):  # 1024 elements of each 64x16 / 16x64 slice over 256 threads
        q = f"(t + {256 * e}u)"
        loads.append(f"        sa[({q} % 16u) * 64u + {q} / 16u] = f32(a[(row0 + {q} / 16u) * K + k0 + {q} % 16u]);")
        loads.append(f"        sb[{q}] = f32(b[(k0 + {q} / 64u) * N + col0 + {q} % 64u]);")
    fma = [f"            let x{i} = sa[kk * 64u + ty + {16 * i}u];" for i in range(4)]
    fma += [f"            let y{j} = sb[kk * 64u + tx + {16 * j}u];" for j in range(4)]
    fma += [f"            acc_{i}_{j} = fma(x{i}, y{j}, acc_{i}_{j});" for i, j in ij]
    store = "\n".join(f"    c[(row0 + ty + {16 * i}u) * N + col0 + tx + {16 * j}u] = acc_{i}_{j};" for i, j in ij)
    return _head(v, m, n, k) + f"""
var<workgroup> sa: array<f32, 1024>;  // the A slice transposed: sa[k * 64 + row]
var<workgroup> sb: array<f32, 1024>;  // the B slice: sb[k * 64 + col]

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {{
    let tx = l.x;
    let ty = l.y;
    let t = ty * 16u + tx;
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
{zero}
    for (var k0 = 0u; k0 < K; k0 += 16u) {{
{chr(10).join(loads)}
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk++) {{
{chr(10).join(fma)}
        }}
        workgroupBarrier();
    }}
{store}
}}
"""


_LOAD = re.compile(r"coopLoad(T?)<coop_mat16x16<(\w+), (\w)>>\(&(\w+)\[(\w+)\], (\w+)\)")
_STORE = re.compile(r"coopStore(T?)\((\w+), &(\w+)\[(\w+)\], (\w+)\)")
_LANE_SHARE = {"A": 16, "B": 128, "C": 8}  # elements of a 16x16 matrix one emulating lane holds


def _at(t: str, r, c) -> str:
    """Index of element (r, c) of a matrix at p[ii]: row-major (coop*T) p[ii + r * ss + c], else p[ii + c * ss + r]."""
    return f"ii + ({r}) * ss + {c}" if t else f"ii + ({c}) * ss + {r}"


def emulated(v: Variant, source: str) -> str:
    """`source` with the cooperative ops replaced by plain WGSL: lane l of a subgroup (l =
    local_invocation_index % 32) holds row l / 2 of an A matrix, columns 8 (l % 2) .. + 8 of a B
    matrix and those 8 elements of that row of a C matrix, so the multiply-add is lane-local.
    The kernels' index math, staging and barriers run unchanged on any adapter (lavapipe), and
    certifying this checks everything but the cooperative ops themselves (`--emulate`)."""
    loads: set[tuple[str, str, str, str]] = set()
    stores: set[tuple[str, str]] = set()

    def load(match: re.Match) -> str:
        t, scalar, role, array, index, stride = match.groups()
        loads.add((t, scalar, role, array))
        return f"ld{t}{role}_{array}({index}, {stride})"

    def store(match: re.Match) -> str:
        t, value, array, index, stride = match.groups()
        stores.add((t, array))
        return f"st{t}_{array}({value}, {index}, {stride})"

    body = _STORE.sub(store, _LOAD.sub(load, source.replace("enable wgpu_cooperative_matrix;\n", "")))
    body = re.sub(r"coop_mat16x16<(\w+), (\w)>\(\)", lambda m: f"array<{m[1]}, {_LANE_SHARE[m[2]]}>()", body)
    body = body.replace("coopMultiplyAdd(", "mma(")
    lid = re.search(r"@builtin\(local_invocation_index\) (\w+): u32", body)
    if lid is None:
        body = body.replace("fn main(", "fn main(@builtin(local_invocation_index) emu_lid: u32, ", 1)
    body = re.sub(r"(fn main\([^{]*\{)", rf"\1\n    emu_lane = {lid[1] if lid else 'emu_lid'} % {SG}u;", body, count=1)
    row, col = "(emu_lane / 2u)", "(emu_lane % 2u) * 8u"
    fma = [f"    out[{j}] = {v.acc}(f32(z[{j}])" + "".join(f" + f32(x[{q}]) * f32(y[{8 * q + j}])" for q in range(16))
           + ");" for j in range(8)]  # fmt: skip
    helpers = [f"var<private> emu_lane: u32;\n\nfn mma(x: array<f16, 16>, y: array<f16, 128>, z: array<{v.acc}, 8>)"
               f" -> array<{v.acc}, 8> {{\n    var out: array<{v.acc}, 8>;\n" + "\n".join(fma)
               + "\n    return out;\n}"]  # fmt: skip
    for t, scalar, role, array in sorted(loads):
        if role == "A":
            lines = [f"    m[{q}] = {array}[{_at(t, row, q)}];" for q in range(16)]
        elif role == "B":
            lines = [f"    m[{8 * q + j}] = {array}[{_at(t, q, f'{col} + {j}u')}];"
                     for q in range(16) for j in range(8)]  # fmt: skip
        else:
            lines = [f"    m[{j}] = {array}[{_at(t, row, f'{col} + {j}u')}];" for j in range(8)]
        share = _LANE_SHARE[role]
        helpers.append(f"fn ld{t}{role}_{array}(ii: u32, ss: u32) -> array<{scalar}, {share}> {{\n"
                       f"    var m: array<{scalar}, {share}>;\n" + "\n".join(lines) + "\n    return m;\n}")  # fmt: skip
    for t, array in sorted(stores):
        lines = [f"    {array}[{_at(t, row, f'{col} + {j}u')}] = m[{j}];" for j in range(8)]
        helpers.append(f"fn st{t}_{array}(m: array<{v.acc}, 8>, ii: u32, ss: u32) {{\n" + "\n".join(lines) + "\n}")
    return body + "\n" + "\n\n".join(helpers) + "\n"
