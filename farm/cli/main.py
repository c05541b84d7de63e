"""The `farm` command. Each subcommand parses its flags here and calls one function
in the module that owns the idea. A user's mistake is one line `farm: error: ...` and
exit status 2 (farm.cli.errors); the store commands live in farm.cli.database."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from farm import catalog
from farm.cli import database, helptext, preflight, queue
from farm.cli.errors import (
    EXIT_INTERRUPTED,
    FarmParser,
    budget,
    count,
    database_bugs,
    finite_float,
    is_path_error,
    nonnegative_int,
    port,
    positive_int,
    report,
    seconds,
    small_nonnegative_int,
    user_errors,
    writable_dir,
)
from farm.cli.vendor import VENDOR_FP32
from farm.tuning.tasks import DEFAULT_BUDGET, SPACE_SHARE

# `farm tune` without --budget (a sentinel: --budget all is None): the budget scales with the space.
SCALED_BUDGET = object()


def cmd_adapters(args: argparse.Namespace) -> int:
    from farm.gpu import adapters_report

    for row in adapters_report():
        profile = row["profile"]
        mark = "*" if row["chosen"] else " "
        print(f"{mark} [{row['index']}] {row['summary']}")
        print(f"      topology_hash {row['topology_hash']}")
        print(f"      driver        {profile.driver_description}")
        print(f"      features      {', '.join(profile.features) or '-'}")
        for name, value in profile.limits:
            print(f"      {name:<40} {value}")
    print("(* = chosen; override with FARM_ADAPTER=<index or name substring>)")
    return 0


def cmd_certify(args: argparse.Namespace) -> int:
    from farm.oracle.certify import certify_kernels, format_table, verdict

    kernels = _kernel_names(args)
    rows = certify_kernels(kernels, schedules=args.schedules, seed=args.seed)
    print(format_table(rows))
    problem = verdict(rows)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from farm.cli.bench import run_bench
    from farm.cli.bench_report import bench_passed
    from farm.tuning.tasks import parse_sizes, sizes_among

    sizes = parse_sizes(args.sizes) if args.sizes is not None else {}
    kernels = args.kernels or list(sizes) or catalog.names()
    for name in kernels:
        catalog.get(name)  # an unknown kernel fails before the adapter is opened
    sizes_among(sizes, kernels, "--kernels")
    out = writable_dir(Path(args.out), "bench results") if args.out else None
    rows = run_bench(kernels, out, args.db, args.allow_cpu, args.reps, sizes, args.vendor_fp32)
    return 0 if bench_passed(rows) else 1


def cmd_sweep_recurrent(args: argparse.Namespace) -> int:
    from farm.recurrent.sweep import run_sweep, sweep_config_from_args
    from farm.store import farm_home, open_store

    config = sweep_config_from_args(args)
    _refuse_cpu(args.allow_cpu, "sweep")
    _check_sweep_cases(config.cases, args.allow_cpu)
    writable_dir(Path(args.output_dir) if args.output_dir else farm_home() / "artifacts", "sweep artifacts")
    open_store(args.db).engine.dispose()  # an unreachable or unusable database fails now, not after the sweep
    report = run_sweep(config)
    return 0 if all(c["step_consistency"]["strict_pass"] for c in report["cases"]) else 1


def _sweep_case(text: str):
    from farm.recurrent.sweep import SweepCase

    try:
        return SweepCase.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_sweep_parser(sub) -> None:
    sweep = sub.add_parser("sweep", help="scaling sweeps").add_subparsers(dest="sweep", required=True)
    p = sweep.add_parser("recurrent", help="recurrent attention: op-by-op baseline vs fused kernel vs runtime")
    p.add_argument("--warmup", type=count, default=2, help="warm-up calls per path (min 1)")
    p.add_argument("--repetitions", type=count, default=4, help="timed calls per path (min 1)")
    p.add_argument(
        "--extra-repetitions", type=small_nonnegative_int, default=3, help="added for heavy cases on an idle GPU"
    )
    p.add_argument("--heavy-min-embd", type=positive_int, default=512, help="E from which a case is heavy")
    p.add_argument(
        "--gpu-util-threshold", type=finite_float, default=25.0, help="max nvidia-smi utilization for extra reps"
    )
    p.add_argument("--output-dir", default=None, help="directory of the four artifacts (default: $FARM_HOME/artifacts)")
    for kind, text in helptext.SWEEP_ARTIFACTS:
        p.add_argument(f"--artifact-{kind}", *["--artifact"] * (kind == "md"), default=None, help=text)
    p.add_argument("--seed", type=int, default=1337, help="seed of the generated inputs")
    p.add_argument("--allow-cpu", action="store_true", help="allow a CPU adapter (numbers mean little)")
    p.add_argument(
        "--case",
        action="append",
        type=_sweep_case,
        default=[],
        metavar="NAME:B,H,VH,T,L,E",
        help="add a case, or replace the default case of that name (repeatable)",
    )
    p.add_argument("--long", action="store_true", help="add the long-sequence cases (T=1024, 4096; B=8)")
    p.add_argument("--db", default=None, help=database.DB_HELP)
    p.set_defaults(func=cmd_sweep_recurrent)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from farm.dashboard.serve import serve

    serve(args.db, args.port, args.host)  # replaces this process with the Streamlit server
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    from farm.cli import cluster as jobs

    if args.cluster_command == "stop":
        pids = jobs.stop_head(args.temp_dir)
        print(f"stopped {len(pids)} Ray process(es) under {args.temp_dir}" if pids else "no Ray head there")
        return 0
    head = jobs.start_head(args.host, args.port, args.dashboard_port, args.num_cpus, args.num_gpus, args.temp_dir)
    print(jobs.instructions(head))
    return 0


def _add_serving_parsers(sub) -> None:
    p = sub.add_parser("dashboard", help="Streamlit dashboard over the database (read-only)")
    p.add_argument("--db", default=None, help=database.DB_HELP)
    p.add_argument("--port", type=port, default=8501, help="port to serve on")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.set_defaults(func=cmd_dashboard)

    cluster = sub.add_parser("cluster", help="a local Ray head for `ray job submit` (token auth)")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    p = cluster_sub.add_parser("start", help="ray start --head on 127.0.0.1 with token auth; prints what to export")
    p.add_argument("--host", default="127.0.0.1", help="address for the job API (dashboard) to bind")
    p.add_argument("--port", type=port, default=6379, help="GCS port")
    p.add_argument("--dashboard-port", type=port, default=8265, help="job API / Ray dashboard port")
    p.add_argument("--num-cpus", type=nonnegative_int, default=None, help="CPUs for Ray (default: this machine's)")
    p.add_argument("--num-gpus", type=nonnegative_int, default=None, help="GPUs for Ray (default: those Ray finds)")
    p.add_argument("--temp-dir", default="/tmp/ray", help="Ray's session directory root")
    p.set_defaults(func=cmd_cluster)
    p = cluster_sub.add_parser("stop", help="stop the head started with --temp-dir (only its processes)")
    p.add_argument("--temp-dir", default="/tmp/ray", help="the --temp-dir the head was started with")
    p.set_defaults(func=cmd_cluster)


def cmd_tune(args: argparse.Namespace) -> int:
    from farm.store import farm_home
    from farm.store.engine import mask_command
    from farm.tuning.campaign import tune
    from farm.tuning.report import closing
    from farm.tuning.tasks import TuneConfig, parse_sizes

    sizes = parse_sizes(args.sizes) if args.sizes is not None else {}
    kernels = list(sizes) if sizes and not args.kernels and not args.all else _kernel_names(args)
    _check_sizes(sizes, kernels, args)
    _refuse_cpu(args.allow_cpu, "tune", args.ray_address)  # no database or artifacts made for a refusal
    out = writable_dir(Path(args.out) if args.out else farm_home() / "artifacts", "tuning artifacts")
    scaled = args.budget is SCALED_BUDGET  # no --budget: DEFAULT_BUDGET, the cap growing with the space
    whole = scaled and args.strategy == "exhaustive"  # exhaustive without --budget: every schedule
    config = TuneConfig(
        kernels=tuple(kernels),
        sizes=sizes,
        strategy=args.strategy,
        budget=None if whole else DEFAULT_BUDGET if scaled else args.budget,
        space_share=SPACE_SHARE if scaled and not whole else 0.0,
        reps=args.reps,
        warmup=args.warmup,
        seed=args.seed,
        out=args.out and Path(args.out),
    )
    if _local_cluster(args):
        from farm.cli.cluster import ensure_token

        ensure_token()  # the token a new local Ray uses; ray.init() would write one 0644
    command = mask_command(["farm", "tune", *(sys.argv[2:] if sys.argv[1:2] == ["tune"] else [])])
    winners = tune(config, args.db, args.ray_address, args.allow_cpu, args.trial_timeout, command, args.gpus,
                   args.verbose)  # fmt: skip
    print(closing(winners, args.db, out, args.verbose))
    missing = _without_winner(kernels, sizes, winners)
    if missing:
        print(f"farm: no certified schedule, so no winner, for {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def _check_sizes(sizes: dict, kernels: list[str], args: argparse.Namespace) -> None:
    """Before Ray starts: every --sizes kernel is one being tuned, and every problem fits the
    adapter a local cluster's workers will use (parse_sizes already refused what fits none)."""
    from farm.tuning.problems import check_sizes
    from farm.tuning.tasks import sizes_among

    sizes_among(sizes, kernels, "the kernels to tune")
    check_sizes(sizes, _local_profile(args) if sizes else None)


