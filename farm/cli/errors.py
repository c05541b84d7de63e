"""How the `farm` command reports a user's mistake: one line `farm: error: ...` on stderr,
exit status 2, no traceback, no password.

A user error is a bad flag value (argparse, `FarmParser.error`; numbers bounded so none
overflows later), a ValueError from the farm's own checks, a path that can't be used
(missing, a file where a directory belongs, no permission, a read-only filesystem, a name
too long, a symlink loop, a full disk: `is_path_error`), a database that can't be reached or read
(SQLAlchemy's OperationalError and DatabaseError: a server down, a corrupt or foreign
file; a driver that isn't installed is a ValueError) and a migration revision Alembic
doesn't know; `farm cluster start`'s failed `ray start` (RayStartError) too. Anything
else is a bug in the farm and keeps its traceback.
"""

from __future__ import annotations

import argparse
import ast
import errno
import math
import os
import sys
from pathlib import Path

from farm import paths

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# Path errors (OSError subclasses) a user causes; other OSErrors (a broken pipe, EIO) are not theirs.
PATH_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)
# ...and the plain OSErrors that are about the path given or the disk under it: a read-only
# filesystem, a name too long, a symlink loop, a full disk or quota (not EIO, EPIPE...: those
# stay tracebacks).
PATH_ERRNOS = frozenset({errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOSPC, errno.EDQUOT})
# pathlib's `Path.resolve(strict=True)` reports a loop as RuntimeError("Symlink loop from '...'") (Python < 3.13).
SYMLINK_LOOP = "Symlink loop from "
# Flag bounds: a value past them is an argparse error, not an OverflowError once it reaches
# C code or the database (tuning_requests.priority is an INTEGER column: 32-bit on PostgreSQL).
INT32 = (-(2**31), 2**31 - 1)
MAX_COUNT = 10**6  # --budget, --reps, --warmup
MAX_SECONDS = 10.0**6  # --trial-timeout


class FarmParser(argparse.ArgumentParser):
    """argparse with the farm's one-line errors (argparse prints the usage, then a line) and
    help that shows every option's default (farm.cli.helptext; subcommands inherit it)."""

    def __init__(self, *args, **kwargs):
        from farm.cli.helptext import FarmHelpFormatter

        kwargs.setdefault("formatter_class", FarmHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("farm").strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_USAGE, f"farm: error: {where}{message} (see `{self.prog} --help`)\n")


def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types `main` reports as one line. Evaluated when an exception is being
    matched, so only the libraries the command imported are consulted (no import cost)."""
    types: list[type[BaseException]] = [ValueError, ConnectionError, *PATH_ERRORS]
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.exc import DatabaseError, OperationalError

        types += [OperationalError, DatabaseError]
    if "alembic" in sys.modules:
        from alembic.util.exc import CommandError

        types.append(CommandError)
    if "farm.cli.cluster" in sys.modules:
        from farm.cli.cluster import RayStartError

        types.append(RayStartError)
    if "farm.gpu.adapter" in sys.modules:
        from farm.gpu.adapter import NoAdapterError

        types.append(NoAdapterError)
    return tuple(types)


def is_path_error(exc: BaseException) -> bool:
    """Whether `exc` is a path the user gave that can't be used (PATH_ERRORS, PATH_ERRNOS, a symlink loop)."""
    if isinstance(exc, PATH_ERRORS):
        return True
    if isinstance(exc, OSError):
        return exc.errno in PATH_ERRNOS
    return type(exc) is RuntimeError and str(exc).startswith(SYMLINK_LOOP)


def database_bugs() -> tuple[type[BaseException], ...]:
    """DatabaseError subclasses that mean the farm's SQL is wrong, not the user's database."""
    if "sqlalchemy" not in sys.modules:
        return ()
    from sqlalchemy.exc import DataError, IntegrityError, InternalError, NotSupportedError, ProgrammingError

    return (DataError, IntegrityError, InternalError, NotSupportedError, ProgrammingError)


