"""The executor: adapter choice, topology hash, folding, timing and step-named errors."""

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
from collections import deque

import numpy as np
import pytest

from farm.gpu import Device, GpuError, HardwareProfile, NoAdapterError, choose_adapter, fold_groups


def test_topology_hash_is_stable_across_processes(device):
    code = "from farm.gpu import Device; print(Device().profile.topology_hash())"
    env = dict(os.environ, XDG_RUNTIME_DIR="/tmp")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == device.profile.topology_hash()
    assert len(device.profile.topology_hash()) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"driver_description": "Mesa 99.0"},
        {"device_name": "other gpu"},
        {"backend": "Metal"},
        {"device_id": 1234},
        {"features": ("timestamp-query",)},
    ],
    ids=lambda c: next(iter(c)),
)
def test_topology_hash_changes_with_identity_and_features(device, change):
    other = dataclasses.replace(device.profile, **change)
    assert other.topology_hash() != device.profile.topology_hash()


def test_topology_hash_changes_with_a_schedule_relevant_limit(device):
    limits = tuple((k, v * 2 if k == "max-compute-workgroup-storage-size" else v) for k, v in device.profile.limits)
    assert dataclasses.replace(device.profile, limits=limits).topology_hash() != device.profile.topology_hash()


def test_profile_round_trips_through_a_dict(device):
    again = HardwareProfile.from_dict(device.profile.to_dict())
    assert again == device.profile and again.topology_hash() == device.profile.topology_hash()


def test_farm_adapter_selects_by_substring_and_index(monkeypatch):
    monkeypatch.delenv("FARM_ADAPTER", raising=False)
    first = choose_adapter()
    monkeypatch.setenv("FARM_ADAPTER", "0")
    assert choose_adapter().summary == first.summary  # the preferred adapter is index 0
    monkeypatch.setenv("FARM_ADAPTER", first.summary.split()[0])
    assert first.summary.split()[0].lower() in choose_adapter().summary.lower()
    monkeypatch.setenv("FARM_ADAPTER", "no-such-gpu-anywhere")
    with pytest.raises(NoAdapterError, match="no-such-gpu-anywhere"):
        choose_adapter()
    monkeypatch.setenv("FARM_ADAPTER", "99")
    with pytest.raises(NoAdapterError, match="index 99 out of range"):
        choose_adapter()


@pytest.mark.parametrize(
    "count,grid",
    [(1, (1, 1, 1)), (65535, (65535, 1, 1)), (65536, (32768, 2, 1)), (200_001, (50001, 4, 1))],
)
def test_fold_groups_covers_every_workgroup_within_the_cap(count, grid):
    folded = fold_groups(count)
    assert folded == grid
    assert max(folded) <= 65535 and folded[0] * folded[1] >= count


def test_fold_groups_rejects_empty_and_impossible_counts():
    with pytest.raises(ValueError, match="must be >= 1"):
        fold_groups(0)
    with pytest.raises(ValueError, match="exceeds"):
        fold_groups(65535 * 65535 + 1)


def test_compile_error_names_the_step_and_kernel(device):
    with pytest.raises(GpuError) as err:
        device.pipeline("@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }", label="broken[wg=1]")
    assert err.value.step == "compile"
    assert "broken[wg=1]" in str(err.value) and "compile failed" in str(err.value)


def test_bind_error_names_the_step(device):
    source = """
    @group(0) @binding(0) var<storage, read_write> out: array<f32>;
    @compute @workgroup_size(1) fn main() { out[0] = 1.0; }
    """
    pipeline = device.pipeline(source, label="one-binding")
    extra = [device.empty(4), device.empty(4)]
    with pytest.raises(GpuError) as err:
        device.dispatch(pipeline, extra, 1)
    device.release(*extra)
    assert err.value.step == "bind" and "one-binding" in str(err.value)



def test_bind_takes_a_buffer_range_at_an_offset(device):
    """A (Buffer, offset, size) entry binds `size` bytes from byte `offset` (the kernel's
    arrayLength sees the range), mixed with whole Buffers and under `bindings`; a range
    wgpu refuses (misaligned, past the buffer's end) is a GpuError at step "bind"."""
    source = """
    @group(0) @binding(0) var<storage, read> src: array<u32>;
    @group(0) @binding(1) var<storage, read_write> dst: array<u32>;
    @compute @workgroup_size(1) fn main() {
        for (var i = 0u; i < arrayLength(&src); i++) { dst[i] = src[i] + 100000u * arrayLength(&dst); }
    }
    """
    pipeline = device.pipeline(source, label="copy-range")
    align = int(device.device.limits["min-storage-buffer-offset-alignment"])
    words = align // 4
    data = np.arange(3 * words, dtype=np.uint32)
    src, dst, unused = device.upload(data), device.empty(2 * align), device.empty(4)
    try:
        device.dispatch(pipeline, [(src, align, align), (dst, align, align)], 1)
        got = device.read(dst, np.uint32)
        np.testing.assert_array_equal(got[:words], 0)  # the range's bytes only
        np.testing.assert_array_equal(got[words:], data[words : 2 * words] + 100000 * words)
        group = device.bind(pipeline, [(src, 2 * align, align), dst, unused], bindings=(0, 1))
        device.dispatch_many([(pipeline, group, 1)])
        np.testing.assert_array_equal(device.read(dst, np.uint32, words), data[2 * words :] + 100000 * 2 * words)
        for bad in ((src, 4, align), (src, 2 * align, 2 * align)):
            with pytest.raises(GpuError) as err:
                device.bind(pipeline, [bad, dst])
            assert err.value.step == "bind" and "copy-range" in str(err.value)
    finally:
        device.release(src, dst, unused)