def _check_sweep_cases(cases, allow_cpu: bool) -> None:
    """Before any input is generated: every sweep case fits this machine's adapter (the
    sweep runs here), so a case of 64 GiB is one `farm: error:` line, not numpy's MemoryError."""
    from farm.tuning.problems import check_problem

    spec, profile = catalog.get("recurrent"), _adapter_profile(allow_cpu)
    for case in cases:
        try:
            check_problem(spec, case.problem(), profile)
        except ValueError as exc:
            raise ValueError(f"--case {case.name}: {exc}") from None


def _refuse_cpu(allow_cpu: bool, what: str, address: str | None = None) -> None:
    """Before Ray starts or anything is made: a local Ray measures this adapter (a CPU: only with --allow-cpu)."""
    if allow_cpu or (address or os.environ.get("RAY_ADDRESS") or "local") != "local":
        return
    profile = _adapter_profile(True)
    if profile is not None and profile.is_cpu:
        raise ValueError(
            f"this machine's adapter is {profile.summary}, a CPU adapter whose timings say nothing about GPUs; "
            f"pass --allow-cpu to {what} on it anyway"
        )


def _local_profile(args: argparse.Namespace):
    """This machine's adapter when the workers will be local (no --ray-address/$RAY_ADDRESS)
    and may use it; None otherwise (a remote cluster's adapters are not known here)."""
    return _adapter_profile(args.allow_cpu) if _local_cluster(args) else None


