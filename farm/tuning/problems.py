"""Whether a campaign can run a problem at all, decided before any worker starts.

A `--sizes` problem that no schedule of its kernel can run (a dimension below 1, topk's k
above every block size, a buffer larger than an adapter binds) would reach the Ray
workers, which would generate its inputs (3.64 TiB for gemv m=n=10^6) or fail with a
traceback. `check_problem` refuses it with one sentence naming the kernel and the size.

Checks run against the adapter the workers will use when that is known (a local cluster:
this machine's adapter), else against `ANY_ADAPTER`, the largest limits and every
feature any adapter the farm runs on offers, so only what no adapter can run is refused
there (the campaign's plan filters schedules per adapter later).
"""

from __future__ import annotations

from farm import catalog
from farm.catalog import KernelSpec
from farm.gpu import HardwareProfile
from farm.gpu.adapter import TOPOLOGY_FEATURES, TOPOLOGY_LIMITS
from farm.schedule import Problem

# Vulkan's maxStorageBufferRange is 32-bit: no Vulkan adapter binds 4 GiB or more (large
# GPUs report about 2 GiB). The other limits are as large as the checks could want.
MAX_BINDING_ANY_ADAPTER = 2**32 - 1
_LARGE = 2**31 - 1
ANY_ADAPTER = HardwareProfile(
    backend="any",
    adapter_type="any",
    vendor_id=0,
    device_id=0,
    device_name="any adapter",
    driver_description="",
    limits=tuple(
        (name, MAX_BINDING_ANY_ADAPTER if name == "max-storage-buffer-binding-size" else _LARGE)
        for name in TOPOLOGY_LIMITS
    ),
    features=TOPOLOGY_FEATURES,
    subgroup_min_size=128,
)


def check_problem(spec: KernelSpec, problem: Problem, profile: HardwareProfile | None = None) -> None:
    """ValueError, naming the kernel and the size, when no schedule of `spec` can run
    `problem` on `profile` (default: ANY_ADAPTER): a dimension below 1, the kernel's own
    checks refusing every schedule, or buffers over the adapter's binding limit."""
    target = profile or ANY_ADAPTER
    where = f"on {target.summary}" if profile is not None else "on any adapter"
    small = [f"{name}={value}" for name, value in problem.dims if value < 1]
    if small:
        raise ValueError(f"{spec.name} {problem}: every dimension must be >= 1, got {', '.join(small)}")
    _check_buffers(spec, problem, target, where)
    # the first schedule that can run it ends the search: a drainer checks every request it claims
    first = spec.invalid_reason(spec.default, problem, target)
    if first and all(spec.invalid_reason(s, problem, target) for s in spec.schedules()):
        raise ValueError(f"{spec.name} {problem}: no schedule of {spec.name} can run it {where} ({first})")


def _check_buffers(spec: KernelSpec, problem: Problem, profile: HardwareProfile, where: str) -> None:
    """Refuse a problem one of whose buffers must exceed the binding limit, before any input
    is generated. The kernel's `buffer_bytes(problem)` names each buffer every schedule
    binds, and the largest must fit. A kernel that doesn't say: `spec.work(problem)` gives
    the bytes its buffers add up to (0: not checked here; the worker's launch check still
    applies); spread over the launch's bindings (counted at the kernel's first certify
    problem), one buffer holds at least the share."""
    limit = profile.limit("max-storage-buffer-binding-size")
    named = spec.buffer_bytes(problem)
    if named:
        name, largest = max(named.items(), key=lambda item: item[1])
        if largest > limit:
            raise ValueError(
                f"{spec.name} {problem}: its buffer {name!r} needs {_size(largest)}, over the {_size(limit)} "
                f"a binding may hold {where} (max-storage-buffer-binding-size)"
            )
        return
    _, total = spec.work(problem)
    if total <= 0:
        return
    if total <= limit:
        return
    small = spec.certify_problems()[0]
    bindings = len(spec.launch(spec.default, small, spec.generate(small, 0)).args)
    if total / bindings > limit:
        raise ValueError(
            f"{spec.name} {problem}: its buffers add up to {_size(total)} over {bindings} bindings, so one "
            f"holds at least {_size(total / bindings)}, over the {_size(limit)} a binding may hold {where} "
            "(max-storage-buffer-binding-size)"
        )


def _size(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def check_sizes(sizes: dict[str, list[Problem]], profile: HardwareProfile | None = None) -> None:
    """`check_problem` for every problem of a --sizes {kernel: [Problem]} on `profile`."""
    for name, problems in sizes.items():
        for problem in problems:
            check_problem(catalog.get(name), problem, profile)
