"""`farm bench`'s settle_clocks (benchmarks/ternary_probe.py calls it too): seconds of copies
before the first timing on a GPU, nothing on a CPU adapter."""

from collections import deque

from farm.cli.bench import settle_clocks


def test_settle_clocks_keeps_a_gpu_busy_and_skips_a_cpu_adapter(device, monkeypatch):
    class AsGpu:  # the real device, reporting itself as a GPU
        def __init__(self, inner):
            self._inner = inner
            self.profile = type("P", (), {"is_cpu": False})()

        def __getattr__(self, name):
            return getattr(self._inner, name)

    monkeypatch.setattr(device, "warm_s", 0.05)  # a GPU's setting: keep_busy runs
    monkeypatch.setattr(device, "_recent", deque())
    monkeypatch.setattr(device, "_busy_until", 0.0)  # idle: keep_busy skips a GPU still at its clocks
    assert settle_clocks(AsGpu(device), seconds=0.05, nbytes=1 << 16) >= 0.05
    assert len(device._recent) == 1 and device._recent[0][1] - device._recent[0][0] >= 0.05
    if device.profile.is_cpu:
        assert settle_clocks(device, seconds=5.0) == 0.0
