"""The passes of a `farm.Kernel`: each `farm.Pass` declared (entry point, grid, buffers bound
by name, its own source or the kernel's) resolved against its WGSL, each binding checked
against the shader's declaration (access and dtype) at definition, each pass held to the
adapter's limits per schedule, and the passes rendered into the dispatches of one launch.
`kernel` below is the farm.catalog.user.Kernel being defined or run."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from farm import paths
from farm.catalog import Pass as Dispatch
from farm.catalog.rules import KernelError, read_text
from farm.catalog.wgsl import READ_AS, entry_points, resources, scalar_of
from farm.gpu import MAX_GROUPS_PER_DIM, HardwareProfile
from farm.schedule import InvalidSchedule, Problem, Schedule

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
OVERRIDE = re.compile(r"^\s*override\s+(\w+)", re.MULTILINE)


@dataclass(frozen=True)
class Pass:
    """One dispatch of a `farm.Kernel` pipeline: the `entry` point of `source` (WGSL text or a
    path; the Kernel's `source` when None), its `grid` (as Kernel's) and the buffers it
    `binds` by name (inputs, outputs, scratch, "params"; None: all of them, in that order)."""

    entry: str = "main"
    grid: str | int | tuple | Callable = 1
    binds: tuple[str, ...] | list[str] | None = None
    source: str | None = None


@dataclass(frozen=True)
class Step:
    """A declared pass, resolved: its WGSL, the args it binds (indices) and their @binding numbers."""

    where: str
    path: str | None
    template: str
    entry: str
    grid: object
    bindings: tuple[int, ...]
    numbers: tuple[int, ...]

    def render(self, ns: Mapping) -> str:
        """The WGSL with the placeholders filled from `ns` (dims and knobs)."""

        def value(match: re.Match) -> str:
            v = ns[match.group(1)]
            return ("true" if v else "false") if isinstance(v, bool) else str(v)

        return PLACEHOLDER.sub(value, self.template)


def _fail(kernel, message: str):
    raise KernelError(f"kernel {kernel.name!r}: {message}")


def read_source(kernel, source: str) -> tuple[str | None, str]:
    """(path or None, WGSL text) of `source`: WGSL text, or a path relative to the defining file."""
    if not isinstance(source, str):
        _fail(kernel, f"source must be WGSL text or a path, got {type(source).__name__}; several passes: "
                      "passes=[farm.Pass(entry=..., grid=..., binds=[...]), ...]")  # fmt: skip
    if "\n" in source or "@compute" in source:
        return None, source
    path = Path(source)
    if not path.is_absolute():
        path = (Path(kernel.origin).parent if kernel.origin else Path.cwd()) / path
    try:
        return str(path), read_text(str(path), "WGSL file")
    except (OSError, paths.UnusablePath) as exc:
        reason = getattr(exc, "strerror", None) or exc
        _fail(kernel, f"cannot read its WGSL {path}: {reason}; `source` is WGSL text or a path relative to the file "
                      "that defines the kernel")  # fmt: skip


def where(steps: list[Step], text: str) -> str:
    """The file and line of the first pass whose WGSL holds `text`."""
    for step in steps:
        line = next((i for i, row in enumerate(step.template.splitlines(), 1) if text in row), 0)
        if line:
            return f"{step.where} line {line}"
    return "source"


def resolve(kernel, source, grid, passes) -> list[Step]:
    """The declared passes resolved: one from `source` and `grid` unless `passes` lists them."""
    if passes is None:
        if source is None or grid is None:
            _fail(kernel, "needs source= and grid= (one pass), or passes=[farm.Pass(...), ...]")
        passes = [Pass(grid=grid)]
    elif grid is not None:
        _fail(kernel, "grid= is for one pass; with passes=, each farm.Pass has its own grid")
    elif not passes:
        _fail(kernel, "passes= is empty; list at least one farm.Pass")
    texts, steps, arg_names = {}, [], kernel.arg_names
    for i, declared in enumerate(passes):
        if isinstance(declared, Mapping):
            try:
                declared = Pass(**declared)
            except TypeError as exc:
                _fail(kernel, f"pass {i}: {exc}")
        if not isinstance(declared, Pass):
            _fail(kernel, f"pass {i}: expected a farm.Pass or a dict of its fields, got {type(declared).__name__}")
        text_or_path = declared.source if declared.source is not None else source
        if text_or_path is None:
            _fail(kernel, f"pass {i} ({declared.entry}) has no source and the kernel gives none")
        if not isinstance(text_or_path, str) or text_or_path not in texts:
            texts[text_or_path] = read_source(kernel, text_or_path)
        path, template = texts[text_or_path]
        binds = list(declared.binds) if declared.binds is not None else list(arg_names)
        unknown = [b for b in binds if b not in arg_names]
        if unknown or len(set(binds)) != len(binds):
            _fail(kernel, f"pass {i} ({declared.entry}) binds {binds}: each once, of {', '.join(arg_names)}")
        declared_vars = {var: n for n, (var, *_rest) in resources(template).items()}
        by_name = [declared_vars.get(b) for b in binds]
        numbers = tuple(by_name) if None not in by_name else tuple(range(len(binds)))
        steps.append(Step(Path(path).name if path else "source", path, template, declared.entry, declared.grid,
                          tuple(arg_names.index(b) for b in binds), numbers))  # fmt: skip
    return steps


def check_bindings(kernel, step: Step) -> None:
    """Each bound buffer against the WGSL's declaration at its @binding: access and dtype."""
    declared = resources(step.template)
    entries = set(entry_points(step.template))
    if step.entry not in entries:
        have = ", ".join(sorted(entries)) or "none"
        _fail(kernel, f"{step.where} has no @compute entry point {step.entry!r} (it has: {have})")
    for index, number in zip(step.bindings, step.numbers, strict=True):
        name = kernel.arg_names[index]
        if number not in declared:
            _fail(kernel, f"binding {name!r}: {step.where} declares no @group(0) @binding({number}) "
                          f"(entry {step.entry!r}); declare it, or name the variable {name!r}")  # fmt: skip
        var, access, wgsl_type, line = declared[number]
        at = f"binding {name!r} (@binding({number}) {var} in {step.where} line {line})"
        if name == "params":
            if access != "uniform":
                _fail(kernel, f"{at}: the dims are a uniform; the WGSL declares var<storage, {access}>")
            continue
        want = "read" if name in kernel.inputs else "read or read_write"
        if access == "uniform" or (name in kernel.inputs and access != "read"):
            role = "an input" if name in kernel.inputs else "an output" if name in kernel.outputs else "scratch"
            shown = "var<uniform>" if access == "uniform" else f"var<storage, {access}>"
            _fail(kernel, f"{at}: {name!r} is {role} (storage, {want}); the WGSL declares {shown}")
        dtype = ({**kernel.inputs, **kernel.outputs, **kernel.scratch}[name])[0]
        scalar = scalar_of(wgsl_type)
        if scalar is not None and scalar not in READ_AS.get(np.dtype(dtype).name, ()):
            _fail(kernel, f"{at}: declared {np.dtype(dtype).name}, the WGSL declares {wgsl_type}")
    if len(entries) == 1:
        unbound = sorted(set(declared) - set(step.numbers))
        if unbound:
            var = declared[unbound[0]][0]
            _fail(kernel, f"{step.where} declares @binding({unbound[0]}) {var}, which the pass doesn't bind "
                          f"(it binds {', '.join(kernel.arg_names[i] for i in step.bindings)})")  # fmt: skip


