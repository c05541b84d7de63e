"""Timing: the value a timed dispatch yields, and the rules that decide when a GPU must
be warmed up before its timed reps (clocks drop while it idles). `TimedDevice` is the
timing half of `farm.gpu.device.Device`, which inherits it: it needs the device's
`dispatch_many`, `wait_idle`, `_encode_pass` and wgpu handles, and nothing else does."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from farm.gpu.adapter import GpuError
from farm.gpu.clocks import CLOCK_TOLERANCE, trace_check

# GPU warm-up (Device._warm_up): idle gaps after which clocks have dropped, the agreement
# between consecutive warm-up rounds that counts as steady, and the least round length.
HOT_GAP_S = 0.25
HOT_SPAN_S = 0.02  # a timing at least this long, ended under HOT_GAP_S ago: no warm-up rounds
# Nor when timings kept the GPU busy for HOT_BUSY of the last HOT_WINDOW_S (back-to-back
# short trials keep the clocks up as one long timing does; a GPU busy less than that may
# be dropping them, and the rounds, themselves busy, bring the share back up).
HOT_WINDOW_S = 0.1
HOT_BUSY = 0.5
LONG_IDLE_S = 1.0
WARM_STEADY = 0.03
WARM_ROUND_S = 0.01
# The timed reps' lead-in (TimedDevice._timestamp_samples): GPU seconds of untimed passes in
# the reps' own submission when the reps alone are shorter, and the most passes it may take.
LEAD_IN_S = 0.002
MAX_LEAD_PASSES = 1024
CLOCK_WARM_S = 0.2  # the heater's passes back to back before a timing the clock check read slow is re-timed
# A re-timing's reps sit behind RETIME_LEAD_S of the kernel's own passes in their submission (no
# host gap between warm and timed work), and are timed again, up to RETIME_ATTEMPTS times in all,
# while the canary after them reads slow: on the H200 a re-timing after the heater alone still
# read slow in 31 of 49 (fft's landscape, session 18), up to 2.96x the kernel's time.
RETIME_LEAD_S = 0.02
RETIME_ATTEMPTS = 3
# A report's timing (farm bench's rows, the recurrent sweep's fused column): the kernel back
# to back for REPORT_WARM_S, then the canary's heater while the canary reads slow, up to about
# REPORT_WARM_MAX_S (Device.warm_until_clocks). The same for both, so that they agree: on the H200 the bench's
# first rows read 2.6-3x slow after the vendor import left the GPU idle, and the SM clock
# wandered 1,545-1,980 MHz between ways of timing one winner (NOTES, session 12).
REPORT_WARM_S = 0.5
REPORT_WARM_MAX_S = 2.0
# Only timings whose reps hold less GPU time than this are checked: on the H200 the slow
# trials were all short kernels' (none of gemm 4096^3's 4 ms), and after long reps a
# power-capped GPU's sustained clocks would read as "slow" against the canary's best
CLOCK_CHECK_MAX_S = 0.02
# A short timing the clock check read over RECHECK_TOLERANCE x the canary's best (under
# CLOCK_TOLERANCE: not "slow") is re-timed too when, scaled by the canary, it would beat
# `beat_ns` (a tuning worker's best so far on the problem): two H200 campaigns with one seed
# went into different basins of recurrent's flat top on 15 us kernels while the SM clock
# wandered ~20% by itself (NOTES, session 12). The re-timing is kept when its canary reads faster.
RECHECK_TOLERANCE = 1.05


@dataclass(frozen=True)
class Timing:
    """Per-dispatch times in nanoseconds over `reps` measured runs after warm-up."""

    median_ns: float
    p20_ns: float
    p80_ns: float
    min_ns: float
    reps: int
    method: str  # "timestamp" (GPU) or "host"

    @classmethod
    def from_samples(cls, samples: list[float], method: str) -> Timing:
        ordered = sorted(samples)
        return cls(
            median_ns=float(statistics.median(ordered)),
            p20_ns=float(_quantile(ordered, 0.2)),
            p80_ns=float(_quantile(ordered, 0.8)),
            min_ns=float(ordered[0]),
            reps=len(ordered),
            method=method,
        )


def _quantile(ordered: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(ordered, dtype=np.float64), q))


class TimedDevice:
    """Timing methods of a Device (mixed into it); state set up by `_init_timing`."""

    def _init_timing(self, gpu: bool) -> None:
        # Warm-up before timing on a GPU, whose clocks drop while it idles (the CPU
        # certifying, computing a reference) and take a while to come back: at least
        # warm_s of work after a short idle gap, warm_idle_s after a long one, then until two
        # consecutive rounds agree, at most warm_max_s. A CPU adapter has no such ramp,
        # and tests on lavapipe stay fast.
        self.warm_s = 0.05 if gpu else 0.0
        self.warm_idle_s = 0.25 if gpu else 0.0
        self.warm_max_s = 1.0 if gpu else 0.0
        self._busy_until = 0.0  # time.perf_counter() when timed work last finished
        self._busy_span = 0.0  # seconds that the last timed work (warm-up and reps) lasted
        self._recent: deque[tuple[float, float]] = deque()  # (start, end) of recent timings
        self.warm_spent_s = 0.0  # seconds spent warming up, all timings together
        self.rounds_spent_s = 0.0  # of them, in warm-up rounds (the rest: keep_busy, re-timings' heater)
        # The clock check after each GPU-timestamp timing (farm.gpu.clocks): on GPUs only
        self.check_clocks = gpu
        self._clock = None
        self.clock_retimes = 0  # timings re-timed because the check read low clocks
        self.clock_retime_s = 0.0  # seconds those re-timings spent (warm-up and reps)
        self.clock_rechecks = 0  # of them, timings re-timed as competitive at slightly low clocks
        self.clock_retimes_slow = 0  # slow timings whose re-timing the canary still read slow

    def time_calls(
        self, calls: list, warmup: int = 2, reps: int = 10, schedule: Any = None, beat_ns: float | None = None
    ) -> Timing:
        """Time a submission of (pipeline, bind_group, groups) passes: by GPU timestamps all
        reps in one submission (`_timestamp_samples`), by host wall one submission per rep.

        Warm-up is `warmup` submissions and then, on GPUs, rounds of growing batches until two
        consecutive rounds agree within WARM_STEADY, after at least warm_s (idle since the
        last timing over HOT_GAP_S) or warm_idle_s (idle over LONG_IDLE_S) and at most
        warm_max_s: a GPU idle between trials drops to idle clocks, and a few short warm-up
        dispatches would not bring it back (seen on the H200: 2.5-5x slower trials, also
        after 50 ms of warm-up when the GPU had idled for seconds). No rounds when the last
        timing lasted HOT_SPAN_S or more and ended under HOT_GAP_S ago: the GPU is at its
        clocks (gemm 4096^3 trials back to back), nor while timings have kept the GPU busy
        for HOT_BUSY of the last HOT_WINDOW_S (a tuning worker's back-to-back short trials:
        gemv 4096^2 trials spent 13 of their 21 ms in rounds). A GPU that ran only short
        kernels now and then is not: skipping the rounds after 7 reps of a 50 us kernel
        measured the H200 5x slow.
        With timestamp queries the sample is GPU time from the start of the first pass to
        the end of the last ("timestamp"); otherwise host wall time around a synchronous
        submission ("host"). `beat_ns`: see RECHECK_TOLERANCE.
        """
        if reps < 1:
            raise ValueError(f"reps must be >= 1, got {reps}")
        begin = time.perf_counter()
        self._warm_up(calls, warmup, schedule)
        try:
            if self.timestamps:
                samples = self._timestamp_samples(calls, reps, schedule)
                short = sum(samples) < CLOCK_CHECK_MAX_S * 1e9  # long reps kept the GPU at its (sustained) clocks
                if self.check_clocks and short:
                    samples = self._checked(calls, reps, schedule, samples, beat_ns)
                return Timing.from_samples(samples, "timestamp")
            self.wait_idle()  # the warm-up submissions are not part of the first sample
            samples = []
            for _ in range(reps):
                start = time.perf_counter_ns()
                self.dispatch_many(calls, schedule)
                samples.append(float(time.perf_counter_ns() - start))
            return Timing.from_samples(samples, "host")
        finally:
            self._mark_busy(begin, time.perf_counter())

    def _warm_up(self, calls: list, warmup: int, schedule: Any) -> None:
        for _ in range(max(warmup, 0)):
            self.dispatch_many(calls, schedule, wait=False)  # the queue runs them before the timed reps
        if self.warm_s <= 0:
            return
        if self._clocks_up(time.perf_counter()):
            return
        # Rounds compare per-call times: the queue (a certification run, the counted warm-up)
        # must be empty first, or the first round reads slow and one more round is spent.
        self.wait_idle()
        start = time.perf_counter()
        try:
            self._warm_rounds(calls, schedule, start)
        finally:
            spent = time.perf_counter() - start
            self.warm_spent_s += spent
            self.rounds_spent_s += spent

    def _clock_check(self):
        if self._clock is None:
            from farm.gpu.clocks import ClockCheck

            self._clock = ClockCheck(self)
        return self._clock

    def clock_ratio(self) -> float | None:
        """The clock canary now against its best on this device (1.0: at the clocks the device
        has shown; 1.25: a latency-bound kernel runs about 25% slow), None where there is no
        canary (a CPU adapter, no timestamps). Reports put it next to a timing, so that two
        timings of one kernel that differ can be told apart from the clock wandering (the
        H200's SM clock went 1,545-1,980 MHz between ways of timing one winner)."""
        return self._clock_check().ratio() if self.check_clocks else None

    def _checked(self, calls: list, reps: int, schedule: Any, samples: list[float], beat_ns: float | None):
        """The samples of a short timing after the clock check: re-timed when it read slow,
        or when it read a little slow and the timing, scaled by the canary, would beat `beat_ns`."""
        clock = self._clock_check()
        ratio = clock.ratio()
        if ratio is not None and ratio > CLOCK_TOLERANCE:  # slow: re-timed after a warm-up
            again, after = self._retime(calls, reps, schedule, samples)
            self.clock_retimes_slow += after is not None and after > CLOCK_TOLERANCE  # the warm-up did not lift them
            trace_check(schedule, samples, ratio, again, after)
            return again
        trace_check(schedule, samples, ratio)
        if beat_ns is None or ratio is None or ratio <= RECHECK_TOLERANCE:
            return samples
        if float(np.median(samples)) / ratio >= beat_ns:  # not competitive even at full clock
            return samples
        self.clock_rechecks += 1
        again, again_ratio = self._retime(calls, reps, schedule, samples, attempts=1)  # the re-timing's own clock
        return again if again_ratio is not None and again_ratio <= ratio else samples

    def _retime(
        self, calls: list, reps: int, schedule: Any, first: list[float], attempts: int = RETIME_ATTEMPTS
    ) -> tuple[list[float], float | None]:
        """The reps again after CLOCK_WARM_S of the canary's heater (every SM busy), behind a
        lead-in of RETIME_LEAD_S of the kernel's own passes in the reps' submission, and again
        (up to `attempts` in all) while the canary after them still reads slow; the fastest
        samples (`first` included) and the canary's ratio after the last attempt. The clock check read the
        first ones (`first`) at low clocks, where warm-up rounds agree (farm.gpu.clocks), and a
        few-workgroup kernel's own passes back to back may not lift them (the recurrent
        sweep's T=64 kernels: 2.2 s of them left the canary 1.4-2.1x slow; NOTES, session 13).
        A slow timing only ever reads slower than the kernel is (H200, session 18: 80 re-timed
        fft schedules, none faster than its lower reading), so the fastest is kept."""
        start = time.perf_counter()
        self.clock_retimes += 1
        clock = self._clock_check()
        lead = max(1, min(MAX_LEAD_PASSES, math.ceil(RETIME_LEAD_S * 1e9 / max(min(first), 1.0))))
        best, after = first, None
        for _ in range(max(1, attempts)):
            self._busy_for(clock.heater(), CLOCK_WARM_S, None)
            samples = self._timestamp_samples(calls, reps, schedule, lead)
            if statistics.median(samples) < statistics.median(best):
                best = samples
            after = clock.ratio()
            if after is None or after <= CLOCK_TOLERANCE:
                break
        self.clock_retime_s += time.perf_counter() - start
        return best, after

    def keep_busy(self, calls: list, seconds: float, schedule: Any = None, force: bool = False) -> float:
        """Dispatch the (pipeline, bind_group, groups) passes in growing batches for at least
        `seconds` (GPUs only; returns the seconds spent). After the GPU idled for a while
        (a tuning campaign between a problem's last trials and its finalists'
        re-measurement), the H200 can take longer than the warm-up rounds to reach its
        clocks, and two rounds at low clocks agree: re-measured medians of short kernels
        read up to 2.3x their bench time. Not when the GPU has not idled (`_clocks_up`: the
        rule that skips the warm-up rounds): a re-measurement right after long trials (gemm
        4096^3's) starts at once. `force`: busy even then (the work before was host-bound:
        the recurrent sweep's op-by-op baseline counts as long timed work but leaves the GPU idle)."""
        if self.warm_s <= 0 or seconds <= 0:
            return 0.0
        if not force and self._clocks_up(time.perf_counter()):
            return 0.0
        return self._busy_for(calls, seconds, schedule)

    def warm_until_clocks(
        self, calls: list, least_s: float, most_s: float, schedule: Any = None, unless_hot: bool = False
    ) -> float:
        """The passes back to back for `least_s` whatever the warm-up rules say (with
        `unless_hot`: not when they say the clocks are up), then, while the clock canary
        still reads slow, the canary's heater (every SM busy) in steps of CLOCK_WARM_S until
        `most_s` in all is reached (the last step may pass it by up to CLOCK_WARM_S); returns
        the seconds spent (0 on a CPU adapter). The canary is read either way: few-workgroup
        kernels back to back satisfy the warm-up rules at low clocks. For a timing right
        after host-bound work: on one H200 the retime's 0.2 s did not bring short kernels
        back to their speed after the recurrent sweep's baselines (NOTES, session 11), nor
        did 2.2 s of their own few-workgroup dispatches (session 13)."""
        if self.warm_s <= 0:  # a CPU adapter: no clocks to raise
            return 0.0
        spent = self.keep_busy(calls, least_s, schedule, force=not unless_hot)
        clock = self._clock_check() if self.check_clocks else None
        while clock is not None and spent < most_s and clock.slow():
            spent += self._busy_for(clock.heater(), CLOCK_WARM_S, None)
        return spent

    def _busy_for(self, calls: list, seconds: float, schedule: Any) -> float:
        """The passes in growing batches for at least `seconds`; returns the seconds spent."""
        start = time.perf_counter()
        batch = 1
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            self.dispatch_many(calls * batch, schedule)
            if time.perf_counter() - t0 < WARM_ROUND_S:
                batch = min(batch * 2, 4096)
        end = time.perf_counter()
        self._mark_busy(start, end)
        self.warm_spent_s += end - start
        return end - start

    def _clocks_up(self, now: float) -> bool:
        """Whether the GPU is at its clocks without more work: long timed work ended a moment
        ago (HOT_SPAN_S, HOT_GAP_S), or timed work kept it busy for HOT_BUSY of the last
        HOT_WINDOW_S (a worker's back-to-back short trials)."""
        if now - self._busy_until < HOT_GAP_S and self._busy_span >= HOT_SPAN_S:
            return True
        return self._recent_busy(now) >= HOT_BUSY * HOT_WINDOW_S

    def _mark_busy(self, start: float, end: float) -> None:
        """Record timed work from `start` to `end` (what the warm-up rules look back on)."""
        self._busy_until, self._busy_span = end, end - start
        self._recent.append((start, end))
        self._drop_old(end)

    def _drop_old(self, now: float) -> None:
        while self._recent and self._recent[0][1] <= now - HOT_WINDOW_S:
            self._recent.popleft()

    def _recent_busy(self, now: float) -> float:
        """Seconds of the last HOT_WINDOW_S spent in timed work."""
        self._drop_old(now)
        since = now - HOT_WINDOW_S
        return sum(min(end, now) - max(start, since) for start, end in self._recent)

    def _warm_rounds(self, calls: list, schedule: Any, start: float) -> None:
        idle = start - self._busy_until
        least = 0.0 if idle < HOT_GAP_S else self.warm_s if idle < LONG_IDLE_S else self.warm_idle_s
        batch, previous = 1, None
        while True:
            t0 = time.perf_counter()
            self.dispatch_many(calls * batch, schedule)
            now = time.perf_counter()
            per_call = (now - t0) / batch
            if now - start >= self.warm_max_s:
                return
            steady = previous is not None and abs(per_call - previous) <= WARM_STEADY * previous
            if now - start >= least and steady:
                return
            previous = per_call
            if now - t0 < WARM_ROUND_S:
                batch = min(batch * 2, 4096)

    def _timestamp_samples(self, calls: list, reps: int, schedule: Any, lead: int | None = None) -> list[float]:
        """`reps` GPU-timestamp samples of the passes, all in ONE submission, so the GPU runs
        them back to back whatever the host does meanwhile (with one submission a rep, a
        host thread holding the GIL could space them out). That alone did not cure trials
        read 4-6x slow on the H200 under such a thread (benchmarks/trial_interference.py):
        the clocks had dropped before the timing began, which the clock check catches.
        When the timed reps hold less than LEAD_IN_S of GPU work, or their first third reads
        slower than their last (clocks still rising), they are timed again behind a lead-in:
        as many untimed passes as make LEAD_IN_S, in the same submission. `lead` given: one
        submission behind that many untimed passes (a re-timing's)."""
        if lead is not None:
            return self._timestamp_submission(calls, reps, schedule, lead)
        samples = self._timestamp_submission(calls, reps, schedule, lead=0)
        shortest = max(min(samples), 1.0)
        if sum(samples) < LEAD_IN_S * 1e9 or _rising(samples):
            lead = max(1, min(MAX_LEAD_PASSES, math.ceil(LEAD_IN_S * 1e9 / shortest)))
            samples = self._timestamp_submission(calls, reps, schedule, lead)
        return samples

    def _timestamp_submission(self, calls: list, reps: int, schedule: Any, lead: int) -> list[float]:
        wgpu = self._wgpu
        label = calls[0][0].label if calls else ""
        last = len(calls) - 1
        try:
            query_set = self.device.create_query_set(type="timestamp", count=2 * reps)
            resolve = self.device.create_buffer(
                size=16 * reps, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            )
            encoder = self.device.create_command_encoder()
            for _ in range(lead):
                for pipeline, bind_group, groups in calls:
                    self._encode_pass(encoder, pipeline, bind_group, groups)
            for rep in range(reps):
                for index, (pipeline, bind_group, groups) in enumerate(calls):
                    writes = {"query_set": query_set}
                    if index == 0:
                        writes["beginning_of_pass_write_index"] = 2 * rep
                    if index == last:
                        writes["end_of_pass_write_index"] = 2 * rep + 1
                    self._encode_pass(encoder, pipeline, bind_group, groups, writes if len(writes) > 1 else None)
            encoder.resolve_query_set(query_set, 0, 2 * reps, resolve, 0)
            self.device.queue.submit([encoder.finish()])
            stamps = np.frombuffer(bytes(self.device.queue.read_buffer(resolve)), dtype=np.uint64)
            resolve.destroy()
            query_set.destroy()
        except GpuError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise GpuError("dispatch", f"timed dispatch: {exc}", label, schedule) from exc
        deltas = stamps[1::2].astype(np.int64) - stamps[0::2].astype(np.int64)
        return [float(max(d, 0)) for d in deltas]


def _rising(samples: list[float]) -> bool:
    """Whether the first third of the samples reads slower than the last third by more than
    WARM_STEADY (the clocks were still rising during the reps)."""
    third = len(samples) // 3
    if third < 1:
        return False
    return statistics.median(samples[:third]) > (1 + WARM_STEADY) * statistics.median(samples[-third:])
