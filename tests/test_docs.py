"""The documentation site stays true to the code: it builds with `mkdocs build --strict`
(broken links, anchors and API references fail), its generated pages cover every command
and table, every FARM_* variable the code reads is in its table, and the pages' examples
marked `<!-- runs in tests/test_docs.py -->` run as written: Python blocks as one script a
page, shell blocks one command at a time in a newcomer's shell. Every other block of code
says why it isn't run (`<!-- not run: REASON -->`, tests/doc_blocks.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import blocks, commands, run_command, shell_env

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARK = "<!-- runs in tests/test_docs.py -->"
BLOCK = re.compile(re.escape(MARK) + r"\n```python\n(.*?)```", re.S)
ENV_NAME = re.compile(r"\bFARM_[A-Z0-9_]*[A-Z0-9]\b")
# Where the farm reads or sets its variables; tests/ has fixture knobs of its own.
ENV_SOURCES = ("farm", "dashboard", "deploy", "scripts", "Makefile")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_site_builds_strictly(site):
    assert (site / "index.html").is_file()
    assert not (site / "internals").exists()  # excluded until it is replaced
    assert not list(site.rglob("*.py"))  # the build hook is not published


def test_the_cli_page_has_every_command_and_option(site):
    from farm.cli import build_parser

    page = (site / "reference" / "cli" / "index.html").read_text()
    for command, parser in _commands(build_parser(), "farm"):
        assert f"<code>{command}</code>" in page, command
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"{flag}" in page, f"{command} {flag}"


def test_the_schema_page_has_every_table_and_column(site):
    from farm.store.models import Base

    page = (site / "reference" / "schema" / "index.html").read_text()
    for table in Base.metadata.tables.values():
        assert f'id="{table.name}"' in page, table.name
        for column in table.columns:
            assert f"<code>{column.name}</code>" in page, f"{table.name}.{column.name}"


def test_every_farm_variable_is_in_the_environment_table():
    table = (DOCS / "reference" / "environment.md").read_text()
    documented = set(re.findall(r"^\| `(FARM_[A-Z0-9_]+)` \|", table, re.M))
    read: dict[str, str] = {}
    for source in ENV_SOURCES:
        path = ROOT / source
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            try:
                text = file.read_text()
            except UnicodeDecodeError:
                continue
            for name in ENV_NAME.findall(text):
                read.setdefault(name, str(file.relative_to(ROOT)))
    missing = {name: where for name, where in read.items() if name not in documented}
    assert missing == {}, "add these to docs/reference/environment.md"
    assert {"FARM_HOME", "FARM_DATABASE_URL", "FARM_ADAPTER"} <= documented


def _runnable_pages() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if BLOCK.search(p.read_text()))


def _shell_blocks() -> list:
    return [b for p in sorted(DOCS.rglob("*.md")) for b in blocks(p) if b.lang == "sh" and b.runs_in]


def test_every_block_of_code_runs_or_says_why_not():
    unmarked, wrong = [], []
    for page in sorted(DOCS.rglob("*.md")):
        for block in blocks(page):
            where = f"{block.page}:{block.line}"
            if block.lang in ("python", "sh", "console", "bash") and not (block.runs_in or block.not_run):
                unmarked.append(where)
            runs_here = block.runs_in in (None, "tests/test_docs.py")
            if not runs_here or (block.runs_in and block.lang not in ("python", "sh")):
                wrong.append(where)
            if block.lang == "python" and not block.runs_in:
                wrong.append(f"{where}: a Python example runs")
    assert unmarked == [], "mark each: <!-- runs in tests/test_docs.py --> or <!-- not run: REASON -->"
    assert wrong == [], "docs/ blocks run in tests/test_docs.py, as python or sh"


@pytest.mark.slow
@pytest.mark.parametrize("block", _shell_blocks(), ids=lambda b: f"{b.page}:{b.line}")
def test_the_shell_examples_run_as_typed(block, tmp_path):
    """Each command of a marked shell block, in a fresh shell in the repository (the examples'
    paths are relative to it) with a FARM_HOME and HOME of its own."""
    env = shell_env(tmp_path)
    for command in commands(block.code):
        done = run_command(command, ROOT, env)
        assert done.returncode == 0, f"{block.page}:{block.line}: {command}: {(done.stdout + done.stderr)[-2000:]}"
        assert "farm: error" not in done.stderr and "Traceback" not in done.stderr, command


# Run before the page's block of that index, in the blocks' namespace: what the page's text
# says the reader has done (a file `farm export` wrote on their machine, a kernel's WGSL beside it).
SETUP = {
    "guides/clusters.md": {0: "import os, tempfile; os.environ['HOME'] = tempfile.mkdtemp()"},  # the Ray token's home
    "guides/custom-kernel.md": {1: f"import shutil; shutil.copy({str(ROOT / 'examples' / 'softmax.wgsl')!r}, '.')"},
    "guides/runtime.md": {
        1: """
