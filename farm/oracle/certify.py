"""`farm certify`: each kernel's default and sampled schedules over its certify problems."""

from __future__ import annotations

from dataclasses import dataclass

from farm import catalog
from farm.gpu import Device
from farm.oracle import compare as oracle


@dataclass(frozen=True)
class CertifyRow:
    kernel: str
    problem: str
    schedule: str
    status: str
    max_abs: float
    max_rel: float
    message: str


def certify_kernels(
    kernels: list[str], schedules: int = 4, seed: int = 0, device: Device | None = None
) -> list[CertifyRow]:
    device = device or Device()
    print(f"adapter: {device.profile.summary}  topology {device.profile.topology_hash()[:16]}")
    rows = []
    for name in kernels:
        spec = catalog.get(name)
        candidates = [spec.default] + [s for s in spec.sample_schedules(schedules, seed) if s != spec.default]
        for problem in spec.certify_problems():
            for schedule in candidates:
                result = oracle.certify(spec, schedule, problem, device, seed)
                rows.append(
                    CertifyRow(
                        name,
                        problem.key(),
                        str(schedule),
                        result.status.value,
                        result.metrics.max_abs,
                        result.metrics.max_rel,
                        result.message,
                    )
                )
    return rows


def verdict(rows: list[CertifyRow]) -> str:
    """Why `farm certify` fails ("" when it passes): a schedule failed, or none was certified
    (every one rejected as invalid, or nothing ran): a run that certified nothing proves nothing."""
    failed = [r for r in rows if r.status not in ("ok", "invalid_schedule")]
    if failed:
        return f"{len(failed)} schedule(s) failed certification"
    if not any(r.status == "ok" for r in rows):
        return f"nothing was certified: {len(rows)} schedule(s) ran, every one rejected as invalid"
    return ""


def format_table(rows: list[CertifyRow]) -> str:
    """The rows, one line each; a message of several lines (a compiler's report) is printed
    once below the table, each row that had it naming it by number."""
    header = f"{'kernel':<14} {'problem':<26} {'status':<17} {'max_abs':>10} {'max_rel':>10}  schedule"
    lines = [header, "-" * len(header)]
    reports: dict[str, int] = {}
    for r in rows:
        note = f"  ({r.message})" if r.status != "ok" else ""
        if r.status != "ok" and "\n" in r.message.strip():
            text = r.message.replace(f" schedule {r.schedule}", "").replace(f"[{r.schedule}]", "").strip()
            note = f"  (error {reports.setdefault(text, len(reports) + 1)} below)"
        lines.append(
            f"{r.kernel:<14} {r.problem:<26} {r.status:<17} {r.max_abs:>10.2e} {r.max_rel:>10.2e}  {r.schedule}{note}"
        )
    ok = sum(r.status == "ok" for r in rows)
    invalid = sum(r.status == "invalid_schedule" for r in rows)
    lines.append(f"{ok} certified, {invalid} rejected as invalid, {len(rows) - ok - invalid} failed")
    lines += [f"\nerror {number}: {text}" for text, number in reports.items()]
    return "\n".join(lines)
