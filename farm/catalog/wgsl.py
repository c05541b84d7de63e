"""What a user kernel's WGSL declares, read without compiling it: its group-0 resources
(binding number, variable, access, type), its compute entry points and their
`@workgroup_size`, and which WGSL scalar each declared dtype may be read as, so bindings
are checked against the shader before anything runs (farm.catalog.passes)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from farm.catalog.rules import split_top

_WORKGROUP_SIZE = re.compile(r"@workgroup_size\(([^)]*)\)")
# `@group(0) @binding(1) var<storage, read_write> y: array<f32>;` (attributes in either order)
_RESOURCE = re.compile(r"((?:@\w+\s*\([^)]*\)\s*)+)var\s*(?:<([^>]*)>)?\s*(\w+)\s*:\s*([^;=]+?)\s*;")
_ENTRY = re.compile(r"((?:@\w+\s*(?:\([^)]*\))?\s*)+)fn\s+(\w+)\s*\(")
SCALARS = ("f32", "f16", "i32", "u32", "bool")
# WGSL scalars a declared dtype may be read as (narrow integers and f16 pairs packed in 32-bit words)
PACKED = ("i32", "u32")
READ_AS = {"float32": ("f32",), "int32": ("i32",), "uint32": ("u32",), "float16": ("f16", "u32"),
           "int8": PACKED, "uint8": PACKED, "int16": PACKED, "uint16": PACKED}  # fmt: skip


def strip_comments(source: str) -> str:
    """WGSL without its // and /* */ comments (line breaks kept, so line numbers hold)."""
    source = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", source)


def resources(source: str) -> dict[int, tuple[str, str, str, int]]:
    """{binding number: (variable, access, type, line)} of the WGSL's group-0 resources;
    access is "read", "read_write" or "uniform"."""
    text, out = strip_comments(source), {}
    for match in _RESOURCE.finditer(text):
        attributes, space, name, wgsl_type = match.groups()
        binding = re.search(r"@binding\s*\(\s*(\d+)\s*\)", attributes)
        group = re.search(r"@group\s*\(\s*(\d+)\s*\)", attributes)
        if binding is None or (group is not None and group.group(1) != "0"):
            continue
        parts = [p.strip() for p in (space or "").split(",")]
        access = "uniform" if parts[0] == "uniform" else (parts[1] if len(parts) > 1 else "read")
        line = text.count("\n", 0, match.start(3)) + 1
        out[int(binding.group(1))] = (name, access, " ".join(wgsl_type.split()), line)
    return out


def entry_points(source: str) -> dict[str, str]:
    """{compute entry point: its @workgroup_size arguments ("" when none)}."""
    out = {}
    for match in _ENTRY.finditer(strip_comments(source)):
        attributes, name = match.groups()
        if "@compute" in attributes:
            size = _WORKGROUP_SIZE.search(attributes)
            out[name] = size.group(1) if size else ""
    return out


def scalar_of(wgsl_type: str) -> str | None:
    """The scalar a WGSL storage type holds (`array<vec4<f32>>` -> f32, `atomic<u32>` -> u32);
    None for a struct or anything else not known here."""
    inner = wgsl_type
    while True:
        match = re.fullmatch(r"\s*(?:array|atomic|vec[234]|mat[234]x[234])\s*<(.*?)(?:,[^<>]*)?>\s*", inner)
        if match is None:
            break
        inner = match.group(1)
    inner = inner.strip()
    if inner in SCALARS:
        return inner
    short = re.fullmatch(r"vec[234]([fhiu])", inner)
    return {"f": "f32", "h": "f16", "i": "i32", "u": "u32"}[short.group(1)] if short else None


def workgroup_threads(source: str, ns: Mapping, entry: str | None = None) -> int | None:
    """Invocations per workgroup from the @workgroup_size of `entry` (else the first in the
    WGSL); None when not computable here."""
    if entry is not None:
        arguments = entry_points(source).get(entry)
    else:
        match = _WORKGROUP_SIZE.search(source)
        arguments = match.group(1) if match else None
    if not arguments:
        return None
    total = 1
    for part in split_top(arguments):
        part = re.sub(r"(\d+)[ui]\b", r"\1", part.strip())
        try:
            total *= int(eval(part, {"__builtins__": {}}, dict(ns)))  # noqa: S307
        except Exception:  # noqa: BLE001 - a WGSL constant not known here: the device checks it
            return None
    return total