def test_timing_reports_ordered_quantiles_over_reps(device):
    source = """
    @group(0) @binding(0) var<storage, read_write> out: array<f32>;
    @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
        if (g.x < arrayLength(&out)) { out[g.x] = f32(g.x) * 2.0; }
    }
    """
    pipeline = device.pipeline(source, label="double")
    buf = device.empty(4 * 1000)
    timing = device.time(pipeline, [buf], groups=16, warmup=1, reps=7)
    out = device.read(buf, np.float32, 1000)
    device.release(buf)
    assert timing.reps == 7 and timing.method in ("timestamp", "host")
    assert 0 < timing.min_ns <= timing.p20_ns <= timing.median_ns <= timing.p80_ns
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32) * 2)


def _double_pipeline(device):
    source = """
    @group(0) @binding(0) var<storage, read_write> out: array<f32>;
    @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
        if (g.x < arrayLength(&out)) { out[g.x] = f32(g.x) * 2.0; }
    }
    """
    return device.pipeline(source, label="double")


def test_timestamp_reps_run_in_one_submission_behind_a_lead_in_when_short(device, monkeypatch):
    # one submission a rep lets a GIL-holding host thread space the reps out: the GPU idles
    # between them and drops its clocks (docs/decisions/002-clock-canary-and-heater.md)
    from farm.gpu import device as device_module

    if not device.timestamps:
        pytest.skip("no timestamp queries on this adapter")
    pipeline, buf = _double_pipeline(device), device.empty(4 * 1000)
    calls = [(pipeline, device.bind(pipeline, [buf]), (16, 1, 1))]
    leads, encoded, submits = [], [], []
    real, queue_type = device_module.Device._timestamp_submission, type(device.device.queue)
    real_submit = queue_type.submit

    def spy(self, calls, reps, schedule, lead):
        leads.append(lead)
        before = len(submits)
        try:
            return real(self, calls, reps, schedule, lead)
        finally:
            encoded.append(len(submits) - before)

    def counting_submit(queue, buffers):
        submits.append(len(buffers))
        return real_submit(queue, buffers)

    monkeypatch.setattr(device_module.Device, "_timestamp_submission", spy)
    monkeypatch.setattr(queue_type, "submit", counting_submit)
    monkeypatch.setattr(device_module, "LEAD_IN_S", 10.0)  # 7 reps of a tiny kernel are shorter
    monkeypatch.setattr(device_module, "MAX_LEAD_PASSES", 5)
    timing = device.time_calls(calls, warmup=0, reps=7)
    assert timing.reps == 7 and timing.method == "timestamp"
    # each timing: one submission of every pass (the second behind 5 untimed ones), one of the read back
    assert leads == [0, 5] and encoded == [2, 2]
    monkeypatch.setattr(device_module, "LEAD_IN_S", 0.0)  # long enough: timed once, no lead-in
    leads.clear()
    device.time_calls(calls, warmup=0, reps=7)
    assert leads in ([0], [0, 1])  # [0, 1] only when the clocks read as rising (_rising)
    device.release(buf)


def test_rising_samples_are_the_ones_whose_first_third_is_slower_than_the_last():
    from farm.gpu.device import _rising

    assert _rising([300.0, 290, 280, 100, 100, 100, 100, 101, 100])
    assert not _rising([100.0, 101, 100, 100, 102, 100, 101, 100, 100])
    assert not _rising([300.0, 100])  # too few to tell


