"""`farm.Kernel`: the public way to define a kernel of your own (docs/guides/custom-kernel.md).

One declaration builds a KernelSpec, so a user kernel goes through exactly the paths the
built-ins take (certification, tuning, the runtime):

    Kernel("softmax", source="softmax.wgsl", dims=("rows", "cols"),
           inputs={"x": "f32[rows, cols]"}, outputs={"y": "f32[rows, cols]"},
           space={"workgroup_size": [32, 64, 128], "unroll": [1, 2, 4]},
           restrict="unroll <= cols", grid="rows", reference=softmax_numpy,
           atol=1e-6, rtol=1e-5, sizes=["rows=64,cols=1000"])

- `source`: WGSL text, or a path (relative paths are relative to the defining file).
  `{{name}}` placeholders take knob or dim values; `override name: T;` declarations whose
  name is a knob get the knob's value as a pipeline constant.
- bindings, in order: every input (read-only storage), every output (read_write
  storage), every scratch buffer, then a uniform with the dims as u32, in `dims` order
  (`struct Params { rows: u32, cols: u32 }`); `params=False` leaves it out.
- shapes: `"dtype[expr, ...]"` with expressions of the dims; dtypes f32, i32, u32 (or
  numpy names). Knob values may be int, bool or str (schedules store a str knob as its
  index in the list). Restrictions: expressions (str or list of str) over knobs and dims,
  or a function; `grid`: an expression, a tuple of up to 3 of them, or a function, of
  dims and knobs. A function of one argument gets a namespace of dims and knobs (`n.rows`
  or `n["rows"]`), one of two gets (dims, knobs). The reference gets the inputs (and any
  dims or knobs it names as parameters) and returns the output (a tuple or dict for
  several). Inputs default to seeded normal floats / small integers (`generate=` replaces
  them: a function of (dims dict, numpy Generator) returning {input: array}).
- several passes: `passes=[Pass(entry, grid=..., binds=[...]), ...]` instead of `grid`, and
  `scratch={"partials": "f32[splits]"}`: buffers the passes share, shaped by dims and knobs
  (farm.catalog.passes resolves the passes and checks each binding against the WGSL).
- staleness: the hash covers the WGSL, the defining file's text (else the functions'
  source) and every argument, so changing any of them makes old winners stale.
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from farm.catalog import _REGISTRY, KERNEL_MODULES, Arg, KernelSpec, Launch, register, rng_for
from farm.catalog import passes as _passes
from farm.catalog.passes import OVERRIDE, PLACEHOLDER, Pass
from farm.catalog.rules import (
    ADAPTER_NAMES,
    TEXTS,
    KernelError,
    Namespace,
    adapter_values,
    check_names,
    defining_file,
    evaluate,
    parse_shape,
    read_text,
)
from farm.catalog.wgsl import workgroup_threads
from farm.gpu import HardwareProfile
from farm.schedule import BASE_KNOBS, InvalidSchedule, Problem, Schedule


class Kernel(KernelSpec):
    """A user kernel; see the module docstring. Registered in the catalog when defined.
    Its modules keep naga's runtime checks (index clamps, loop bounds): the farm can't know
    that the WGSL checks every access itself, as the built-in kernels do."""

    runtime_checks = True

    def __init__(
        self,
        name: str,
        source: str | None = None,
        *,
        dims: tuple[str, ...] | list[str],
        inputs: Mapping[str, str],
        outputs: Mapping[str, str],
        space: Mapping[str, list],
        reference: Callable,
        grid: str | tuple | Callable | None = None,
        passes: list[Pass | Mapping] | None = None,
        scratch: Mapping[str, str] | None = None,
        restrict: str | list[str] | Callable | None = None,
        sizes: list[str | Mapping[str, int]] = (),
        atol: float = 1e-5,
        rtol: float = 1e-5,
        exact: bool | None = None,
        generate: Callable | None = None,
        params: bool = True,
        defaults: Mapping[str, object] | None = None,
        workgroup_bytes: str | Callable | None = None,
    ):
        self.name, self.dims, self.params = name, tuple(dims), params
        self.origin = defining_file()
        self.values = {k: list(v) for k, v in space.items()}
        self.inputs = {k: self._shape_spec(k, v) for k, v in inputs.items()}
        self.outputs = {k: self._shape_spec(k, v) for k, v in outputs.items()}
        self.scratch = {k: self._shape_spec(k, v, knobs=True) for k, v in (scratch or {}).items()}
        for knob, values in self.values.items():
            if not values or not all(isinstance(v, (int, bool, str, np.integer)) for v in values):
                self._fail(f"space[{knob!r}] must be a non-empty list of int, bool or str values, got {values!r}")
        clash = set(self.values) & set(self.dims)
        if clash:
            self._fail(f"{sorted(clash)} are both knobs and dims; rename one")
        reserved = (set(self.values) | set(self.dims)) & set(ADAPTER_NAMES)
        if reserved:
            self._fail(f"{sorted(reserved)} name the adapter's limits in restrictions and grids; rename it")
        names = [*self.inputs, *self.outputs, *self.scratch]
        if len(set(names)) != len(names) or "params" in names:
            self._fail(f"inputs, outputs and scratch need distinct names other than 'params', got {names}")
        self.arg_names = names + (["params"] if self.params and self.dims else [])
        self.steps = _passes.resolve(self, source, grid, passes)
        self.source_path = self.steps[0].where if len({s.where for s in self.steps}) == 1 else None
        self._template = "\n".join(dict.fromkeys(s.template for s in self.steps))
        self.grid_rule = grid if passes is None else tuple(s.grid for s in self.steps)
        self.space = {
            k: tuple(range(len(v))) if _is_str(v) else tuple(int(x) for x in v) for k, v in self.values.items()
        }
        chosen = {k: v[0] for k, v in self.values.items()} | dict(defaults or {})
        self.default = Schedule.declared(**{k: self._encode(k, v) for k, v in chosen.items()})
        self.restrictions = [restrict] if isinstance(restrict, str) or callable(restrict) else list(restrict or ())
        self.shared_rule = workgroup_bytes
        self._adapter = adapter_values(None)  # the adapter's limits once `check` has seen one
        for rule in self.restrictions:
            self._check_names(rule, "restriction")
        for step in self.steps:
            for rule in step.grid if isinstance(step.grid, tuple) else (step.grid,):
                self._check_names(rule, "grid")
        if workgroup_bytes:
            self._check_names(workgroup_bytes, "workgroup_bytes")
        self.reference_fn, self.generate_fn = reference, generate
        ref_params = set(inspect.signature(reference).parameters)
        unknown = ref_params - set(self.inputs) - set(self.dims) - set(self.values)
        if unknown:
            self._fail(
                f"reference parameter(s) {sorted(unknown)} are no input, dim or knob; inputs: {list(self.inputs)}"
            )
        self.reference_knobs = sorted(ref_params & set(self.values))
        self.schedule_dependent_reference = bool(self.reference_knobs)
        self.atol, self.rtol = atol, rtol
        integer_out = all(np.dtype(d).kind in "iu" for d, _ in self.outputs.values())
        self.exact = integer_out if exact is None else exact
        self.sizes = [self._size(s) for s in sizes]
        if defaults is None and self.sizes:  # the first schedule the restrictions allow for the first size
            self.default = next((s for s in self.schedules() if self._allowed(s, self.sizes[0])), self.default)
        for placeholder in PLACEHOLDER.findall(self._template):
            if placeholder not in self.values and placeholder not in self.dims:
                self._fail(
                    f"{_passes.where(self.steps, placeholder)} has placeholder {{{{{placeholder}}}}}, "
                    "which is no knob or dim "
                    f"(knobs: {', '.join(self.values)}; dims: {', '.join(self.dims)})"
                )
        for step in self.steps:
            _passes.check_bindings(self, step)
        self.overrides = set(OVERRIDE.findall(self._template)) & set(self.values)
        existing = _REGISTRY.get(name)
        if name in KERNEL_MODULES or (existing is not None and not isinstance(existing, Kernel)):
            self._fail("a built-in kernel has that name; choose another")
        if isinstance(existing, Kernel) and existing.origin != self.origin:
            self._fail(f"defined twice, in {existing.origin or '<interactive>'} and {self.origin or '<interactive>'}")
        register(self)

    # -- definition checks -------------------------------------------------------------
    def _fail(self, message: str):
        raise KernelError(f"kernel {self.name!r}: {message}")

    def _call(self, what: str, fn: Callable, problem: Problem, *args, **kwargs):
        """The user's `fn` (reference or generate); what it raises is their kernel's mistake,
        so it comes back as a KernelError naming the kernel, the function and the problem
        (one line on the CLI, on a Ray worker too), the original chained."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any exception of the user's code
            where = getattr(fn, "__qualname__", what)
            raise KernelError(f"kernel {self.name!r}: its {what} ({where}) raised {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]} for {problem}") from exc  # fmt: skip

    def _shape_spec(self, arg: str, text: str, knobs: bool = False) -> tuple[type, tuple[str, ...]]:
        dtype, shape = parse_shape(self.name, arg, text)
        for expr in shape:
            self._check_names(expr, f"shape of {arg}", dims_only=not knobs)
        return dtype, shape

    def _check_names(self, rule, what: str, dims_only: bool = False) -> None:
        knobs = () if dims_only else [*getattr(self, "values", ()), *ADAPTER_NAMES]
        check_names(self.name, rule, what, self.dims, knobs, getattr(self, "values", ()) if dims_only else ())

    def _size(self, size) -> Problem:
        if isinstance(size, str):
            try:
                size = {k.strip(): int(v) for k, v in (pair.split("=", 1) for pair in size.split(","))}
            except ValueError:
                self._fail(f"size {size!r}: expected 'dim=value,...'")
        try:
            return self.problem(**size)
        except ValueError as exc:
            self._fail(str(exc))

    def _allowed(self, schedule: Schedule, problem: Problem) -> bool:
        ns = self.namespace(problem, schedule)
        return all(self.evaluate(rule, ns, "restriction") for rule in self.restrictions)

    def _encode(self, knob: str, value) -> int:
        if knob not in self.values:
            self._fail(f"defaults name {knob!r}, which is not a knob ({', '.join(self.values)})")
        if _is_str(self.values[knob]):
            return self.values[knob].index(value)
        return int(value)

    def schedules(self) -> list[Schedule]:
        """Every schedule of the space, each carrying only the knobs the kernel declares."""
        names = list(self.space)
        return [Schedule.declared(**dict(zip(names, v, strict=True))) for v in itertools.product(*self.space.values())]

    # -- evaluation ----------------------------------------------------------------------
    def knobs(self, schedule: Schedule) -> dict[str, object]:
        """The schedule's knob values as declared (str and bool knobs decoded)."""
        out = {}
        for knob, values in self.values.items():
            raw = schedule.get(knob, self.default.get(knob, 0))
            if _is_str(values):
                out[knob] = values[raw] if 0 <= raw < len(values) else raw
            else:
                out[knob] = bool(raw) if all(isinstance(v, bool) for v in values) else raw
        return out

    def namespace(self, problem: Problem, schedule: Schedule | None = None) -> Namespace:
        """Dims, the schedule's knobs and the adapter's limits (ADAPTER_NAMES) by name."""
        knobs = self.knobs(schedule) if schedule is not None else {}
        return Namespace(self.name, self._adapter | problem.as_dict() | knobs)

    def evaluate(self, rule, ns: Namespace, what: str):
        return evaluate(self.name, self.dims, rule, ns, what)

    def shape(self, arg: str, problem: Problem, schedule: Schedule | None = None) -> tuple[int, ...]:
        """An input's or output's shape for `problem`; a scratch buffer's for `problem` and `schedule`."""
        spec = self.inputs.get(arg) or self.outputs.get(arg) or self.scratch[arg]
        ns = self.namespace(problem, schedule if arg in self.scratch else None)
        return tuple(int(self.evaluate(expr, ns, f"shape of {arg}")) for expr in spec[1])

    def groups(self, schedule: Schedule, problem: Problem, step: int = 0) -> int | tuple[int, int, int]:
        """The workgroup count of pass `step`."""
        ns, rule = self.namespace(problem, schedule), self.steps[step].grid
        grid = tuple(self.evaluate(g, ns, "grid") for g in rule) if isinstance(rule, tuple) else None
        grid = grid if grid is not None else self.evaluate(rule, ns, "grid")
        if isinstance(grid, (int, np.integer)):
            return max(1, int(grid))
        grid = tuple(max(1, int(g)) for g in grid)
        if not 1 <= len(grid) <= 3:
            self._fail(f"grid must give 1 to 3 workgroup counts, got {grid}")
        return (*grid, 1, 1)[:3]

    # -- KernelSpec ------------------------------------------------------------------------
    def template(self) -> str:
        return self._template

    def source_name(self, step: int) -> str | None:
        return self.steps[step].path or f"{self.name} source"

    def host_source(self) -> str:
        """The defining file's text (else the functions' source) and every declared value."""
        parts = (
            [read_text(self.origin)] if self.origin and (self.origin in TEXTS or Path(self.origin).is_file()) else []
        )
        if not parts:
            for fn in (self.reference_fn, self.generate_fn, *(s.grid for s in self.steps), *self.restrictions):
                if callable(fn):
                    try:
                        parts.append(inspect.getsource(fn))
                    except (OSError, TypeError):
                        parts.append(repr(getattr(fn, "__code__", fn).co_code if hasattr(fn, "__code__") else fn))
        rules = [r for r in self.restrictions if not callable(r)], repr(self.grid_rule), repr(self.shared_rule)
        steps = [(s.where, s.entry, repr(s.grid), s.bindings, s.numbers) for s in self.steps]
        declared = (self.dims, self.inputs, self.outputs, self.values, self.default.key(), self.params, self.exact)
        if self.scratch or len(self.steps) > 1:  # one-pass kernels without scratch keep their hash
            declared += (self.scratch, steps)
        return "\n".join(parts) + repr((declared, self.atol, self.rtol, rules))

    def default_problems(self, profile: HardwareProfile) -> list[Problem]:
        if not self.sizes:
            self._fail("no sizes to tune; pass sizes=['dim=value,...'] to Kernel or --sizes to `farm tune`")
        return list(self.sizes)

    def certify_problems(self) -> list[Problem]:
        return self.default_problems(None)  # type: ignore[arg-type]

    def check(self, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
        self._adapter = adapter_values(profile)  # what restrictions, grids and launch() read
        for knob in schedule.as_dict():
            if knob not in self.space and knob not in BASE_KNOBS:
                raise InvalidSchedule(self.name, schedule, f"unknown knob {knob!r} (space: {sorted(self.space)})")
        ns = self.namespace(problem, schedule)
        for rule in self.restrictions:
            if not self.evaluate(rule, ns, "restriction"):
                shown = rule if isinstance(rule, str) else getattr(rule, "__name__", "restriction")
                raise InvalidSchedule(self.name, schedule, f"restriction {shown!r} is false")
        _passes.check_limits(self, schedule, problem, profile)
        need, storage = self.workgroup_bytes(schedule, problem), profile.limit("max-compute-workgroup-storage-size")
        if need > storage:
            raise InvalidSchedule(self.name, schedule, f"needs {need} bytes of workgroup storage > {storage}")

    def buffer_bytes(self, problem: Problem) -> dict[str, int]:
        """Every declared input and output at its declared shape (no scratch is declared)."""
        return {
            name: np.dtype(dtype).itemsize * math.prod(self.shape(name, problem))
            for name, (dtype, _) in {**self.inputs, **self.outputs}.items()
        }

    def workgroup_bytes(self, schedule: Schedule, problem: Problem) -> int:
        if self.shared_rule is None:
            return 0
        return int(self.evaluate(self.shared_rule, self.namespace(problem, schedule), "workgroup_bytes"))

    def threads(self, ns: Namespace, step: int = 0) -> int | None:
        return workgroup_threads(self.render(ns, step), ns, self.steps[step].entry)

    def render(self, ns: Mapping, step: int = 0) -> str:
        """Pass `step`'s WGSL with the placeholders filled."""
        return self.steps[step].render(ns)

    def generate(self, problem: Problem, seed: int) -> dict[str, np.ndarray]:
        if self.generate_fn is not None:
            rng = rng_for(seed, self.name, problem.key())
            data = self._call("generate", self.generate_fn, problem, problem.as_dict(), rng)
            return {name: np.ascontiguousarray(data[name], dtype) for name, (dtype, _) in self.inputs.items()}
        out = {}
        for name, (dtype, _) in self.inputs.items():
            rng, shape = rng_for(seed, self.name, problem.key(), name), self.shape(name, problem)
            kind = np.dtype(dtype).kind
            if kind == "f":
                out[name] = rng.standard_normal(shape).astype(dtype)
            else:
                out[name] = rng.integers(-100 if kind == "i" else 0, 100, shape).astype(dtype)
        return out

    def reference_key(self, schedule: Schedule) -> str:
        return ",".join(f"{k}={schedule.get(k, 0)}" for k in self.reference_knobs)

    def reference(self, problem: Problem, schedule: Schedule, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ns = self.namespace(problem, schedule)
        params = inspect.signature(self.reference_fn).parameters
        arguments = {p: inputs[p] if p in self.inputs else ns[p] for p in params}
        result = self._call("reference", self.reference_fn, problem, **arguments)
        names = list(self.outputs)
        if isinstance(result, Mapping):
            values = [result.get(n) for n in names]
        else:
            values = list(result) if isinstance(result, tuple) else [result]
        if len(values) != len(names) or any(v is None for v in values):
            self._fail(f"reference returned {len(values)} value(s); expected one per output {names} (a tuple or dict)")
        out = {}
        for name, value in zip(names, values, strict=True):
            value, want = np.asarray(value), self.shape(name, problem)
            if value.shape != want:
                self._fail(f"reference returned shape {value.shape} for output {name!r}; expected {want} "
                           f"({', '.join(self.outputs[name][1])}) for {problem}")  # fmt: skip
            out[name] = value.astype(self.outputs[name][0])
        return out

    def launch(self, schedule: Schedule, problem: Problem, inputs: dict[str, np.ndarray]) -> Launch:
        args = [Arg(n, "read", np.ascontiguousarray(inputs[n], dtype)) for n, (dtype, _) in self.inputs.items()]
        args += [
            Arg(n, "storage", dtype=dtype, shape=self.shape(n, problem), output=True)
            for n, (dtype, _) in self.outputs.items()
        ]
        scratch = self.scratch.items()
        args += [Arg(n, "storage", dtype=d, shape=self.shape(n, problem, schedule)) for n, (d, _) in scratch]
        if self.params and self.dims:
            values = [problem[d] for d in self.dims]
            args.append(Arg("params", "uniform", np.array(values + [0] * (-len(values) % 4), np.uint32)))
        steps = _passes.dispatches(self, schedule, problem)
        first = steps[0]
        return Launch(first.source, args, first.groups, first.constants, first.entry_point, first.bindings,
                      first.numbers, epilogue=steps[1:])  # fmt: skip

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        return (self.atol, self.rtol)


def _is_str(values: list) -> bool:
    return any(isinstance(v, str) for v in values)
