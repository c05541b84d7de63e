"""The README is the front page: short, its quickstart marked `<!-- runs in tests/test_readme.py -->`
runs as written (the shell block as a newcomer types it, the Python as a script), every
other block of code says why it isn't run, and every link it has leads to a file in the
repository. The guides' examples run in tests/test_docs.py."""

import re
from pathlib import Path

import numpy as np
import pytest
from doc_blocks import blocks, commands, run_command, shell_env

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_quickstart_runs(farm_home):
    blocks = re.findall(r"<!-- runs in tests/test_readme.py -->\n```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 - our own README
    np.testing.assert_allclose(scope["y"], scope["a"].astype(np.float64) @ scope["x"], rtol=1e-4, atol=1e-4)
    scope["rt"].close()


def test_every_block_of_code_runs_here_or_says_why_not():
    for block in blocks(README):
        if block.lang in ("python", "sh", "console", "bash"):
            assert block.runs_in == "tests/test_readme.py" or block.not_run, f"README.md:{block.line}"
            assert block.lang != "python" or block.runs_in, f"README.md:{block.line}: a Python block runs"


@pytest.mark.slow
def test_the_quickstart_commands_run_as_typed(tmp_path):
    """After set-up, in a fresh shell: the commands the README shows, one by one (the dashboard
    until it answers), each without an error, the tune ending with what to run next."""
    (shell,) = [b for b in blocks(README) if b.lang == "sh" and b.runs_in]
    env = shell_env(tmp_path)
    typed = commands(shell.code)
    assert typed[0] == "source .venv/bin/activate" and "farm winners" in typed and "farm dashboard" in typed
    for command in typed:
        done = run_command(command, ROOT, env)
        assert done.returncode == 0, f"{command}: {(done.stdout + done.stderr)[-2000:]}"
        assert "farm: error" not in done.stderr and "Traceback" not in done.stderr, command
        if command.startswith("farm tune"):
            assert "next:\n  farm winners" in done.stdout and "WARNING" not in done.stderr
        if command == "farm winners":
            assert done.stdout.splitlines()[1].split()[:2] == ["kernel", "problem"]
            assert max(map(len, done.stdout.splitlines())) <= 100


def test_the_front_page_stays_short():
    assert len(README.read_text().splitlines()) <= 120


def test_every_link_leads_to_a_file():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links into docs/"
    assert [link for link in local if not (ROOT / link).exists()] == []
