"""fft: batched forward radix-2 DIT DFT of interleaved complex f32 (matches numpy.fft.fft).

Problem: `n` points per transform (a power of two, 2 ≤ n ≤ 1024; n = 1 is rejected with
ValueError when the problem is built, and with InvalidSchedule if a problem built some
other way reaches `check`) and `batch` transforms in one dispatch. Inputs: `x` of shape
(batch, n, 2) (real, imaginary) or any array of batch·n·2 floats; output `y` (batch, n, 2).

Schedule knobs (see kernels/fft.wgsl):
- `workgroup_size`: threads sharing a workgroup's butterflies; each does
  ⌈items·n/2 / workgroup_size⌉ butterflies per stage, and threads beyond items·n/2 idle
  (accepted, not rejected: they are simply wasted);
- `items_per_invocation`: transforms per workgroup; workgroup memory is 8·n·items bytes,
  checked against the adapter's limit;
- `vector_width`: 1 (two f32 loads per point) or 2 (one vec2<f32> load); others rejected.
Speed knobs, 0 by default (a schedule that leaves them out runs the original kernel):
- `stockham`: 0 is the radix-2 decimation-in-time kernel (bit-reversed load, log2 n
  in-place stages, a barrier after each); R = 2, 4, 8, 16 or 32 is the Stockham autosort
  kernel (`main_stockham`) with radix-R stages and one smaller last stage for the rest of
  log2 n: the first stage reads global memory, the last writes it, each thread keeps its R
  points in registers through a stage's twiddles and radix-R DFT (R = 8, 16, 32 as
  4 × R/4 in registers), and the stages exchange through two workgroup buffers, one
  barrier each. At n = 1024: radix 4 has 4 exchanges, radix 16 (16, 16, 4) 2, radix 32
  (32, 32) 1, against 11 barriers and ~20 workgroup accesses per point for `stockham` 0.
  Workgroup memory is 16·n·items bytes (8·n·items when two stages are the whole
  transform, 0 when one is);
- `single_buffer` (needs `stockham`): 1 exchanges through one workgroup buffer instead of
  two: a stage between the first and the last reads its points into registers, waits at a
  barrier, then writes (two barriers an exchange instead of one), in half the workgroup
  memory, so twice the transforms fit a workgroup or an SM (a radix 16 schedule of 256
  threads holding one transform keeps only 64 threads busy). Each thread holds
  one unit of such a stage, so workgroup_size must be >= items_per_invocation · n / radix
  for them (rejected otherwise, naming both);
- `swizzle` (needs `stockham`): 0 stores point i at i; 1 XORs i's low 4 bits with bits
  4..7; 2 XORs them with a linear map of bits 4..9 (SWIZZLE_MAP); 3 with bits 5..8. In a
  model of the NVIDIA shared memory (32 banks, 8-byte accesses served 16 lanes at a time)
  swizzle 2 makes every stage's loads and stores conflict-free for radix 4 and 8 at
  n = 64..1024, swizzle 1 does for radix 16 and swizzle 3 for radix 32 (n = 512..1024);
  unswizzled radix 4 needs 1.75x the wavefronts, radix 16 ~5x, radix 32 ~8x. 4 pads
  instead: one slot after every `stockham` points (i at i + i / R, workgroup memory
  (1 + 1/R) times), conflict-free for the first stage's strided writes, and the stages
  reach every slot from a base plus an immediate offset (farm.catalog.fft_slots).
Twiddles are a host table exp(-2πi·t/n), t < n/2, computed in float64 and rounded to f32.

NaN and Inf. The twiddle 1 (entry 0) is applied exactly, not multiplied: its zero
imaginary part would make Inf · 0 = NaN, and it is the table's only entry with a zero part
(the Stockham stages never need the twiddle -1: farm.catalog.fft_stockham._twiddles).
So, for every schedule, against numpy.fft.fft (pocketfft):
- a transform whose non-finite inputs (±Inf or NaN, in either part, any number of them)
  sit at points 0 and n/2 gives NaN and ±Inf in exactly numpy's places: both algorithms
  carry those two points to every output by additions and subtractions only (n = 2:
  every input);
- otherwise an output point is non-finite (in one part or both) exactly where numpy's
  is, and where numpy returns ±Inf these kernels return the same ±Inf or NaN, never the
  other sign or a finite value. The other parts can differ (NaN against ±Inf or finite,
  either way): which part ends NaN depends on the twiddle multiplies an Inf goes through
  (inf·c − inf·s is NaN when the terms cancel), and pocketfft's radix 8/4/2 passes are
  not these kernels' radix-2 or radix-R stages. Over lone non-finite inputs at every
  point of n = 4..1024, about half of the parts numpy gives as ±Inf come back NaN. Matching
  them would take pocketfft's own algorithm.
"""