def test_a_timing_the_clock_check_reads_slow_is_re_timed_after_the_heater(device, monkeypatch):
    # a GPU at low clocks reads whole runs of trials slow while two warm-up rounds agree;
    # a canary timed after the timing sees it (farm.gpu.clocks)
    from farm.gpu import clocks
    from farm.gpu import device as device_module
    from farm.gpu.device import RETIME_ATTEMPTS

    if not device.timestamps:
        pytest.skip("no timestamp queries on this adapter")
    pipeline, buf = _double_pipeline(device), device.empty(4 * 1000)
    calls = [(pipeline, device.bind(pipeline, [buf]), (16, 1, 1))]
    submissions, busy = [], []
    real_samples, real_busy = device_module.Device._timestamp_samples, device_module.Device._busy_for
    monkeypatch.setattr(device_module.Device, "_timestamp_samples",
                        lambda self, *a: submissions.append(1) or real_samples(self, *a))  # fmt: skip
    monkeypatch.setattr(device_module.Device, "_busy_for",
                        lambda self, c, sec, s: busy.append((c, sec)) or real_busy(self, c, sec, s))  # fmt: skip
    monkeypatch.setattr(device_module, "CLOCK_WARM_S", 0.01)
    monkeypatch.setattr(device, "check_clocks", True)
    monkeypatch.setattr(device, "_clock", None)  # this test's own check (closed below)
    before, slow_before = device.clock_retimes, device.clock_retimes_slow
    # the first sets the best; the second reads 5x over it; after the re-timing: fast, then slow
    readings = iter([1000.0, 5000.0, 1000.0, 5000.0] + [5000.0] * RETIME_ATTEMPTS)
    monkeypatch.setattr(clocks.ClockCheck, "read_ns", lambda self: next(readings))
    device.time_calls(calls, warmup=0, reps=3)  # first check: its own best, not slow
    assert (len(submissions), busy, device.clock_retimes) == (1, [], before)
    timing = device.time_calls(calls, warmup=0, reps=3)  # slow: the heater, then timed again
    assert len(submissions) == 3 and busy == [(device._clock.heater(), 0.01)] and device.clock_retimes == before + 1
    assert timing.reps == 3 and device.clock_retime_s > 0 and device.clock_retimes_slow == slow_before
    # slow, and still slow after each of its RETIME_ATTEMPTS re-timings (heater, lead-in, reps): counted
    device.time_calls(calls, warmup=0, reps=3)
    assert device.clock_retimes == before + 2 and device.clock_retimes_slow == slow_before + 1
    assert len(submissions) == 3 + RETIME_ATTEMPTS + 1 and len(busy) == 1 + RETIME_ATTEMPTS
    monkeypatch.setattr(device_module, "CLOCK_CHECK_MAX_S", 0.0)  # reps this long are not checked
    device.time_calls(calls, warmup=0, reps=3)
    assert len(submissions) == 3 + RETIME_ATTEMPTS + 2 and device.clock_retimes == before + 2
    device._clock.close()
    device.release(buf)


def test_a_re_timing_the_canary_still_reads_slow_is_timed_again_and_its_fastest_attempt_kept(device, monkeypatch):
    # a re-timing after the heater alone can still read slow, and slow readings only ever read
    # slower than the kernel is (docs/decisions/002-clock-canary-and-heater.md)
    from farm.gpu import clocks
    from farm.gpu import device as device_module
    from farm.gpu.device import RETIME_ATTEMPTS

    if not device.timestamps:
        pytest.skip("no timestamp queries on this adapter")
    pipeline, buf = _double_pipeline(device), device.empty(4 * 1000)
    calls = [(pipeline, device.bind(pipeline, [buf]), (16, 1, 1))]
    attempts = [[250.0] * 3, [200.0] * 3, [220.0] * 3][:RETIME_ATTEMPTS]
    draws = iter([[100.0] * 3, [300.0] * 3, *attempts])
    leads = []
    monkeypatch.setattr(device_module.Device, "_timestamp_samples",
                        lambda self, *a: leads.append(a[3:]) or list(next(draws)))  # fmt: skip
    monkeypatch.setattr(device_module.Device, "_busy_for", lambda self, c, seconds, s: 0.0)
    monkeypatch.setattr(device, "check_clocks", True)
    monkeypatch.setattr(device, "_clock", None)
    readings = iter([1000.0] + [5000.0] * (1 + RETIME_ATTEMPTS))
    monkeypatch.setattr(clocks.ClockCheck, "read_ns", lambda self: next(readings))
    slow = device.clock_retimes_slow
    try:
        assert device.time_calls(calls, warmup=0, reps=3).median_ns == 100.0  # the canary's own best
        assert device.time_calls(calls, warmup=0, reps=3).median_ns == min(min(a) for a in attempts)
        assert device.clock_retimes_slow == slow + 1 and len(leads) == 2 + len(attempts)
        lead = math.ceil(device_module.RETIME_LEAD_S * 1e9 / 300.0)  # RETIME_LEAD_S of the slow passes
        assert leads[2:] == [(min(lead, device_module.MAX_LEAD_PASSES),)] * len(attempts)
    finally:
        device._clock.close()
        device.release(buf)


