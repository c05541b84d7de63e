"""farm.gpu.nvidia against a fake `nvidia-smi` first on PATH: CSV parsing, utilization as the
maximum over GPUs, n/a lines ignored, and None when the binary is missing, fails or hangs."""

import os
import shlex
import stat

import pytest

from farm.gpu import nvidia
from farm.tuning import workers

H200_ROWS = "0, 00000000:18:00.0, GPU-aaaa, NVIDIA H200\n1, 00000000:2A:00.0, GPU-bbbb, NVIDIA H200\n"


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Install a fake nvidia-smi answering `--query-gpu` / `--query-compute-apps` with the
    given text and exit code; returns a function that reads back the arguments it got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args_file = tmp_path / "args"

    def install(gpu: str = "", apps: str = "", rc: int = 0, body: str | None = None):
        script = bin_dir / "nvidia-smi"
        script.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\n' \"$@\" > {shlex.quote(str(args_file))}\n"
            + (
                body
                or f'case "$1" in\n'
                f"  --query-gpu=*) printf '%s' {shlex.quote(gpu)} ;;\n"
                f"  --query-compute-apps=*) printf '%s' {shlex.quote(apps)} ;;\n"
                "esac\n"
            )
            + f"exit {rc}\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        return lambda: args_file.read_text().splitlines()

    return install


def test_gpu_utilization_is_the_maximum_over_gpus(fake_smi):
    args = fake_smi(gpu="12\n87\n40\n")
    assert nvidia.gpu_utilization() == 87.0
    assert args() == ["--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]


def test_gpu_utilization_ignores_na_and_blank_lines(fake_smi):
    fake_smi(gpu="[N/A]\n33\n\n[Not Supported]\n")
    assert nvidia.gpu_utilization() == 33.0


def test_gpu_utilization_is_none_when_no_gpu_reports_a_number(fake_smi):
    fake_smi(gpu="[N/A]\n[N/A]\n")
    assert nvidia.gpu_utilization() is None


def test_query_gpus_returns_one_dict_per_gpu_keyed_by_field(fake_smi):
    args = fake_smi(gpu=H200_ROWS)
    rows = nvidia.query_gpus(("index", "pci.bus_id", "uuid", "name"))
    assert rows == [
        {"index": "0", "pci.bus_id": "00000000:18:00.0", "uuid": "GPU-aaaa", "name": "NVIDIA H200"},
        {"index": "1", "pci.bus_id": "00000000:2A:00.0", "uuid": "GPU-bbbb", "name": "NVIDIA H200"},
    ]
    assert args()[0] == "--query-gpu=index,pci.bus_id,uuid,name"


def test_query_gpus_skips_lines_with_the_wrong_number_of_cells(fake_smi):
    fake_smi(gpu="0, GPU-aaaa\nsomething went sideways\n1, GPU-bbbb, extra\n")
    assert nvidia.query_gpus(("index", "uuid")) == [{"index": "0", "uuid": "GPU-aaaa"}]


def test_query_gpus_refuses_an_empty_field_list():
    with pytest.raises(ValueError, match="no fields"):
        nvidia.query_gpus(())


def test_compute_apps_lists_processes_and_is_empty_when_none_run(fake_smi):
    args = fake_smi(apps="4242, GPU-bbbb\n17, GPU-aaaa\n")
    assert nvidia.compute_apps() == [{"pid": "4242", "gpu_uuid": "GPU-bbbb"}, {"pid": "17", "gpu_uuid": "GPU-aaaa"}]
    assert args()[0] == "--query-compute-apps=pid,gpu_uuid"
    fake_smi(apps="")
    assert nvidia.compute_apps() == []


def test_missing_binary_gives_none(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert nvidia.query_gpus(("index",)) is None
    assert nvidia.compute_apps() is None
    assert nvidia.gpu_utilization() is None


def test_non_zero_exit_gives_none_even_with_output(fake_smi):
    fake_smi(gpu="55\n", apps="1, GPU-aaaa\n", rc=9)
    assert nvidia.query_gpus(("utilization.gpu",)) is None
    assert nvidia.compute_apps() is None
    assert nvidia.gpu_utilization() is None


def test_hanging_nvidia_smi_times_out_to_none(fake_smi):
    fake_smi(body="exec sleep 5\n")
    assert nvidia.gpu_utilization(timeout_s=0.2) is None


def test_cluster_crosscheck_and_placement_read_the_fake(fake_smi):
    fake_smi(gpu=H200_ROWS, apps=f"{os.getpid()}, GPU-bbbb\n1, GPU-aaaa\n")
    mapping = workers._nvidia_smi_crosscheck(1, "NVIDIA H200")
    assert mapping == {
        "nvidia_smi": {"index": "1", "pci_bus_id": "00000000:2A:00.0", "uuid": "GPU-bbbb", "name": "NVIDIA H200"},
        "name_matches": True,
    }
    assert workers._placement(mapping) == {"placement_uuids": ["GPU-bbbb"], "placement_ok": True}
    assert workers._nvidia_smi_crosscheck(7, "NVIDIA H200") == {"nvidia_smi": None}


def test_cluster_placement_without_nvidia_smi(fake_smi):
    fake_smi(rc=1)
    assert workers._nvidia_smi_crosscheck(0, "anything") == {"nvidia_smi": None}
    assert workers._placement({"nvidia_smi": {"uuid": "GPU-aaaa"}}) == {"placement_uuid": None}
