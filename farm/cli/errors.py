"""How the `farm` command reports a user's mistake: one line `farm: error: ...` on stderr,
exit status 2, no traceback, no password.

A user error is a bad flag value (argparse, `FarmParser.error`), a ValueError from the
farm's own checks, a path that can't be used (missing, a file where a directory belongs,
no permission), a database that can't be reached or read (SQLAlchemy's OperationalError
and DatabaseError: a server down, a corrupt or foreign file) and a migration revision
Alembic doesn't know. Anything else is a bug in the farm and keeps its traceback.
"""

from __future__ import annotations

import argparse
import math
import sys

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# Path errors (OSError subclasses) a user causes; other OSErrors (a broken pipe, EIO) are not theirs.
PATH_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)


class FarmParser(argparse.ArgumentParser):
    """argparse with the farm's one-line errors (argparse prints the usage, then a line)."""

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
    if "farm.gpu.adapter" in sys.modules:
        from farm.gpu.adapter import NoAdapterError

        types.append(NoAdapterError)
    return tuple(types)


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
    return mask_secrets(" ".join(str(exc).split())) or type(exc).__name__


def report(exc: BaseException, db: str | None) -> int:
    print(f"farm: error: {message(exc, db)}", file=sys.stderr)
    return EXIT_USAGE


# -- argument types: a bad value is an argparse error (one line, exit 2) ------------------


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def _finite(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number{' > 0' if positive else ''}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (no nan, no inf)."""
    return _finite(text, positive=True)


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
    """`--budget N` (N >= 1) or `--budget all` (the whole schedule space: None)."""
    if text == "all":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"budget must be a positive integer or 'all', got {text!r}") from None