def test_a_competitive_timing_at_a_slightly_low_clock_is_re_timed_and_the_faster_clock_kept(device, monkeypatch):
    # a short kernel timed while the SM clock wanders just under the "slow" line can lose to a
    # worse one: a trial that would beat the bar at full clock is timed again
    from farm.gpu import clocks
    from farm.gpu import device as device_module

    if not device.timestamps:
        pytest.skip("no timestamp queries on this adapter")
    pipeline, buf = _double_pipeline(device), device.empty(4 * 1000)
    calls = [(pipeline, device.bind(pipeline, [buf]), (16, 1, 1))]
    draws = iter([[100.0] * 3, [100.0] * 3, [90.0] * 3, [100.0] * 3, [80.0] * 3, [100.0] * 3])
    monkeypatch.setattr(device_module.Device, "_timestamp_samples", lambda self, *a: list(next(draws)))
    monkeypatch.setattr(device_module.Device, "_busy_for", lambda self, c, seconds, s: 0.0)
    monkeypatch.setattr(device, "check_clocks", True)
    monkeypatch.setattr(device, "_clock", None)
    readings = iter([1000.0, 1100.0, 1000.0, 1100.0, 1150.0, 1100.0])
    monkeypatch.setattr(clocks.ClockCheck, "read_ns", lambda self: next(readings))
    rechecks = device.clock_rechecks
    try:
        # canary 1.0 (its own best), then 1.1x: 100 ns / 1.1 = 91 would beat 95: timed again at 1.0x, kept
        assert device.time_calls(calls, warmup=0, reps=3, beat_ns=95.0).median_ns == 100.0  # first: no bar met
        assert device.time_calls(calls, warmup=0, reps=3, beat_ns=95.0).median_ns == 90.0
        assert device.clock_rechecks == rechecks + 1
        # 1.1x again, but the re-timing's canary reads slower (1.15x): the first timing stays
        assert device.time_calls(calls, warmup=0, reps=3, beat_ns=95.0).median_ns == 100.0
        assert device.clock_rechecks == rechecks + 2
        # 1.1x and not competitive even at full clock (100 / 1.1 = 91 > 80): no re-timing
        assert device.time_calls(calls, warmup=0, reps=3, beat_ns=80.0).median_ns == 100.0
        assert device.clock_rechecks == rechecks + 2
    finally:
        device._clock.close()
        device.release(buf)


def test_a_canary_that_could_not_be_read_re_checks_nothing(device, monkeypatch):
    # no reading: no ratio to scale by, so nothing is re-timed, however competitive
    from farm.gpu import clocks
    from farm.gpu import device as device_module

    pipeline, buf = _double_pipeline(device), device.empty(4 * 1000)
    calls = [(pipeline, device.bind(pipeline, [buf]), (16, 1, 1))]
    monkeypatch.setattr(device_module.Device, "_timestamp_samples", lambda self, *a: [100.0] * 3)
    monkeypatch.setattr(device_module.Device, "_busy_for", lambda self, c, seconds, s: 0.0)
    monkeypatch.setattr(device, "timestamps", True)
    monkeypatch.setattr(device, "check_clocks", True)
    monkeypatch.setattr(device, "_clock", None)
    readings = iter([1000.0, 0.0, 1000.0])
    monkeypatch.setattr(clocks.ClockCheck, "read_ns", lambda self: next(readings))
    try:
        assert device.clock_ratio() == 1.0  # best 1000
        rechecks = device.clock_rechecks
        assert device.time_calls(calls, warmup=0, reps=3, beat_ns=1e9).median_ns == 100.0
        assert device.clock_rechecks == rechecks and device.clock_ratio() == 1.0  # the 0 reading was the only one used
    finally:
        device._clock.close()
        device.release(buf)


def test_the_clock_check_times_its_canary_and_keeps_its_best(device):
    from farm.gpu.clocks import CLOCK_TOLERANCE, ClockCheck

    if not device.timestamps:
        pytest.skip("no timestamp queries on this adapter")
    check = ClockCheck(device)
    try:
        first = check.read_ns()
        assert first > 0 and check.checks == 1
        check.best_ns = first * 100  # a best far slower than now: this reading is not slow
        assert not check.slow() and check.best_ns < first * 100
        check.best_ns = 1.0  # a best far faster than any reading: slow
        assert check.slow() and CLOCK_TOLERANCE > 1
        out = device.read(check.out, np.float32, 64)
        assert np.all(np.isfinite(out)) and np.all(out > 0)  # the loop ran for every thread
        (pipeline, _, groups), = check.heater()
        assert groups == 1 and check.heater()[0][0] is pipeline  # a CPU adapter: one workgroup, made once
        device.dispatch_many(check.heater())
        heated = device.read(check._heater_out, np.float32, 256)
        assert np.all(np.isfinite(heated)) and np.all(heated > 0)
    finally:
        check.close()


def test_cpu_adapters_skip_the_clock_check(device):
    assert device.profile.is_cpu and not device.check_clocks
    assert device.clock_ratio() is None  # no canary: reports leave the clock column blank


