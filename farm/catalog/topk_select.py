"""The selection variant of topk (algorithm 1): its WGSL, emitted per (block, threads per
block, blocks per thread group, vector width, k) as unrolled register code, apart from the
spec in farm.catalog.topk because it is a code generator of its own."""

from __future__ import annotations

from farm.catalog import render, sections

MIN_CHUNK = 16  # elements a select thread loads per iteration (64 bytes), at least


def select_source(block: int, t: int, ipi: int, vw: int, k: int, pad_key: str = "0x00800000") -> str:
    """The selection kernel for blocks of `block`, `t` threads per block, top `k` (<= 32)."""
    top = 1 << (k - 1).bit_length()  # K: the list length, a power of two
    per_thread = block // t
    chunk = min(per_thread, max(top, MIN_CHUNK, vw))
    group = min(top, chunk)
    keys_of = "to_key" if vw == 1 else "keys4"
    return render(
        sections("topk.wgsl")["select"],
        {
            "WG": block,
            "TPB": t,
            "IPI": ipi,
            "C": chunk,
            "KOUT": k,
            "PAD_KEY": pad_key,
            "VW": vw,
            "VEC": "u32" if vw == 1 else "vec4<u32>",
            "OUT": "vec4<u32>" if k % 4 == 0 else "u32",
            "KEYS_OF": keys_of,
            "LIST": _indent(f"var l{i} = 0u;" for i in range(top)),
            "CHUNK": _indent(_chunk_body(chunk, group, top, vw), 12),
            "LANES": _indent(_lane_merge(t, top)),
            "STORE": _indent(_store(k), 12),
        },
    )


def _indent(lines, spaces: int = 8) -> str:
    return "\n".join(" " * spaces + line for line in lines)


def _exchange(high: str, low: str) -> str:
    """Leave the larger key in `high`, the smaller in `low`."""
    return f"{{ let hi = max({high}, {low}); {low} = min({high}, {low}); {high} = hi; }}"


def _bitonic_sort(names: list[str]) -> list[str]:
    """An unrolled bitonic network sorting `names` (a power of two of them) descending."""
    n, lines, size = len(names), [], 2
    while size <= n:
        stride = size // 2
        while stride:
            for i in range(n):
                j = i ^ stride
                if j > i:
                    a, b = (names[i], names[j]) if i & size == 0 else (names[j], names[i])
                    lines.append(_exchange(a, b))
            stride //= 2
        size *= 2
    return lines


def _merge(into: list[str], other: list[str]) -> list[str]:
    """Top len(into) of two descending lists into `into` (other may be shorter): pairwise
    max against `other` reversed gives a bitonic sequence; a bitonic clean sorts it."""
    top = len(into)
    lines = [f"{into[i]} = max({into[i]}, {other[top - 1 - i]});" for i in range(top) if top - 1 - i < len(other)]
    stride = top // 2
    while stride:
        lines += [_exchange(into[i], into[i ^ stride]) for i in range(top) if i ^ stride > i]
        stride //= 2
    return lines


def _chunk_body(chunk: int, group: int, top: int, vw: int) -> list[str]:
    """Load `chunk` keys from `start`, sort them in groups of `group`, merge into the list."""
    keys = [f"c{i}" for i in range(chunk)]
    lines = [f"var {name}: u32;" for name in keys]
    lines += ["if (start + C <= p.n) {", *(f"    {line}" for line in _loads(chunk, vw, fast=True))]
    lines += ["} else {", *(f"    {line}" for line in _loads(chunk, vw, fast=False)), "}"]
    listed = [f"l{i}" for i in range(top)]
    for g in range(chunk // group):
        members = keys[g * group : (g + 1) * group]
        lines += _bitonic_sort(members)
        merge = _merge(listed, members)
        if g == 0:
            init = [f"{listed[i]} = {members[i]};" for i in range(group)]
            lines += ["if (ch == 0u) {", *(f"    {x}" for x in init), "} else {", *(f"    {x}" for x in merge), "}"]
        else:
            lines += merge
    return lines


def _loads(chunk: int, vw: int, fast: bool) -> list[str]:
    """Assignments of the chunk's keys; the fast path skips the bounds checks."""
    if vw == 1:
        return [f"c{i} = " + (f"to_key(x[start + {i}u]);" if fast else f"keys_at(start + {i}u);") for i in range(chunk)]
    lines = []
    for q in range(chunk // 4):
        load = f"keys4(x[start / 4u + {q}u])" if fast else f"keys_at(start + {4 * q}u)"
        lines.append(f"let q{q} = {load};")
        lines += [f"c{4 * q + i} = q{q}.{lane};" for i, lane in enumerate("xyzw")]
    return lines


def _lane_merge(t: int, top: int) -> list[str]:
    """Butterfly the T lists of a block through subgroup shuffles: every lane ends with the
    block's top K."""
    listed, lines, mask = [f"l{i}" for i in range(top)], [], 1
    while mask < t:
        others = [f"o{i}_{mask}" for i in range(top)]
        lines += [f"let {o} = subgroupShuffleXor({key}, {mask}u);" for o, key in zip(others, listed, strict=True)]
        lines += _merge(listed, others)
        mask *= 2
    return lines


def _store(k: int) -> list[str]:
    """Lane 0 writes the k keys as floats (vec4 stores when 4 divides k)."""
    if k % 4:
        return [f"out[block * KOUT + {i}u] = from_key(l{i});" for i in range(k)]
    return [
        f"out[block * (KOUT / 4u) + {q}u] = vec4<u32>({', '.join(f'from_key(l{4 * q + i})' for i in range(4))});"
        for q in range(k // 4)
    ]
