"""An f16 GEMM on the adapter's cooperative matrices (tensor cores) against cuBLAS fp16 (issue 17).

C = A·B for m = n = k in --sizes (1024, 2048, 4096), A and B f16 uniform in [-1, 1], each of the
kernel variants of coop_gemm_kernels.py (compile errors printed in full; the others carry on)
certified against numpy (float32 matmul of the f16 inputs) with its own tolerance (below), timed
by GPU timestamps (farm.gpu's `time_calls`: warm-up, median of --reps, the clock check), and, where
torch has CUDA, cuBLAS (torch.matmul on half tensors) kernel-only by CUDA-graph replay
(farm.cli.vendor's `vendor_kernel_ns`), reported as cuBLAS time / ours (the fraction of cuBLAS's
speed). Prints a Markdown table, writes <date>-<label>-coop-gemm.json under --out (rewritten
after every row, so a crash leaves what it had).

The device: wgpu-native 29.0.1.1 (wgpu-py 0.32.0) lists `cooperative-matrix` on the H200 but
builds every device with wgpu's experimental features off (the byte PATCH_SITE sets in
wgpuAdapterRequestDevice), and wgpu-core refuses EXPERIMENTAL_COOPERATIVE_MATRIX then ("Some
experimental features, ... were requested, but experimental features are not enabled"). When
the plain request fails (that way or any other), the script runs itself again on a copy of the
library with that one byte set to 1 (WGPU_LIB_PATH; the JSON's `wgpu.patch` says so; --no-patch:
don't). Without a
cooperative-matrix device it says why in the JSON (status unsupported / device-request-failed)
and exits 0, after the control variant and cuBLAS where there is a GPU.

Tolerance: products of f16 values are exact in f32; the error is the rounding of the running
sum, T times (unit roundoff u), the partial sums s_t growing from 0 to C_ij. Rounding to nearest
gives an error of standard deviation sigma_ij = u sqrt(T (C_ij^2/9 + R_ij^2/18)) (R_ij^2 = sum_k
a_ik^2 b_kj^2; relative to the output's scale it grows like sqrt(K) u); truncation (tensor cores
align and truncate) adds a bias of about u sum_t |s_t| ~ u T (|C_ij|/2 + 2 R_ij/3). Certified:
every |out - ref| <= 16 sigma_ij + beta u T (|ref_ij|/2 + 2 R_ij/3) + u_out |ref_ij|, with
(u, T, beta) = (2^-11, K/16, 1.5) for an f16 accumulator (one rounding per 16-deep multiply-add)
and (2^-24, K/8, 3) for f32, u_out = 2^-11 for an f16 C (cuBLAS's); a numpy simulation of both
roundings at K = 1024 and 4096 (256 rows) reads at most 0.13 (to nearest) and 0.75 (truncated) of
it. At K = 4096 it is about 5 (f16) and 2e-3 (f32) on a typical element (|C| ~ 21): an f16 sum
posing as f32 fails by 170x, a dropped 16-deep step by 1.7x (f16) and 4000x (f32), a layout
mix-up by far more. `err_sigma` is the worst |err| / sigma_ij: about 6 means rounding to nearest,
tens truncation.

    source .devkit/setup.sh && python3 benchmarks/coop_gemm.py --out DIR [--sizes 1024,2048,4096]
    python3 benchmarks/coop_gemm.py --emulate --sizes 128 --no-vendor --out DIR  # index math on lavapipe
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # farm, also under `python3 benchmarks/...`
from coop_gemm_kernels import SG, VARIANTS, emulated  # noqa: E402

from farm.gpu import Device, GpuError, HardwareProfile, choose_adapter  # noqa: E402
from farm.gpu.device import REPORT_WARM_MAX_S, REPORT_WARM_S  # noqa: E402

COOP = "cooperative-matrix"
PATCH_ENV = "COOP_GEMM_PATCH"
# wgpuAdapterRequestDevice in wgpu-native 29.0.1.1: movd %xmm0,0x310(%rsp); movb $0x0,0x318(%rsp)
# (the wgpu DeviceDescriptor's experimental_features, read by wgpu-core's create_device_and_queue at
# +0x120); mov 0x88(%rsp),%rax. The patch sets the movb's immediate (byte 16) to 1.
PATCH_SITE = bytes.fromhex("660f7e842410030000" "c684241803000000" "488b842488000000")
ROUNDING = {"f16": (2.0**-11, 16, 1.5), "f32": (2.0**-24, 8, 3.0)}  # (u, k per rounding, beta): the docstring


class NativeLog(logging.Handler):
    """wgpu-native's log lines (INFO and up, less wgpu-py's "Creating ..."), kept for the JSON (wgpu-hal
    says there how many cooperative matrix configurations it found); warnings and those printed."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.levelname}: {record.getMessage()}"
        if not record.getMessage().startswith("Creating "):
            self.lines.append(line)
            del self.lines[:-200]  # in place: the report holds this list
            if record.levelno >= logging.WARNING or "ooperative" in line:
                print(f"[wgpu] {line}", flush=True)


