"""The README is the front page: short, its quickstart marked `<!-- runs in tests/test_readme.py -->`
runs as written, and every link it has leads to a file in the repository. The guides'
examples run in tests/test_docs.py."""

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_quickstart_runs(farm_home):
    blocks = re.findall(r"<!-- runs in tests/test_readme.py -->\n```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 - our own README
    np.testing.assert_allclose(scope["y"], scope["a"].astype(np.float64) @ scope["x"], rtol=1e-4, atol=1e-4)
    scope["rt"].close()


def test_the_front_page_stays_short():
    assert len(README.read_text().splitlines()) <= 120


def test_every_link_leads_to_a_file():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert local, "the README links into docs/"
    assert [link for link in local if not (ROOT / link).exists()] == []
