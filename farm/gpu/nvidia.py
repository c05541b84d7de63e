"""nvidia-smi queries: the one place farm shells out to it.

Each query runs `nvidia-smi --query-...=<fields> --format=csv,noheader,nounits` with a short
timeout and parses its CSV into one dict per line, keyed by the requested field names.
Every function returns None where nvidia-smi is missing, times out or exits non-zero, so
callers treat "no NVIDIA tooling" and "nothing to report" the same way they always did.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

__all__ = ["NVIDIA_SMI", "TIMEOUT_S", "compute_apps", "gpu_utilization", "query_gpus"]

NVIDIA_SMI = "nvidia-smi"
TIMEOUT_S = 10.0


def _run(query: str, fields: Sequence[str], timeout_s: float) -> list[dict[str, str]] | None:
    """Rows of `nvidia-smi --<query>=<fields>`; lines whose cell count is not len(fields) are skipped."""
    if not fields:
        raise ValueError(f"nvidia-smi {query}: no fields requested")
    command = [NVIDIA_SMI, f"--{query}={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    rows = []
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == len(fields):
            rows.append(dict(zip(fields, cells, strict=True)))
    return rows


def query_gpus(fields: Sequence[str], timeout_s: float = TIMEOUT_S) -> list[dict[str, str]] | None:
    """One {field: text} per GPU from `--query-gpu` (e.g. fields ("index", "uuid", "name")),
    in nvidia-smi's order; None where nvidia-smi is unavailable or fails."""
    return _run("query-gpu", fields, timeout_s)


def compute_apps(
    fields: Sequence[str] = ("pid", "gpu_uuid"), timeout_s: float = TIMEOUT_S
) -> list[dict[str, str]] | None:
    """One {field: text} per process holding a compute context (`--query-compute-apps`);
    [] when none does; None where nvidia-smi is unavailable or fails."""
    return _run("query-compute-apps", fields, timeout_s)


def gpu_utilization(timeout_s: float = TIMEOUT_S) -> float | None:
    """The highest utilization.gpu (percent) over all GPUs; GPUs reporting no number
    (e.g. "[N/A]") are ignored; None where nvidia-smi is unavailable or no GPU has a number."""
    rows = query_gpus(("utilization.gpu",), timeout_s)
    values = []
    for row in rows or []:
        try:
            values.append(float(row["utilization.gpu"]))
        except ValueError:
            continue
    return max(values) if values else None
