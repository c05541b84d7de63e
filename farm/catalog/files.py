"""Kernel files: Python files defining `farm.Kernel`s, loaded by every process that needs them.

A process loads the files named by `farm ... --kernels-file PATH` (`load`, which also
appends them to $FARM_KERNELS_FILES so child processes such as the dashboard's server
load them too) and those in $FARM_KERNELS_FILES (`os.pathsep`- or comma-separated); a
file there that fails to load is reported in one line and skipped, and asking for a kernel
no loaded file defines then fails with its error.
Ray workers get `bundle()` instead, in $FARM_KERNELS_BUNDLE (farm.tuning.ray_session
puts it in the runtime_env): each file's text and the WGSL it read, so a worker on
another node needs nothing at the same path; the definitions see their original paths
and hash the same texts, so trials and winners carry the driver's source hashes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
import zlib
from pathlib import Path

from farm import paths
from farm.catalog import _BROKEN, _REGISTRY, user

FILES_ENV = "FARM_KERNELS_FILES"
BUNDLE_ENV = "FARM_KERNELS_BUNDLE"
MAX_BUNDLE_BYTES = 96 * 1024  # one environment variable (Linux allows 128 KiB per string)
_LOADED: list[str] = []  # resolved paths, in load order


def configured() -> list[str]:
    """The paths in $FARM_KERNELS_FILES."""
    return [p for p in re.split(rf"[,{re.escape(os.pathsep)}]", os.environ.get(FILES_ENV, "")) if p.strip()]


def load_configured() -> None:
    """What `farm.catalog` runs once: the shipped bundle if there is one, else $FARM_KERNELS_FILES."""
    shipped = os.environ.get(BUNDLE_ENV)
    if shipped:
        data = json.loads(zlib.decompress(base64.b64decode(shipped)))
        user.TEXTS.update(data["texts"])
        for path in data["files"]:
            _load_one(path)
        return
    for path in configured():
        before = set(_REGISTRY)
        try:
            _load_one(path)
        except (ValueError, OSError) as exc:  # one broken file must not stop the others' kernels
            for name in set(_REGISTRY) - before:  # nothing half-loaded from it stays
                del _REGISTRY[name]
            _BROKEN[path] = " ".join(str(exc).split())
            print(f"farm: warning: {_BROKEN[path]} (from ${FILES_ENV}; its kernels are unavailable)", file=sys.stderr)


def load(paths: list[str]) -> list[str]:
    """Load kernel files now (`--kernels-file`) and name them in $FARM_KERNELS_FILES for
    child processes; returns the names of the kernels they define."""
    names = []
    for path in paths:
        names += _load_one(path)
    known = configured()
    extra = [p for p in _LOADED if p not in known]
    if extra:
        os.environ[FILES_ENV] = os.pathsep.join(known + extra)
    return names


def bundle() -> str | None:
    """The loaded kernel files and the files they read, for a Ray runtime_env (None when none)."""
    if not _LOADED:
        return None
    texts = {path: text for path, text in user.TEXTS.items()}
    for path in _LOADED:
        texts[path] = user.read_text(path)
    raw = base64.b64encode(zlib.compress(json.dumps({"files": _LOADED, "texts": texts}).encode())).decode()
    if len(raw) > MAX_BUNDLE_BYTES:
        raise ValueError(
            f"kernel files {', '.join(_LOADED)} and their WGSL are {len(raw)} bytes compressed, more than "
            f"the {MAX_BUNDLE_BYTES} that travel to Ray workers; split them or trim the files"
        )
    return raw


def _load_one(path: str) -> list[str]:
    resolved = os.path.realpath(os.path.expanduser(path)) if user.TEXTS.get(path) is None else path
    if resolved in _LOADED:
        return [k.name for k in _REGISTRY.values() if isinstance(k, user.Kernel) and k.origin == resolved]
    try:
        text = user.read_text(resolved, "kernels file")
    except (paths.UnusablePath, FileNotFoundError) as exc:
        raise type(exc)(str(exc).replace(resolved, path, 1)) from None  # the path as the user wrote it
    except OSError as exc:
        raise FileNotFoundError(f"kernels file {path}: {exc.strerror or exc}") from None
    name = f"farm_kernels_{Path(resolved).stem}_{hashlib.sha256(resolved.encode()).hexdigest()[:8]}"
    module = type(sys)(name)
    module.__file__ = resolved
    before = set(_REGISTRY)
    sys.modules[name] = module
    try:
        exec(compile(text, resolved, "exec"), module.__dict__)  # noqa: S102 - the user's own kernel file
    except user.KernelError as exc:
        del sys.modules[name]
        raise user.KernelError(f"{exc} (in {path})") from None
    except SyntaxError as exc:
        del sys.modules[name]
        raise ValueError(f"kernels file {path} line {exc.lineno}: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # sys.exit() in a kernels file is an error too, not a silent exit
        del sys.modules[name]
        line = _line_in(exc, resolved)
        raise ValueError(f"kernels file {path}{line}: {type(exc).__name__}: {exc}") from exc
    defined = [k.name for k in _REGISTRY.values() if isinstance(k, user.Kernel) and k.origin == resolved]
    if not defined and set(_REGISTRY) == before:
        raise ValueError(f"kernels file {path} defines no kernel: define one with farm.Kernel(...)")
    _LOADED.append(resolved)
    return defined


def _line_in(exc: BaseException, path: str) -> str:
    tb, line = exc.__traceback__, ""
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = f" line {tb.tb_lineno}"
        tb = tb.tb_next
    return line
