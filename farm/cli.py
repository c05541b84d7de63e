"""The `farm` command. Each subcommand parses its flags here and calls one function
in the module that owns the idea."""

from __future__ import annotations

import argparse
import sys

from farm import catalog


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
    from farm.certify import certify_kernels, format_table

    kernels = _kernel_names(args)
    rows = certify_kernels(kernels, schedules=args.schedules, seed=args.seed)
    print(format_table(rows))
    failed = [r for r in rows if r.status not in ("ok", "invalid_schedule")]
    if failed:
        print(f"{len(failed)} schedule(s) failed certification", file=sys.stderr)
        return 1
    return 0


def _kernel_names(args: argparse.Namespace) -> list[str]:
    if getattr(args, "all", False) or not args.kernels:
        return catalog.names()
    for name in args.kernels:
        catalog.get(name)  # raises with the known names
    return list(args.kernels)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="farm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("adapters", help="list wgpu adapters, the chosen one and its topology hash")
    p.set_defaults(func=cmd_adapters)

    p = sub.add_parser("certify", help="certify kernels against their numpy references")
    p.add_argument("kernels", nargs="*", help="kernel names (default: all)")
    p.add_argument("--all", action="store_true", help="every kernel in the catalog")
    p.add_argument("--schedules", type=int, default=4, help="sampled schedules per kernel besides the default")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_certify)

    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        print(f"farm: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
