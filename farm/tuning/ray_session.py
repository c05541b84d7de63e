"""Connecting to Ray: start a local one, or join a cluster only when one is named.

`init_ray(address, ...)` joins `address`, else $RAY_ADDRESS (`ray job submit` sets it for
the job's driver, so `farm tune` inside a job joins its cluster), else starts a local Ray
with `address="local"`. Never a bare `ray.init()`: Ray 2.60 then joins whatever
`<temp dir>/ray_current_cluster` names (`ray start` writes it, only `ray stop` removes it),
so a head stopped any other way left every later local tune retrying a dead address for
minutes, and a live head made a "local" tune silently join it.

Joining is bounded: the address must accept a TCP connection within `connect_timeout_s`
(CONNECT_TIMEOUT_S, $FARM_RAY_CONNECT_TIMEOUT_S) before Ray is asked to connect (Ray itself
retries an unreachable GCS for 20 x ~36 s); otherwise, or when Ray then fails to connect
(a refused auth token among others), `RayUnreachable`: a ValueError the CLI prints as one
line naming the address and the fix.

A local Ray keeps Ray's token auth on, without the WARNING Ray 2.60 logs about it on every
start (`_not_token_notice`): a local run prints only the farm's own lines.

FORWARDED_ENV are the variables the workers need from the driver's environment (an extra
kernel module, the adapter choice), except those an enclosing `ray job submit` already
sets (`job_env_keys`). User kernel files (`--kernels-file`, $FARM_KERNELS_FILES) travel by
value: their texts and WGSL in $FARM_KERNELS_BUNDLE (farm.catalog.files.bundle), so no
node needs them at a path.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time

from farm import catalog
from farm.catalog import files as kernel_files

FORWARDED_ENV = ("FARM_EXTRA_KERNELS", "FARM_ADAPTER")
CONNECT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_ENV = "FARM_RAY_CONNECT_TIMEOUT_S"
_RETRY_S = 0.5  # between connection attempts to an address that refused
# Ray 2.60 logs this WARNING on every new local cluster, where token auth is what the farm wants.
_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"
_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


def _not_token_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(_TOKEN_NOTICE)


class RayUnreachable(ValueError):
    """The Ray cluster named by --ray-address or $RAY_ADDRESS did not answer in time."""


def init_ray(address: str | None, num_cpus: int | None, connect_timeout_s: float | None = None) -> bool:
    """Join `address` / $RAY_ADDRESS (bounded by `connect_timeout_s`), or start a local Ray
    with `num_cpus`; True when this call initialized Ray, False when it already was."""
    import ray

    if ray.is_initialized():
        return False
    job_keys = job_env_keys()
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ and k not in job_keys}
    catalog.names()  # loads $FARM_KERNELS_FILES too, so the bundle holds them
    shipped = kernel_files.bundle()  # user kernel files travel by value: no path needed on any node
    if shipped:
        env[kernel_files.BUNDLE_ENV] = shipped
    runtime_env = {"env_vars": env} if env else None
    source = "--ray-address" if address else "$RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        timeout_s = connect_timeout(connect_timeout_s)
        probe(address, timeout_s, source)
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, logging_level="WARNING")
        except ConnectionError as exc:
            if "InvalidAuthToken" in str(exc.__cause__):
                raise RayUnreachable(
                    f"the Ray cluster at {address} ({source}) refused this process's auth token; "
                    "export RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH as `farm cluster start` printed"
                ) from exc
            raise RayUnreachable(_unreachable(address, source, str(exc).splitlines()[0])) from exc
        return True
    # The per-node metrics exporter answers on 0.0.0.0 without the token (a local Ray's node
    # address is never loopback); a local tune doesn't need it: off unless the user set it,
    # as `farm cluster start` does.
    os.environ.setdefault("RAY_enable_metrics_collection", "0")
    notices = logging.getLogger(_TOKEN_LOGGER)
    if _not_token_notice not in notices.filters:
        notices.addFilter(_not_token_notice)  # only that notice: a warning that auth is off still shows
    ray.init(
        address="local",  # never the cluster named in ray_current_cluster
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env=runtime_env,
        log_to_driver=False,
        logging_level="WARNING",
    )
    return True


def probe(address: str, timeout_s: float, source: str = "--ray-address") -> None:
    """Return once `address` accepts a TCP connection; retry refusals until `timeout_s` has
    passed, then raise RayUnreachable naming the address, where it came from and the fix."""
    hosts, port = _endpoints(address, source)
    deadline = time.monotonic() + timeout_s
    while True:
        error = ""
        for host in hosts:
            left = deadline - time.monotonic()
            try:
                with socket.create_connection((host, port), timeout=max(0.1, min(2.0, left))):
                    return
            except socket.gaierror as exc:  # a name that doesn't resolve: waiting won't change it
                reason = f"cannot resolve {host!r} ({exc.strerror})"
                raise RayUnreachable(_unreachable(address, source, reason)) from None
            except OSError as exc:
                error = exc.strerror or str(exc) or type(exc).__name__
        if time.monotonic() + _RETRY_S >= deadline:
            raise RayUnreachable(_unreachable(address, source, f"no answer within {timeout_s:g} s ({error})"))
        time.sleep(_RETRY_S)


def _endpoints(address: str, source: str) -> tuple[list[str], int]:
    """Hosts to try and the port of `address` (HOST:PORT, ray://HOST:PORT or "auto"). A
    loopback host is also tried at this node's IP, which is where Ray connects for it."""
    import ray

    if address == "auto":  # Ray's own lookup: ray_current_cluster, else a local GCS process
        from ray._private.services import canonicalize_bootstrap_address

        try:
            address = canonicalize_bootstrap_address("auto") or ""
        except ConnectionError:
            raise RayUnreachable(_unreachable("auto", source, "no running Ray cluster found")) from None
    host, port = parse_address(address, source)
    hosts = [host]
    if host in ("localhost", "::1") or host.startswith("127."):
        hosts.append(ray.util.get_node_ip_address())
    return hosts, port


def parse_address(address: str, source: str = "--ray-address") -> tuple[str, int]:
    """(host, port) of HOST:PORT or ray://HOST:PORT, checked without a connection (so a command
    can refuse a bad address before it creates or starts anything): RayUnreachable otherwise."""
    scheme, sep, rest = address.strip().partition("://")
    if not sep:
        scheme, rest = "", scheme
    host, _, port = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    bad = (
        scheme not in ("", "ray")
        or not host
        or any(c.isspace() or c in "/@?#" for c in host)
        or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
    )
    if bad:
        raise RayUnreachable(
            f"bad Ray address {_shown(address)} ({source}): expected HOST:PORT or ray://HOST:PORT with a port in "
            "1..65535, 'auto' or 'local'"
        )
    return host, int(port)


def check_address(address: str | None, source: str) -> None:
    """What `init_ray` will accept for `address`: None, "local", "auto", or `parse_address`'s form."""
    if address and address not in ("local", "auto"):
        parse_address(address, source)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:60] + "...")


def _unreachable(address: str, source: str, reason: str) -> str:
    drop = "drop --ray-address" if source == "--ray-address" else "unset RAY_ADDRESS"
    return (
        f"cannot reach the Ray cluster at {address} ({source}): {reason}; "
        f"start it with `farm cluster start`, or {drop} to tune on a local Ray"
    )


def connect_timeout(value: float | None) -> float:
    if value is None:
        raw = os.environ.get(CONNECT_TIMEOUT_ENV)
        try:
            value = float(raw) if raw else CONNECT_TIMEOUT_S
        except ValueError:
            raise ValueError(f"${CONNECT_TIMEOUT_ENV} must be a number of seconds, got {_shown(raw)}") from None
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"${CONNECT_TIMEOUT_ENV} must be a finite number of seconds > 0, got {_shown(raw)}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"the Ray connect timeout must be a finite number of seconds > 0, got {value}")
    return float(value)


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