import json
from farm.gpu import HardwareProfile, choose_adapter
from farm.store import SCHEDULES_FORMAT
_profile = HardwareProfile.from_adapter(choose_adapter())
_document = {"format": SCHEDULES_FORMAT, "topology_hash": _profile.topology_hash(), "winners": []}
open("winners.json", "w").write(json.dumps(_document))
""",
    },
}

# Checks run after the page's block of that index, in the blocks' namespace.
CHECKS = {
    "guides/clusters.md": {0: "assert head.gpus == 1 and job.startswith('raysubmit_')"},
    "index.md": {0: "np.testing.assert_allclose(y, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)"},
    "getting-started.md": {0: "assert np.allclose(y, a @ x, rtol=1e-4)"},
    "guides/runtime.md": {
        0: """
import numpy as np
np.testing.assert_allclose(y, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(spectrum, np.fft.fft(signal), rtol=1e-3, atol=1e-3)
np.testing.assert_allclose(proj, records.astype(np.float32) @ weights, rtol=1e-4)
assert top.shape[0] % 8 == 0 and out.shape == (m,) and context.shape == (1, 4, 32, 24) and rho.shape == (1, 4, 16, 24)
assert source in ("tuned", "nearest", "same-device", "default")
""",
        1: "assert rt.gemv(a, x).shape == (256,)",
        2: """
ha, hb = a.numpy(), b.numpy()
np.testing.assert_allclose(c.numpy(), ha.astype(np.float64) @ hb, rtol=1e-4, atol=1e-4)
_, want_rho = rt.recurrent_attention(q, v)
np.testing.assert_allclose(final, want_rho, rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(y.numpy(), ha.sum(axis=1), rtol=1e-4, atol=1e-4)
""",
        3: "np.testing.assert_allclose(sums.numpy(), a.numpy().sum(axis=1), rtol=1e-4, atol=1e-4)",
    },
    "guides/custom-kernel.md": {
        0: """
np.testing.assert_array_equal(y, 2 * np.arange(8, dtype=np.float32) + 1)
assert tuned.winner.speedup is not None and set(tuned.winner.knobs) == {"workgroup_size", "items"}
""",
        2: """
np.testing.assert_allclose(total, [100_000.0])
assert set(tuned.winner.knobs) == {"workgroup_size", "splits"}
""",
    },
}

# Runs a page's blocks in one namespace, each compiled at its own line of the page, so a
# traceback points into the Markdown.
DRIVER = """
import json, sys
page, blocks = json.load(sys.stdin)
scope = {"__name__": "__main__"}
for line, setup, code, check in blocks:
    if setup:
        exec(compile(setup, page + " (setup)", "exec"), scope)
    exec(compile("\\n" * (line - 1) + code, page, "exec"), scope)
    if check:
        exec(compile(check, page + " (check)", "exec"), scope)
print("all blocks ran")
"""


SLOW_PAGES = {"guides/clusters.md"}  # starts a Ray head and a node


@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=[pytest.mark.slow] * (p in SLOW_PAGES)) for p in _runnable_pages()]
)
def test_the_guides_examples_run(page, farm_home):
    path = DOCS / page
    text = path.read_text()
    blocks = []
    for index, match in enumerate(BLOCK.finditer(text)):
        line = text.count("\n", 0, match.start(1)) + 1
        setup = SETUP.get(page, {}).get(index, "")
        blocks.append((line, setup, match.group(1), CHECKS.get(page, {}).get(index, "")))
    assert blocks, f"{page}: a marked block must be a ```python block right after the mark"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps([f"docs/{page}", blocks]),
        cwd=farm_home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.rstrip().endswith("all blocks ran")


def test_every_checked_page_still_has_its_blocks():
    for page, checks in (CHECKS | {f"{page} (setup)": SETUP[page] for page in SETUP}).items():
        page = page.removesuffix(" (setup)")
        count = len(BLOCK.findall((DOCS / page).read_text()))
        assert max(checks) < count, f"{page} has {count} runnable blocks; CHECKS names block {max(checks)}"


def test_the_example_program_runs(farm_home):
    example = ROOT / "examples" / "device_chain.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gemm -> topk:" in done.stdout and "recurrence: 64 steps on the GPU" in done.stdout


def _commands(parser, name):
    import argparse

    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _commands(sub, f"{name} {sub_name}")
