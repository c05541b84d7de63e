"""The kernel catalog: one KernelSpec per built-in kernel, registered by name.

A KernelSpec says everything the farm needs about a kernel: its WGSL source (`kernels/<name>.wgsl`),
the schedule space and default, how to check a schedule against the adapter and problem, a
seed-derived input generator, the numpy reference and tolerance, and `launch()`: the exact buffer
wiring, constants and workgroup count. Certification (farm.oracle), tuning (farm.tuning) and the
runtime library (farm.runtime) all go through `launch()`, so the runtime path is the certified path.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import itertools
import os
import random
import re
import sys
from abc import ABC, abstractmethod
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

from farm.catalog.launches import Arg, Launch, Pass, check_launch  # noqa: F401 - their public home
from farm.gpu import HardwareProfile
from farm.schedule import BASE_KNOBS, InvalidSchedule, Problem, Schedule

DEFAULT_SCHEDULE = Schedule(workgroup_size=64)


def kernels_dir() -> Path:
    """Where the .wgsl sources live: shipped inside the package as farm/kernels_wgsl,
    or the repository's kernels/ when running from a checkout."""
    packaged = resources.files("farm") / "kernels_wgsl"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "kernels"


@cache
def read_source(filename: str) -> str:
    return (kernels_dir() / filename).read_text()


_SECTION = re.compile(r"^//// (\w+)\s*$", re.MULTILINE)


@cache
def sections(filename: str) -> dict[str, str]:
    """A kernel file's `//// name` sections (kernel templates and snippets), each without
    its surrounding blank lines and ending in one newline."""
    parts = _SECTION.split(read_source(filename))
    return {parts[i]: parts[i + 1].strip("\n") + "\n" for i in range(1, len(parts), 2)}


def render(template: str, values: dict[str, object]) -> str:
    """Substitute `{{NAME}}` placeholders; refuses to leave one unfilled."""
    out = template
    for key, value in values.items():
        out = out.replace("{{" + key + "}}", str(value))
    if "{{" in out:
        start = out.index("{{")
        raise KeyError(f"unfilled template placeholder {out[start : out.index('}}', start) + 2]}")
    return out


