"""What a `farm.Kernel` declares as text, and how it is read: shapes (`"f32[rows, cols]"`),
expressions over dims, knobs and the adapter's limits (restrictions, grids, shapes), each
mistake a KernelError naming the kernel, the name and the fix. Also the texts of the files
definitions read (TEXTS: what travels to Ray workers). The WGSL itself is read in
farm.catalog.wgsl."""

from __future__ import annotations

import ast
import inspect
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from farm import paths

DTYPES = {"f32": np.float32, "i32": np.int32, "u32": np.uint32, "f16": np.float16}
FUNCTIONS = {"ceil": math.ceil, "floor": math.floor, "min": min, "max": max, "abs": abs, "log2": math.log2}
TEXTS: dict[str, str] = {}  # path -> text of every file a definition read (shipped to Ray workers)


class KernelError(ValueError):
    """A mistake in a user kernel's definition: says which kernel, what and how to fix it."""


class Namespace(dict):
    """Dims and knobs by name, as items or attributes; a missing one names what exists."""

    def __init__(self, kernel: str, values: Mapping):
        super().__init__(values)
        self.kernel = kernel

    def __getattr__(self, name: str):
        return self[name]

    def __missing__(self, name: str):
        raise KernelError(f"kernel {self.kernel!r}: no knob or dim {name!r} (there are: {', '.join(self)})")


def read_text(path: str, what: str = "file") -> str:
    """A file's text, from what a Ray worker was shipped (TEXTS) or the disk (a regular file of
    bounded size: farm.paths); recorded in TEXTS."""
    if path not in TEXTS:
        TEXTS[path] = paths.read_text(path, what)
    return TEXTS[path]


def parse_shape(kernel: str, arg: str, text: object) -> tuple[type, tuple[str, ...]]:
    """`"f32[rows, cols]"` -> (np.float32, ("rows", "cols"))."""
    match = re.fullmatch(r"\s*(\w+)\s*\[(.*)\]\s*", text) if isinstance(text, str) else None
    if match is None:
        raise KernelError(f"kernel {kernel!r}: {arg}: expected 'dtype[dim expressions]' like 'f32[rows, cols]', "
                          f"got {text!r}")  # fmt: skip
    kind, inner = match.groups()
    try:
        dtype = DTYPES.get(kind) or np.dtype(kind).type
    except TypeError:
        raise KernelError(
            f"kernel {kernel!r}: {arg}: unknown dtype {kind!r} (use {', '.join(DTYPES)} or a numpy name)"
        ) from None
    return dtype, tuple(part.strip() for part in split_top(inner))


def check_names(kernel: str, rule: object, what: str, dims, knobs, not_here=()) -> None:
    """KernelError unless `rule` is a function or an expression naming only dims, knobs and FUNCTIONS;
    `not_here`: knobs that can't be named here (an input's shape), each said so."""
    if callable(rule):
        return
    if not isinstance(rule, (str, int)):
        raise KernelError(f"kernel {kernel!r}: {what} {rule!r}: expected an expression string or a function")
    try:
        tree = ast.parse(str(rule), mode="eval")
    except SyntaxError as exc:
        raise KernelError(f"kernel {kernel!r}: {what} {rule!r} is not an expression: {exc.msg}") from None
    known = set(dims) | set(knobs)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in not_here:
            raise KernelError(
                f"kernel {kernel!r}: {what} {rule!r} names knob {node.id!r}: inputs and outputs are shaped by "
                "the dims alone (the caller's arrays); a knob may size a scratch buffer (scratch={...})"
            )
        if isinstance(node, ast.Name) and node.id not in known and node.id not in FUNCTIONS:
            kind = "knob or dim" if knobs else "dim"
            raise KernelError(
                f"kernel {kernel!r}: {what} {rule!r} names {node.id!r}, which is no {kind} "
                f"({', '.join(sorted(known))}); fix the name or add it to the space"
            )


def evaluate(kernel: str, dims, rule, ns: Namespace, what: str):
    """An expression's value in `ns`; a function of one argument gets `ns`, of two (dims, knobs)."""
    if callable(rule):
        try:
            arity = len(inspect.signature(rule).parameters)
        except (TypeError, ValueError):
            arity = 1
        if arity == 2:
            dim_ns = Namespace(kernel, {d: ns[d] for d in dims})
            return rule(dim_ns, Namespace(kernel, {k: v for k, v in ns.items() if k not in dims}))
        return rule(ns)
    try:
        return eval(compile(str(rule), f"<{kernel} {what}>", "eval"), {"__builtins__": {}, **FUNCTIONS}, dict(ns))  # noqa: S307
    except KernelError:
        raise
    except Exception as exc:
        raise KernelError(f"kernel {kernel!r}: {what} {rule!r} failed for {dict(ns)}: {exc}") from None


def split_top(text: str) -> list[str]:
    """Split on commas outside brackets; empty parts dropped."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += 1 if ch in "([<" else -1 if ch in ")]>" else 0
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def defining_file() -> str | None:
    """The file whose code called into farm.catalog.user (None in a notebook or `python -c`)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("farm.catalog."):
        frame = frame.f_back
    path = frame.f_globals.get("__file__") if frame is not None else None
    return str(Path(path).resolve()) if path and not str(path).startswith("<") else None


# The adapter's limits as restrictions, grids and scratch shapes read them (docs/guides/custom-kernel.md):
# name -> (HardwareProfile limit, WebGPU's default where no adapter is known yet).
ADAPTER_LIMITS = {
    "max_invocations": ("max-compute-invocations-per-workgroup", 256),
    "max_workgroup_size_x": ("max-compute-workgroup-size-x", 256),
    "max_workgroup_size_y": ("max-compute-workgroup-size-y", 256),
    "max_workgroup_bytes": ("max-compute-workgroup-storage-size", 16384),
    "max_workgroups": ("max-compute-workgroups-per-dimension", 65535),
    "max_buffer_bytes": ("max-storage-buffer-binding-size", 134217728),
}
ADAPTER_NAMES = (*ADAPTER_LIMITS, "subgroup_size", "subgroup_max_size")


def adapter_values(profile) -> dict[str, int]:
    """ADAPTER_NAMES' values for `profile` (a HardwareProfile; None: WebGPU's defaults, no subgroups).
    `subgroup_size` is the least subgroup the adapter may run (0 without the subgroup feature)."""
    limits = dict(profile.limits) if profile is not None else {}
    values = {name: int(limits.get(limit, default)) for name, (limit, default) in ADAPTER_LIMITS.items()}
    lanes = profile.subgroup_lanes() if profile is not None else 0
    values["subgroup_size"] = lanes
    values["subgroup_max_size"] = max(lanes, profile.subgroup_max_size) if lanes else 0
    return values
