"""One campaign per local GPU: the per-adapter flock under $FARM_HOME/locks that a
second campaign on the same GPU waits on (or, FARM_DEVICE_LOCK=warn, only warns about)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from farm.tuning.device_lock import device_locks, local_gpus, lock_mode

HOST = "this-host"


def report(slot_host: str, topology: str = "a" * 64, index: int | None = 0, uuid: str | None = None) -> dict:
    mapping = {"adapter": "NVIDIA H200 (DiscreteGPU) via Vulkan", "adapter_index": index}
    mapping["nvidia_smi"] = {"uuid": uuid} if uuid else None
    return {"host": slot_host, "pid": 1, "topology_hash": topology, "mapping": mapping}


def test_keys_name_each_local_gpu_and_leave_other_machines_alone():
    reports = {
        "w0": report(HOST, uuid="GPU-1234"),
        "w1": report(HOST, index=1),
        "w2": report("other-node", index=0),  # a multi-node cluster: not ours to lock
        "w3": report(HOST, topology="c" * 64, index=None),  # a CPU adapter
        "w4": report(HOST, topology="c" * 64, index=None),  # sharing it
    }
    keys = local_gpus(reports, host=HOST)
    assert sorted(keys) == ["GPU-1234", "aaaaaaaaaaaaaaaa-1", "cccccccccccccccc-default"]
    assert keys["aaaaaaaaaaaaaaaa-1"] == "GPU NVIDIA H200 (DiscreteGPU) via Vulkan (worker w1)"


def test_lock_mode_reads_the_environment(monkeypatch):
    monkeypatch.delenv("FARM_DEVICE_LOCK", raising=False)
    assert lock_mode() == "wait"
    monkeypatch.setenv("FARM_DEVICE_LOCK", " Warn ")
    assert lock_mode() == "warn"
    monkeypatch.setenv("FARM_DEVICE_LOCK", "never")
    with pytest.raises(ValueError, match="FARM_DEVICE_LOCK must be one of wait, warn, off, got 'never'"):
        lock_mode()


@pytest.fixture
def local(monkeypatch):
    monkeypatch.setattr("farm.tuning.device_lock.socket.gethostname", lambda: HOST)
    monkeypatch.delenv("FARM_DEVICE_LOCK", raising=False)
    return {"w0": report(HOST, uuid="GPU-1234")}


def test_a_second_campaign_on_the_gpu_waits_with_one_line_until_the_first_ends(local, tmp_path):
    first_err, second_err = io.StringIO(), io.StringIO()
    order = []
    with device_locks(local, "farm tune gemv --db postgresql://u:hunter2@h/farm", first_err, tmp_path) as held:
        assert held == ["GPU-1234"] and (tmp_path / "locks" / "gpu-GPU-1234.lock").exists()

        def second():
            with device_locks(local, "farm tune gemm", second_err, tmp_path):
                order.append("second ran")

        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)
        assert order == [] and thread.is_alive()  # waiting
        order.append("first done")
    thread.join(timeout=10)
    assert order == ["first done", "second ran"] and first_err.getvalue() == ""
    (line,) = second_err.getvalue().splitlines()
    assert line.startswith("farm: waiting for GPU NVIDIA H200 (DiscreteGPU) via Vulkan (worker w0): another campaign")
    assert f"pid {os.getpid()} since " in line and "farm tune gemv --db postgresql://u:***@h/farm" in line
    assert "hunter2" not in line and "FARM_DEVICE_LOCK=warn" in line


def test_warn_mode_runs_beside_it_with_one_warning_and_off_takes_no_lock(local, tmp_path, monkeypatch):
    with device_locks(local, "farm tune gemv", io.StringIO(), tmp_path):
        monkeypatch.setenv("FARM_DEVICE_LOCK", "warn")
        err = io.StringIO()
        with device_locks(local, "farm tune gemm", err, tmp_path) as held:
            assert held == []
        (line,) = err.getvalue().splitlines()
        assert line.startswith("farm: warning: GPU NVIDIA H200") and "time each other's load" in line
        monkeypatch.setenv("FARM_DEVICE_LOCK", "off")
        err = io.StringIO()
        with device_locks(local, "farm tune gemm", err, tmp_path) as held:
            assert held == [] and err.getvalue() == ""


def test_a_killed_holder_leaves_no_lock_behind(local, tmp_path, monkeypatch):
    path = tmp_path / "locks" / "gpu-GPU-1234.lock"
    path.parent.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl,os,time; fd=os.open({str(path)!r}, os.O_RDWR|os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("FARM_DEVICE_LOCK", "warn")
        err = io.StringIO()
        with device_locks(local, "farm tune", err, tmp_path) as held:
            assert held == [] and "holder unknown" in err.getvalue()  # it wrote no record
    finally:
        monkeypatch.delenv("FARM_DEVICE_LOCK")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    err = io.StringIO()
    with device_locks(local, "farm tune", err, tmp_path) as held:
        assert held == ["GPU-1234"] and err.getvalue() == ""


def test_an_unusable_farm_home_is_one_warning_not_an_error(local, tmp_path):
    home = tmp_path / "file"
    home.write_text("not a directory")
    err = io.StringIO()
    with device_locks(local, "farm tune", err, home) as held:
        assert held == []
    assert err.getvalue().startswith("farm: warning: no GPU lock (")
