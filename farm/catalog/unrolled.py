"""WGSL the host unrolls for the recurrent kernels: a thread's work as named scalars and
its loads issued before their stores.

Private arrays (and vector components) indexed by loop variables ended up in slow local
memory on the NVIDIA Vulkan driver (kernels/gemm.wgsl), and a loop that loads one
element, stores it to workgroup memory and loads the next waits out each load's latency
in turn. So the host renders:
- `each`: a section's lines holding a token once per item (`acc$i += ...` for i < IPI);
- `fetch_rounds`: a workgroup's copy of `total` elements into workgroup memory, each
  thread issuing up to `batch` loads (addresses clamped in bounds) before their stores.
"""

from __future__ import annotations

from collections.abc import Iterable

FETCH_BATCH = 16  # loads a thread issues before it stores them


def indent(width: int, lines: Iterable[str]) -> str:
    """The lines (each may hold several, split at newlines) indented by `width` spaces."""
    return "\n".join(" " * width + part for line in lines for part in line.split("\n"))


def each(section: str, count: int, token: str = "$i") -> str:
    """`section` with every line holding `token` repeated for 0..count-1 (token replaced by
    the number; `$iu` thus reads `0u`, `1u`, ...). Each such line must be a whole statement."""
    out = []
    for line in section.split("\n"):
        out += [line.replace(token, str(i)) for i in range(count)] if token in line else [line]
    return "\n".join(out)


def fetch_rounds(tag: str, total: str, most: int, wg: int, load: list[str], store: str) -> list[str]:
    """Lines copying elements i < `total` (a WGSL u32 expression, at most `most`) with WG
    threads, element i = round base + u·WG for u < batch: `load` lines (templates of {i},
    the element, and {u}, naming the lines' locals; the last must be `let x{u} = ...`)
    run for every u before any `store` (a template of {i} and {x}), which is skipped past
    `total`. The load lines see i clamped to total - 1, so any address they form from it is
    in bounds; `total` must be at least 1."""
    if not load or not load[-1].startswith("let x{u} ="):
        raise ValueError(f"fetch_rounds {tag!r}: the last load line must be `let x{{u}} = ...`, got {load!r}")
    batch = max(1, min(-(-most // wg), FETCH_BATCH))
    base = f"b{tag}"
    lines = [f"for (var {base} = lid; {base} < {total}; {base} += {wg * batch}u) {{"]
    for u in range(batch):
        lines.append(f"    let i{tag}{u} = min({base} + {u * wg}u, {total} - 1u);")
        lines += ["    " + line.format(i=f"i{tag}{u}", u=f"{tag}{u}") for line in load]
    for u in range(batch):
        stored = store.format(i=f"i{tag}{u}", x=f"x{tag}{u}")
        lines.append(f"    if ({base} + {u * wg}u < {total}) {{ {stored} }}")
    lines.append("}")
    return lines