def test_the_clock_ratio_is_the_canary_against_its_best(device, monkeypatch):
    from farm.gpu import clocks

    monkeypatch.setattr(device, "check_clocks", True)
    monkeypatch.setattr(device, "_clock", None)
    readings = iter([1000.0, 1250.0, 800.0])
    monkeypatch.setattr(clocks.ClockCheck, "read_ns", lambda self: next(readings))
    try:
        assert device.clock_ratio() == 1.0  # the first reading is its own best
        assert device.clock_ratio() == 1.25  # 25% over the best: the clocks have dropped
        assert device.clock_ratio() == 1.0 and device._clock.best_ns == 800.0  # a faster reading is the new best
    finally:
        device._clock.close()


def test_buffers_are_accounted_and_released(device):
    before = device.memory()["in_use"]
    bufs = [device.upload(np.ones(100, np.float32)), device.empty(1000)]
    assert device.memory()["in_use"] == before + 400 + 1000
    device.release(*bufs)
    device.release(*bufs)  # releasing twice is harmless
    assert device.memory()["in_use"] == before


def test_a_second_device_is_independent():
    d = Device()
    assert d.profile.topology_hash() == Device().profile.topology_hash()


COUNTER = """
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(1) fn main() { out[0] = out[0] + 1.0; }
"""


def _warm_settings(device, monkeypatch, least, idle, most):
    # the warm-up tests count dispatches: the timed reps' own lead-in (a separate rule) stays off
    monkeypatch.setattr("farm.gpu.device.LEAD_IN_S", 0.0)
    monkeypatch.setattr("farm.gpu.device._rising", lambda samples: False)
    monkeypatch.setattr(device, "warm_s", least)
    monkeypatch.setattr(device, "warm_idle_s", idle)
    monkeypatch.setattr(device, "warm_max_s", most)


def test_gpu_warm_up_after_a_long_idle_runs_warm_idle_s_before_timing(device, monkeypatch):
    """GPUs idle between trials sit at low clocks: timing starts only after enough work.
    The idle is the device's whole record of timed work (last end and the recent window):
    work timed a moment before (an earlier test on the session's device, here on purpose)
    must not leave the window looking busy, or the rounds are skipped."""
    import time
    from collections import deque

    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    _warm_settings(device, monkeypatch, 0.05, 0.2, 2.0)
    device.time(pipeline, [buf], 1, warmup=0, reps=1)  # timed work that just ended
    before = device.read(buf, np.float32, 1)[0]
    monkeypatch.setattr(device, "_busy_until", time.perf_counter() - 10)  # idle for 10 s:
    monkeypatch.setattr(device, "_recent", deque())  # nothing timed in the recent window either
    start = time.perf_counter()
    device.time(pipeline, [buf], 1, warmup=1, reps=3)
    elapsed = time.perf_counter() - start
    count = device.read(buf, np.float32, 1)[0] - before
    device.release(buf)
    assert elapsed >= 0.2
    assert count > 1 + 3 + 1  # the warm-up kept dispatching beyond the counted warm-up runs


def test_gpu_warm_up_rounds_are_skipped_only_after_long_recent_work_and_capped(device, monkeypatch):
    """Counted in dispatches, not seconds: after a timing that lasted HOT_SPAN_S and ended a
    moment ago only the counted warm-up and the reps run; after short work (a 50 us kernel's
    reps leave the GPU at low clocks) the rounds run even when hot; after an idle gap,
    rounds that never agree stop at warm_max_s (a lower bound only: shared CI)."""
    import time

    from farm.gpu import HOT_GAP_S

    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    _warm_settings(device, monkeypatch, 0.3, 0.3, 0.6)
    monkeypatch.setattr("farm.gpu.device.WARM_STEADY", float("inf"))  # any two rounds agree
    monkeypatch.setattr("farm.gpu.device.HOT_SPAN_S", 10.0)  # every timing counts as short
    monkeypatch.setattr("farm.gpu.device.HOT_BUSY", 2.0)  # and the GPU never as busy enough
    device.time(pipeline, [buf], 1, warmup=0, reps=1)
    before = device.read(buf, np.float32, 1)[0]
    device.time(pipeline, [buf], 1, warmup=1, reps=2)
    short = device.read(buf, np.float32, 1)[0] - before
    assert 1 + 2 < short <= 1 + 2 * 2 + 2  # two rounds (batch 1, then at most 2)
    monkeypatch.setattr("farm.gpu.device.HOT_SPAN_S", 0.0)  # every timing counts as long
    device.time(pipeline, [buf], 1, warmup=0, reps=1)
    before = device.read(buf, np.float32, 1)[0]
    device.time(pipeline, [buf], 1, warmup=1, reps=2)
    assert device.read(buf, np.float32, 1)[0] - before == 1 + 2
    monkeypatch.setattr("farm.gpu.device.WARM_STEADY", -1.0)  # rounds never agree: the cap ends it
    monkeypatch.setattr(device, "_busy_until", time.perf_counter() - 2 * HOT_GAP_S)
    start = time.perf_counter()
    device.time(pipeline, [buf], 1, warmup=0, reps=1)
    capped = time.perf_counter() - start
    device.release(buf)
    assert capped >= 0.6


