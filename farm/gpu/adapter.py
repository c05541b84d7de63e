"""Adapter choice and the hardware profile: which wgpu adapter the farm runs on, what
identifies it (`HardwareProfile`, its topology hash: the key winners are stored under),
and the adapters report of `farm adapters`."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any

MAX_GROUPS_PER_DIM = 65535
PREFERRED_BACKENDS = ("Vulkan", "Metal", "D3D12")

# Limits that change which schedules are legal or fast: part of the topology hash.
TOPOLOGY_LIMITS = (
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-storage-size",
    "max-compute-workgroups-per-dimension",
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-storage-buffers-per-shader-stage",
)
# Features that change which kernels can be emitted.
TOPOLOGY_FEATURES = ("timestamp-query", "subgroup", "shader-f16", "shader-f64")

# HardwareProfile fields left out of its topology hash (see the fields).
SUBGROUP_SIZES = ("subgroup_min_size", "subgroup_max_size")

_instance_configured = False


class GpuError(RuntimeError):
    """A wgpu failure at a named step (compile, pipeline, bind, dispatch, readback)."""

    def __init__(self, step: str, message: str, kernel: str = "", schedule: Any = None):
        self.step = step
        self.kernel = kernel
        self.schedule = schedule
        where = f" for kernel {kernel!r}" if kernel else ""
        sched = f" schedule {schedule}" if schedule is not None else ""
        super().__init__(f"{step} failed{where}{sched}: {message}")


class NoAdapterError(RuntimeError):
    pass


class AdapterNotFound(NoAdapterError, ValueError):
    """The adapter asked for (`adapter=` or $FARM_ADAPTER) is not among this machine's: a bad value."""


class CpuAdapterRefused(ValueError):
    """Work whose numbers mean nothing on a CPU adapter (lavapipe), asked for without --allow-cpu."""


def refuse_cpu(profile: HardwareProfile, allow_cpu: bool, what: str) -> None:
    """Raise CpuAdapterRefused when `profile` is a CPU adapter and `allow_cpu` is false."""
    if profile.is_cpu and not allow_cpu:
        raise CpuAdapterRefused(f"refusing to {what} on CPU adapter {profile.summary}; pass --allow-cpu")


def _configure_instance() -> None:
    """Ask for ns-normalized timestamps; must run before the first adapter request."""
    global _instance_configured
    if _instance_configured:
        return
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from wgpu.backends.wgpu_native import extras

    try:
        extras.set_instance_extras(flags=["Default", "AutomaticTimestampNormalization"])
    except Exception:  # noqa: BLE001 - instance already created by someone else
        pass
    _instance_configured = True


def enumerate_adapters() -> list:
    """Every compute-capable adapter wgpu sees, preferred ones first."""
    _configure_instance()
    import wgpu

    adapters = wgpu.gpu.enumerate_adapters_sync()
    return sorted(adapters, key=_adapter_rank)


def _adapter_rank(adapter) -> tuple[int, int]:
    info = adapter.info
    type_rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    backend = info.get("backend_type", "")
    backend_rank = 0 if backend in PREFERRED_BACKENDS else 1
    return (backend_rank, type_rank.get(info.get("adapter_type", ""), 4))


def choose_adapter(spec: str | None = None):
    """The adapter to use: `spec` (or $FARM_ADAPTER) as an index or summary substring,
    otherwise the best GPU on Vulkan/Metal/D3D12, otherwise a CPU adapter."""
    adapters = enumerate_adapters()
    if not adapters:
        raise NoAdapterError("no wgpu adapter found; on Debian install mesa-vulkan-drivers for a CPU adapter")
    source = "adapter" if spec is not None else "FARM_ADAPTER"  # the argument, or the setting, named in errors
    spec = spec if spec is not None else os.environ.get("FARM_ADAPTER")
    if spec is not None and not isinstance(spec, str):
        raise TypeError(f"{source}: expected an index or a name substring as a string, got {type(spec).__name__}")
    if spec:
        if spec.isdigit():
            index = int(spec)
            if index >= len(adapters):
                raise AdapterNotFound(
                    f"{source}={spec!r}: index {index} out of range: {len(adapters)} adapters (0..{len(adapters) - 1})"
                )
            return adapters[index]
        for adapter in adapters:
            if spec.lower() in adapter.summary.lower():
                return adapter
        names = "; ".join(a.summary for a in adapters)
        raise AdapterNotFound(f"no adapter matches {source}={spec!r}; have: {names}")
    return adapters[0]