def check_limits(kernel, schedule: Schedule, problem: Problem, profile: HardwareProfile) -> None:
    """InvalidSchedule when a pass's workgroup or grid is over the adapter's limits."""
    ns, limit = kernel.namespace(problem, schedule), profile.limit("max-compute-invocations-per-workgroup")
    for index, step in enumerate(kernel.steps):
        which = f"pass {step.entry!r}: " if len(kernel.steps) > 1 else ""
        threads = kernel.threads(ns, index)
        if threads is not None and threads > limit:
            raise InvalidSchedule(
                kernel.name,
                schedule,
                f"{which}{threads} invocations per workgroup > max-compute-invocations-per-workgroup {limit}",
            )
        groups = kernel.groups(schedule, problem, index)
        for axis, count in zip("xyz", (groups,) if isinstance(groups, int) else groups, strict=False):
            if count > MAX_GROUPS_PER_DIM:
                hint = "; return a tuple (x, y) from grid and use workgroup_id.y" if isinstance(groups, int) else ""
                raise InvalidSchedule(
                    kernel.name, schedule, f"{which}grid {axis} of {count} workgroups > {MAX_GROUPS_PER_DIM}{hint}"
                )


def dispatches(kernel, schedule: Schedule, problem: Problem) -> list[Dispatch]:
    """Every pass rendered for `schedule` and `problem`, in order: the dispatches of one launch."""
    ns, out = kernel.namespace(problem, schedule), []
    for i, step in enumerate(kernel.steps):
        named = set(OVERRIDE.findall(step.template)) & kernel.overrides
        constants = {k: float(ns[k]) for k in sorted(named) if not isinstance(ns[k], str)}
        groups = kernel.groups(schedule, problem, i)
        out.append(Dispatch(step.render(ns), groups, step.bindings, constants, step.entry, step.numbers))
    return out
