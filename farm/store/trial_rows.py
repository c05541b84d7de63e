"""A trial as a row of the trials table: `trial_rows` turns TrialResults into tuples in
TRIAL_COLUMNS order, bound for the database's driver (farm.store.repo.write_trial_batch
sends them as they are), and `summary_fields` reads a row's SUMMARY_FIELDS
(farm.store.summaries)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from operator import itemgetter

from farm.store.summaries import SUMMARY_FIELDS
from farm.trial import TrialResult

# Every column a trial's row holds, in trial_rows' tuple order (id is the database's).
TRIAL_COLUMNS = tuple(
    "campaign_id topology_hash kernel source_hash problem schedule status message median_ns p20_ns p80_ns"
    " min_ns reps timing_method max_abs mean_abs rmse max_rel host worker_id finished_at".split()
)
TOPOLOGY_INDEX = TRIAL_COLUMNS.index("topology_hash")
summary_fields = itemgetter(*(TRIAL_COLUMNS.index(name) for name in SUMMARY_FIELDS))
_NO_TIMING = (None,) * 6  # a failed trial's timing columns


def trial_rows(campaign_id: int | None, results: Iterable[TrialResult], processors: list) -> dict[tuple, tuple]:
    """Trial key -> (row: a tuple in TRIAL_COLUMNS order, bound for the driver, result), the
    first result of each key, in `results`' order; the values are as_row()'s, NaN as NULL."""
    by_key: dict[tuple, tuple[tuple, TrialResult]] = {}
    for index, result in enumerate(results):
        if not isinstance(result, TrialResult):
            raise TypeError(f"results[{index}] is {type(result).__name__}, expected TrialResult")
        k, t, m = result.key, result.timing, result.metrics
        trial_key = (k.topology_hash, k.kernel, k.source_hash, k.problem.key(), k.schedule.key())
        if trial_key in by_key:
            continue
        # only the timings and the error metrics are floats, so only they can be NaN (x != x)
        if t is None:
            timing: tuple = _NO_TIMING
        else:
            times = (t.median_ns, t.p20_ns, t.p80_ns, t.min_ns)
            timing = (*[None if x != x else x for x in times], t.reps, t.method)
        errors = [None if x != x else x for x in (m.max_abs, m.mean_abs, m.rmse, m.max_rel)]
        finished = datetime.fromtimestamp(result.finished_at, UTC)
        row = (campaign_id, *trial_key, result.status.value, result.message, *timing, *errors, result.host,
               result.worker_id, finished)  # fmt: skip
        if processors:
            bound = list(row)
            for column, process in processors:
                bound[column] = process(bound[column])
            row = tuple(bound)
        by_key[trial_key] = (row, result)
    return by_key
