"""Value objects shared by every layer: Schedule, Problem, trial Status, InvalidSchedule.

Frozen and hashable so they serve as dict keys and database keys; `key()` gives the
canonical text form stored in SQL and Parquet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum

BASE_KNOBS = ("workgroup_size", "items_per_invocation", "vector_width")


class InvalidSchedule(ValueError):
    """A schedule that can't run on this adapter or problem; says which limit or knob."""

    def __init__(self, kernel: str, schedule: Schedule, reason: str):
        self.kernel = kernel
        self.schedule = schedule
        self.reason = reason
        super().__init__(f"invalid schedule {schedule} for {kernel}: {reason}")


class Status(StrEnum):
    OK = "ok"
    INVALID_SCHEDULE = "invalid_schedule"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    WRONG_RESULT = "wrong_result"
    TIMEOUT = "timeout"
    WORKER_LOST = "worker_lost"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Schedule:
    """How a kernel is launched: the three shared knobs plus kernel-specific ones. `base` names
    the shared knobs it carries: all three for the built-ins (`of`), only those a farm.Kernel
    declares (`declared`), so a kernel's schedules print and store only its own knobs."""

    workgroup_size: int = 64
    items_per_invocation: int = 1
    vector_width: int = 1
    knobs: tuple[tuple[str, int], ...] = field(default=())
    base: tuple[str, ...] = BASE_KNOBS

    @classmethod
    def of(cls, **values: int) -> Schedule:
        base = {k: int(values.pop(k)) for k in BASE_KNOBS if k in values}
        return cls(**base, knobs=tuple(sorted((k, int(v)) for k, v in values.items())))

    @classmethod
    def declared(cls, **values: int) -> Schedule:
        """A schedule of exactly these knobs (shared knobs not given are not carried)."""
        return replace(cls.of(**values), base=tuple(k for k in BASE_KNOBS if k in values))

    def __getitem__(self, name: str) -> int:
        if name in self.base:
            return getattr(self, name)
        for key, value in self.knobs:
            if key == name:
                return value
        raise KeyError(f"schedule {self} has no knob {name!r}")

    def get(self, name: str, default: int) -> int:
        try:
            return self[name]
        except KeyError:
            return default

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.base} | dict(self.knobs)

    def key(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_key(cls, text: str) -> Schedule:
        values = json.loads(text)
        return cls.of(**values) if all(k in values for k in BASE_KNOBS) else cls.declared(**values)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.as_dict().items())


@dataclass(frozen=True)
class Problem:
    """A kernel's shape parameters, e.g. gemm m,k,n. Winners are per problem."""

    dims: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, **dims: int) -> Problem:
        return cls(tuple((k, int(v)) for k, v in dims.items()))

    def __getitem__(self, name: str) -> int:
        for key, value in self.dims:
            if key == name:
                return value
        raise KeyError(f"problem {self} has no dimension {name!r}")

    def as_dict(self) -> dict[str, int]:
        return dict(self.dims)

    def key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.dims)

    @classmethod
    def from_key(cls, text: str) -> Problem:
        pairs = [item.split("=", 1) for item in text.split(",") if item]
        return cls(tuple((k, int(v)) for k, v in pairs))

    def __str__(self) -> str:
        return self.key()
