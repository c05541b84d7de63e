"""deploy/: each file parses and carries what a GPU farm needs (image, GPU resources, DB wiring, entrypoints)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
IMAGE = "farm:0.1.0"


def load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def db_url_from_secret(container: dict) -> dict:
    (entry,) = [e for e in container["env"] if e["name"] == "FARM_DATABASE_URL"]
    return entry["valueFrom"]["secretKeyRef"]


def env_value(container: dict, name: str) -> str:
    return next(e["value"] for e in container["env"] if e["name"] == name)


def test_cluster_launcher_has_a_head_and_a_gpu_worker_type():
    config = load("ray-cluster.yaml")
    types = config["available_node_types"]
    assert config["head_node_type"] == "head" and types["head"]["resources"]["GPU"] == 0
    assert types["gpu_worker"]["resources"] == {"CPU": 4, "GPU": 1}
    assert types["gpu_worker"]["max_workers"] >= 1
    setup = " ".join(config["setup_commands"])
    assert "pip install" in setup and "~/farm" in setup and "libvulkan1" in setup
    assert config["file_mounts"]["/home/ubuntu/farm"] == "."


def test_cluster_launcher_starts_ray_with_token_auth_and_a_local_job_api():
    config = load("ray-cluster.yaml")
    head = " ".join(config["head_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "--dashboard-host=127.0.0.1" in head and "--head" in head
    assert all("RAY_AUTH_MODE=token" in c for c in config["worker_start_ray_commands"] if "ray start" in c)
    assert "~/.ray/auth_token" in config["file_mounts"].values()


@pytest.fixture(params=["raycluster", "rayjob"])
def cluster_spec(request) -> dict:
    doc = load(f"kuberay/{request.param}.yaml")
    return doc["spec"] if doc["kind"] == "RayCluster" else doc["spec"]["rayClusterSpec"]


def test_kuberay_clusters_have_a_gpu_worker_group_with_db_from_secret(cluster_spec):
    assert cluster_spec["rayVersion"] == "2.60.0" and cluster_spec["authOptions"] == {"mode": "token"}
    head = cluster_spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == IMAGE
    assert db_url_from_secret(head) == {"name": "farm-db", "key": "url"}
    (group,) = cluster_spec["workerGroupSpecs"]
    assert group["rayStartParams"]["num-gpus"] == "1"
    worker = group["template"]["spec"]["containers"][0]
    assert worker["image"] == IMAGE
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert "graphics" in env_value(worker, "NVIDIA_DRIVER_CAPABILITIES").split(",")
    assert db_url_from_secret(worker) == {"name": "farm-db", "key": "url"}


def test_rayjob_runs_farm_tune_all_and_cleans_up():
    doc = load("kuberay/rayjob.yaml")
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayJob")
    assert shlex.split(doc["spec"]["entrypoint"]) == ["farm", "tune", "--all"]
    assert doc["spec"]["shutdownAfterJobFinishes"] is True
    assert doc["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["image"] == IMAGE


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_dockerfile_is_debian_python_with_vulkan_loader_and_graphics_capability():
    steps = dockerfile()
    (base,) = [args for op, args in steps if op == "FROM"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim-(bookworm|trixie)", base)
    runs = " ".join(args for op, args in steps if op == "RUN")
    assert re.search(r"apt-get install [^&]*\blibvulkan1\b", runs)
    assert re.search(r"pip install \.", runs)
    env = " ".join(args for op, args in steps if op == "ENV")
    capabilities = re.search(r"NVIDIA_DRIVER_CAPABILITIES=(\S+)", env).group(1).split(",")
    assert {"compute", "utility", "graphics"} <= set(capabilities)
    copied = {args.split()[0] for op, args in steps if op == "COPY"}
    assert {"farm", "kernels", "db", "dashboard", "pyproject.toml"} <= copied


def test_compose_wires_postgres_into_ray_head_and_dashboard():
    services = load("compose.yaml")["services"]
    assert services["postgres"]["image"].startswith("postgres:")
    urls = {name: services[name]["environment"]["FARM_DATABASE_URL"] for name in ("ray-head", "dashboard", "migrate")}
    assert len(set(urls.values())) == 1
    (url,) = set(urls.values())
    assert re.fullmatch(r"postgresql\+psycopg://farm:\$\{FARM_PG_PASSWORD[^}]*\}@postgres:5432/farm", url)
    for name in ("ray-head", "dashboard", "migrate"):
        assert services[name]["image"] == IMAGE


def test_compose_gives_the_ray_head_the_gpu_with_graphics_and_token_auth():
    head = load("compose.yaml")["services"]["ray-head"]
    (device,) = head["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and {"gpu", "graphics"} <= set(device["capabilities"])
    assert "graphics" in head["environment"]["NVIDIA_DRIVER_CAPABILITIES"]
    assert head["environment"]["RAY_AUTH_MODE"] == "token"
    assert head["command"][:3] == ["ray", "start", "--head"] and "--block" in head["command"]


def test_compose_publishes_ports_on_loopback_only_and_runs_the_dashboard():
    services = load("compose.yaml")["services"]
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(port.startswith("127.0.0.1:") for port in published)
    assert services["dashboard"]["command"][:2] == ["farm", "dashboard"]
    assert services["migrate"]["command"] == ["farm", "db", "upgrade"]
    assert services["dashboard"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
