"""Connecting to Ray: start a local one or join a cluster, with the farm's env forwarded.

`init_ray` starts or joins Ray for the driver; FORWARDED_ENV are the variables the workers
need from the driver's environment (an extra kernel module, the adapter choice), except
those an enclosing `ray job submit` already sets (`job_env_keys`).
"""

from __future__ import annotations

import json
import os

FORWARDED_ENV = ("FARM_EXTRA_KERNELS", "FARM_ADAPTER")


def init_ray(address: str | None, num_cpus: int | None) -> bool:
    """Join `address` / $RAY_ADDRESS, or start a local Ray; True when we started it."""
    import ray

    if ray.is_initialized():
        return False
    job_keys = job_env_keys()
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ and k not in job_keys}
    runtime_env = {"env_vars": env} if env else None
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level="WARNING")
        return True
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env=runtime_env,
        log_to_driver=False,
        logging_level="WARNING",
    )
    return True


def job_env_keys() -> set[str]:
    """Env vars the enclosing `ray job submit` runtime env already sets: Ray refuses to merge
    a driver runtime env that sets the same keys, so those are left to the job."""
    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return set()
    try:
        config = json.loads(raw)
    except ValueError:
        return set()
    env_vars = (config.get("runtime_env") or {}).get("env_vars") or {}
    return set(env_vars)