from __future__ import annotations

import itertools

import numpy as np

from farm.catalog import Arg, KernelSpec, Launch, register, render, rng_for
from farm.catalog.fft_slots import Slots
from farm.catalog.fft_stockham import (
    buffer_count,
    emitter_source,
    single_buffer_problem,
    stage_twiddles,
    stockham_buffers,
    stockham_stages,
    stockham_workgroup_bytes,
    workgroup_bytes,
)
from farm.gpu import HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

MAX_N = 1024
STOCKHAM_MARK = "// ==== stockham ===="
STOCKHAM_RADICES = (0, 2, 4, 8, 16, 32)
SWIZZLES = (0, 1, 2, 3, 4)
SINGLE_BUFFER_RADICES = (8, 16, 32)  # single_buffer=1's schedules in `schedules()` (vector_width 2 only)
# The swizzle each radix gets in `schedules()`: the one the bank model finds conflict-free
# for it at n = 256..1024 (2 for radix 4 and 8, 1 for radix 16; 3 for radix 32 at 512..1024,
# and at 256 with one transform a workgroup), and none.
SPACE_SWIZZLES = {4: (0, 2), 8: (0, 2), 16: (0, 1), 32: (0, 3)}
DOUBLE_BUFFER_RADICES = (4, 8, 16)  # radix 32 is searched with single_buffer only: at every
# n <= 1024 it has at most two stages, which use one buffer either way (the same WGSL)
BASE_SPACE = {
    "workgroup_size": (32, 64, 128, 256, 512, 1024),
    "items_per_invocation": (1, 2, 4, 8),
    "vector_width": (1, 2),
}

_ACCESS = {
    1: (
        "f32",
        "return vec2<f32>(x[2u * point], x[2u * point + 1u]);",
        "y[2u * point] = v.x; y[2u * point + 1u] = v.y;",
    ),
    2: ("vec2<f32>", "return x[point];", "y[point] = v;"),
}


def length_problem(n: int) -> str:
    """Why `n` is not a valid transform length, or '' when it is."""
    if n < 2 or n > MAX_N or n & (n - 1):
        return f"fft length n={n} must be a power of two with 2 <= n <= {MAX_N}"
    return ""