def test_gpu_warm_up_rounds_are_skipped_while_recent_timings_kept_the_gpu_busy(device, monkeypatch):
    """Back-to-back short timings (a worker's trials) that kept the GPU busy for HOT_BUSY of
    the last HOT_WINDOW_S skip the rounds; timings that left it mostly idle keep them."""
    import time
    from collections import deque

    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    _warm_settings(device, monkeypatch, 0.01, 0.01, 0.6)
    monkeypatch.setattr("farm.gpu.device.WARM_STEADY", float("inf"))  # any two rounds agree
    monkeypatch.setattr("farm.gpu.device.HOT_SPAN_S", 10.0)  # no single timing counts as long
    monkeypatch.setattr("farm.gpu.device.HOT_WINDOW_S", 1.0)

    def dispatches(busy_s: float) -> float:
        now = time.perf_counter()
        monkeypatch.setattr(device, "_recent", deque([(now - 0.95, now - 0.95 + busy_s)]))
        before = device.read(buf, np.float32, 1)[0]
        device.time(pipeline, [buf], 1, warmup=1, reps=2)
        return device.read(buf, np.float32, 1)[0] - before

    assert dispatches(0.8) == 1 + 2  # busy 0.8 of the last 1 s: no rounds
    assert dispatches(0.2) > 1 + 2  # busy 0.2 of it: rounds
    device.release(buf)
    assert device._recent_busy(time.perf_counter() + 5.0) == 0.0  # old timings are dropped
    assert not device._recent


def test_keep_busy_dispatches_for_the_given_seconds_on_a_gpu_only(device, monkeypatch):
    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    monkeypatch.setattr(device, "warm_s", 0.0)  # a CPU adapter's setting: nothing runs
    assert device.keep_busy([(pipeline, device.bind(pipeline, [buf]), 1)], 0.05) == 0.0
    assert device.read(buf, np.float32, 1)[0] == 0
    monkeypatch.setattr(device, "warm_s", 0.05)
    monkeypatch.setattr(device, "_busy_until", 0.0)  # the GPU idled (earlier tests timed work on it)
    monkeypatch.setattr(device, "_recent", deque())
    assert device.keep_busy([(pipeline, device.bind(pipeline, [buf]), 1)], 0.05) >= 0.05
    assert device.read(buf, np.float32, 1)[0] > 1
    assert device._recent and device._busy_span >= 0.05  # counts as recent work
    # Right after that (long work, ended a moment ago) the clocks are up: nothing runs,
    # unless forced (host-bound work before, as the recurrent sweep's baseline).
    assert device.keep_busy([(pipeline, device.bind(pipeline, [buf]), 1)], 0.05) == 0.0
    assert device.keep_busy([(pipeline, device.bind(pipeline, [buf]), 1)], 0.05, force=True) >= 0.05
    device.release(buf)


def test_warm_until_clocks_goes_on_while_the_canary_reads_slow_up_to_its_most(device, monkeypatch):
    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    calls = [(pipeline, device.bind(pipeline, [buf]), 1)]
    monkeypatch.setattr(device, "warm_s", 0.0)  # a CPU adapter: nothing runs
    assert device.warm_until_clocks(calls, 0.02, 0.5) == 0.0
    monkeypatch.setattr(device, "warm_s", 0.05)  # a GPU's settings, the canary read slow three times
    monkeypatch.setattr(device, "check_clocks", True)
    readings = iter([True, True, True, False])
    heat = device.empty(4)
    heater = device.pipeline(COUNTER, label="heater")

    class Canary:
        def slow(self):
            return next(readings)

        def heater(self):  # the heater's own passes, counted apart from the kernel's
            return [(heater, device.bind(heater, [heat]), 1)]

    monkeypatch.setattr(device, "_clock_check", lambda: Canary())
    monkeypatch.setattr("farm.gpu.device.CLOCK_WARM_S", 0.01)
    kernel_before = device.read(buf, np.float32, 1)[0]
    spent = device.warm_until_clocks(calls, 0.02, 0.5)  # forced although the GPU just ran (clocks "up")
    assert 0.05 <= spent < 0.5 and next(readings, None) is None  # on until the canary read fast
    assert device.read(buf, np.float32, 1)[0] > kernel_before  # least_s on the kernel itself
    assert device.read(heat, np.float32, 1)[0] > 3  # then the heater, three times CLOCK_WARM_S
    readings = iter([True] * 1000)
    assert 0.1 <= device.warm_until_clocks(calls, 0.02, 0.1) < 0.5  # never reads fast: stops at most_s
    # right after: hot, so none of the kernel's passes, but the canary (still slow) is read and heated for
    before = device.read(buf, np.float32, 1)[0]
    assert 0.1 <= device.warm_until_clocks(calls, 0.02, 0.1, unless_hot=True) < 0.5
    assert device.read(buf, np.float32, 1)[0] == before
    readings = iter([False])
    assert device.warm_until_clocks(calls, 0.02, 0.1, unless_hot=True) == 0.0  # hot and at its clocks: nothing
    device.release(buf, heat)


