"""The fenced code blocks of the README and docs/, and how the tests run the shell ones.

A block of code (python, sh, console, bash) is preceded by a mark: `<!-- runs in
tests/test_docs.py -->` or `<!-- runs in tests/test_readme.py -->` (that test runs it as
written) or `<!-- not run: REASON -->` (it can't run in the tests: the reason says why).
`text` and `mermaid` blocks are output and diagrams, not code."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("python", "sh", "console", "bash")
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
RUNS = re.compile(r"<!-- runs in (tests/test_\w+\.py) -->")
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->")
SERVERS = ("farm dashboard",)  # long-running: started, checked to answer, stopped


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the block's first code line
    lang: str
    code: str
    runs_in: str | None  # the test file that runs it
    not_run: str | None  # why it isn't run


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        runs, skipped = RUNS.fullmatch(before.strip()), NOT_RUN.fullmatch(before.strip())
        line = text.count("\n", 0, match.start(2)) + 1
        page = str(path.relative_to(ROOT))
        runs_in, why = runs and runs.group(1), skipped and skipped.group(1)
        found.append(Block(page, line, match.group(1), match.group(2), runs_in, why))
    return found


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def commands(code: str) -> list[str]:
    """A shell block's commands, one a line, without comments and blank lines."""
    return [line for line in (raw.split(" #")[0].strip() for raw in code.splitlines()) if line and line[0] != "#"]


def shell_env(home: Path) -> dict[str, str]:
    """A newcomer's shell, isolated: this interpreter's bin (the venv `source .venv/bin/activate`
    puts first) on PATH, FARM_HOME and HOME of their own, no cluster or database named."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "RAY_ADDRESS"))}
    env |= {"FARM_HOME": str(home / "farm_home"), "HOME": str(home), "XDG_RUNTIME_DIR": "/tmp"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_command(command: str, cwd: Path, env: dict[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess:
    """Run one line as typed in bash; a server (SERVERS) runs on a free port until it answers."""
    if command == "source .venv/bin/activate":
        command = ":"  # shell_env's PATH is what it does
    if command.startswith(SERVERS):
        return _serve(command, cwd, env, timeout_s)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)


def _serve(command: str, cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = ["bash", "-c", f"exec {command} --port {port}"]
    server = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)  # fmt: skip
    answered, deadline = False, time.monotonic() + min(timeout_s, 120)
    try:
        while not answered and server.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    answered = response.status == 200
            except OSError:
                time.sleep(0.5)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        output = server.communicate(timeout=30)[0]
    return subprocess.CompletedProcess(argv, 0 if answered else 1, output, "" if answered else "no answer")
