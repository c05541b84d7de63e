"""`farm request` (queue, dedupe, --list, one-line errors) and `farm serve --once` end to end
on lavapipe: a local Ray, a real campaign, winners stored, requests done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from farm.cli.main import main
from farm.store import open_store, winners
from farm.store import queue as q

ROOT = Path(__file__).resolve().parents[1]


def _farm(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_request_queues_dedupes_and_lists(farm_home, capsys):
    code, out, _ = _farm(capsys, "request", "--list")
    assert code == 0 and "the queue is empty" in out and not (farm_home / "farm.db").exists()  # --list creates nothing
    code, out, _ = _farm(capsys, "request", "gemv", "--sizes", "gemv:m=64,n=64;gemv:m=128,n=64", "--priority", "2")
    assert code == 0 and out.splitlines() == [
        "request 1: gemv m=64,n=64 on topology any: queued",
        "request 2: gemv m=128,n=64 on topology any: queued",
    ]
    code, out, _ = _farm(capsys, "request", "--sizes", "gemv:m=64,n=64", "--topology", "a" * 64)
    assert out.strip() == f"request 3: gemv m=64,n=64 on topology {'a' * 12}: queued"
    code, out, _ = _farm(capsys, "request", "--sizes", "gemv:m=64,n=64")
    assert out.strip() == "request 1: gemv m=64,n=64 on topology any: already open"
    code, out, _ = _farm(capsys, "request", "--list")
    lines = out.splitlines()
    assert lines[0].split() == [
        "id", "status", "prio", "kernel", "problem", "topology", "age", "requested_by", "lease", "tries", "why"
    ]  # fmt: skip
    assert [line.split()[:6] for line in lines[2:]] == [
        ["1", "queued", "2", "gemv", "m=64,n=64", "any"],
        ["2", "queued", "2", "gemv", "m=128,n=64", "any"],
        ["3", "queued", "0", "gemv", "m=64,n=64", "a" * 12],
    ]
    code, out, _ = _farm(capsys, "request", "--list", "--status", "done")
    assert "the queue is empty" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["request"], "request needs --sizes"),
        (["request", "gemm", "--sizes", "gemv:m=4,n=4"], "--sizes names gemv, not among the kernels (gemm)"),
        (["request", "gemv", "gemm", "--sizes", "gemv:m=4,n=4"], "no problem in --sizes for gemm"),
        (["request", "--sizes", "gemv:m=0,n=4"], "m"),
        (["request", "--sizes", "gemv:m=4,n=4", "--topology", "abc"], "--topology abc: no topology is stored yet"),
        (["request", "--list", "gemv"], "request --list takes no kernels"),
        (["request", "--priority", "x"], "invalid int value: 'x'"),
        (["serve", "--poll", "0"], "expected a finite number > 0"),
        (["serve", "--max-attempts", "0"], "expected a positive integer"),
    ],
)
def test_request_and_serve_mistakes_are_one_line(farm_home, capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("farm: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_serve_once_on_an_empty_queue_returns_without_ray(farm_home, capsys):
    code, _, err = _farm(capsys, "serve", "--once", "--allow-cpu")
    assert code == 0 and "serve: the queue is empty" in err


@pytest.mark.slow
def test_farm_serve_once_drains_the_queue_on_lavapipe(farm_home, capsys, device):
    assert main(["request", "gemv", "--sizes", "gemv:m=40,n=24", "--topology", device.profile.topology_hash()]) == 0
    assert main(["request", "--sizes", "gemv:m=48,n=24"]) == 0  # any
    assert main(["request", "--sizes", "gemv:m=56,n=24", "--topology", "b" * 64]) == 0  # nobody has it
    capsys.readouterr()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "farm", "serve", "--once", "--allow-cpu", "--budget", "2", "--reps", "2"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "serve: 2 claimed, 2 done, 0 to retry, 0 failed, 1 left queued" in proc.stderr
    assert f"is for topology {'b' * 12}, which no worker here has" in proc.stderr
    db = open_store(None)
    rows = {r["problem"]: r for r in q.requests(db)}
    statuses = {p: r["status"] for p, r in rows.items()}
    assert statuses == {"m=40,n=24": "done", "m=48,n=24": "done", "m=56,n=24": "queued"}
    here = device.profile.topology_hash()
    assert {(w.topology_hash, w.problem_key) for w in winners(db, kernel="gemv")} == {
        (here, "m=40,n=24"), (here, "m=48,n=24")
    }  # fmt: skip
    assert rows["m=48,n=24"]["note"] == f"tuned on {here[:12]}"
    main(["request", "--list"])
    listed = capsys.readouterr().out
    assert "campaign " in listed and "no worker of this topology" in listed
    db.engine.dispose()


def test_request_and_serve_take_kernel_files_like_tune():
    from farm.cli.main import build_parser

    parser = build_parser()
    for argv in (["serve", "--once"], ["request", "softmax", "--sizes", "softmax:rows=8,cols=100"]):
        args = parser.parse_args([*argv, "--kernels-file", "examples/softmax.py", "--kernels-file", "b.py"])
        assert args.kernels_file == ["examples/softmax.py", "b.py"]
