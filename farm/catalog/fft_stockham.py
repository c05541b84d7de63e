"""fft's Stockham kernels, as the host emits them: the stages' radices, the unrolled
stages (two workgroup buffers in turn, or one with `single_buffer` or when two stages are
the whole transform), the radix-R DFTs in registers, and the workgroup memory they take
(farm.catalog.fft_slots places the points in it). farm.catalog.fft is the spec;
kernels/fft.wgsl holds the templates these fill."""

from __future__ import annotations

import inspect

import numpy as np

from farm.catalog import fft_slots
from farm.catalog.fft_slots import Slots


def workgroup_bytes(n: int, transforms: int) -> int:
    """Workgroup memory: every point of the workgroup's transforms as vec2<f32>."""
    return 8 * n * transforms


def stockham_workgroup_bytes(n: int, transforms: int, radix: int, single: bool = False, swizzle: int = 0) -> int:
    """The buffers `buffer_count` declares, each holding every slot of the workgroup's transforms."""
    return buffer_count(n, radix, single) * workgroup_bytes(Slots(swizzle, radix).span(n), transforms)


def buffer_count(n: int, radix: int, single: bool = False) -> int:
    """Workgroup buffers the stages use: none when one stage is the whole transform, one
    with `single` or when two stages are (the first writes s0, the last reads it), else two."""
    stages = len(stage_radices(n, radix))
    return 0 if stages == 1 else 1 if single or stages == 2 else 2


