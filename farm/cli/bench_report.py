"""`farm bench`'s rows and what it writes of them: the row type, the exit rule, the printed
line, the ratios per (kernel, problem), and the Markdown + JSON results."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class BenchRow:
    kernel: str
    problem: str
    variant: str  # default | tuned | vendor | copy
    schedule: str
    median_ms: float
    tflops: float
    gbps: float
    certified: bool
    note: str = ""
    method: str = ""
    clock: float | None = None  # the clock canary right after the timing / its best (Device.clock_ratio)


def bench_passed(rows: list[BenchRow]) -> bool:
    """Every farm row (default, tuned, tuned call) that ran is certified; vendor rows and copy don't count."""
    return all(
        r.certified for r in rows if r.variant in ("default", "tuned", "tuned call") and r.note != "no winner stored"
    )


def print_rows(rows: list[BenchRow]) -> None:
    for r in rows:
        print(
            f"{r.kernel:<13} {r.problem:<24} {r.variant:<8} {r.median_ms:>10.4f} ms {r.tflops:>8.2f} TFLOP/s "
            f"{r.gbps:>8.0f} GB/s {'ok' if r.certified else 'FAIL'} {r.schedule} {r.note}"
        )


def by_problem(rows: list[BenchRow]) -> dict[tuple[str, str], dict[str, BenchRow]]:
    """{(kernel, problem): {variant: row}}."""
    keyed: dict[tuple[str, str], dict[str, BenchRow]] = {}
    for r in rows:
        keyed.setdefault((r.kernel, r.problem), {})[r.variant] = r
    return keyed


def speed(a: BenchRow | None, b: BenchRow | None) -> float | None:
    """b's time over a's (how much faster a is), None unless both ran certified."""
    if a is None or b is None or not a.certified or not b.certified or not a.median_ms > 0:
        return None
    return b.median_ms / a.median_ms


def vendor_speed(tuned: BenchRow | None, vendor: BenchRow | None) -> float | None:
    """The kernel-only speed against the vendor: None when ours was timed by host wall (an
    adapter without timestamps), which holds the submission and is not kernel-only."""
    return None if tuned is None or tuned.method == "host" else speed(tuned, vendor)


def ratios(rows: list[BenchRow], ceiling: float) -> list[dict]:
    """Per (kernel, problem): tuned/vendor (kernel-only; per call), tuned/default and tuned
    bandwidth / copy ceiling, each with the methods of the two rows it compares."""
    out = []
    for (kernel, problem), v in by_problem(rows).items():
        if kernel == "copy":
            continue
        tuned, default, vendor = v.get("tuned"), v.get("default"), v.get("vendor")
        tuned_call, vendor_call = v.get("tuned call"), v.get("vendor call")

        def methods(a, b):
            return f"{a.method} vs {b.method}" if a is not None and b is not None else None

        out.append(
            {
                "kernel": kernel,
                "problem": problem,
                "tuned_vs_vendor_speed": vendor_speed(tuned, vendor),  # kernel-only: timestamps vs graph replay
                "tuned_vs_vendor_speed_method": methods(tuned, vendor),
                "tuned_vs_vendor_per_call": speed(tuned_call, vendor_call),  # host wall, sync each call
                "tuned_vs_vendor_per_call_method": methods(tuned_call, vendor_call),
                "tuned_vs_default_speedup": speed(tuned, default),
                "tuned_vs_default_method": methods(tuned, default),
                "tuned_fraction_of_copy_bw": (tuned.gbps / ceiling) if tuned and tuned.certified else None,
            }
        )
    return out


def write_results(rows: list[BenchRow], out: Path, adapter: str, ceiling: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.date.today().isoformat()
    summary = ratios(rows, ceiling)
    payload = {
        "date": stamp,
        "adapter": adapter,
        "copy_gbps": ceiling,
        "rows": [asdict(r) for r in rows],
        "ratios": summary,
    }
    (out / "bench.json").write_text(json.dumps(payload, indent=2, default=float))
    lines = [
        f"# farm bench {stamp}",
        "",
        f"adapter: {adapter}",
        f"copy kernel: {ceiling:.0f} GB/s",
        "clock: the clock canary right after a timing against its best on this device (1.00: full clocks)",
        "",
        "| kernel | problem | variant | ms | TFLOP/s | GB/s | certified | method | clock | schedule |",
        "| :-- | :-- | :-- | --: | --: | --: | :-: | :-- | --: | :-- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.kernel} | {r.problem} | {r.variant} | {r.median_ms:.4f} | {r.tflops:.2f} | {r.gbps:.0f} "
            f"| {'yes' if r.certified else 'no'} | {r.method} | {'-' if r.clock is None else f'{r.clock:.2f}'} "
            f"| {r.schedule} {r.note} |"
        )
    lines += [
        "",
        "| kernel | problem | tuned/vendor speed, kernel-only | tuned/vendor speed, per call | tuned/default "
        "| fraction of copy BW |",
        "| :-- | :-- | --: | --: | --: | --: |",
    ]
    for s in summary:

        def f(x):
            return "-" if x is None else f"{x:.2f}"

        lines.append(
            f"| {s['kernel']} | {s['problem']} | {f(s['tuned_vs_vendor_speed'])} | {f(s['tuned_vs_vendor_per_call'])} "
            f"| {f(s['tuned_vs_default_speedup'])} | {f(s['tuned_fraction_of_copy_bw'])} |"
        )
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'bench.md'} and {out / 'bench.json'}")
