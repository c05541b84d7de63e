"""What a campaign prints: the progress line, a line per problem as it is done, the
closing summary (`format_summary`: fits 100 columns; `format_winners_table` with -v, its
margins explained by MARGIN_NOTE) and what to run next, and with -v each worker's
placement and where each worker's time went.

`Progress` keeps done/total, failures, resumed trials (replayed from the store: they count
into done, as they do in the campaign row) and the ETA on one stderr line;
`format_winners_table`, `format_workers` (host, pid, Ray GPU -> adapter, nvidia-smi UUID,
placement), `format_stage_times` (ms per trial by stage) and `format_task_totals` (search
and re-measurement cost) are plain text for stderr/stdout.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from farm.schedule import Schedule
from farm.store import WinnerRecord
from farm.store.listing import SCHEDULE_NOTE, fit_table, short_schedule
from farm.trial import TrialResult
from farm.tuning.job import format_stage_report
from farm.tuning.workers import WorkerPool


class Progress:
    """done/total, failures, skipped (resumed) and ETA on one stderr line; plain lines when not a TTY.
    `counts()` is (done, failures) read together, for a thread writing the campaign row."""

    def __init__(self, total: int, stream: TextIO | None = None, every_s: float = 5.0):
        self.total, self.done, self.failures, self.skipped = total, 0, 0, 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every_s = every_s
        self.start = time.monotonic()
        self._last = -math.inf  # the first result always prints
        self._lock = threading.Lock()

    def advance(self, result: TrialResult, skipped: bool = False) -> None:
        with self._lock:
            self.done += 1
            self.skipped += skipped
            self.failures += not result.ok
        now = time.monotonic()
        if self.tty or now - self._last >= self.every_s or self.done == self.total:
            self._last = now
            self.stream.write(("\r" if self.tty else "") + self.line() + ("" if self.tty else "\n"))
            self.stream.flush()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.done, self.failures

    def line(self) -> str:
        ran = self.done - self.skipped
        elapsed = time.monotonic() - self.start
        total = max(self.total, self.done)  # a search past its plan counts before the plan is corrected
        left = total - self.done
        eta = f"{left * elapsed / ran:.0f}s" if ran else "?"
        filled = int(30 * self.done / max(total, 1))
        return (
            f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{total} trials, "
            f"{self.failures} failed, {self.skipped} resumed, ETA {eta}"
        )

    def note(self, text: str) -> None:
        """A line of its own above the progress line (on a TTY the progress line is redrawn below it)."""
        with self._lock:
            if self.tty:
                self.stream.write(f"\r\033[K{text}\n{self.line()}")
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


MARGIN_NOTE = (
    "margin: how much slower the runner-up is than the winner (median of their paired re-measurement rounds);\n"
    "[low, high]: its 90% sign-test interval over those rounds; tie: the two were within the timing noise"
)
NEXT_STEPS = """\
next:
  farm winners      what was stored (--wide: every column, --json: every field)
  farm dashboard    the same in a browser, with every trial: http://127.0.0.1:8501
  and in Python, the tuned kernels on your arrays:
      import numpy as np
      from farm import ForgeRuntime
      rt = ForgeRuntime()  # this GPU's winners, from the database above
      a, x = np.random.rand(256, 256).astype(np.float32), np.random.rand(256).astype(np.float32)
      print(rt.gemv(a, x))"""


def closing(winners: list[WinnerRecord], db_url: str | None, out: Path, verbose: bool) -> str:
    """What `farm tune` prints last: the winners (the full table and MARGIN_NOTE with -v), where
    the results are (the database's URL, password masked; the artifacts) and NEXT_STEPS."""
    from farm.store import database_url
    from farm.store.engine import mask_url

    table = f"{format_winners_table(winners)}\n{MARGIN_NOTE}" if verbose else format_summary(winners)
    where = (
        f"results:  {mask_url(database_url(db_url))}\n"
        f"          {out}  (the trials as Parquet, each campaign's summary)"
    )
    same = "\n  (this campaign's --db: pass it to farm winners and farm dashboard, and as ForgeRuntime(db=...))"
    return f"{table}\n\n{where}\n{NEXT_STEPS}{same if db_url else ''}"


def problem_line(winner: WinnerRecord, trials: int) -> str:
    """The line printed as a problem's winner is stored: its time and speedup over the default schedule."""
    speedup = winner.speedup
    speed = "" if speedup is None or math.isnan(speedup) else f", {speedup:.2f}x over the default schedule"
    return f"{winner.kernel} {winner.problem_key}: {winner.median_ns / 1e3:.2f} us{speed} ({trials} trials)"


def format_summary(winners: list[WinnerRecord]) -> str:
    """The closing table that fits 100 columns: kernel, problem, the winner's median, its
    speedup over the default schedule and the schedule as the knobs that differ from the default."""
    if not winners:
        return "no winners"
    header = ("kernel", "problem", "median_us", "speedup", "schedule")
    rows = [
        (
            w.kernel,
            w.problem_key,
            f"{w.median_ns / 1e3:.2f}",
            "-" if w.speedup is None or math.isnan(w.speedup) else f"{w.speedup:.2f}x",
            short_schedule(w),
        )
        for w in winners
    ]
    note = SCHEDULE_NOTE.format(wide="`farm winners --wide`")
    return fit_table(header, rows, flex=len(header) - 1) + "\n" + note


def format_winners_table(winners: list[WinnerRecord]) -> str:
    """kernel, problem, schedule, median, default-schedule time, speedup, then p20-p80 over
    the re-measurement's rounds and the runner-up's margin with its interval ("tie" when the
    winner was chosen among finalists within noise), one row each."""
    header = ("kernel", "problem", "schedule", "median_us", "default_us", "speedup", "p20-p80_us", "margin")
    rows = [header]
    for w in winners:
        rows.append(
            (
                w.kernel,
                w.problem_key,
                str(Schedule.from_key(w.schedule_key)),
                f"{w.median_ns / 1e3:.2f}",
                "-" if w.default_median_ns is None else f"{w.default_median_ns / 1e3:.2f}",
                "-" if w.speedup is None or math.isnan(w.speedup) else f"{w.speedup:.2f}x",
                _spread(w),
                format_margin(w),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _spread(w: WinnerRecord) -> str:
    p20, p80 = getattr(w, "p20_ns", None), getattr(w, "p80_ns", None)
    return "-" if p20 is None or p80 is None else f"{p20 / 1e3:.2f}-{p80 / 1e3:.2f}"


def format_margin(w: WinnerRecord) -> str:
    """The runner-up's margin over the winner with its interval, e.g. `+2.1% [+0.8, +3.5] (5
    rounds)`, prefixed `tie` when the winner was chosen among finalists within noise; `-`
    without one (a winner stored before revision 0005, or one without a runner-up)."""
    margin = getattr(w, "margin", None)
    if margin is None or not math.isfinite(margin):
        return "-"
    low, high = getattr(w, "margin_low", None), getattr(w, "margin_high", None)
    interval = f" [{100 * low:+.1f}, {100 * high:+.1f}]" if low is not None and high is not None else ""
    rounds = getattr(w, "rounds", None)
    text = f"{100 * margin:+.1f}%{interval}" + (f" ({rounds} rounds)" if rounds else "")
    return ("tie " if getattr(w, "tie", False) else "") + text


def format_task_totals(tasks: list[dict]) -> str:
    """One line: the search's trials and seconds (and how many problems went past their
    planned trials, the budget that scales with the space), the re-measurement's rounds,
    finalist-rounds timed and seconds, over the campaign's (kernel, problem) tasks."""
    trials = sum(t.get("trials", 0) for t in tasks)
    extended = sum(t.get("trials", 0) > t.get("planned", 0) for t in tasks)
    search_s = sum(t.get("search_s", 0.0) for t in tasks)
    measured = [t for t in tasks if "remeasure_s" in t]
    rounds = sum(t["rounds"] for t in measured)
    return (
        f"search: {trials} trials over {len(tasks)} problems ({extended} past their planned trials, the polish's"
        f" included), {search_s:.1f} s;"
        f" re-measurement: {rounds} rounds, {sum(t['timings'] for t in measured)} finalist-rounds timed"
        f" over {len(measured)} problems, {sum(t['remeasure_s'] for t in measured):.1f} s"
    )


def format_stage_times(pool: WorkerPool, wall_s: float) -> str:
    """Where each worker's time went (ms per trial by stage, see StageTimes), or why unknown."""
    try:
        stages = pool.stage_times()
    except Exception as exc:  # noqa: BLE001 - a dead worker must not hide the campaign's outcome
        return f"worker stage times unavailable: {exc}"
    lines = [f"campaign wall time {wall_s:.1f} s; worker ms per trial by stage:"]
    for slot, report in sorted(stages.items()):
        competitive = f", {report['clock_rechecks']} of them competitive" if report.get("clock_rechecks") else ""
        still = f", {report['clock_retimes_slow']} still slow after" if report.get("clock_retimes_slow") else ""
        retimes = report.get("clock_retimes")
        retimed = f" ({retimes} re-timed at low clocks{competitive}{still})" if retimes else ""
        lines.append(f"  worker {slot}: {report.get('trials', 0)} trials{retimed}; {format_stage_report(report)}")
    return "\n".join(lines)


def format_workers(reports: dict[str, dict]) -> str:
    """One line per worker: where it runs and which GPU it holds (Ray GPU id -> wgpu
    adapter index, nvidia-smi's UUID for it, and whether the process really sits there), and
    the seconds of its start-up steps (choosing the adapter with nvidia-smi's cross-check,
    making the device and trial runner, nvidia-smi's placement check)."""
    lines = []
    for slot, report in sorted(reports.items()):
        mapping = report.get("mapping", {})
        smi = mapping.get("nvidia_smi") or {}
        gpu = (
            f"ray GPU {','.join(mapping['ray_gpu_ids'])} -> adapter {mapping['adapter_index']}"
            if mapping.get("ray_gpu_ids")
            else "no Ray GPU"
        )
        placed = {True: "placement ok", False: "PLACEMENT MISMATCH", None: "placement unchecked"}[
            mapping.get("placement_ok")
        ]
        uuid = f" {smi['uuid']}" if smi.get("uuid") else ""
        steps = mapping.get("startup_s") or {}
        up = f"; up in {', '.join(f'{k} {v:.1f}' for k, v in steps.items())} s" if steps else ""
        lines.append(
            f"worker {slot} on {report.get('host', '?')} pid {report.get('pid', '?')}: {mapping.get('adapter', '?')};"
            f" {gpu}{uuid}; {placed}; topology {report['topology_hash'][:16]}{up}"
        )
    return "\n".join(lines)


def failure_summary(rows: dict[str, dict]) -> str:
    """"; N of M trials <status>: <first line>" for a problem without a certified trial: its
    commonest failure and that failure's first message line (a WGSL error's compiler line)."""
    failed = [r for r in rows.values() if r["status"] != "ok"]
    if not failed:
        return ""
    status, count = Counter(r["status"] for r in failed).most_common(1)[0]
    message = next(r["message"] for r in failed if r["status"] == status) or ""
    return f"; {count} of {len(rows)} trials {status}" + (f": {_headline(message)}" if message.strip() else "")


def _headline(message: str) -> str:
    """A failure message's telling line: wgpu's validation errors open with a generic line and
    give the compiler's ("... parsing error: no definition in scope for identifier ...") and
    its place (" ┌─ wgsl:6:51") further down."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    index = next((i for i, line in enumerate(lines) if i and "error:" in line.lower()), 0)
    where = next((line.split("wgsl:", 1)[1] for line in lines[index + 1 : index + 3] if "wgsl:" in line), "")
    return lines[index][:200] + (f" (wgsl:{where})" if where else "")
