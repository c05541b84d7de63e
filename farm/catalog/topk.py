"""topk (per-block): the k largest values of each block of x, descending.

The block size is the schedule's workgroup_size, so the reference depends on the
schedule. For x of n f32 values and B = workgroup_size, the output has
ceil(n / B) * k values: block b contributes its k largest, descending; the tail
block is padded with -FLT_MAX first, so every block yields k values. 1 <= k <= B.
Knob `pad` = 1 pads with -Inf instead: the runtime's global top-k (`ForgeRuntime.topk`
without `block=`) runs this kernel in stages over its own candidates, and -Inf padding,
the lowest key, can never displace a value of x. Campaigns never vary it.

NaN rule (the kernel and reference agree bit for bit): every NaN counts as +NaN and
sorts above +Inf; a NaN in the output is the canonical quiet NaN 0x7fc00000. Otherwise values
are ordered as numbers (the kernel uses IEEE-754 total order, so -0.0 sorts just
below +0.0, which compares equal). -Inf sorts below the -FLT_MAX padding.

Algorithms (knob `algorithm`; both produce the same bits):
- 0 (default, absent from the original schedules' keys): the workgroup loads
  items_per_invocation blocks into workgroup memory and bitonic-sorts each block.
- 1, selection (needs k <= 32): `threads_per_block` (1, 2 or 4) adjacent threads read
  one block, each streaming contiguous chunks and keeping a running top-K (K = next
  power of two >= k) in registers; the lists are merged with subgroup shuffles. No
  workgroup memory, no barriers: the kernel streams x once at register speed.
  items_per_invocation = blocks per thread group, one after another.
"""

from __future__ import annotations

import itertools

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for, sections
from farm.catalog.topk_select import select_source
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

PAD = np.float32(-3.4028234663852886e38)  # -FLT_MAX
PADS = {0: PAD, 1: np.float32(-np.inf)}  # knob `pad`: the tail block's filler
PAD_KEYS = {0: 0x00800000, 1: 0x007FFFFF}  # their keys in the kernel's total order
CANONICAL_NAN_BITS = np.uint32(0x7FC00000)  # the default quiet NaN
# NaN, -NaN, NaN with a payload, +Inf, -Inf, +0, -0 (as f32 bit patterns).
ALGORITHMS = {0: "bitonic", 1: "select"}
MAX_SELECT_K = 32  # the selection variant keeps K <= 32 keys per thread in registers
MIN_SUBGROUP_SIZE = 4  # the smallest subgroup size WebGPU allows
SPECIAL_BITS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000], np.uint32)