def test_a_fresh_canary_on_a_gpu_is_primed_so_its_first_check_can_read_slow(device, monkeypatch, as_gpu):
    """Its first reading would be its own best: the bench's first row could never be heated."""
    from farm.gpu import clocks

    monkeypatch.setattr(clocks, "HEATER_GROUPS", 1)  # lavapipe: one workgroup is plenty
    monkeypatch.setattr(clocks, "PRIME_S", 0.01)
    readings = iter([5000.0, 1000.0, 1000.0])  # the timing's reading, then the primed one, then later
    monkeypatch.setattr(clocks.ClockCheck, "read_ns", lambda self: next(readings))
    check = clocks.ClockCheck(as_gpu(device))
    try:
        assert check.slow() and check.best_ns == 1000.0  # 5x its primed best: slow on the first check
        assert not check.slow()
        cpu = clocks.ClockCheck(device)  # a CPU adapter is not primed: its first reading is its best
        readings = iter([5000.0])
        assert not cpu.slow() and cpu.best_ns == 5000.0
        cpu.close()
    finally:
        check.close()


def test_recent_timings_are_kept_for_the_window_only_also_without_warm_up(device, monkeypatch):
    # a CPU adapter never runs the warm-up rules, so recording a timing must prune the window itself
    import time

    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    monkeypatch.setattr(device, "warm_s", 0.0)
    monkeypatch.setattr("farm.gpu.device.HOT_WINDOW_S", 0.001)
    for _ in range(5):
        device.time(pipeline, [buf], 1, warmup=0, reps=1)
        time.sleep(0.002)
    device.release(buf)
    assert len(device._recent) == 1


def test_only_gpus_get_the_timed_warm_up(device):
    gpu = not device.profile.is_cpu
    assert (device.warm_s, device.warm_idle_s, device.warm_max_s) == ((0.05, 0.25, 1.0) if gpu else (0.0, 0.0, 0.0))


def test_refuse_cpu_names_the_work_and_the_adapter(device):
    from farm.gpu import CpuAdapterRefused, refuse_cpu

    cpu = dataclasses.replace(device.profile, adapter_type="CPU")
    with pytest.raises(CpuAdapterRefused) as refused:
        refuse_cpu(cpu, False, "benchmark")
    assert str(refused.value) == f"refusing to benchmark on CPU adapter {cpu.summary}; pass --allow-cpu"
    refuse_cpu(cpu, True, "benchmark")
    refuse_cpu(dataclasses.replace(device.profile, adapter_type="DiscreteGPU"), False, "benchmark")


def test_subgroup_size_is_known_but_not_part_of_the_topology_hash(device):
    profile = device.profile
    assert profile.subgroup_lanes() >= 4 if profile.has("subgroup") else profile.subgroup_lanes() == 0
    if profile.has("subgroup"):
        assert 0 < profile.subgroup_min_size <= profile.subgroup_max_size  # wgpu-py 0.32's "stackgroup_*" read
    for name in ("subgroup_min_size", "subgroup_max_size"):
        other = dataclasses.replace(profile, **{name: getattr(profile, name) + 32})
        assert other.topology_hash() == profile.topology_hash()
        assert HardwareProfile.from_dict(other.to_dict()) == other
    legacy = profile.to_dict()
    del legacy["subgroup_min_size"], legacy["subgroup_max_size"]  # a profile stored before the fields existed
    old = HardwareProfile.from_dict(legacy)
    assert (old.subgroup_min_size, old.subgroup_max_size) == (0, 0)