@dataclass(frozen=True)
class HardwareProfile:
    """What identifies an adapter for tuning purposes; winners are keyed by its hash."""

    backend: str
    adapter_type: str
    vendor_id: int
    device_id: int
    device_name: str
    driver_description: str
    limits: tuple[tuple[str, int], ...]
    features: tuple[str, ...]
    # The smallest and largest subgroup the adapter may run (0: unknown). Not part of the
    # topology hash (SUBGROUP_SIZES): the device and driver above determine them, and hashes
    # stored before they existed must keep matching.
    subgroup_min_size: int = 0
    subgroup_max_size: int = 0

    @classmethod
    def from_adapter(cls, adapter) -> HardwareProfile:
        info = adapter.info
        limits = adapter.limits
        return cls(
            backend=str(info.get("backend_type", "")),
            adapter_type=str(info.get("adapter_type", "")),
            vendor_id=int(info.get("vendor_id", 0)),
            device_id=int(info.get("device_id", 0)),
            device_name=str(info.get("device", "")),
            driver_description=str(info.get("description", "")),
            limits=tuple((k, int(limits[k])) for k in TOPOLOGY_LIMITS if k in limits),
            features=tuple(sorted(f for f in adapter.features if f in TOPOLOGY_FEATURES)),
            subgroup_min_size=_subgroup_size(info, "min"),
            subgroup_max_size=_subgroup_size(info, "max"),
        )

    def topology_hash(self) -> str:
        identity = self.to_dict()
        for name in SUBGROUP_SIZES:
            identity.pop(name)
        payload = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    def limit(self, name: str) -> int:
        # memoized outside the fields (equality and hash ignore it): a plan asks for limits per schedule it checks
        limits = self.__dict__.get("_limits")
        if limits is None:
            limits = dict(self.limits)
            object.__setattr__(self, "_limits", limits)
        return limits[name]

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def is_cpu(self) -> bool:
        return self.adapter_type == "CPU"

    @property
    def summary(self) -> str:
        return f"{self.device_name} ({self.adapter_type}) via {self.backend}"

    def to_dict(self) -> dict:
        data = asdict(self)
        data["limits"] = dict(self.limits)
        data["features"] = list(self.features)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> HardwareProfile:
        return cls(
            **{k: data[k] for k in ("backend", "adapter_type", "vendor_id", "device_id")},
            device_name=data["device_name"],
            driver_description=data["driver_description"],
            limits=tuple(sorted(data["limits"].items(), key=lambda kv: TOPOLOGY_LIMITS.index(kv[0]))),
            features=tuple(sorted(data["features"])),
            subgroup_min_size=int(data.get("subgroup_min_size", 0)),
            subgroup_max_size=int(data.get("subgroup_max_size", 0)),
        )

    def subgroup_lanes(self) -> int:
        """Lanes guaranteed to share a subgroup: the adapter's minimum subgroup size when
        it has the subgroup feature (WebGPU's floor of 4 when the size is unknown), else 0."""
        if not self.has("subgroup"):
            return 0
        return max(4, self.subgroup_min_size)


def _subgroup_size(info, bound: str) -> int:
    """The adapter info's subgroup_{min,max}_size (0 when absent); wgpu-py 0.32 spells the
    keys "stackgroup_min_size" and "stackgroup_max_size", later versions fix them."""
    return int(info.get(f"subgroup_{bound}_size", info.get(f"stackgroup_{bound}_size", 0)) or 0)


def adapters_report() -> list[dict]:
    """Every adapter with its profile and hash, for `farm adapters`."""
    chosen = choose_adapter().summary
    rows = []
    for index, adapter in enumerate(enumerate_adapters()):
        profile = HardwareProfile.from_adapter(adapter)
        rows.append(
            {
                "index": index,
                "summary": adapter.summary,
                "chosen": adapter.summary == chosen,
                "topology_hash": profile.topology_hash(),
                "profile": profile,
            }
        )
    return rows
