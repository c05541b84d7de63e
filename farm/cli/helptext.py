"""What `farm --help` and each subcommand's `--help` teach: every option's default shown,
the examples a newcomer starts from, and the built-in kernels' names."""

from __future__ import annotations

import argparse

# The built-in kernels (farm.catalog.KERNEL_MODULES, one kernel each), listed without loading the
# catalog: a parser is built before --kernels-file is read.
BUILTIN_KERNELS = ("fft", "gemm", "gemv", "p64_project", "recurrent", "ternary_gemv", "topk")

START_HERE = """\
start here:
  farm adapters                         the GPU the farm will use and its topology hash
  farm tune gemv                        tune one kernel (--allow-cpu on a machine without a GPU)
  farm winners                          what was stored, one row per kernel and problem
  farm dashboard                        the same, in a browser at http://127.0.0.1:8501

more:
  farm tune --all --budget 32           every built-in kernel, 32 schedules per problem
  farm tune gemm --sizes 'gemm:m=1024,k=1024,n=1024'
                                        tune the problem sizes you care about
  farm tune --kernels-file my_kernels.py
                                        tune kernels of your own (farm.Kernel)
  farm cluster start                    a Ray head for `ray job submit`

`farm COMMAND --help` says more; results land in $FARM_HOME (default ~/.farm)."""

TUNE_EPILOG = f"""\
kernels: {", ".join(BUILTIN_KERNELS)} (and a --kernels-file's)

examples:
  farm tune gemv --allow-cpu            one kernel on this machine (a CPU adapter too)
  farm tune --all -v                    every kernel; -v adds workers, stage times and margins
  farm tune gemm --sizes 'gemm:m=512,k=512,n=512' --budget all --strategy exhaustive"""


TUNE_HELP = "tune kernels on every GPU of a Ray cluster; store trials and winners"
# `farm sweep recurrent --artifact-KIND`; --artifact is the older name of --artifact-md.
SWEEP_ARTIFACTS = (
    ("md", "the Markdown report's path (default: in --output-dir)"),
    ("csv", "the per-case CSV's path (default: in --output-dir)"),
    ("json", "the JSON report's path (default: in --output-dir)"),
    ("steps-csv", "the per-step consistency CSV's path (default: in --output-dir)"),
)
STRATEGY_HELP = (
    "how schedules are chosen: model (a cost model fitted to the trials so far proposes the next, then polishes "
    "the best), random (a random sample of the space), exhaustive (every schedule, up to --budget)"
)
SIZES_HELP = (
    "problems, e.g. 'gemm:m=64,k=64,n=64;gemv:m=256,n=256' (default: each kernel's own problems, realistic sizes "
    "on a GPU and small ones on a CPU adapter)"
)
VERBOSE_HELP = "also print the plan, each worker's placement and stage times, and the margins with their intervals"


def describe(parser: argparse.ArgumentParser) -> None:
    """Each subcommand's `--help` opens with the line `farm --help` lists it with."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and helps.get(name):
                    sub.description = helps[name]
                describe(sub)


class FarmHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs keep their lines; an option whose help doesn't say its default gets
    "(default: X)" appended, unless it has none to show (None, off, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default is None or default is False or default == [] or default is argparse.SUPPRESS:
            return text
        if not (action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)):
            return text
        return f"{text} (default: %(default)s)"