def test_topology_hashes_stored_before_subgroup_max_size_still_match(device):
    """An H200's hash as stored before profiles carried subgroup_max_size, and this adapter's
    computed the same way (the identity fields without subgroup_min_size): both still match."""
    h200 = {
        "backend": "Vulkan", "adapter_type": "DiscreteGPU", "vendor_id": 4318, "device_id": 9013,
        "device_name": "NVIDIA H200", "driver_description": "580.159.04",
        "limits": {"max-compute-workgroup-size-x": 1024, "max-compute-workgroup-size-y": 1024,
                   "max-compute-invocations-per-workgroup": 1024, "max-compute-workgroup-storage-size": 49152,
                   "max-compute-workgroups-per-dimension": 65535, "max-storage-buffer-binding-size": 2147483644,
                   "max-buffer-size": 4292870144, "max-storage-buffers-per-shader-stage": 524288},
        "features": ["shader-f16", "shader-f64", "subgroup", "timestamp-query"], "subgroup_min_size": 4,
    }  # fmt: skip
    stored = "5a4957c95ba886b588168912666f11953b6880b0f72d2540b9251689cf20b647"
    assert HardwareProfile.from_dict(h200).topology_hash() == stored
    assert HardwareProfile.from_dict(h200 | {"subgroup_max_size": 128}).topology_hash() == stored
    before = {k: v for k, v in device.profile.to_dict().items() if not k.startswith("subgroup_")}
    assert set(before) == {"backend", "adapter_type", "vendor_id", "device_id", "device_name",
                           "driver_description", "limits", "features"}  # fmt: skip
    payload = json.dumps(before, sort_keys=True, separators=(",", ":"))
    assert device.profile.topology_hash() == hashlib.sha256(payload.encode()).hexdigest()


def test_reads_reuse_staging_buffers_and_return_writable_copies(device):
    from farm import gpu

    data = np.arange(1000, dtype=np.float32)
    buf = device.upload(data, "storage")
    first = device.read(buf)
    staged = {id(b) for b in device._staging_buffers}
    second = device.read(buf, np.float32, 10)  # a smaller read reuses a staging buffer
    first[0] = -1.0  # the caller owns its copy: neither the GPU buffer nor other reads change
    np.testing.assert_array_equal(second, data[:10])
    np.testing.assert_array_equal(device.read(buf), data)
    assert {id(b) for b in device._staging_buffers} == staged
    odd = device.upload(np.arange(7, dtype=np.int8))  # 7 bytes: padded to 8 on upload
    np.testing.assert_array_equal(device.read(odd, np.int8, 7), np.arange(7, dtype=np.int8))
    for size in range(gpu.STAGING_KEEP + 2):  # bigger reads add buffers; only a few are kept
        big = device.upload(np.zeros(2000 * (size + 1), np.float32), "storage")
        device.read(big)
        device.release(big)
    assert len(device._staging_buffers) <= gpu.STAGING_KEEP
    device.release(buf, odd)


def test_pending_reads_hold_their_own_staging_and_collect_on_another_thread(device):
    """A run's outputs are copied in its submission and read later (a checker thread) while
    later work is queued: each pending read owns its staging buffer until collected."""
    from concurrent.futures import ThreadPoolExecutor

    from farm.gpu import STAGING_KEEP

    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.zeros(1, np.float32), "storage")
    pending = []
    for _ in range(3):
        device.dispatch(pipeline, [buf], 1, wait=False)
        pending.append(device.submit_reads([("count", buf, np.float32, 1, (1,))]))
    free_before = len(device._staging_buffers)
    pending[1].map()  # mapped on the submitting thread, read on a checker's
    with ThreadPoolExecutor(2) as pool:
        counts = [f.result()["count"] for f in [pool.submit(p.collect) for p in reversed(pending)]]
    assert [c.shape for c in counts] == [(1,)] * 3
    assert [float(c[0]) for c in counts] == [3.0, 2.0, 1.0]  # each saw the queue at its copy
    counts[0][0] = -1.0  # the caller owns its copy (the staging buffer is reused)
    assert all(c.flags.writeable for c in counts)
    assert len(device._staging_buffers) == min(free_before + 3, STAGING_KEEP)  # all handed back
    device.release(buf)


def test_run_and_read_zeroes_then_runs_once_then_copies_in_one_submission(device):
    """The certification path: stale output data never survives into the read-back."""
    pipeline = device.pipeline(COUNTER, label="counter")
    buf = device.upload(np.full(4, 41.0, np.float32), "storage")
    calls, reads = [(pipeline, device.bind(pipeline, [buf]), 1)], [("out", buf, np.float32, 4, (2, 2))]
    kept = device.run_and_read(calls, [], reads).collect()["out"]
    np.testing.assert_array_equal(kept, [[42.0, 41.0], [41.0, 41.0]])  # nothing cleared: counted on
    cleared = device.run_and_read(calls, [buf], reads).collect()["out"]
    np.testing.assert_array_equal(cleared, [[1.0, 0.0], [0.0, 0.0]])  # zeroed, then one run
    device.release(buf)


def test_benchmark_device_refuses_a_cpu_adapter_unless_allowed(device, capsys):
    from farm.gpu import benchmark_device

    if not device.profile.is_cpu:
        pytest.skip("only a CPU adapter is refused")
    assert benchmark_device(allow_cpu=False) is None
    assert "refusing to benchmark on CPU adapter" in capsys.readouterr().err
    assert benchmark_device(allow_cpu=True).profile == device.profile
