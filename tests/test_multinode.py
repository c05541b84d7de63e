"""A real two-node Ray cluster on one machine: a head (`farm cluster start`'s
`start_head`) and a second node (`start_node`, `ray start --address`), each with its own temp dir
and one CPU; a submitted `farm tune --kernels-file` job whose CPU workers run one per node.

The kernels file is a copy of examples/softmax.py that deletes itself and its WGSL once the
driver has loaded it (the driver has no $FARM_KERNELS_BUNDLE, the workers do): trials only pass
when the workers build the kernel from the shipped bundle, not from the path.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from ray.job_submission import JobStatus
from test_jobs import free_ports, rows

from farm.cli import cluster as jobs

REPO = Path(__file__).resolve().parents[1]
NODE_PORT_FLAGS = jobs.EXTRA_PORT_FLAGS[1:]  # ray_client_server_port is the head's only
SELF_DELETE = """
# test only: the driver (no shipped bundle) removes this file and its WGSL once loaded
import os as _os
from pathlib import Path as _Path

if "FARM_KERNELS_BUNDLE" not in _os.environ:
    for _name in (__file__, _Path(__file__).with_name("softmax.wgsl")):
        _os.unlink(_name)
"""


def session_logs(temp_dir: Path) -> list[str]:
    return [p.name for p in (temp_dir / "session_latest" / "logs").glob("worker-*")]


@pytest.fixture
def two_nodes():
    base = Path(tempfile.mkdtemp(prefix="fm", dir="/tmp"))  # short: Ray's unix sockets live below it
    head_dir, node_dir = base / "h", base / "n"
    port, dashboard_port, *extra = free_ports(2 + len(jobs.EXTRA_PORT_FLAGS) + len(NODE_PORT_FLAGS))
    head_ports = dict(zip(jobs.EXTRA_PORT_FLAGS, extra[: len(jobs.EXTRA_PORT_FLAGS)], strict=True))
    node_ports = dict(zip(NODE_PORT_FLAGS, extra[len(jobs.EXTRA_PORT_FLAGS) :], strict=True))
    try:
        head = jobs.start_head(
            port=port,
            dashboard_port=dashboard_port,
            num_cpus=1,
            temp_dir=head_dir,
            extra_ports=head_ports,
            token_file=base / "auth_token",
        )
        jobs.start_node(head, num_cpus=1, temp_dir=node_dir, extra_ports=node_ports)
        yield head, head_dir, node_dir, base
    finally:
        jobs.stop_head(node_dir)
        jobs.stop_head(head_dir)
        left = jobs.head_pids(node_dir) + jobs.head_pids(head_dir)
        shutil.rmtree(base, ignore_errors=True)
        assert left == [], f"Ray processes left running: {left}"


@pytest.mark.slow
def test_tune_job_runs_trials_on_both_nodes_from_the_shipped_bundle(two_nodes):
    head, head_dir, node_dir, base = two_nodes
    kernels = base / "k"
    kernels.mkdir()
    shutil.copy(REPO / "examples" / "softmax.wgsl", kernels / "softmax.wgsl")
    (kernels / "softmax.py").write_text((REPO / "examples" / "softmax.py").read_text() + SELF_DELETE)
    db = f"sqlite:///{base / 'farm.db'}"
    client = jobs.job_client(head.dashboard_url, head.token_path)
    entrypoint = (
        f"farm tune --kernels-file {kernels / 'softmax.py'} --sizes softmax:rows=16,cols=64 "
        f"--budget 8 --allow-cpu -v --db {db}"  # -v: the worker placement lines
    )
    job_id = client.submit_job(
        entrypoint=entrypoint,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "FARM_HOME": str(base / "home")}},
    )
    status = jobs.wait_for_job(client, job_id, timeout_s=150)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    assert not (kernels / "softmax.py").exists()  # the driver deleted it before any worker started

    # One worker per node: each slot's pid (the job prints them) has its Ray log files in one node's temp dir.
    pids = dict(re.findall(r"worker (w\d+) on \S+ pid (\d+)", logs))
    assert sorted(pids) == ["w0", "w1"], logs[-3000:]
    nodes = {}
    for slot, pid in pids.items():
        where = [d for d in (head_dir, node_dir) if any(name.endswith(f"-{pid}.out") for name in session_logs(d))]
        assert len(where) == 1, (slot, pid, session_logs(head_dir), session_logs(node_dir))
        nodes[slot] = where[0]
    assert set(nodes.values()) == {head_dir, node_dir}

    # Both slots ran trials (worker ids are slot.generation: w0.0, w1.0; no replacements).
    trials = dict(rows(db, "SELECT worker_id, count(*) FROM trials WHERE kernel = 'softmax' GROUP BY worker_id"))
    assert set(trials) == {"w0.0", "w1.0"} and all(n >= 1 for n in trials.values()), trials
    failed = rows(db, "SELECT count(*) FROM trials WHERE kernel = 'softmax' AND status != 'ok'")[0][0]
    assert failed == 0
    assert rows(db, "SELECT kernel, problem FROM winners") == [("softmax", "rows=16,cols=64")]
    assert rows(db, "SELECT status FROM campaigns") == [("done",)]
