"""What `rt.run(kernel, dims, inputs)` checks before anything touches the GPU.

`dims` must be exactly the kernel's dims, each an integer >= 1; `inputs` exactly its inputs
(a built-in's optional ones may be left out: recurrent's rho and decay), each a numpy array
or a DeviceArray of this runtime with the dtype and shape its declaration gives for those
dims (nothing is cast); `out=` may name only its outputs. A `farm.Kernel` declares its
inputs; the built-ins' are declared here, in the same notation: the arrays each spec's
`generate()` makes and its `launch()` takes (tests/test_runtime_audit.py holds the two to
each other). A spec that declares neither (one `FARM_EXTRA_KERNELS` registers) is held to
the dtypes and shapes its `generate()` makes for the dims.

The expected shapes are worked out once per (kernel, dims): a repeated call pays only the
per-array dtype and shape comparisons.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from farm.catalog import KernelSpec
from farm.catalog.rules import Namespace, evaluate, parse_shape
from farm.catalog.user import Kernel
from farm.runtime.arrays import DeviceArray
from farm.runtime.validation import check_dims, check_input_limits

# kernel: ({input: "dtype[shape]"}, outputs, optional inputs)
BUILTIN: dict[str, tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]] = {
    "gemv": ({"a": "f32[m, n]", "x": "f32[n]"}, ("y",), ()),
    "gemm": ({"a": "f32[m, k]", "b": "f32[k, n]"}, ("c",), ()),
    "topk": ({"x": "f32[n]"}, ("out",), ()),
    "ternary_gemv": ({"x": "f32[k]", "w_packed": "u32[m, ceil(k / 16)]", "scale": "f32[m]"}, ("out",), ()),
    "recurrent": (
        {"query": "f32[B, H, T, L]", "value": "f32[B, VH, T, E]", "rho": "f32[B, H, L, E]", "decay": "f32[H]"},
        ("context", "rho"),
        ("rho", "decay"),
    ),
    "p64_project": ({"records": "u32[n, 16]", "weights": "f32[16]"}, ("out",), ()),
    "fft": ({"x": "f32[batch, n, 2]"}, ("y",), ()),
}
ANY_RANK = tuple(range(65))  # numpy's ranks
# kernel: (a rule over its dims, what it means): the built-in methods hold their arguments to it too
RULES = {"recurrent": ("VH == 1 or VH == H", "VH (value's heads) must be 1 (shared by all heads) or H")}


@functools.lru_cache(maxsize=1024)
def expected(spec: KernelSpec, values: tuple[int, ...]) -> tuple[dict, tuple[str, ...] | None, tuple[str, ...]]:
    """({input: (dtype, shape, declaration)}, outputs (None: not declared), optional inputs)
    of `spec` for its dims `values` (in `spec.dims` order, checked)."""
    dims = dict(zip(spec.dims, values, strict=True))
    if isinstance(spec, Kernel):
        declared = {name: (dtype, exprs) for name, (dtype, exprs) in spec.inputs.items()}
        outputs, optional = tuple(spec.outputs), ()
    elif spec.name in BUILTIN:
        texts, outputs, optional = BUILTIN[spec.name]
        declared = {name: parse_shape(spec.name, name, text) for name, text in texts.items()}
    else:
        made = spec.generate(spec.problem(**dims), 0)
        made_shapes = {
            n: (np.dtype(v.dtype), tuple(map(int, v.shape)), "as generate() makes it") for n, v in made.items()
        }
        return made_shapes, None, ()
    ns = Namespace(spec.name, dims)
    shapes = {}
    for name, (dtype, exprs) in declared.items():
        shape = tuple(int(evaluate(spec.name, spec.dims, e, ns, f"shape of {name}")) for e in exprs)
        shapes[name] = (np.dtype(dtype), shape, f"{np.dtype(dtype).name}[{', '.join(exprs)}]")
    return shapes, outputs, optional


def check_call(runtime, spec: KernelSpec, dims, inputs, out) -> tuple[dict[str, int], dict, dict | None]:
    """(dims, inputs, out) of a `run(kernel, dims, inputs)` call, checked (module docstring):
    TypeError for a wrong type, dtype or name, ValueError for a wrong dim, shape or size."""
    if not isinstance(dims, Mapping):
        raise TypeError(f"{spec.name}: dims: expected a dict of {', '.join(spec.dims)}, got {type(dims).__name__}")
    if not isinstance(inputs, Mapping):
        raise TypeError(f"{spec.name}: inputs: expected a dict of arrays by name, got {type(inputs).__name__}")
    dims = check_dims(f"{spec.name}: dims", spec, dims)
    shapes, outputs, optional = expected(spec, tuple(dims.values()))
    unknown = [name for name in inputs if name not in shapes]
    missing = [name for name in shapes if name not in inputs and name not in optional]
    if unknown or missing:
        listing = ", ".join(f"{n} ({shapes[n][2]}{', optional' if n in optional else ''})" for n in shapes)
        what = f"unknown input {unknown[0]!r}" if unknown else f"missing input {missing[0]!r}"
        raise TypeError(f"{spec.name}: {what}; its inputs are {listing}")
    checked = {}
    for name, (dtype, shape, declaration) in shapes.items():
        if name not in inputs:
            continue
        value = runtime._arg(name, inputs[name], (dtype,), ANY_RANK)  # a wrong rank is a wrong shape, below
        if value.shape != shape:
            given = ", ".join(f"{d}={v}" for d, v in dims.items())
            raise ValueError(f"{name}: expected shape {shape} ({declaration} with {given}), got {value.shape}")
        checked[name] = value
    rule = RULES.get(spec.name)
    if rule is not None and not evaluate(spec.name, spec.dims, rule[0], Namespace(spec.name, dims), "rule"):
        raise ValueError(f"{spec.name}: dims {dims}: {rule[1]}")
    check_input_limits(spec.name, checked, runtime.binding_limit)
    return dims, checked, outs_of(spec.name, outputs, out)


def outs_of(kernel: str, outputs: tuple[str, ...] | None, out) -> dict | None:
    """`out=` as {output: array}: a dict naming outputs among `outputs` (None: not declared,
    the plan checks the names), or one array for a kernel of one output."""
    if out is None:
        return None
    if isinstance(out, Mapping):
        unknown = [name for name in out if outputs is not None and name not in outputs]
        if unknown:
            raise TypeError(f"{kernel}: out names {unknown[0]!r}, not among its outputs {', '.join(outputs)}")
        return dict(out)
    if isinstance(out, (DeviceArray, np.ndarray)) and outputs is not None and len(outputs) == 1:
        return {outputs[0]: out}
    names = ", ".join(outputs) if outputs is not None else "its outputs"
    raise TypeError(
        f"{kernel}: out: expected a dict of {names} (or one array for a kernel of one output), got {type(out).__name__}"
    )