def single_buffer_problem(n: int, radix: int, transforms: int, threads: int) -> str:
    """Why single_buffer can't run at length n, or '': each thread holds one unit of every
    stage that both reads and writes the buffer (all but the first and the last)."""
    radices = stage_radices(n, radix)
    units = max((transforms * n // r for r in radices[1:-1]), default=0)
    if units > threads:
        return (f"single_buffer needs workgroup_size >= items_per_invocation * n / radix = {units} "
                f"(items_per_invocation {transforms}, n={n}, radix {radix}); got {threads}")  # fmt: skip
    return ""


def stockham_buffers(count: int, slots: int | None = None) -> str:
    """The Stockham kernels' workgroup buffers: s0 and s1, s0 alone, or none; each of T
    transforms' `slots` (N when left out)."""
    size = f"T * {slots}u" if slots else "T * N"
    return "\n".join(f"var<workgroup> s{b}: array<vec2<f32>, {size}>;" for b in range(count))


def stage_radices(n: int, radix: int) -> list[int]:
    """The Stockham stages' radices: as many `radix` stages as fit, then one smaller
    power-of-two stage for the rest (radix 4 at n = 512: 4, 4, 4, 4, 2)."""
    log, step = n.bit_length() - 1, radix.bit_length() - 1
    return [radix] * (log // step) + ([2 ** (log % step)] if log % step else [])


def stockham_stages(n: int, radix: int, single: bool = False, stage_table: int = 0, slots: Slots | None = None) -> str:
    """The unrolled stages of `main_stockham` (see kernels/fft.wgsl); with `single`, the
    stages between the first and the last through one buffer (`_exchange`); with
    `stage_table` 1, twiddles read from `stage_twiddles(n, radix, half)` instead of the half
    table; with 2, only the power-of-two points' read from it, the others their products.
    `slots`: the buffers' layout and its index arithmetic (unswizzled by default)."""
    slots = slots or Slots(0, radix)
    radices = stage_radices(n, radix)
    lines, ns, base = [], 1, 0
    for s, r in enumerate(radices):
        first, last = s == 0, s == len(radices) - 1
        table = base if stage_table else None
        twiddled = _twiddles(n, r, ns, table, products=stage_table == 2)
        if single and not first and not last:
            lines += _exchange(n, r, ns, twiddled, slots)
        else:
            src, dst = ("s0", "s0") if single else (f"s{(s + 1) % 2}", f"s{s % 2}")
            lines += _stage(n, r, ns, first=first, last=last, src=src, dst=dst, twiddled=twiddled, slots=slots)
        base += (r - 1) * ns if ns > 1 else 0
        ns *= r
    return "\n    ".join(lines)


def stage_twiddles(n: int, radix: int, half: np.ndarray) -> np.ndarray:
    """The twiddles of every Stockham stage with ns > 1, laid out [stage][q - 1][k] (k < ns,
    q < r) as (entries, 2) f32: the lanes of a warp (consecutive units j, so consecutive
    k = j mod ns) read consecutive entries, where the half table's t = k·m puts them m
    entries apart (radix 32 at n = 1024: 31 loads a thread, up to 32 cache lines each).
    Each entry is the half table's `half[t mod n/2]`, negated for t >= n/2: bit for bit
    the values the half table gives."""
    blocks, ns = [], 1
    for r in stage_radices(n, radix):
        if ns > 1:
            k = np.arange(ns)
            for q in range(1, r):
                t = k * (q * n // (r * ns))
                w = half[t % (n // 2)]
                blocks.append(np.where((t >= n // 2)[:, None], -w, w))
        ns *= r
    return np.concatenate(blocks).astype(np.float32) if blocks else half[:1].copy()


def _exchange(n: int, r: int, ns: int, twiddled: list[str], slots: Slots) -> list[str]:
    """A middle Stockham stage through the one buffer s0: each thread (lid < T·n/r: one unit)
    reads its r points, all wait at a barrier, then each writes its r outputs; a barrier after.
    `twiddled`: the stage's `_twiddles` lines."""
    units, stride = n // r, n // r
    before, at = slots.reads(stride, r)
    read = before + [f"v{q} = s0[{at[q]}];" for q in range(r)]
    body = []
    body += twiddled
    body += _dft([f"v{q}" for q in range(r)], "y")
    body.append(f"let o = (j / {ns}u) * {ns * r}u + j % {ns}u;")
    before, at = slots.writes(ns, r)
    body += before + [f"s0[{at[q]}] = y{q};" for q in range(r)]
    out = ["{", f"    let live = lid < T * {units}u;", f"    let tr = lid / {units}u;", f"    let j = lid % {units}u;"]
    out += [f"    var v{q} = vec2<f32>();" for q in range(r)]
    out += ["    if (live) {", *("        " + line for line in read), "    }", "    workgroupBarrier();"]
    out += ["    if (live) {", *("        " + line for line in body), "    }", "}", "workgroupBarrier();"]
    return out


def _stage(
    n: int, r: int, ns: int, first: bool, last: bool, src: str, dst: str, twiddled: list[str], slots: Slots
) -> list[str]:
    """One Stockham stage over the workgroup's T·n/r units, then a barrier unless last."""
    units, stride = n // r, n // r
    body = [f"let tr = u / {units}u;", f"let j = u % {units}u;", "let g = min(first + tr, p.batch - 1u);"]
    if first:
        body += [f"var v{q} = load(g * N + j + {q * stride}u);" for q in range(r)]
    else:
        before, at = slots.reads(stride, r)
        body += before + [f"var v{q} = {src}[{at[q]}];" for q in range(r)]
    body += twiddled
    body += _dft([f"v{q}" for q in range(r)], "y")
    if last:
        body.append("if (first + tr < p.batch) {")
        body += [f"    store((first + tr) * N + j + {q * ns}u, y{q});" for q in range(r)]
        body.append("}")
    else:
        body.append(f"let o = (j / {ns}u) * {ns * r}u + j % {ns}u;")
        before, at = slots.writes(ns, r)
        body += before + [f"{dst}[{at[q]}] = y{q};" for q in range(r)]
    out = [f"for (var u = lid; u < T * {units}u; u += WG) {{", *("    " + line for line in body), "}"]
    return out + ([] if last else ["workgroupBarrier();"])


def _twiddles(n: int, r: int, ns: int, table: int | None = None, products: bool = False) -> list[str]:
    """WGSL lines multiplying v1..v(r-1) of unit j by their twiddles exp(-2πi·t/n),
    t = k·m with k = j mod ns and m = q·n/(r·ns). The twiddle 1 (t = 0, exactly where k = 0:
    one compare for all q) is applied exactly, as in `twiddled`; t = n/2 never occurs (k·q =
    r·ns/2, a power of two, would need k = 2^b < ns and q = 2^c < r with b + c = log2(r·ns) - 1,
    over their most, log2(r·ns) - 2), so -1 needs no case of its own; and the half-period
    table is read directly, with no sign select, for a point q whose every t is under n/2.
    With `table` (this stage's first entry in `stage_twiddles`), point q reads entry
    table + (q - 1)·ns + k, the same value. With `products` too, only the points q = 2^b read
    it (log2(r) loads instead of r - 1); every other q's twiddle is w_h · w_(q-h), h the largest
    power of two under q (w_q = w_1^q: at most log2(r) products deep, so a few ulps; radix 16:
    4 loads and 11 complex products a unit)."""
    if ns == 1:
        return []
    lines = [f"let k = j % {ns}u;", "let k0 = k == 0u;"]
    if products and table is not None:
        for q in range(1, r):
            h = 1 << (q.bit_length() - 1)
            w = f"twiddle[{table + (q - 1) * ns}u + k]" if q == h else f"cmul(w{h}, w{q - h})"
            lines.append(f"let w{q} = {w};")
        return lines + [f"v{q} = select(cmul(v{q}, w{q}), v{q}, k0);" for q in range(1, r)]
    for q in range(1, r):
        m = q * n // (r * ns)
        if table is not None:
            w = f"twiddle[{table + (q - 1) * ns}u + k]"
        else:
            w = f"twiddle[k * {m}u]" if (ns - 1) * m < n // 2 else f"tw(k * {m}u)"
        lines.append(f"v{q} = select(cmul(v{q}, {w}), v{q}, k0);")
    return lines


def _dft(ins: list[str], out: str) -> list[str]:
    """WGSL lines computing the forward DFT of the vec2 values named `ins` (a power of two
    up to 32 of them) into `let {out}0..`, natural order. Radix 2 and 4 directly; 8 and 16
    (and 32) as 4 × (len/4) Cooley-Tukey: input n = R2·n1 + n2 and output k = k1 + 4·k2 give
    X[k] = DFT_R2 over n2 of W_R^(n2·k1) · DFT_4 over n1 of x[R2·n1 + n2]."""
    r = len(ins)
    if r == 2:
        return [f"let {out}0 = {ins[0]} + {ins[1]};", f"let {out}1 = {ins[0]} - {ins[1]};"]
    if r == 4:
        a, b, c, d = ins
        return [
            f"let {out}s0 = {a} + {c};",
            f"let {out}s1 = {a} - {c};",
            f"let {out}s2 = {b} + {d};",
            f"let {out}s3 = {b} - {d};",
            f"let {out}0 = {out}s0 + {out}s2;",
            f"let {out}1 = {out}s1 + vec2<f32>({out}s3.y, -{out}s3.x);",
            f"let {out}2 = {out}s0 - {out}s2;",
            f"let {out}3 = {out}s1 - vec2<f32>({out}s3.y, -{out}s3.x);",
        ]
    r2 = r // 4
    lines = []
    for n2 in range(r2):
        lines += _dft([ins[r2 * n1 + n2] for n1 in range(4)], f"{out}a{n2}_")
    for n2 in range(r2):
        lines += [f"let {out}b{n2}_{k1} = {_rotate(f'{out}a{n2}_{k1}', n2 * k1, r)};" for k1 in range(4)]
    for k1 in range(4):
        lines += _dft([f"{out}b{n2}_{k1}" for n2 in range(r2)], f"{out}c{k1}_")
        lines += [f"let {out}{k1 + 4 * k2} = {out}c{k1}_{k2};" for k2 in range(r2)]
    return lines


def _rotate(value: str, m: int, r: int) -> str:
    """`value` · exp(-2πi·m/r) as a WGSL expression; quarter turns without a multiply."""
    m %= r
    if m == 0:
        return value
    if 4 * m % r == 0:
        return {1: f"vec2<f32>({value}.y, -{value}.x)", 2: f"-{value}", 3: f"vec2<f32>(-{value}.y, {value}.x)"}[
            4 * m // r
        ]
    angle = -2.0 * np.pi * m / r
    return f"cmul({value}, vec2<f32>({np.cos(angle):.9f}, {np.sin(angle):.9f}))"


def emitter_source() -> str:
    """The functions that shape the Stockham WGSL (with farm.catalog.fft_slots, the module
    that places the points), for the fft spec's source hash (not the checks or the memory
    sums: editing those keeps stored trials)."""
    shaping = [stage_radices, stockham_stages, _exchange, _stage, _dft, _rotate, stockham_buffers, buffer_count]
    shaping += [_twiddles, stage_twiddles]
    return "".join(inspect.getsource(f) for f in shaping) + inspect.getsource(fft_slots)