@functools.cache
def case(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A, B, reference, scale) of one size, made once for ours and cuBLAS alike."""
    g = np.random.default_rng(size)
    a16, b16 = (g.uniform(-1, 1, (size, size)).astype(np.float16) for _ in range(2))
    return (a16, b16, *reference(a16, b16))


def reference(a16: np.ndarray, b16: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = a16.astype(np.float32), b16.astype(np.float32)
    return a @ b, np.sqrt((a * a) @ (b * b))


def certify(out: np.ndarray, ref: np.ndarray, scale: np.ndarray, acc: str, k: int, out_f16: bool) -> dict:
    """The tolerance of the module docstring; the worst element and where it is."""
    u, depth, beta = ROUNDING[acc]
    steps = max(k // depth, 1)
    spread = np.sqrt(steps * (ref * ref / 9 + scale * scale / 18))
    bias = beta * u * steps * (np.abs(ref) / 2 + 2 * scale / 3)
    tol = 16 * u * spread + bias + (2.0**-11 if out_f16 else 0.0) * np.abs(ref)
    err = np.abs(out.astype(np.float32) - ref)
    bad = ~np.isfinite(out)
    ratio = np.where(bad, np.inf, err / np.maximum(tol, 1e-30))
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return {"certified": bool(np.all(ratio <= 1.0)), "max_err": float(np.nanmax(np.where(bad, np.nan, err))),
            "worst_ratio": float(ratio[worst]), "err_sigma": float(np.nanmax(err / (u * spread))),
            "worst_at": [int(i) for i in worst], "worst_got": float(out[worst]), "worst_want": float(ref[worst]),
            "nan_or_inf": int(bad.sum()), "zeros": int((out == 0).sum()),
            "failing": int((ratio > 1).sum())}  # fmt: skip


def diagnose(out: np.ndarray, a16: np.ndarray, b16: np.ndarray) -> dict:
    """Which product a failing output is closest to (a layout mix-up shows as a transpose)."""
    a, b = a16.astype(np.float32), b16.astype(np.float32)
    guesses = {"A@B": a @ b, "(A@B)^T": (a @ b).T, "A^T@B": a.T @ b, "A@B^T": a @ b.T, "A^T@B^T": a.T @ b.T,
               "B@A": b @ a}  # fmt: skip
    out = np.nan_to_num(out.astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    return {name: float(np.linalg.norm(out - g) / np.linalg.norm(g)) for name, g in guesses.items()}


def library() -> dict:
    import wgpu
    from wgpu.backends import wgpu_native

    path = str(wgpu_native.lib_path)
    return {"wgpu_py": wgpu.__version__, "wgpu_native_expected": wgpu_native.__version__,
            "wgpu_native": ".".join(map(str, wgpu_native.lib_version_info)), "lib_path": path,
            "lib_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
            "patch": json.loads(os.environ[PATCH_ENV]) if PATCH_ENV in os.environ else None}  # fmt: skip


def patched_library(original: str) -> tuple[str, dict]:
    data = bytearray(Path(original).read_bytes())
    if data.count(PATCH_SITE) != 1:
        raise RuntimeError(f"{original}: the experimental-features byte is not where wgpu-native 29.0.1.1 has it")
    at = data.find(PATCH_SITE) + 16
    data[at] = 1
    path = Path(tempfile.mkdtemp(prefix="coop-gemm-")) / Path(original).name
    path.write_bytes(bytes(data))
    return str(path), {"original": original, "patched": str(path), "file_offset": hex(at),
                       "original_sha256": hashlib.sha256(Path(original).read_bytes()).hexdigest()}  # fmt: skip


class Report:
    def __init__(self, args, adapter):
        info = dict(adapter.info)
        label = args.label or re.sub(r"[^a-z0-9]+", "-", str(info.get("device", "gpu")).lower()).strip("-")[:24]
        self.path = Path(args.out) / f"{time.strftime('%Y-%m-%d')}-{label}-coop-gemm.json"
        self.data = {"status": "running", "reason": "", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "label": label,
                     "adapter": adapter.summary, "adapter_info": {k: str(v) for k, v in info.items()},
                     "features": sorted(adapter.features), COOP: COOP in adapter.features, "wgpu": library(),
                     "argv": sys.argv[1:], "sizes": args.sizes, "reps": args.reps, "subgroup_lanes_assumed": SG,
                     "tolerance": "|out-ref| <= 16 sigma + beta u T (|ref|/2 + 2R/3) + u_out |ref|, sigma = u "
                                  "sqrt(T (ref^2/9 + R^2/18)); f16 acc (u, T, beta) = (2^-11, K/16, 1.5), f32 "
                                  "(2^-24, K/8, 3); u_out 2^-11 for f16 C",
                     "rows": [], "vendor": [], "fractions": []}  # fmt: skip
        self.start = time.perf_counter()
        self.save()

    def save(self, **fields) -> None:
        self.data.update(fields, elapsed_s=round(time.perf_counter() - self.start, 1))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1))


def open_device(args, adapter, report: Report) -> tuple[Device | None, bool]:
    """(device, whether it has cooperative matrices); may run the script again on the patched
    library and exit with its status."""
    if args.emulate or COOP not in adapter.features:
        why = "--emulate: cooperative ops emulated" if args.emulate else f"the adapter lacks {COOP}"
        print(f"{adapter.summary}: {why}", flush=True)
        report.save(reason=why)
        return (Device(adapter) if args.emulate or not HardwareProfile.from_adapter(adapter).is_cpu else None), False
    try:
        return Device(adapter, features=(COOP,)), True
    except GpuError as exc:
        first = str(exc)
    print(f"device request with {COOP} failed:\n{first}", flush=True)
    if PATCH_ENV not in os.environ and not args.no_patch:  # expected: "... experimental features are not enabled"
        try:
            path, info = patched_library(report.data["wgpu"]["lib_path"])
        except (OSError, RuntimeError) as exc:
            print(f"no patched library: {exc}", flush=True)
        else:
            info["first_attempt_error"] = first
            print(f"running again on {path} (experimental features enabled, {info['file_offset']})", flush=True)
            env = {**os.environ, "WGPU_LIB_PATH": path, PATCH_ENV: json.dumps(info)}
            rc = subprocess.run([sys.executable, *sys.argv], env=env).returncode
            shutil.rmtree(Path(path).parent, ignore_errors=True)
            try:
                done = json.loads(report.path.read_text()) if report.path.exists() else {}
            except json.JSONDecodeError:  # the child died mid-write
                done = {}
            if done.get("status") in (None, "running") or rc != 0:
                report.save(status="crashed", reason=f"the run on the patched library ended with status {rc} "
                            f"after {len(done.get('rows', []))} rows", patched_run=done)  # fmt: skip
                print(f"the patched run ended with status {rc}; see {report.path}", flush=True)
            sys.exit(0)
    report.save(status="device-request-failed", reason=first)
    if HardwareProfile.from_adapter(adapter).is_cpu:
        return None, False
    try:
        return Device(), False  # the control and cuBLAS
    except GpuError as exc:
        report.save(status="device-request-failed", reason=f"{first}; without the feature: {exc}")
        return None, False


def run_ours(device: Device, args, coop: bool, report: Report) -> None:
    names = args.variants.split(",") if args.variants else [v.name for v in VARIANTS]
    wanted = [v for v in VARIANTS if v.name in names and (v.coop is False or coop or args.emulate)]
    lanes = subgroup_lanes(device)
    report.save(subgroup_lanes=list(lanes))
    for size in args.sizes:
        a16, b16, ref, scale = case(size)
        a, b = device.upload(a16), device.upload(b16)
        for v in wanted:
            print(f"... {v.name} at {size}^3", flush=True)
            report.save(current=f"{v.name} {size}")
            row = {"size": size, "variant": v.name, "acc": v.acc, "threads": v.threads,
                   "emulated": v.coop and args.emulate}  # fmt: skip
            row.update(_one(device, v, size, a, b, (a16, b16, ref, scale), lanes, args, report))
            report.data["rows"].append(row)
            report.save()
            print(json.dumps(row), flush=True)
        device.release(a, b)


SUBGROUP_PROBE = """
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(subgroup_size) lanes: u32) { out[lid] = lanes; }
"""


def subgroup_lanes(device: Device) -> tuple[int, int]:
    """(least, most) subgroup size a 256-thread workgroup actually ran with: the adapter
    reports a range (the H200's Vulkan adapter says 4..128, so every cooperative variant was
    skipped on 2026-12-02), NVIDIA runs 32. The adapter's range where the probe can't run."""
    try:
        pipeline = device.pipeline(SUBGROUP_PROBE, "main", label="subgroup-probe")
        out = device.empty(256 * 4)
        try:
            device.dispatch_many([(pipeline, device.bind(pipeline, [out]), (1, 1, 1))])
            seen = device.read(out, np.uint32, 256)
        finally:
            device.release(out)
        return int(seen.min()), int(seen.max())
    except Exception:  # noqa: BLE001 - no subgroup builtin here: fall back on what the adapter says
        return device.profile.subgroup_min_size, device.profile.subgroup_max_size


def _one(device: Device, v, size: int, a, b, data, lanes, args, report: Report) -> dict:
    a16, b16, ref, scale = data
    if not v.fits(size, size, size):
        return {"status": "skipped", "error": f"needs sizes multiple of {v.block}"}
    if v.coop and not args.emulate and (lanes[0] not in (0, SG) or lanes[1] not in (0, SG)):
        return {"status": "skipped", "error": f"subgroups of {lanes[0]}..{lanes[1]} lanes; the kernels assume {SG}"}
    if time.perf_counter() - report.start > args.budget_s:
        return {"status": "skipped", "error": f"past the {args.budget_s} s budget"}
    source = v.source(size, size, size)
    if v.coop and args.emulate:
        source = emulated(v, source)
    t0 = time.perf_counter()
    try:
        pipeline = device.pipeline(source, "main", None, f"coop-gemm {v.name} {size}")
    except GpuError as exc:
        shown = f"\n--- its source:\n{source}" if size == min(args.sizes) else ""
        print(f"--- {v.name} {size}: {exc.step} error, in full:\n{exc}{shown}", flush=True)
        return {"status": f"{exc.step}-error", "error": str(exc)}
    out = {"compile_s": round(time.perf_counter() - t0, 3)}
    dtype = np.float16 if v.acc == "f16" else np.float32
    c = device.empty(size * size * np.dtype(dtype).itemsize)
    try:
        calls = [(pipeline, device.bind(pipeline, [a, b, c]), v.grid(size, size))]
        got = device.run_and_read(calls, [c], [("c", c, dtype, size * size, (size, size))]).collect()["c"]
        check = certify(got, ref, scale, v.acc, size, v.acc == "f16")
        out.update(check, status="certified" if check["certified"] else "FAIL")
        if not check["certified"] and size == min(args.sizes):
            out["closest"] = diagnose(got, a16, b16)
        device.warm_until_clocks(calls, REPORT_WARM_S, REPORT_WARM_MAX_S)  # as farm bench's rows
        timing = device.time_calls(calls, warmup=2, reps=args.reps)
        out.update(median_us=timing.median_ns / 1e3, p20_us=timing.p20_ns / 1e3, p80_us=timing.p80_ns / 1e3,
                   tflops=2 * size**3 / timing.median_ns / 1e3, method=timing.method, clock=device.clock_ratio())
    except Exception as exc:  # noqa: BLE001 - any failure is this row's; the others carry on
        step = getattr(exc, "step", "run")
        print(f"--- {v.name} {size}: {step} error, in full:\n{exc!r}", flush=True)
        out.update(status=f"{step}-error", error=f"{type(exc).__name__}: {exc}")
    finally:
        device.release(c)
    return out


def run_vendor(args, report: Report) -> None:
    try:
        import torch
    except ImportError as exc:
        report.data["vendor_skipped"] = f"no torch: {exc}"
        return
    if not torch.cuda.is_available():
        report.data["vendor_skipped"] = "torch has no CUDA"
        return
    try:
        from farm.cli.vendor import vendor_kernel_ns
    except Exception as exc:  # noqa: BLE001 - farm.cli imports much; cuBLAS is then missing, not the rest
        report.data["vendor_skipped"] = f"farm.cli.vendor: {exc!r}"
        return
    flag = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    for size in args.sizes:
        a16, b16, ref, scale = case(size)
        try:
            ta, tb = (torch.from_numpy(x).cuda() for x in (a16, b16))
            got = torch.matmul(ta, tb).cpu().numpy()
            ns, method = vendor_kernel_ns(torch, lambda ta=ta, tb=tb: torch.matmul(ta, tb), reps=args.reps)
        except Exception as exc:  # noqa: BLE001 - recorded, the next size tried
            report.data["vendor_errors"] = [*report.data.get("vendor_errors", []), f"{size}: {exc!r}"]
            print(f"--- cuBLAS {size}: {exc!r}", flush=True)
            continue
        row = {"size": size, "median_us": ns / 1e3, "tflops": 2 * size**3 / ns / 1e3, "method": method,
               "device": torch.cuda.get_device_name(), "torch": torch.__version__, "fp16_reduced_reduction": flag}
        row.update(certify(got, ref, scale, "f32", size, True))  # f32 sums, f16 out
        if not row["certified"] and flag:
            row["note"] = "torch allows cuBLAS reduced-precision (f16) reductions here: outside the f32-sum tolerance"
        report.data["vendor"].append(row)
        report.save()
        print(json.dumps(row), flush=True)
        del ta, tb
        torch.cuda.empty_cache()


def fractions(report: Report) -> None:
    vendor = {row["size"]: row["median_us"] for row in report.data["vendor"]}
    vendor_method = {row["size"]: row["method"] for row in report.data["vendor"]}
    for size in sorted({row["size"] for row in report.data["rows"]}):
        ours = [r for r in report.data["rows"] if r["size"] == size and r.get("status") == "certified"
                and not r["emulated"] and "median_us" in r]  # fmt: skip
        coop = [r for r in ours if r["variant"] != "simt_f16"]
        for r in ours:
            r["vs_cublas"] = vendor[size] / r["median_us"] if size in vendor else None
        best = min(coop or ours, key=lambda r: r["median_us"], default=None)
        report.data["fractions"].append({"size": size, "best": best and best["variant"], "ours_us": best and
                                         best["median_us"], "ours_method": best and best["method"],
                                         "cublas_us": vendor.get(size), "cublas_method": vendor_method.get(size),
                                         "fraction": best and best.get("vs_cublas")})  # fmt: skip


def table(report: Report) -> str:
    def f(x, spec):
        return "-" if x is None else format(x, spec)

    lines = [f"{report.data['adapter']}: {report.data['status']} {report.data['reason'][:300]}",
             "| size | variant | acc | status | median us | method | TFLOP/s | worst err/tol | err/sigma "
             "| cuBLAS/ours |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in report.data["rows"]:
        lines.append(f"| {r['size']} | {r['variant']}{' (emulated)' if r['emulated'] else ''} | {r['acc']} | "
                     f"{r['status']} | {f(r.get('median_us'), '.1f')} | {r.get('method', '-')} | "
                     f"{f(r.get('tflops'), '.1f')} | "
                     f"{f(r.get('worst_ratio'), '.3g')} | {f(r.get('err_sigma'), '.2f')} | "
                     f"{f(r.get('vs_cublas'), '.3f')} |")
    for r in report.data["vendor"]:
        lines.append(f"| {r['size']} | cuBLAS | f16 out | "
                     f"{'certified' if r['certified'] else 'FAIL'} | "
                     f"{r['median_us']:.1f} | {r['method']} | {r['tflops']:.1f} | {r['worst_ratio']:.3g} | "
                     f"{r['err_sigma']:.2f} | 1 |")
    for key in ("vendor_skipped", "vendor_errors"):
        if key in report.data:
            lines.append(f"{key}: {report.data[key]}")
    lines += ["", "| size | best certified | ours us | method | cuBLAS us | method | fraction of cuBLAS, kernel-only |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in report.data["fractions"]:
        lines.append(f"| {r['size']} | {r['best'] or '-'} | {f(r['ours_us'], '.1f')} | {r['ours_method'] or '-'} | "
                     f"{f(r['cublas_us'], '.1f')} | {r['cublas_method'] or '-'} | {f(r['fraction'], '.3f')} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--label", default="", help="file label (default: the adapter's name)")
    parser.add_argument("--sizes", default="1024,2048,4096", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--reps", type=int, default=20)
    names = ",".join(v.name for v in VARIANTS)
    parser.add_argument("--variants", default="", help=f"comma-separated subset of: {names}")
    parser.add_argument("--budget-s", type=float, default=90.0, help="skip further variants after this many seconds")
    parser.add_argument("--emulate", action="store_true", help="run the cooperative variants emulated (any adapter)")
    parser.add_argument("--no-patch", action="store_true", help="don't retry on a library with experimental features")
    parser.add_argument("--no-vendor", action="store_true")
    args = parser.parse_args()
    import wgpu

    log = NativeLog()
    wgpu.logger.addHandler(log)
    wgpu.logger.setLevel(logging.INFO)  # also wgpu-native's level
    adapter = choose_adapter()
    report = Report(args, adapter)
    report.data["wgpu_log"] = log.lines
    print(json.dumps({k: report.data[k] for k in ("adapter", "adapter_info", "features", "wgpu")}), flush=True)
    device, coop = open_device(args, adapter, report)
    if coop:
        print(f"{adapter.summary}: device with {COOP}; subgroup size {device.profile.subgroup_min_size}", flush=True)
    if device is not None:
        limits = {k: device.adapter.limits.get(k) for k in ("max-compute-workgroup-storage-size",
                  "max-compute-invocations-per-workgroup", "max-storage-buffer-binding-size")}  # fmt: skip
        report.save(device_features=sorted(device.device.features), limits=limits)
        print(json.dumps({"device_features": sorted(device.device.features), "limits": limits}), flush=True)
        run_ours(device, args, coop, report)
    if not args.no_vendor and device is not None and not device.profile.is_cpu:
        run_vendor(args, report)
    fractions(report)
    report.data.pop("current", None)
    status = "ok" if coop else "emulated" if args.emulate else report.data["status"]
    report.save(status="unsupported" if status == "running" else status)
    print(table(report))
    print(f"wrote {report.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
