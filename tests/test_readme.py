"""The README's examples marked `<!-- runs in tests/test_readme.py -->` run as written."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _tested_blocks() -> list[str]:
    text = README.read_text()
    return re.findall(r"<!-- runs in tests/test_readme.py -->\n```python\n(.*?)```", text, flags=re.S)


def test_the_device_resident_example_runs_and_computes_what_numpy_does(farm_home, capsys):
    blocks = _tested_blocks()
    assert len(blocks) == 2  # the device-resident example, then rt.run by dims on its arrays
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - our own README
    rt, a, b = scope["rt"], scope["a"].numpy(), scope["b"].numpy()
    c = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(scope["c"].numpy(), c, rtol=1e-4, atol=1e-4)
    assert scope["top"].shape[0] % 8 == 0
    _, want_rho = rt.recurrent_attention(scope["q"], scope["v"])
    np.testing.assert_allclose(scope["final"], want_rho, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scope["y"].numpy(), a.sum(axis=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scope["sums"].numpy(), a.sum(axis=1), rtol=1e-4, atol=1e-4)
    assert capsys.readouterr().out.strip().startswith("[")
    rt.close()


def test_the_example_program_runs(farm_home):
    import subprocess
    import sys

    example = README.parent / "examples" / "device_chain.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gemm -> topk:" in done.stdout and "recurrence: 64 steps on the GPU" in done.stdout
