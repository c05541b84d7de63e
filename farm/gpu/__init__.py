"""The wgpu layer: which adapter and what identifies it (`adapter`), the device that
compiles, binds, dispatches and reads back (`device`), how a dispatch is timed
(`timing`), whether a timing ran at the GPU's clocks (`clocks`), the spinning wait for
the GPU (`waits`), and the only place that asks `nvidia-smi` (`nvidia`).

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
from farm.gpu.device import STAGING_KEEP, Buffer, Device, PendingRead, Pipeline, benchmark_device, fold_groups
from farm.gpu.timing import HOT_GAP_S, Timing

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
