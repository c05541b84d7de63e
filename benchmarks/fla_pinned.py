"""`farm bench` with flash-linear-attention's chunk_rwkv6 autotuning cut to a few configurations.

FLA's chunk kernels autotune 4-36 Triton configurations each on first use at a shape; in fp32
(`TRITON_F32_DEFAULT=ieee`, farm bench's default) their compiles are slower than in TF32, and
on a fresh GPU the whole autotune can take minutes. PINNED keeps, per kernel, the
configuration a full ieee autotune selected on an H200 at B1 H8 VH8 T1024 L64 E768
(chunk_gla_fwd_kernel_o: the TF32 autotune's choice and three neighbours), so the vendor's
time is its autotuned configuration's, minus the search; at other shapes a full autotune
could pick faster ones. The rows say nothing of the pinning: this script does.

    python3 benchmarks/fla_pinned.py --kernels recurrent --sizes "recurrent:B=1,...,E=768" --db URL --out DIR
"""

from __future__ import annotations

import importlib
import sys

# (module, kernel) -> [(meta-parameters, num_warps, num_stages)]
PINNED = {
    ("fla.ops.rwkv6.chunk", "chunk_rwkv6_fwd_cumsum_kernel"): [({"BS": 32}, 4, 2)],
    ("fla.ops.common.chunk_h", "chunk_fwd_kernel_h"): [({"BK": 32, "BV": 32}, 4, 3)],
    ("fla.ops.rwkv6.chunk", "chunk_rwkv6_fwd_A_kernel_intra_sub_inter"): [({"BK": 32}, 1, 4)],
    ("fla.ops.rwkv6.chunk", "chunk_rwkv6_fwd_A_kernel_intra_sub_intra"): [({}, 4, 3)],
    ("fla.ops.gla.chunk", "chunk_gla_fwd_kernel_o"): [
        ({"BK": 64, "BV": 64}, 4, 3),
        ({"BK": 32, "BV": 64}, 4, 3),
        ({"BK": 64, "BV": 128}, 4, 3),
        ({"BK": 32, "BV": 128}, 4, 3),
    ],
}


def pin() -> list[str]:
    """Cut each PINNED kernel's autotuner to its configurations; the kernels pinned."""
    import triton
    from triton.runtime.autotuner import Autotuner

    done = []
    for (module, name), configs in PINNED.items():
        fn = getattr(importlib.import_module(module), name)
        while not isinstance(fn, Autotuner):  # under @triton.heuristics
            if not hasattr(fn, "fn"):
                raise SystemExit(f"fla_pinned: {module}.{name} is not autotuned in this FLA; update PINNED")
            fn = fn.fn
        fn.configs = [triton.Config(meta, num_warps=w, num_stages=s) for meta, w, s in configs]
        done.append(f"{name}: {len(configs)}")
    return done


def main(argv: list[str] | None = None) -> int:
    print("fla autotuning pinned: " + ", ".join(pin()), flush=True)
    from farm.cli.main import main as farm_main

    return farm_main(["bench", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
