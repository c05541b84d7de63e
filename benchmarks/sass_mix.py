"""The instruction mix of kernels in a `cuobjdump --dump-sass` listing: per function, how
many instructions of each opcode (its first dotted part), most frequent first. A probe for
benchmarks/ternary_cuda.cu (the H200 session's part 58), e.g.

    python3 benchmarks/sass_mix.py tcu.sass 128,8,4,1 256,8,8,2

where each pattern names pass2<WG, TPR, R, V> by its template arguments.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path


def functions(listing: str) -> dict[str, list[str]]:
    """Function name -> its instructions' opcodes, in order."""
    out: dict[str, list[str]] = {}
    current = None
    for line in listing.splitlines():
        head = re.match(r"\s*Function : (\S+)", line)
        if head:
            current = head.group(1)
            out[current] = []
            continue
        op = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if op and current is not None:
            out[current].append(op.group(1))
    return out


def mangled(pattern: str) -> str:
    """'128,8,4,1' -> the mangled name prefix of pass2<128, 8, 4, 1>."""
    return "_Z5pass2I" + "".join(f"Li{int(a)}E" for a in pattern.split(",")) + "E"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    table = functions(Path(argv[0]).read_text())
    for pattern in argv[1:]:
        prefix = mangled(pattern)
        names = [n for n in table if n.startswith(prefix)]
        if not names:
            print(f"{pattern}: no function {prefix}* in {len(table)} functions")
            continue
        ops = table[names[0]]
        counts = Counter(ops)
        print(f"pass2<{pattern}>: {len(ops)} instructions")
        print("  " + ", ".join(f"{op} {n}" for op, n in counts.most_common(24)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
