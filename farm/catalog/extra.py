"""$FARM_EXTRA_KERNELS: modules (or .py paths) defining `KernelSpec`s, imported when the catalog
loads (the test suite's deliberately faulty kernels use it; Ray workers get the variable too).

Each entry is checked before anything is imported (`extra_kernel_entries`, also what the CLI
checks before a command starts): a module that can be found, or a regular .py file
(farm.paths). Whatever an entry raises while it is imported, SystemExit included, is a
ValueError naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from farm import paths

EXTRA_ENV = "FARM_EXTRA_KERNELS"


def extra_kernel_entries(spec: str) -> list[str]:
    """The entries of $FARM_EXTRA_KERNELS (`spec`), each checked without importing it: a module
    that can be found, or a .py path that is a regular file (farm.paths); ValueError naming it."""
    import importlib.util

    entries = [e.strip() for e in spec.split(",") if e.strip()]
    for entry in entries:
        if entry.endswith(".py"):
            paths.regular_file(entry, EXTRA_ENV, paths.MAX_TEXT_BYTES)
            continue
        try:
            found = importlib.util.find_spec(entry)
        except (ImportError, ValueError):  # a parent package that is missing, a relative or empty name
            found = None
        if found is None:
            raise ValueError(f"{EXTRA_ENV}: no module named {entry!r} (a module name or a .py path)")
    return entries


def load(spec: str) -> None:
    """Import extra kernel modules named in $FARM_EXTRA_KERNELS (comma-separated module
    names or .py paths), e.g. test-only faulty kernels that Ray workers must also see."""
    import importlib
    import importlib.util

    for entry in extra_kernel_entries(spec):
        try:
            if not entry.endswith(".py"):
                importlib.import_module(entry)
                continue
            name = f"farm_extra_{Path(entry).stem}"
            module_spec = importlib.util.spec_from_file_location(name, entry)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {entry!r}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # the module's own error, said in one line naming it
            raise ValueError(f"{EXTRA_ENV} entry {entry!r}: {type(exc).__name__}: {exc}") from exc
