"""The wgpu layer: which adapter and what identifies it (`adapter`), the device that
compiles, binds, dispatches, reads back and times dispatches (`device`), whether a timing
ran at the GPU's clocks (`clocks`), the spinning wait for the GPU (`waits`), and the only
place that asks `nvidia-smi` (`nvidia`).

The names below are the layer's surface; `from farm.gpu import Device` is the usual way in.
"""

from farm.gpu.adapter import (
    MAX_GROUPS_PER_DIM,
    CpuAdapterRefused,
    GpuError,
    HardwareProfile,
    NoAdapterError,
    adapters_report,
    choose_adapter,
    enumerate_adapters,
    refuse_cpu,
)
from farm.gpu.device import (
    HOT_GAP_S,
    STAGING_KEEP,
    Buffer,
    Device,
    PendingRead,
    Pipeline,
    Timing,
    benchmark_device,
    fold_groups,
)

__all__ = [
    "HOT_GAP_S",
    "MAX_GROUPS_PER_DIM",
    "STAGING_KEEP",
    "Buffer",
    "CpuAdapterRefused",
    "Device",
    "GpuError",
    "HardwareProfile",
    "NoAdapterError",
    "PendingRead",
    "Pipeline",
    "Timing",
    "adapters_report",
    "benchmark_device",
    "choose_adapter",
    "enumerate_adapters",
    "fold_groups",
    "refuse_cpu",
]