def _adapter_profile(allow_cpu: bool):
    """This machine's adapter's profile, if it has one it may use (a CPU adapter only with allow_cpu)."""
    from farm.gpu import HardwareProfile, NoAdapterError, choose_adapter

    try:
        profile = HardwareProfile.from_adapter(choose_adapter())
    except NoAdapterError:
        return None
    return profile if allow_cpu or not profile.is_cpu else None


def _local_cluster(args: argparse.Namespace) -> bool:
    """Whether the workers will be this machine's: no address, or "local" (as init_ray reads it)."""
    return (args.ray_address or os.environ.get("RAY_ADDRESS") or "local") == "local"


def _without_winner(kernels: list[str], sizes: dict, winners: list) -> list[str]:
    """`kernel problem` (or `kernel`) for each asked-for problem (or kernel) no winner came back for."""
    won = {(w.kernel, w.problem_key) for w in winners}
    missing = [f"{k} {p.key()}" for k, problems in sizes.items() for p in problems if (k, p.key()) not in won]
    return missing + [k for k in kernels if k not in sizes and not any(w.kernel == k for w in winners)]


def _add_tune_parser(sub) -> None:
    p = sub.add_parser("tune", help=helptext.TUNE_HELP, epilog=helptext.TUNE_EPILOG)
    p.add_argument("kernels", nargs="*", help="kernel names (default: all, or those named in --sizes)")
    p.add_argument("--all", action="store_true", help="every kernel in the catalog")
    p.add_argument("--sizes", default=None, help=helptext.SIZES_HELP)
    strategies = ("exhaustive", "random", "model")
    p.add_argument("--strategy", choices=strategies, default="model", help=helptext.STRATEGY_HELP)
    p.add_argument(
        "--budget",
        type=budget,
        default=SCALED_BUDGET,
        help=f"schedules per kernel and problem, or 'all': an explicit cap (default: {DEFAULT_BUDGET}, the model "
        f"search growing it to {100 * SPACE_SHARE:.0f}%% of a larger space while it still improves; 'all' with "
        "--strategy exhaustive; CPU adapters cap it lower)",
    )
    p.add_argument("--reps", type=count, default=10, help="timed repetitions per trial")
    p.add_argument("--warmup", type=small_nonnegative_int, default=2, help="untimed runs before timing")
    p.add_argument("--db", default=None, help=database.DB_HELP)
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: $RAY_ADDRESS or a local Ray)")
    p.add_argument("--allow-cpu", action="store_true", help="tune on a CPU adapter (lavapipe) when there is no GPU")
    p.add_argument("--out", default=None, help="artifacts directory (default: $FARM_HOME/artifacts)")
    p.add_argument(
        "--trial-timeout", type=seconds, default=60.0, help="seconds per trial before its worker is replaced"
    )
    p.add_argument(
        "--gpus", type=positive_int, default=None, help="use at most this many of the cluster's GPUs (default: all)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the inputs and of the search's random choices")
    p.add_argument("-v", "--verbose", action="store_true", help=helptext.VERBOSE_HELP)
    p.set_defaults(func=cmd_tune)


