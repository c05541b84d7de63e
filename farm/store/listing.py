"""Text tables of what is stored, for `farm winners` and the end of `farm tune`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from farm.schedule import Schedule
from farm.store.records import WinnerRecord

SHORT_HASH = 12  # how `farm winners` shows a topology hash; any unique prefix selects it


NOT_RECORDED = "\u2013"  # a decision or vendor value the row does not have (rows from before revision 0005)


def format_winners(records: Sequence[WinnerRecord], current_source_hash: Callable[[str], str | None]) -> str:
    """A fixed-width table: kernel, problem, schedule, median, default, speedup, the decision
    (margin of the runner-up over the winner, tie, the runner-up's knobs that differ from
    the winner's), `farm bench`'s speed against the vendor library (vendor time / tuned
    time), topology, device, stale. Values a row lacks (older rows) show as NOT_RECORDED.

    `current_source_hash(kernel)` gives the catalog's hash now (None for a kernel the
    catalog doesn't know); a winner tuned against another source is marked stale.
    """
    if not records:
        return "no winners stored yet: run `farm tune` first"
    header = ("kernel", "problem", "schedule", "median_us", "default_us", "speedup", "margin", "tie", "runner_up",
              "vs_vendor", "topology", "device", "stale")  # fmt: skip
    rows = [header] + [_winner_cells(r, current_source_hash(r.kernel)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _winner_cells(record: WinnerRecord, current: str | None) -> tuple[str, ...]:
    stale = "unknown kernel" if current is None else ("yes" if record.is_stale(current) else "no")
    return (
        record.kernel,
        record.problem_key,
        str(record.schedule),
        f"{record.median_ns / 1000:.2f}",
        "-" if record.default_median_ns is None else f"{record.default_median_ns / 1000:.2f}",
        "-" if record.speedup is None else f"{record.speedup:.2f}x",
        NOT_RECORDED if record.margin is None else f"{100 * record.margin:+.1f}%",
        NOT_RECORDED if record.tie is None else ("yes" if record.tie else "no"),
        runner_up_knobs(record),
        NOT_RECORDED if record.vendor_ratio is None else f"{record.vendor_ratio:.2f}x",
        record.topology_hash[:SHORT_HASH],
        record.device_name,
        stale,
    )


def runner_up_knobs(record: WinnerRecord) -> str:
    """The runner-up as the knobs where it differs from the winner (`vector_width=2`), "same
    knobs" when none do, NOT_RECORDED without one."""
    if not record.runner_up:
        return NOT_RECORDED
    mine, theirs = record.schedule.as_dict(), Schedule.from_key(record.runner_up).as_dict()
    differing = [f"{k}={theirs.get(k, '-')}" for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    return ",".join(differing) or "same knobs"


def resolve_topology(prefix: str, stored: Iterable[str]) -> str:
    """The one stored topology hash starting with `prefix` (as `farm winners` prints them, or
    whole); ValueError naming the stored ones when none or several match."""
    hashes = sorted(set(stored))
    matches = [h for h in hashes if h.startswith(prefix.strip().lower())] if prefix.strip() else []
    if len(matches) == 1:
        return matches[0]
    shown = ", ".join(h[:SHORT_HASH] for h in hashes) or "none"
    if not matches:
        raise ValueError(f"no stored topology matches {prefix!r}; stored topologies: {shown}")
    raise ValueError(f"topology {prefix!r} matches {len(matches)} stored topologies ({shown}): give more of the hash")
