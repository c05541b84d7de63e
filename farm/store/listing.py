"""Text tables of what is stored, for `farm winners` and the end of `farm tune`: a narrow
table that fits a terminal by default (`format_winners`), every column with `wide=True`,
and the rows as JSON (`winners_json`)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Sequence

from farm.schedule import Schedule
from farm.store.records import WinnerRecord

SHORT_HASH = 12  # how `farm winners` shows a topology hash; any unique prefix selects it


NOT_RECORDED = "\u2013"  # a decision or vendor value the row does not have (rows from before revision 0005)
WIDTH = 100  # what the default tables fit: a terminal a little wider than 80 columns
SCHEDULE_NOTE = "schedule: knobs that differ from the default ({wide}: every knob, every column)"
MARGIN_LEGEND = "margin: how much slower the runner-up is than the winner; tie: the two were within the noise"
CURRENT, STALE, UNKNOWN = "current", "stale", "unknown kernel"  # a winner's state, as every listing tells it


def winner_state(source_hash: str, current: str | None) -> str:
    """CURRENT, STALE (its kernel's source changed since) or UNKNOWN: a kernel this process
    doesn't know (`current` None: a user kernel whose file wasn't given) can't be judged stale."""
    if current is None:
        return UNKNOWN
    return STALE if source_hash != current else CURRENT


def changed_knobs(knobs: dict[str, int], default: dict[str, int], sep: str = ",") -> str:
    """The knobs that differ from the kernel's default schedule (`vector_width=4,workgroup_size=256`),
    "default" when none do."""
    return sep.join(f"{k}={v}" for k, v in sorted(knobs.items()) if default.get(k) != v) or "default"


def format_winners(
    records: Sequence[WinnerRecord], current_source_hash: Callable[[str], str | None], wide: bool = False
) -> str:
    """The winners as a table of at most WIDTH columns: kernel, problem, median, speedup over
    the default schedule, the margin over the runner-up (or tie), the schedule as the knobs
    that differ from the default (wrapped to fit); the topology as a column when several are
    listed (above the table when one is), and a note for a winner that is stale or whose
    kernel this process doesn't know. `wide`: every column (`format_wide_winners`)."""
    if not records:
        return "no winners stored yet: run `farm tune` first"
    if wide:
        return format_wide_winners(records, current_source_hash)
    several = len({r.topology_hash for r in records}) > 1
    notes = [_note(winner_state(r.source_hash, current_source_hash(r.kernel))) for r in records]
    header = ["kernel", "problem", "median_us", "speedup", "margin"] + ["topology"] * several + ["schedule"]
    rows = []
    for record in records:
        margin = NOT_RECORDED if record.margin is None else f"{100 * record.margin:+.1f}%"
        cells = [record.kernel, record.problem_key, f"{record.median_ns / 1000:.2f}", _speedup(record.speedup),
                 "tie" if record.tie else margin]  # fmt: skip
        rows.append(cells + [record.topology_hash[:SHORT_HASH]] * several + [short_schedule(record)])
    if any(notes):
        header.insert(2, "note")
        for row, note in zip(rows, notes, strict=True):
            row.insert(2, note or "")
    legend = [SCHEDULE_NOTE.format(wide="--wide")] + [MARGIN_LEGEND] * any(r.margin is not None for r in records)
    title = [] if several else [f"topology {records[0].topology_hash[:SHORT_HASH]}: {records[0].device_name}"]
    return "\n".join([*title, fit_table(header, rows, flex=len(header) - 1), *legend])


def _note(state: str) -> str:
    return "" if state == CURRENT else state


def _speedup(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.2f}x"


def short_schedule(record: WinnerRecord) -> str:
    """The winner's knobs that differ from its kernel's default schedule (`vector_width=4,
    workgroup_size=256`), "default" when none do; every knob for a kernel this process
    doesn't know."""
    from farm import catalog

    try:
        default = catalog.get(record.kernel).default.as_dict()
    except ValueError:
        return str(record.schedule)
    return changed_knobs(record.schedule.as_dict(), default)


def fit_table(header: Sequence[str], rows: Sequence[Sequence[str]], flex: int, width: int = WIDTH) -> str:
    """A fixed-width table whose column `flex` wraps (after a comma, else anywhere) onto lines of
    its own so that each line fits `width` characters, if the other columns leave it room."""
    table = [list(header)] + [list(row) for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    room = width - (sum(widths) - widths[flex]) - 2 * (len(header) - 1)
    room = max(room, len(header[flex]), 20)
    widths[flex] = min(widths[flex], room)
    lines = []
    for index, row in enumerate(table):
        for part, piece in enumerate(_wrap(row[flex], room)):
            cells = row if part == 0 else [""] * len(row)
            cells = [piece if i == flex else cell for i, cell in enumerate(cells)]
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _wrap(text: str, room: int) -> list[str]:
    """`text` in pieces of at most `room` characters, each ending after a comma where one fits."""
    pieces = []
    while len(text) > room:
        cut = text.rfind(",", 0, room) + 1 or room
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text]


def winners_json(records: Sequence[WinnerRecord], current_source_hash: Callable[[str], str | None]) -> str:
    """Every field of every winner as a JSON list, with `stale` (true, false, or null for a
    kernel this process doesn't know) and the schedule's knobs."""
    out = []
    for record in records:
        current = current_source_hash(record.kernel)
        row = dataclasses.asdict(record) | {"knobs": record.schedule.as_dict()}
        row["stale"] = None if current is None else record.is_stale(current)
        out.append({k: _json_value(v) for k, v in row.items()})
    return json.dumps(out, indent=2)


def _json_value(value):
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return None if isinstance(value, float) and not math.isfinite(value) else value  # JSON has no NaN


def format_wide_winners(records: Sequence[WinnerRecord], current_source_hash: Callable[[str], str | None]) -> str:
    """A fixed-width table: kernel, problem, schedule, median, default, speedup, the decision
    (margin of the runner-up over the winner, tie, the runner-up's knobs that differ from
    the winner's), `farm bench`'s speed against the vendor library (vendor time / tuned
    time), topology, device, stale. Values a row lacks (older rows) show as NOT_RECORDED.

    `current_source_hash(kernel)` gives the catalog's hash now (None for a kernel the
    catalog doesn't know); a winner tuned against another source is marked stale.
    """
    header = ("kernel", "problem", "schedule", "median_us", "default_us", "speedup", "margin", "tie", "runner_up",
              "vs_vendor", "topology", "device", "stale")  # fmt: skip
    rows = [header] + [_winner_cells(r, current_source_hash(r.kernel)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _winner_cells(record: WinnerRecord, current: str | None) -> tuple[str, ...]:
    stale = {CURRENT: "no", STALE: "yes", UNKNOWN: UNKNOWN}[winner_state(record.source_hash, current)]
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