def _kernel_names(args: argparse.Namespace) -> list[str]:
    if getattr(args, "kernels_file", None) and not args.kernels and not getattr(args, "all", False):
        return list(args.user_kernels)  # `--kernels-file F` without names: the kernels F defines
    if getattr(args, "all", False) or not args.kernels:
        return catalog.names()
    for name in args.kernels:
        catalog.get(name)  # raises with the known names
    return list(args.kernels)


def build_parser() -> argparse.ArgumentParser:
    parser = FarmParser(
        prog="farm",
        description="A tuning farm for WebGPU compute kernels: certify, tune on a Ray cluster, serve the winners.",
        epilog=helptext.START_HERE,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("adapters", help="list wgpu adapters, the chosen one and its topology hash")
    p.set_defaults(func=cmd_adapters)

    p = sub.add_parser("certify", help="certify kernels against their numpy references")
    p.add_argument("kernels", nargs="*", help="kernel names (default: all)")
    p.add_argument("--all", action="store_true", help="every kernel in the catalog")
    p.add_argument(
        "--schedules", type=nonnegative_int, default=4, help="sampled schedules per kernel besides the default"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled schedules and the inputs")
    p.set_defaults(func=cmd_certify)

    p = sub.add_parser("bench", help="default vs tuned vs vendor library (torch) at realistic sizes")
    p.add_argument("--kernels", nargs="*", default=None, help="kernel names (default: all)")
    p.add_argument("--out", default=None, help="directory for bench.md and bench.json (default: print only)")
    p.add_argument("--db", default=None, help=database.DB_HELP)
    p.add_argument("--sizes", default=None, help="problems as in farm tune --sizes (default: realistic sizes)")
    p.add_argument("--reps", type=count, default=20, help="timed repetitions per kernel and path")
    p.add_argument(
        "--vendor-fp32",
        choices=VENDOR_FP32,
        default="ieee",
        help="how the vendor multiplies fp32 inputs: ieee (fp32 FMAs, like ours; default) or tf32 "
        "(TF32 tensor cores allowed in cuBLAS and FLA's Triton dots; such rows usually fail our tolerances)",
    )
    p.add_argument("--allow-cpu", action="store_true", help="allow a CPU adapter (numbers mean little)")
    p.set_defaults(func=cmd_bench)

    _add_sweep_parser(sub)
    _add_tune_parser(sub)
    database.add_parsers(sub)
    queue.add_parsers(sub)  # farm request, farm serve
    _add_serving_parsers(sub)
    for name in ("tune", "certify", "winners", "export", "dashboard", "bench", "request", "serve"):
        sub.choices[name].add_argument(
            "--kernels-file",
            action="append",
            default=[],
            metavar="PATH",
            help="a Python file defining farm.Kernel(s) (repeatable; default: those $FARM_KERNELS_FILES names)",
        )
    helptext.describe(parser)

    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; a user error (farm.cli.errors.user_errors) is one line and exit 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        preflight.check(args)  # environment and addresses, before anything is created or started
        if getattr(args, "kernels_file", None):
            from farm.catalog import files

            args.user_kernels = files.load(args.kernels_file)  # before anything reads the catalog
        return int(args.func(args) or 0)
    except database_bugs():
        raise  # the farm's SQL is wrong: keep the traceback
    except user_errors() as exc:
        return report(exc, getattr(args, "db", None))
    except (OSError, RuntimeError) as exc:
        if not is_path_error(exc):
            raise  # EIO, a broken pipe, a RuntimeError of the farm's: a bug, with its traceback
        return report(exc, getattr(args, "db", None))
    except KeyboardInterrupt:
        print("farm: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
