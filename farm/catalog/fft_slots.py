"""Where fft's Stockham stages keep a point in workgroup memory (the `swizzle` knob), and
the index arithmetic the host emits for it.

A stage's unit reads its r points at j + q·stride and writes them at o + q·ns (q < r;
farm.catalog.fft_stockham). Every layout here maps such an address to its slot as the
unit's base slot combined with a constant the host computes, so an access costs one XOR
(swizzles 1-3) or an immediate offset (swizzle 0 and 4) instead of re-deriving the slot:
- swizzles 1-3 are i ^ L(i) with L GF(2)-linear in i's high bits, so the slot of b | c
  (b and c sharing no bits, as j and q·stride do with j < stride, and o and q·ns do) is
  slot(b) ^ swizzle(c); the transform's offset tr·N sits above every bit they touch;
- swizzle 4 pads one slot after every R points (R the knob's radix): point i of a
  transform sits at i + i / R, a transform takes N + N/R slots, and the slot of b + c is
  slot(b) + c + c / R where c is a multiple of R, or where b + c stays inside one aligned
  block of R points (b a multiple of ns·r, c < ns·r, ns·r dividing R). Other accesses
  (small n, where stride < R) take the whole expression.
In the bank model (32 banks of 4 bytes, a vec2 slot spans two, 16 lanes a wavefront) the
first stage's writes, r points apart across lanes, land (R + 1)·j apart: an odd stride, so
16 lanes hit 16 different bank pairs; the reads after it (consecutive points across lanes)
cross at most one pad slot a half warp for R >= 16 (one wavefront), and two or more for
radix 4 and 8 (two wavefronts: swizzle 2 stays theirs)."""

from __future__ import annotations

from dataclasses import dataclass

# swizzle 1 and 3 XOR i's low 4 bits with bits 4..7 and 5..8 (conflict-free in the bank model
# for radix 16 and radix 32: a unit's r consecutive output slots, r apart across lanes).
# swizzle 2: bit b of (i >> 4) flips these bits of i's low 4 (a GF(2)-linear map searched
# offline against a 32-bank, 16-lanes-per-8-byte-wavefront model of the NVIDIA shared memory).
SWIZZLE_MAP = (15, 10, 12, 9, 6, 12)
PAD = 4  # the `swizzle` value that pads instead of permuting


def swizzle_expr(swizzle: int, radix: int = 16) -> str:
    """WGSL for point i's position within its transform's slots: a permutation of 0..n-1
    (only the low 4 bits change, and only for n >= 32; swizzle 3 for n >= 64), or with
    swizzle 4 i plus one pad slot per `radix` points before it."""
    if swizzle == 0:
        return "i"
    if swizzle == 1:
        return "i ^ ((i >> 4u) & 15u)"
    if swizzle == 3:
        return "i ^ ((i >> 5u) & 15u)"
    if swizzle == PAD:
        return f"i + (i >> {radix.bit_length() - 1}u)"
    masks = [sum(((row >> bit) & 1) << b for b, row in enumerate(SWIZZLE_MAP)) for bit in range(4)]
    flips = [f"((countOneBits((i >> 4u) & {mask}u) & 1u) << {bit}u)" for bit, mask in enumerate(masks)]
    return "i ^ " + " ^ ".join(flips)


def swizzled(swizzle: int, radix: int, i: int) -> int:
    """`swizzle_expr` evaluated on the host for the constant i."""
    if swizzle == 0:
        return i
    if swizzle == 1:
        return i ^ ((i >> 4) & 15)
    if swizzle == 3:
        return i ^ ((i >> 5) & 15)
    if swizzle == PAD:
        return i + (i >> (radix.bit_length() - 1))
    flips = 0
    for bit, row in enumerate(SWIZZLE_MAP):
        if (i >> (4 + bit)) & 1:
            flips ^= row
    return i ^ flips


@dataclass(frozen=True)
class Slots:
    """The layout of a schedule's workgroup buffers (`swizzle`, the knob's `radix`); the
    stages fold their accesses into a base slot wherever the layout allows it."""

    swizzle: int
    radix: int

    def span(self, n: int) -> int:
        """Slots one transform takes in a workgroup buffer."""
        return n + n // self.radix if self.swizzle == PAD else n

    def slot_fn(self, n: int) -> str:
        """The body of the WGSL `slot(tr, i)`: transform tr's slots, then point i's place in them."""
        return f"tr * {self.span(n)}u + ({swizzle_expr(self.swizzle, self.radix)})"

    def reads(self, stride: int, r: int) -> tuple[list[str], list[str]]:
        """(lines before, slot index of each q) for unit j's points j + q·stride, j < stride."""
        if self.swizzle != PAD or stride % self.radix == 0:
            return ["let rb = slot(tr, j);"], [self._at("rb", q * stride) for q in range(r)]
        return [], [f"slot(tr, j + {q * stride}u)" for q in range(r)]

    def writes(self, ns: int, r: int) -> tuple[list[str], list[str]]:
        """(lines before, slot index of each q) for the outputs o + q·ns of unit j, with
        o = (j / ns)·ns·r + j mod ns a WGSL value already defined."""
        if self.swizzle != PAD or ns % self.radix == 0 or self.radix % (ns * r) == 0:
            return ["let wb = slot(tr, o);"], [self._at("wb", q * ns) for q in range(r)]
        return [], [f"slot(tr, o + {q * ns}u)" for q in range(r)]

    def _at(self, base: str, c: int) -> str:
        k = swizzled(self.swizzle, self.radix, c)
        if k == 0:
            return base
        return f"{base} ^ {k}u" if self.swizzle in (1, 2, 3) else f"{base} + {k}u"
