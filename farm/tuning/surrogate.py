"""The model search's surrogates (farm.tuning.search.model_based): features of a space's
schedules and two cheap predictors of log(time) fitted on the measured ones, k-nearest
neighbours over log2 knob values (smooth trends) and ridge regression over one-hot knob
values (what each value is worth on its own)."""

from __future__ import annotations

import math

import numpy as np

from farm.schedule import Schedule
from farm.trial import TrialResult


def log_targets(results: list[TrialResult]) -> np.ndarray:
    """log(median time) per result; failures at log(4x) the slowest success."""
    times = [math.log(r.median_ns) for r in results if r.ok and r.median_ns]
    penalty = (max(times) if times else 0.0) + math.log(4.0)
    return np.array([math.log(r.median_ns) if r.ok and r.median_ns else penalty for r in results])


def knob_values(space: list[Schedule]) -> tuple[list[str], np.ndarray]:
    """(the knob names of the space, sorted; an int matrix: one row per schedule, a column per
    name, a knob a schedule lacks as 0). The model search builds its features and the polish
    its distances from it: per knob value, over the whole space at once, a fraction of what
    per-element Python cost a driver over a space of thousands."""
    rows = [s.as_dict() for s in space]
    names = sorted({name for row in rows for name in row})
    values = np.array([[row.get(n, 0) for n in names] for row in rows], dtype=np.int64).reshape(len(rows), len(names))
    return names, values


def _by_value(column: np.ndarray, value_of) -> np.ndarray:
    """`value_of(v)` for each entry, computed once per distinct value (the same float as per entry)."""
    distinct, inverse = np.unique(column, return_inverse=True)
    return np.array([value_of(int(v)) for v in distinct], dtype=np.float64)[inverse.reshape(-1)]


def knob_features(space: list[Schedule], values: np.ndarray | None = None) -> np.ndarray:
    """One row per schedule: log2(1 + knob value) per knob name, scaled to [0, 1] (`values`:
    the space's `knob_values`, when the caller has them)."""
    values = knob_values(space)[1] if values is None else values
    raw = np.empty(values.shape, dtype=np.float64)
    for j in range(values.shape[1]):
        raw[:, j] = _by_value(values[:, j], lambda v: math.log2(1 + max(v, 0)))
    span = raw.max(axis=0) - raw.min(axis=0)
    span[span == 0] = 1.0
    return (raw - raw.min(axis=0)) / span


def onehot_features(space: list[Schedule], values: np.ndarray | None = None) -> np.ndarray:
    """One row per schedule: a 0/1 column per (knob, value) present in the space, sorted
    (`values` as `knob_features`')."""
    values = knob_values(space)[1] if values is None else values
    blocks = []
    for j in range(values.shape[1]):
        distinct, inverse = np.unique(values[:, j], return_inverse=True)
        block = np.zeros((len(space), len(distinct)))
        block[np.arange(len(space)), inverse.reshape(-1)] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((len(space), 0))


def ridge_predict(known: np.ndarray, targets: np.ndarray, query: np.ndarray, lam: float = 1.0) -> np.ndarray:
    """Ridge regression (centred targets, L2 weight `lam`) fitted on known rows, applied to query rows."""
    mean = targets.mean()
    gram = known.T @ known + lam * np.eye(known.shape[1])
    weights = np.linalg.solve(gram, known.T @ (targets - mean))
    return query @ weights + mean


def ranks(values: np.ndarray) -> np.ndarray:
    """Each value's rank (0: the smallest; ties in order)."""
    out = np.empty(len(values))
    out[np.argsort(values, kind="stable")] = np.arange(len(values))
    return out


KNN_CHUNK = 1 << 16  # query rows x known rows x features per chunk: its temporaries stay in cache


def knn_predict(known: np.ndarray, targets: np.ndarray, query: np.ndarray, k: int = 5) -> np.ndarray:
    """Inverse-distance-weighted mean of the `k` nearest known targets for each query row
    (nearest first, equal distances in known-row order, as a stable sort ranks them)."""
    k = min(k, len(known))
    distances = np.empty((len(query), len(known)))
    step = max(1, KNN_CHUNK // max(1, known.size))
    for start in range(0, len(query), step):  # row by row the same arithmetic as one broadcast
        rows = query[start : start + step]
        distances[start : start + step] = np.sqrt(((rows[:, None, :] - known[None, :, :]) ** 2).sum(axis=2))
    nearest = _nearest(distances, k)
    d = np.take_along_axis(distances, nearest, axis=1)
    weights = 1.0 / (d + 1e-3)
    return (weights * targets[nearest]).sum(axis=1) / weights.sum(axis=1)


def _nearest(distances: np.ndarray, k: int) -> np.ndarray:
    """The first `k` columns of each row's stable argsort, without sorting whole rows: a
    partition finds each row's k-th distance; where exactly k lie at or below it, those k
    (in column order) are sorted stably; rows with ties across the k-th place are sorted whole."""
    if k >= distances.shape[1]:
        return np.argsort(distances, axis=1, kind="stable")[:, :k]
    kth = np.partition(distances, k - 1, axis=1)[:, k - 1 : k]
    inside = distances <= kth
    exact = inside.sum(axis=1) == k
    nearest = np.empty((len(distances), k), dtype=np.intp)
    rows = np.flatnonzero(exact)
    if len(rows):
        cols = np.nonzero(inside[rows])[1].reshape(len(rows), k)  # ascending within each row
        order = np.argsort(np.take_along_axis(distances[rows], cols, axis=1), axis=1, kind="stable")
        nearest[rows] = np.take_along_axis(cols, order, axis=1)
    rows = np.flatnonzero(~exact)
    if len(rows):
        nearest[rows] = np.argsort(distances[rows], axis=1, kind="stable")[:, :k]
    return nearest
