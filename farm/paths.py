"""Paths a user hands the farm: kernel files, schedules files, SQLite databases, `--out`
targets. One set of checks for every reader and writer, so none of them can be made to
hang (a FIFO opened for reading waits for a writer), to read forever (/dev/zero), to write
into a device (/dev/full), to follow a symlink loop, or to leave a half-written file.

A path that can't be used is an `UnusablePath` (a ValueError: the CLI prints it as one
line) naming it and saying why; a missing file is a FileNotFoundError as before (callers
decide whether "missing" is fine). Reads are bounded: `read_bytes` refuses a file over its
limit before reading it, and opens with O_NONBLOCK and checks what it opened (fstat), so a
path swapped for a FIFO between the check and the open still can't block.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

# A kernels file or the WGSL it reads, a schedules file: text a person wrote or `farm export` made.
MAX_TEXT_BYTES = 16 * 2**20


class UnusablePath(ValueError):
    """A path that names something the farm can't read or write as asked (a FIFO, a device,
    a directory where a file belongs, a symlink loop, a file over its size limit...)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stat(path: Path, what: str) -> os.stat_result | None:
    """os.stat(path) following links; None when nothing is there; UnusablePath for a loop
    or a name the system refuses."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        blocking = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
        raise NotADirectoryError(f"{what} {path}: {blocking or 'a parent'} is a file, not a directory") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENAMETOOLONG):  # "strerror: path", as every path error reads
            raise UnusablePath(f"{what}: {os.strerror(exc.errno)}: {path}") from None
        if exc.errno == errno.EACCES:
            raise PermissionError(errno.EACCES, f"{what}: {os.strerror(errno.EACCES)}", str(path)) from None
        raise


def existing(path: str | Path, what: str) -> os.stat_result | None:
    """What is at `path` (its stat, links followed), None when nothing is; UnusablePath for a
    symlink loop or a dangling link (a link to nothing is a mistake, not "no file yet")."""
    path = Path(path)
    found = _stat(path, what)
    if found is None and path.is_symlink():
        raise UnusablePath(f"{what} {path}: a symlink to {os.readlink(path)}, which does not exist")
    return found


def regular_file(path: str | Path, what: str, max_bytes: int | None = None) -> Path:
    """`path` when it is a regular file (links followed) of at most `max_bytes`:
    FileNotFoundError when nothing is there, UnusablePath for anything else."""
    path = Path(path)
    found = existing(path, what)
    if found is None:
        raise FileNotFoundError(f"{what} {path}: no such file")
    _check_regular(path, found, what, max_bytes)
    return path


def _check_regular(path: Path, found: os.stat_result, what: str, max_bytes: int | None) -> None:
    if not stat.S_ISREG(found.st_mode):
        raise UnusablePath(f"{what} {path} is {_kind(found.st_mode)}, not a regular file")
    if max_bytes is not None and found.st_size > max_bytes:
        raise UnusablePath(f"{what} {path} is {found.st_size} bytes, over the {max_bytes} the farm reads")


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of the regular file `path` (at most `max_bytes`), read without ever blocking on a
    FIFO or reading a device: FileNotFoundError, PermissionError or UnusablePath naming it otherwise."""
    path = regular_file(path, what, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except PermissionError:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path)) from None
    except OSError as exc:
        raise UnusablePath(f"{what} {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        _check_regular(path, os.fstat(fd), what, max_bytes)  # what was opened, not what was checked
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:  # EISDIR, EIO on a bad disk
            raise UnusablePath(f"{what} {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise UnusablePath(f"{what} {path} is over the {max_bytes} bytes the farm reads")
    return data


def read_text(path: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """`read_bytes` as UTF-8 text; UnusablePath naming the file for bytes that are not."""
    data = read_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnusablePath(f"{what} {path}: byte {exc.start} is not UTF-8 text") from None


def file_target(path: str | Path, what: str) -> Path:
    """`path` as a file to (re)write: nothing there yet, or a regular file. UnusablePath for a
    directory, a FIFO, a device or a symlink loop; NotADirectoryError when a file stands where
    one of its directories belongs."""
    path = Path(path)
    found = existing(path, what)
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UnusablePath(f"{what} {path} is {_kind(found.st_mode)}; name a regular file to write")
    for parent in path.parents:
        above = _stat(parent, what)
        if above is None:
            continue
        if not stat.S_ISDIR(above.st_mode):
            raise NotADirectoryError(f"{what} {path}: {parent} is a file, not a directory")
        break
    return path


def directory_target(path: str | Path, what: str) -> Path:
    """`path` as a directory to write in (made later if missing): UnusablePath for a file, a FIFO,
    a device or a symlink loop there; NotADirectoryError for a file where a parent belongs."""
    path = Path(path)
    found = existing(path, what)
    if found is not None and not stat.S_ISDIR(found.st_mode):
        if stat.S_ISREG(found.st_mode):
            raise FileExistsError(f"{what}: {path} is a file, not a directory")
        raise UnusablePath(f"{what}: {path} is {_kind(found.st_mode)}, not a directory")
    for parent in path.parents:
        above = _stat(parent, what)
        if above is None:
            continue
        if not stat.S_ISDIR(above.st_mode):
            raise NotADirectoryError(f"{what}: {path}: {parent} is a file, not a directory")
        break
    return path


def _umask() -> int:
    """This process's umask, read without changing it (os.umask sets it, racing other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_text_atomically(path: str | Path, text: str, what: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file beside it, synced, then renamed
    over it. A full disk or a failing write is UnusablePath naming `path`, and no partial file stays."""
    path = file_target(path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it (mkstemp makes 0600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, PermissionError):
            raise
        raise UnusablePath(f"{what} {path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