def topk_blocks(x: np.ndarray, k: int, block_size: int, pad: int = 0) -> np.ndarray:
    """The per-block top-k of `x` (f32), descending, tail padded with -FLT_MAX, NaN largest
    (every NaN as the canonical quiet NaN), -0.0 below +0.0: the kernel's total order.

    Each value becomes a u32 key ordered as that total order (sign-flipped bits; NaNs mapped
    above +Inf), so one `np.partition` a block finds its k largest and only those k are
    sorted: O(n) a block size, where a lexsort of every block was O(n log B) with two keys
    (2^26 values: seconds a block size, and a topk campaign needs one per workgroup size)."""
    x = np.asarray(x, np.float32).ravel()
    if x.size == 0:
        raise ValueError("topk input must be non-empty")
    if not 1 <= k <= block_size:
        raise ValueError(f"k must be in 1..=block_size ({block_size}); got {k}")
    blocks = -(-x.size // block_size)
    padded = np.full(blocks * block_size, PADS[pad], np.float32)
    padded[: x.size] = x
    keys = _order_keys(padded).reshape(blocks, block_size)
    if k < block_size:
        keys = np.partition(keys, block_size - k, axis=1)[:, block_size - k :]
    top = -np.sort(-keys.astype(np.int64), axis=1)  # descending, within the k
    return _values(top.astype(np.uint32)).ravel()


def topk_global(x: np.ndarray, k: int) -> np.ndarray:
    """The k largest values of all of `x` (f32), descending, in the kernel's total order
    (NaN largest, as the canonical quiet NaN; -0.0 below +0.0). 1 <= k <= x.size."""
    x = np.asarray(x, np.float32).ravel()
    if not 1 <= k <= x.size:
        raise ValueError(f"k must be in 1..={x.size} (the number of values); got {k}")
    return topk_blocks(x, k, x.size)


def topk_levels(x: np.ndarray, k: int, block_sizes) -> dict[int, np.ndarray]:
    """{block size: topk_blocks(x, k, block size)} for every size >= k of `block_sizes`
    (each a multiple of the next smaller one), from one pass: the k largest of a block are
    among the k largest of its halves, so each size after the smallest partitions only the
    candidates the previous size kept (2^24 values, six sizes: 0.46 s against 1.23 s one
    size at a time, on the 2-core CPU machine)."""
    sizes = sorted(b for b in set(block_sizes) if b >= k)
    x = np.asarray(x, np.float32).ravel()
    if x.size == 0:
        raise ValueError("topk input must be non-empty")
    if not sizes:
        raise ValueError(f"k must be at most the largest block size ({max(block_sizes)}); got {k}")
    if any(b % a for a, b in zip(sizes, sizes[1:], strict=False)):
        raise ValueError(f"block sizes {sizes} must each divide the next")
    padded = np.full(-(-x.size // sizes[-1]) * sizes[-1], PAD, np.float32)
    padded[: x.size] = x
    keep = _order_keys(padded).reshape(-1, sizes[0])
    if k < sizes[0]:
        keep = np.partition(keep, sizes[0] - k, axis=1)[:, sizes[0] - k :]
    out, size = {}, sizes[0]
    for block in sizes:
        if block != size:  # merge block // size kept sets of k into one and keep its k largest
            keep = keep.reshape(-1, block // size * k)
            keep = np.partition(keep, keep.shape[1] - k, axis=1)[:, keep.shape[1] - k :]
            size = block
        top = -np.sort(-keep[: -(-x.size // block)].astype(np.int64), axis=1)  # descending
        out[block] = _values(top.astype(np.uint32)).ravel()
    return out


_NAN_KEY = np.uint32(0xFFFFFFFF)  # above every number's key (+Inf: 0xFF800000)


def _order_keys(values: np.ndarray) -> np.ndarray:
    """u32 keys that sort as the kernel's total order: negative floats bit-inverted, others
    with the sign bit set, every NaN the largest key."""
    bits = values.view(np.uint32)
    keys = np.where(bits >> 31 == 1, ~bits, bits | np.uint32(0x80000000))
    keys[np.isnan(values)] = _NAN_KEY
    return keys


def _values(keys: np.ndarray) -> np.ndarray:
    """The f32 values of `_order_keys` keys (the NaN key: the canonical quiet NaN)."""
    bits = np.where(keys >> 31 == 1, keys & np.uint32(0x7FFFFFFF), ~keys)
    bits[keys == _NAN_KEY] = CANONICAL_NAN_BITS
    return bits.astype(np.uint32).view(np.float32)


class TopK(KernelSpec):
    name = "topk"
    source_file = "topk.wgsl"
    dims = ("n", "k")
    space = {
        "workgroup_size": (32, 64, 128, 256, 512, 1024),
        "items_per_invocation": (1, 2, 4, 8),
        "vector_width": (1, 4),
        "algorithm": tuple(ALGORITHMS),
        "threads_per_block": (1, 2, 4),
        "pad": tuple(PADS),  # not searched: schedules() never sets it (see the module's doc)
    }
    exact = True
    schedule_dependent_reference = True  # the block size is the workgroup size

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(n=4096, k=8)]
        # 2**26 floats = 256 MiB, or as much as one storage binding allows.
        n = min(2**26, profile.limit("max-storage-buffer-binding-size") // 4)
        return [self.problem(n=n, k=8), self.problem(n=n, k=32)]

    def certify_problems(self) -> list[Problem]:
        return [self.problem(n=1, k=1), self.problem(n=1000, k=5), self.problem(n=4100, k=32)]

    def reference_key(self, schedule: Schedule) -> str:
        """The reference depends on the block size (and the padding) alone: one per block size
        and problem."""
        pad = schedule.get("pad", 0)
        return f"block={schedule.workgroup_size}" + (f",pad={pad}" if pad else "")

    def schedules(self) -> list[Schedule]:
        """The original bitonic space (without the new knobs, so its keys and winners carry
        over) plus the selection variant over block size, threads per block, vector width
        and one or two blocks per thread group."""
        bitonic = [
            Schedule.of(workgroup_size=wg, items_per_invocation=ipi, vector_width=vw)
            for wg, ipi, vw in itertools.product(
                self.space["workgroup_size"], self.space["items_per_invocation"], self.space["vector_width"]
            )
        ]
        select = [
            Schedule.of(workgroup_size=wg, items_per_invocation=ipi, vector_width=vw, algorithm=1, threads_per_block=t)
            for wg, t, vw, ipi in itertools.product(
                self.space["workgroup_size"], self.space["threads_per_block"], self.space["vector_width"], (1, 2)
            )
        ]
        return bitonic + select

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        block, k, n = schedule.workgroup_size, problem["k"], problem["n"]
        if block & (block - 1):
            raise InvalidSchedule(self.name, schedule, f"workgroup_size {block} is not a power of two (bitonic sort)")
        if n < 1:
            raise InvalidSchedule(self.name, schedule, f"n={n} must be >= 1")
        if not 1 <= k <= block:
            raise InvalidSchedule(self.name, schedule, f"k={k} must be in 1..=block_size (workgroup_size {block})")
        ipi = schedule.items_per_invocation
        if ipi < 1:
            raise InvalidSchedule(self.name, schedule, f"items_per_invocation {ipi} < 1")
        if schedule.get("pad", 0) not in PADS:
            raise InvalidSchedule(self.name, schedule, f"pad {schedule.get('pad')} not in {tuple(PADS)}")
        vw = schedule.vector_width
        if vw not in (1, 4):
            raise InvalidSchedule(self.name, schedule, f"vector_width {vw} not in (1, 4)")
        if n % vw:
            raise InvalidSchedule(self.name, schedule, f"vector_width {vw} does not divide n={n}")
        self._check_algorithm(schedule, problem, profile)

    def _check_algorithm(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        algorithm, t = schedule.get("algorithm", 0), schedule.get("threads_per_block", 1)
        if algorithm not in ALGORITHMS:
            raise InvalidSchedule(self.name, schedule, f"algorithm {algorithm} not in {tuple(ALGORITHMS)}")
        if algorithm == 0:
            if t != 1:
                raise InvalidSchedule(self.name, schedule, f"threads_per_block {t} applies to algorithm 1 only")
            return
        k, block, vw = problem["k"], schedule.workgroup_size, schedule.vector_width
        if k > MAX_SELECT_K:
            raise InvalidSchedule(
                self.name, schedule, f"algorithm 1 (select) keeps k <= {MAX_SELECT_K} in registers; got k={k}"
            )
        if t < 1 or t & (t - 1) or t > MIN_SUBGROUP_SIZE:
            raise InvalidSchedule(
                self.name, schedule, f"threads_per_block {t} must be a power of two <= {MIN_SUBGROUP_SIZE}"
            )
        if t > 1 and not profile.has("subgroup"):
            raise InvalidSchedule(self.name, schedule, f"threads_per_block {t} > 1 needs the subgroup feature")
        if block < t * vw:
            raise InvalidSchedule(
                self.name, schedule, f"threads_per_block {t} x vector_width {vw} exceeds the block of {block}"
            )

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        if schedule.get("algorithm", 0) == 1:
            return 0  # registers and subgroup shuffles only
        return 4 * schedule.workgroup_size * schedule.items_per_invocation  # ipi blocks of f32 keys

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        """Normal values with ties and ~1% specials: NaNs (negative, with payloads), ±Inf, ±0."""
        rng = rng_for(seed, self.name, problem.key())
        n = problem["n"]
        x = rng.standard_normal(n, dtype=np.float32)
        x[rng.random(n) < 0.05] = np.float32(1.5)  # ties
        marks = rng.random(n) < 0.01
        x.view(np.uint32)[marks] = SPECIAL_BITS[rng.integers(0, SPECIAL_BITS.size, int(marks.sum()))]
        return {"x": x}

    def reference(self, problem, schedule, inputs):
        return {"out": topk_blocks(inputs["x"], problem["k"], schedule.workgroup_size, schedule.get("pad", 0))}

    def reference_set(self, problem, inputs):
        """Every block size's reference from one pass (topk_levels): a campaign times all six."""
        levels = topk_levels(inputs["x"], problem["k"], self.space["workgroup_size"])
        return {self.reference_key(Schedule.of(workgroup_size=b)): {"out": out} for b, out in levels.items()}

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        n, k = problem["n"], problem["k"]
        block, ipi, vw = schedule.workgroup_size, schedule.items_per_invocation, schedule.vector_width
        blocks = -(-n // block)
        pad_key = f"0x{PAD_KEYS[schedule.get('pad', 0)]:08x}"
        if schedule.get("algorithm", 0) == 1:
            t = schedule.get("threads_per_block", 1)
            groups = -(-blocks // ((block // t) * ipi))
            source = select_source(block, t, ipi, vw, k, pad_key)
        else:
            groups = -(-blocks // ipi)
            source = render(
                sections(TopK.source_file)["bitonic"],
                {"WG": block, "IPI": ipi, "VW": vw, "VEC": "u32" if vw == 1 else "vec4<u32>", "LOAD": _load_body(vw),
                 "PAD_KEY": pad_key},
            )
        return Launch(
            source=source,
            args=[
                Arg("x", "read", np.ascontiguousarray(inputs["x"], np.float32)),
                Arg("out", "storage", dtype=np.float32, shape=(blocks * k,), output=True),
                Arg("params", "uniform", np.array([n, k, groups, blocks], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        """(one comparison per element, input read + output written at the default block of 64)."""
        n, k = problem["n"], problem["k"]
        return (float(n), 4.0 * (n + -(-n // self.default.workgroup_size) * k))

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        return {"x": 4 * problem["n"]}  # the candidates' size depends on the block size


def _load_body(vw: int) -> str:
    """WGSL that turns x[first + v] (covering elements e..e+vw-1) into sort keys."""
    if vw == 1:
        return "if (e < p.n) { keys[e - base] = to_key(x[first + v]); } else { keys[e - base] = PAD_KEY; }"
    lanes = "xyzw"
    fill = " ".join(f"keys[e - base + {i}u] = to_key(q.{c});" for i, c in enumerate(lanes))
    pad = " ".join(f"keys[e - base + {i}u] = PAD_KEY;" for i in range(4))
    return f"if (e < p.n) {{ let q = x[first + v]; {fill} }} else {{ {pad} }}"


register(TopK())
