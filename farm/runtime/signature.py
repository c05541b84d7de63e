"""`ForgeRuntime.run(kernel, **arrays)`: named arrays bound to a kernel's declared arguments.

A `farm.Kernel` declares its inputs' dtypes and shapes as expressions of its dims, so a
call needs only the arrays: each dim that is a whole axis of some input is read off that
axis (the first input naming it wins; every other must agree), any other dim is passed
by name (`rt.run("k", x=x, n=5)`), and every input is then checked against its declared
shape. A wrong dtype is a TypeError, a wrong shape a ValueError, each naming the argument
and the shape expected. For a built-in kernel the keyword form is its method
(`rt.run("gemv", a=a, x=x)` is `rt.gemv(a, x)`, `rt.run("recurrent", query=q, value=v)` is
`rt.recurrent_attention(q, v)`), which checks its arguments the same way and uses the tuned
schedule; another schedule takes the dims form, `rt.run("gemv", dims, inputs, schedule=s)`
(farm.runtime.declared checks it).
"""

from __future__ import annotations

import numpy as np

from farm.catalog import KernelSpec
from farm.catalog.user import Kernel
from farm.runtime.declared import outs_of
from farm.runtime.validation import check_input_limits

METHODS = {"recurrent": "recurrent_attention"}  # built-in kernels whose method has another name


def call(runtime, spec: KernelSpec, arrays: dict, schedule, out):
    """Run `spec` on `arrays` through `runtime`; the output, or a tuple of them in declared order."""
    if not isinstance(spec, Kernel):
        method = getattr(runtime, METHODS.get(spec.name, spec.name), None)
        form = f"run({spec.name!r}, dims, inputs{', schedule=...' if schedule is not None else ''})"
        if method is None:
            raise TypeError(f"{spec.name}: call it as {form} (it declares no shapes)")
        if schedule is not None:
            raise TypeError(
                f"{spec.name}: schedule= takes the dims form, {form} with dims {', '.join(spec.dims)}; "
                f"run({spec.name!r}, ...) by name is rt.{method.__name__}(...), which uses the tuned schedule"
            )
        return method(**arrays, **({"out": out} if out is not None else {}))
    dims, inputs = bind(runtime, spec, arrays)
    result = runtime._run(spec.name, dims, inputs, schedule, outs_of(spec.name, tuple(spec.outputs), out))
    values = tuple(result[name] for name in spec.outputs)
    return values[0] if len(values) == 1 else values


def bind(runtime, spec: Kernel, arrays: dict) -> tuple[dict[str, int], dict]:
    """(dims, inputs) for a call of `spec` with `arrays` (and dims given by name)."""
    names = set(spec.inputs) | set(spec.dims)
    unknown = [k for k in arrays if k not in names]
    if unknown:
        raise TypeError(
            f"{spec.name}: unexpected argument {unknown[0]!r}; its inputs are {', '.join(spec.inputs)}"
            f" and its dims {', '.join(spec.dims)}"
        )
    dims: dict[str, int] = {}
    for dim in spec.dims:
        if dim in arrays:
            value = arrays[dim]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{spec.name}: dim {dim} must be an integer >= 1, got {value!r}")
            dims[dim] = int(value)
    inputs = {}
    for name, (dtype, shape) in spec.inputs.items():
        if name not in arrays:
            raise TypeError(f"{spec.name}: missing input {name!r} ({np.dtype(dtype)}[{', '.join(shape)}])")
        value = runtime._arg(name, arrays[name], (dtype,), (len(shape),))
        for axis, expr in enumerate(shape):
            if expr in spec.dims and expr not in dims:
                dims[expr] = int(value.shape[axis])
        inputs[name] = value
    missing = [d for d in spec.dims if d not in dims]
    if missing:
        raise ValueError(f"{spec.name}: dim {missing[0]!r} is no axis of an input; pass it by name ({missing[0]}=...)")
    problem = spec.problem(**dims)
    for name, value in inputs.items():
        want = spec.shape(name, problem)
        if tuple(value.shape) != want:
            given = ", ".join(f"{d}={v}" for d, v in dims.items())
            exprs = ", ".join(spec.inputs[name][1])
            raise ValueError(f"{name}: expected shape {want} ({exprs} with {given}), got {tuple(value.shape)}")
    check_input_limits(spec.name, inputs, runtime.binding_limit)
    return dims, inputs