class Fft(KernelSpec):
    name = "fft"
    source_file = "fft.wgsl"
    dims = ("n", "batch")
    space = BASE_SPACE | {
        "stockham": STOCKHAM_RADICES,
        "swizzle": SWIZZLES,
        "single_buffer": (0, 1),
        "stage_twiddles": (0, 1, 2),
    }
    default = Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=1)

    def host_source(self) -> str:
        """The host code that emits the Stockham stages: it shapes the schedules' WGSL."""
        return emitter_source()

    def knob(self, schedule: Schedule, name: str) -> int:
        """A speed knob's value; 0 when the schedule leaves it out."""
        return schedule.get(name, 0)

    def slots(self, schedule: Schedule) -> Slots:
        """Where a Stockham schedule's stages keep their points (farm.catalog.fft_slots)."""
        return Slots(self.knob(schedule, "swizzle"), self.knob(schedule, "stockham"))

    # -- problems ------------------------------------------------------------------
    def problem(self, **dims: int) -> Problem:
        problem = super().problem(**dims)
        reason = length_problem(problem["n"])
        if reason:
            raise ValueError(reason)
        if problem["batch"] < 1:
            raise ValueError(f"fft batch must be >= 1; got batch={problem['batch']}")
        return problem

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if profile.is_cpu:
            return [self.problem(n=256, batch=16)]
        return [self.problem(n=1024, batch=16384)]

    def certify_problems(self) -> list[Problem]:
        return [
            self.problem(n=2, batch=3),
            self.problem(n=64, batch=5),
            self.problem(n=256, batch=7),
            self.problem(n=1024, batch=2),
        ]

    # -- schedules -----------------------------------------------------------------
    def schedules(self) -> list[Schedule]:
        """The original 48 (speed knobs left out, so keys and winners carry over), each of
        them as Stockham radix 4, 8 and 16 with the swizzles of SPACE_SWIZZLES, and the 24
        with vector_width 2 as radix 8, 16 and 32 with single_buffer=1, every Stockham one
        with stage_twiddles=1, and the single-buffered ones (where large-GPU winners fall)
        again with stage_twiddles=2: 624 in all (radix 2, the other swizzles and
        stage_twiddles=0 are accepted, but not searched)."""
        base = [Schedule.of(**dict(zip(BASE_SPACE, v, strict=True))) for v in itertools.product(*BASE_SPACE.values())]
        speed = [
            Schedule.of(**s.as_dict(), stockham=radix, swizzle=swz, stage_twiddles=1)
            for s in base
            for radix in DOUBLE_BUFFER_RADICES
            for swz in SPACE_SWIZZLES[radix]
        ]
        single = [
            Schedule.of(**s.as_dict(), stockham=radix, swizzle=swz, single_buffer=1, stage_twiddles=1)
            for s in base
            if s.vector_width == 2
            for radix in SINGLE_BUFFER_RADICES
            for swz in SPACE_SWIZZLES[radix]
        ]
        products = [Schedule.of(**s.as_dict() | {"stage_twiddles": 2}) for s in single]
        return base + speed + single + products

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        n = problem["n"]
        reason = length_problem(n)
        if reason:
            raise InvalidSchedule(self.name, schedule, reason)
        max_wg = profile.limit("max-compute-invocations-per-workgroup")
        if n > max_wg:
            raise InvalidSchedule(self.name, schedule, f"n={n} > max-compute-invocations-per-workgroup {max_wg}")
        if schedule.vector_width not in (1, 2):
            raise InvalidSchedule(self.name, schedule, f"vector_width {schedule.vector_width} not in (1, 2)")
        if schedule.items_per_invocation < 1:
            raise InvalidSchedule(self.name, schedule, f"items_per_invocation {schedule.items_per_invocation} < 1")
        radix, single = self.knob(schedule, "stockham"), self.knob(schedule, "single_buffer")
        staged = self.knob(schedule, "stage_twiddles")
        reason = speed_knob_problem(radix, self.knob(schedule, "swizzle"), single, staged)
        if not reason and single:
            reason = single_buffer_problem(n, radix, schedule.items_per_invocation, schedule.workgroup_size)
        if reason:
            raise InvalidSchedule(self.name, schedule, reason)

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        radix = self.knob(schedule, "stockham")
        if radix:
            single, swizzle = bool(self.knob(schedule, "single_buffer")), self.knob(schedule, "swizzle")
            return stockham_workgroup_bytes(problem["n"], schedule.items_per_invocation, radix, single, swizzle)
        return workgroup_bytes(problem["n"], schedule.items_per_invocation)

    # -- data ----------------------------------------------------------------------
    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        rng = rng_for(seed, self.name, problem.key())
        return {"x": rng.standard_normal((problem["batch"], problem["n"], 2), dtype=np.float32)}

    def reference(self, problem, schedule, inputs):
        x = _as_signals(inputs["x"], problem).astype(np.float64)
        spectrum = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=-1)
        return {"y": np.stack([spectrum.real, spectrum.imag], axis=-1).astype(np.float32)}

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        # Outputs of unit-normal signals have magnitude ~sqrt(n); f32 rounding adds up over
        # log2(n) stages.
        n = problem["n"]
        return (2e-6 * float(np.sqrt(n)) * max(1, int(n).bit_length() - 1), 1e-4)

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        n, batch = problem["n"], problem["batch"]
        reason = length_problem(n)
        if reason:
            raise ValueError(reason)
        items = schedule.items_per_invocation
        groups = -(-batch // items)
        elem, load, store = _ACCESS[schedule.vector_width]
        values = {"WG": schedule.workgroup_size, "N": n, "LOGN": n.bit_length() - 1, "T": items}
        values |= {"ELEM": elem, "LOAD": load, "STORE": store}
        radix, entry = self.knob(schedule, "stockham"), "main"
        table = twiddles(n)
        radix2_source, stockham_source = self.template().split(STOCKHAM_MARK)
        if radix:
            template, entry = radix2_source + STOCKHAM_MARK + stockham_source, "main_stockham"
            single, staged = bool(self.knob(schedule, "single_buffer")), self.knob(schedule, "stage_twiddles")
            table = stage_twiddles(n, radix, table) if staged else table
            slots = self.slots(schedule)
            values |= {
                "STAGES": stockham_stages(n, radix, single, staged, slots),
                "BUFFERS": stockham_buffers(buffer_count(n, radix, single), slots.span(n)),
                "SLOT": slots.slot_fn(n),
            }
        source = render(template if radix else radix2_source, values)
        return Launch(
            entry_point=entry,
            source=source,
            args=[
                Arg("x", "read", _as_signals(inputs["x"], problem)),
                Arg("twiddle", "read", table),
                Arg("y", "storage", dtype=np.float32, shape=(batch, n, 2), output=True),
                Arg("params", "uniform", np.array([batch, groups, 0, 0], np.uint32)),
            ],
            groups=groups,
        )

    def work(self, problem: Problem) -> tuple[float, float]:
        n, batch = problem["n"], problem["batch"]
        return (5.0 * n * np.log2(n) * batch, 16.0 * n * batch)

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        signals = 8 * problem["n"] * problem["batch"]  # complex64 as (re, im) f32 pairs
        return {"x": signals, "y": signals}


def speed_knob_problem(stockham: int, swizzle: int, single_buffer: int = 0, stage_tw: int = 0) -> str:
    """Why the speed knob values can't form a kernel, or ''."""
    if stockham not in STOCKHAM_RADICES:
        return f"stockham {stockham} not in {STOCKHAM_RADICES}"
    if swizzle not in SWIZZLES:
        return f"swizzle {swizzle} not in {SWIZZLES}"
    if swizzle and not stockham:
        return f"swizzle {swizzle} needs stockham > 0 (the radix-2 kernel has no swizzled layout)"
    if single_buffer not in (0, 1):
        return f"single_buffer {single_buffer} not in (0, 1)"
    if single_buffer and not stockham:
        return f"single_buffer {single_buffer} needs stockham > 0 (the radix-2 kernel works in place)"
    if stage_tw not in (0, 1, 2):
        return f"stage_twiddles {stage_tw} not in (0, 1, 2)"
    if stage_tw and not stockham:
        return f"stage_twiddles {stage_tw} needs stockham > 0 (the radix-2 kernel reads the half table)"
    return ""


def twiddles(n: int) -> np.ndarray:
    """exp(-2πi·t/n) for t < n/2 as (n/2, 2) f32, computed in float64."""
    angle = -2.0 * np.pi * np.arange(n // 2, dtype=np.float64) / n
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1).astype(np.float32)


def _as_signals(value: np.ndarray, problem: Problem) -> np.ndarray:
    """`value` as a contiguous (batch, n, 2) f32 array; refuses any other element count."""
    batch, n = problem["batch"], problem["n"]
    array = np.asarray(value)
    if array.size != batch * n * 2:
        raise ValueError(
            f"fft input x has shape {array.shape}; expected (batch={batch}, n={n}, 2) or {batch * n * 2} floats"
        )
    return np.ascontiguousarray(array, dtype=np.float32).reshape(batch, n, 2)


register(Fft())