def message(exc: BaseException, db: str | None) -> str:
    """The one line for a user error; database errors name the database `db` (masked)."""
    from farm.store.engine import describe_error, mask_secrets, mask_url

    kind = type(exc).__module__.split(".")[0]
    if kind == "sqlalchemy":
        try:
            from farm.store.engine import database_url

            where = mask_url(database_url(db))
        except (ValueError, OSError):
            where = "the database"
        return f"database {where}: {describe_error(exc)}"
    if kind == "alembic":
        return f"migrations: {describe_error(exc)} (see `farm db current`)"
    if isinstance(exc, OSError):
        return describe_error(exc)
    if type(exc) is RuntimeError and str(exc).startswith(SYMLINK_LOOP):
        path = str(exc).removeprefix(SYMLINK_LOOP)
        try:
            path = str(ast.literal_eval(path))  # pathlib gives the path's repr
        except (ValueError, SyntaxError):
            pass
        return f"{os.strerror(errno.ELOOP)}: {mask_secrets(path)}"
    return mask_secrets(" ".join(str(exc).split())) or type(exc).__name__


def report(exc: BaseException, db: str | None) -> int:
    print(f"farm: error: {message(exc, db)}", file=sys.stderr)
    return EXIT_USAGE


# -- argument types: a bad value is an argparse error (one line, exit 2) ------------------


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def count(text: str) -> int:
    """A positive integer up to MAX_COUNT (--reps): past it, C code (a C long) overflows."""
    return _int_at_least(text, 1, "a positive integer", MAX_COUNT)


def small_nonnegative_int(text: str) -> int:
    """An integer in 0..MAX_COUNT (--warmup)."""
    return _int_at_least(text, 0, "an integer >= 0", MAX_COUNT)


def priority(text: str) -> int:
    """A 32-bit signed integer: the queue's priority column is INTEGER (SQLite takes 64 bits, PostgreSQL 32)."""
    value = _int(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"invalid int value: {_shown(text)}")
    if not INT32[0] <= value <= INT32[1]:
        raise argparse.ArgumentTypeError(f"expected an integer in {INT32[0]}..{INT32[1]}, got {_shown(text)}")
    return value


def _int_at_least(text: str, low: int, what: str, high: int | None = None) -> int:
    value = _int(text)
    if value is None or value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high}, got {_shown(text)}")
    return value


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:  # also more digits than int() converts (sys.get_int_max_str_digits)
        return None


def _shown(text: str) -> str:
    """`text` quoted for a message, a huge value shortened."""
    return repr(text) if len(text) <= 40 else repr(f"{text[:20]}...{text[-8:]}")


def _finite(text: str, positive: bool, high: float | None = None) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    what = f"a finite number{' > 0' if positive else ''}"
    if not math.isfinite(value) or (positive and value <= 0):
        raise argparse.ArgumentTypeError(f"expected {what}, got {_shown(text)}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"expected {what}, at most {high:.0f}, got {_shown(text)}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds in (0, MAX_SECONDS] (--trial-timeout)."""
    return _finite(text, positive=True, high=MAX_SECONDS)


def finite_float(text: str) -> float:
    return _finite(text, positive=False)


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {text!r}")
    return value


def budget(text: str) -> int | None:
    """`--budget N` (1 <= N <= MAX_COUNT) or `--budget all` (the whole schedule space: None)."""
    if text == "all":
        return None
    value = _int(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"budget must be a positive integer or 'all', got {_shown(text)}")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"budget must be at most {MAX_COUNT} or 'all', got {_shown(text)}")
    return value


def file_in_the_way(path: Path) -> Path | None:
    """The nearest existing ancestor of `path` when it is a file, not a directory (so `path`
    can't be made): what a one-line NotADirectoryError should name."""
    parent = next((parent for parent in path.parents if parent.exists()), None)
    return parent if parent is not None and not parent.is_dir() else None


def writable_dir(path: Path, what: str) -> Path:
    """`path`, created if missing; PermissionError/FileExistsError/NotADirectoryError naming it
    (or the file that stands where one of its directories belongs) when it can't hold `what`."""
    paths.directory_target(path, what)  # a file, FIFO, device or loop there, or a file above it
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK):
        raise PermissionError(f"{what}: {path} is not writable")
    return path
