"""settle_clocks (benchmarks/runtime_calls.py calls it): seconds of copies
before the first timing on a GPU, nothing on a CPU adapter."""

from collections import deque

from farm.cli.bench import settle_clocks


def test_settle_clocks_keeps_a_gpu_busy_and_skips_a_cpu_adapter(device, monkeypatch, as_gpu):
    monkeypatch.setattr(device, "warm_s", 0.05)  # a GPU's setting: keep_busy runs
    monkeypatch.setattr(device, "_recent", deque())
    monkeypatch.setattr(device, "_busy_until", 0.0)  # idle: keep_busy skips a GPU still at its clocks
    assert settle_clocks(as_gpu(device), seconds=0.05, nbytes=1 << 16) >= 0.05
    assert len(device._recent) == 1 and device._recent[0][1] - device._recent[0][0] >= 0.05
    if device.profile.is_cpu:
        assert settle_clocks(device, seconds=5.0) == 0.0


def test_each_bench_timing_warms_to_the_clocks_on_its_own_kernel_first(device, monkeypatch):
    """A pause between settle_clocks and the first timing (the vendor import) leaves the GPU
    idle and its first rows slow, so every timed row warms on its kernel first, as the
    sweep's fused column does (the same REPORT_WARM_S / REPORT_WARM_MAX_S)."""
    from farm import catalog
    from farm.cli import bench
    from farm.gpu.device import REPORT_WARM_MAX_S, REPORT_WARM_S
    from farm.oracle.launch import Prepared
    from farm.schedule import Problem

    events = []
    real_time = Prepared.time
    monkeypatch.setattr(Prepared, "warm_until_clocks", lambda self, a, b: events.append(("warm", a, b)) or 0.0)
    monkeypatch.setattr(Prepared, "time", lambda self, **kw: events.append(("time",)) or real_time(self, **kw))
    spec = catalog.get("gemv")
    problem = Problem.of(m=64, n=64)
    inputs = spec.generate(problem, 0)
    expected = spec.reference(problem, spec.default, inputs)
    timing, cert = bench.time_schedule(device, spec, spec.default, problem, inputs, expected, 3)
    assert cert.ok and timing.median_ns > 0
    assert events == [("warm", REPORT_WARM_S, REPORT_WARM_MAX_S), ("time",)]