class KernelSpec(ABC):
    """Base class; each kernel module subclasses it (the abstract methods), registers one."""

    name: str = ""
    source_file: str = ""
    dims: tuple[str, ...] = ()
    space: dict[str, tuple[int, ...]] = {}
    default: Schedule = DEFAULT_SCHEDULE
    exact: bool = False
    # False: the WGSL checks every access itself, so its modules skip naga's (farm.gpu.modules);
    # True for farm.Kernel and any subclass defined outside farm.catalog: we vouch for ours only.
    runtime_checks: bool = False
    # True when reference() depends on the schedule (topk: block = workgroup_size), so
    # workers must not reuse one reference across schedules of a problem.
    schedule_dependent_reference: bool = False
    atol: float = 1e-4
    rtol: float = 1e-4

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "runtime_checks" not in cls.__dict__ and not cls.__module__.startswith("farm.catalog."):
            cls.runtime_checks = True

    # -- source ----------------------------------------------------------------
    def template(self) -> str:
        return read_source(self.source_file)

    def source_hash(self) -> str:
        """Hash of what shapes the work: template, `host_source()`, `code_source()` (launch,
        checks, schedules, data, reference) and `runtime_checks`; a change makes old winners
        stale. Cached: workers stamp it on every trial, and inspect makes it milliseconds."""
        cached = self.__dict__.get("_source_hash")
        if cached is None:
            text = self.template() + self.host_source() + self.code_source()
            text += "" if self.runtime_checks else "\nmodules without runtime checks"  # timed so
            cached = self.__dict__["_source_hash"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return cached

    def host_source(self) -> str:
        """Host code that shapes the emitted WGSL beyond the template ("" when none)."""
        return ""

    def source_name(self, step: int) -> str | None:
        """The file pass `step` of a launch was rendered from, line for line, for compile
        errors to name (None: the WGSL is generated, as the built-ins' is)."""
        return None

    def code_source(self) -> str:
        """The Python that shapes the work: the text of each module defining this spec's class
        or a base below KernelSpec, and of the farm.catalog modules they take code from
        (gemm_tiling, ternary_variants), so a changed `launch()`, `check_knobs()`,
        `schedules()`, `generate()`, `reference()` or a helper they call makes old winners
        stale (so does an edited comment in those modules: staleness errs on re-tuning)."""
        return _code_text(type(self))

    # -- problems --------------------------------------------------------------
    def problem(self, **dims: int) -> Problem:
        missing = [d for d in self.dims if d not in dims]
        extra = [d for d in dims if d not in self.dims]
        if missing or extra:
            raise ValueError(f"{self.name} problem needs {self.dims}; got {tuple(dims)}")
        return Problem.of(**{d: dims[d] for d in self.dims})

    def reference_key(self, schedule: Schedule) -> str:
        """What of `schedule` the reference depends on ("" when nothing): workers compute one
        reference per problem and key. Kernels with schedule_dependent_reference override it."""
        return schedule.key() if self.schedule_dependent_reference else ""

    def reference_set(self, problem: Problem, inputs: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """{reference_key: reference outputs} for every key at once, where that costs less than
        one key at a time (topk: every block size from one pass); {} when the spec computes
        each key alone. A tuning worker asks once per problem, on its first reference."""
        return {}

    @abstractmethod
    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        """Sizes `farm tune --all` uses: small on CPU adapters, realistic on GPUs."""

    @abstractmethod
    def certify_problems(self) -> list[Problem]:
        """A few sizes for `farm certify`, including ones that are not tile multiples."""

    # -- schedules -------------------------------------------------------------
    def schedules(self) -> list[Schedule]:
        """Every schedule in the space (the cartesian product of knob values)."""
        names = list(self.space)
        return [
            Schedule.of(**dict(zip(names, values, strict=True))) for values in itertools.product(*self.space.values())
        ]

    def sample_schedules(self, count: int, seed: int = 0) -> list[Schedule]:
        everything = self.schedules()
        rng = random.Random(seed)
        return rng.sample(everything, min(count, len(everything)))

    def check(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        """Raise InvalidSchedule when `schedule` can't run `problem` on `profile`."""
        for knob, value in schedule.items():
            if knob not in self.space:
                raise InvalidSchedule(self.name, schedule, f"unknown knob {knob!r} (space: {sorted(self.space)})")
            if type(value) is not int or (knob in BASE_KNOBS and value < 1):  # a Schedule built without of()
                raise InvalidSchedule(self.name, schedule, f"{knob} must be an integer >= 1, got {value!r}")
        wg = schedule.workgroup_size
        max_inv = profile.limit("max-compute-invocations-per-workgroup")
        max_x = profile.limit("max-compute-workgroup-size-x")
        if wg < 1 or wg > min(max_inv, max_x):
            raise InvalidSchedule(
                self.name,
                schedule,
                f"workgroup_size {wg} exceeds max-compute-invocations-per-workgroup {max_inv}"
                if wg > 0
                else f"workgroup_size {wg} < 1",
            )
        self.check_knobs(schedule, problem, profile)
        need = self.workgroup_bytes(schedule, problem)
        storage = profile.limit("max-compute-workgroup-storage-size")
        if need > storage:
            raise InvalidSchedule(
                self.name,
                schedule,
                f"needs {need} bytes of workgroup storage > max-compute-workgroup-storage-size {storage}",
            )

    def invalid_reason(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> str:
        """Why `schedule` can't run `problem` on `profile` ("" when it can)."""
        try:
            self.check(schedule, problem, profile)
        except InvalidSchedule as exc:
            return exc.reason
        except (KeyError, ValueError) as exc:
            return str(exc)
        return ""

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        """Bytes of workgroup memory `schedule` declares; `check` holds it to the adapter's limit."""
        return 0

    def check_knobs(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        """Kernel-specific checks (divisibility, feature needs); the base class has none."""
        return None

    # -- data ------------------------------------------------------------------
    @abstractmethod
    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        """Deterministic inputs: the same seed gives the same bytes on any machine."""

    @abstractmethod
    def reference(self, problem: Problem, schedule: Schedule, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The expected outputs by name, from numpy (float64 where it matters, cast like the GPU's)."""

    @abstractmethod
    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        """The rendered source, bindings (in binding order) and workgroup count for one run."""

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        """(atol, rtol) for `problem`; ignored when `exact`."""
        return (self.atol, self.rtol)

    def work(self, problem: Problem) -> tuple[float, float]:
        """(flops, bytes moved) for throughput reporting."""
        return (0.0, 0.0)

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        """{binding name: bytes} of the buffers every schedule binds for `problem` (inputs and
        outputs, at their least over schedules; no scratch), known without generating: a problem
        with a buffer over the adapter's binding limit is refused before any worker starts
        (farm.tuning.problems). {}: the spec doesn't say (only its `work` bytes are checked)."""
        return {}


# farm.catalog's own machinery, not a kernel's code: not part of any kernel's code_source().
_MACHINERY = frozenset({"farm.catalog", "farm.catalog.user", "farm.catalog.rules", "farm.catalog.files",
                        "farm.catalog.launches", "farm.catalog.passes", "farm.catalog.wgsl"})  # fmt: skip


@cache
def _code_text(cls: type) -> str:
    """`KernelSpec.code_source()` for `cls`, once per class (cached: reading modules with inspect)."""
    modules = [c.__module__ for c in cls.__mro__ if issubclass(c, KernelSpec) and c is not KernelSpec]
    seen: list[str] = []
    while modules:
        name = modules.pop(0)
        module = sys.modules.get(name)
        # A user's kernels file (farm.catalog.files names it farm_kernels_*) is in host_source() already.
        if name in seen or name in _MACHINERY or name.startswith("farm_kernels_") or module is None:
            continue
        seen.append(name)
        for value in vars(module).values():  # what it imports from other farm.catalog modules
            used = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
            if isinstance(used, str) and used.startswith("farm.catalog.") and used not in seen:
                modules.append(used)
    parts = []
    for name in seen:
        try:
            parts.append(inspect.getsource(sys.modules[name]))
        except (OSError, TypeError):  # no source file (defined in `python -c`): its name only
            parts.append(name)
    return "\n".join(parts)


def rng_for(seed: int, *salt: object) -> np.random.Generator:
    """A PCG64 generator whose stream depends only on seed + salt (portable bytes)."""
    digest = hashlib.sha256(repr((seed,) + salt).encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:8], "little")))


_REGISTRY: dict[str, KernelSpec] = {}
_BROKEN: dict[str, str] = {}  # $FARM_KERNELS_FILES entries that failed to load: path -> their error


def register(spec: KernelSpec) -> KernelSpec:
    _REGISTRY[spec.name] = spec
    return spec


def get(name: str) -> KernelSpec:
    _load_all()
    try:
        return _REGISTRY[name]
    except KeyError:
        if _BROKEN:  # the kernel may be one a broken file would define: its error is the answer
            raise ValueError(f"unknown kernel {name!r}; {'; '.join(_BROKEN.values())}") from None
        hint = "".join(f" did you mean {m!r}?" for m in difflib.get_close_matches(str(name), names(), n=1))
        raise ValueError(f"unknown kernel {name!r};{hint} known: {', '.join(names())}") from None


def names() -> list[str]:
    _load_all()
    return list(_REGISTRY)


def all_specs() -> list[KernelSpec]:
    _load_all()
    return list(_REGISTRY.values())


KERNEL_MODULES = ("topk", "ternary_gemv", "p64_project", "gemm", "gemv", "fft", "recurrent")


@cache
def _load_all() -> None:
    import importlib

    for module in KERNEL_MODULES:
        importlib.import_module(f"farm.catalog.{module}")
    importlib.import_module("farm.catalog.extra").load(os.environ.get("FARM_EXTRA_KERNELS", ""))
    importlib.import_module("farm.catalog.files").load_configured()  # user kernel files (farm.Kernel)

