"""Value objects shared by every layer: Schedule, Problem, trial Status, InvalidSchedule.

Frozen and hashable so they serve as dict keys and database keys; `key()` gives the
canonical text form stored in SQL and Parquet.
"""

from __future__ import annotations

import functools
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
        super().__init__(kernel, schedule, reason)  # the message is made when shown: planning meets thousands

    def __str__(self) -> str:
        return f"invalid schedule {self.schedule} for {self.kernel}: {self.reason}"


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


def _knob(name: str, value: object) -> int:
    """A knob's value as an int; TypeError/ValueError naming the knob (not int()'s bare message)."""
    try:
        return int(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"schedule: knob {name}: expected an integer, got {type(value).__name__} {value!r}") from None
    except ValueError:
        raise ValueError(f"schedule: knob {name}: expected an integer, got {value!r}") from None


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
        base = {k: _knob(k, values.pop(k)) for k in BASE_KNOBS if k in values}
        return cls(**base, knobs=tuple(sorted((k, _knob(k, v)) for k, v in values.items())))

    @classmethod
    def declared(cls, **values: int) -> Schedule:
        """A schedule of exactly these knobs (shared knobs not given are not carried)."""
        return replace(cls.of(**values), base=tuple(k for k in BASE_KNOBS if k in values))

    def __getitem__(self, name: str) -> int:
        try:
            return self._values()[name]
        except KeyError:
            raise KeyError(f"schedule {self} has no knob {name!r}") from None

    _dict = None  # not a field: _values' memo, set on first use

    def get(self, name: str, default: int) -> int:
        return self._values().get(name, default)

    def as_dict(self) -> dict[str, int]:
        return dict(self._values())

    def items(self):
        """(knob, value) pairs, as as_dict's, without a copy (the checks read every schedule's)."""
        return self._values().items()

    def __reduce__(self):
        # Flat and interned: the schedules of a driver's results and a worker's jobs repeat, and
        # an interned one keeps its memoized key and values.
        fields = (self.workgroup_size, self.items_per_invocation, self.vector_width, self.knobs, self.base)
        return _interned, (Schedule, fields, self.__dict__.get("_key"))

    def _values(self) -> dict[str, int]:
        """Every knob's value, memoized like `key` (the checks and the search's features read them per schedule)."""
        cached = self._dict
        if cached is None:
            cached = {k: getattr(self, k) for k in self.base} | dict(self.knobs)
            object.__setattr__(self, "_dict", cached)
        return cached

    def key(self) -> str:
        # Memoized outside the fields (equality and hash ignore it): a driver asks each trial's key many times.
        cached = self.__dict__.get("_key")
        if cached is None:
            cached = json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_key", cached)
        return cached

    @classmethod
    def from_key(cls, text: str) -> Schedule:
        if cls is Schedule:
            return _schedule_from_key(text)
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

    _index = None  # not a field: the dims as a dict, the first of a repeated name, set on first use

    def __getitem__(self, name: str) -> int:
        index = self._index
        if index is None:
            index = dict(reversed(self.dims))
            object.__setattr__(self, "_index", index)
        try:
            return index[name]
        except KeyError:
            raise KeyError(f"problem {self} has no dimension {name!r}") from None

    def as_dict(self) -> dict[str, int]:
        return dict(self.dims)

    def __reduce__(self):
        return _interned, (Problem, (self.dims,), self.__dict__.get("_key"))  # as Schedule's

    def key(self) -> str:
        cached = self.__dict__.get("_key")  # memoized as Schedule.key
        if cached is None:
            cached = ",".join(f"{k}={v}" for k, v in self.dims)
            object.__setattr__(self, "_key", cached)
        return cached

    @classmethod
    def from_key(cls, text: str) -> Problem:
        pairs = [item.split("=", 1) for item in text.split(",") if item]
        return cls(tuple((k, int(v)) for k, v in pairs))

    def __str__(self) -> str:
        return self.key()


@functools.lru_cache(maxsize=1 << 16)
def _schedule_from_key(text: str) -> Schedule:
    """Schedule.from_key, parsed once per key: a driver reads back every trial of a problem
    (resume, finalists), and the schedules repeat across a kernel's problems."""
    values = json.loads(text)
    return Schedule.of(**values) if all(k in values for k in BASE_KNOBS) else Schedule.declared(**values)


_INTERNED: dict[tuple, Schedule | Problem] = {}
_INTERNED_MAX = 1 << 16


def _interned(cls: type, fields: tuple, key: str | None):
    """An unpickled Schedule or Problem: one object per distinct value, its key memo set from the sender's."""
    try:
        value = _INTERNED.get((cls, fields))
    except TypeError:  # a knob value that can't be hashed: a hand-built schedule the checks will refuse
        return cls(*fields)
    if value is None:
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()
        value = _INTERNED[(cls, fields)] = cls(*fields)
    if key is not None and "_key" not in value.__dict__:
        object.__setattr__(value, "_key", key)
    return value
