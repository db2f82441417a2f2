"""Command line: parse, validate, pick a face (TUI on a terminal, headless otherwise).

Heavy imports (torch, textual) happen only after parsing, so `--help` and bad usage answer at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from loadertop import __version__
from loadertop.core.config import (
    Settings,
    UsageError,
    parse_bool_list,
    parse_int_list,
    parse_start_methods,
    parse_workers,
)

EXIT_USAGE = 2
EXIT_BUG = 1

EPILOG = """\
dataset specs:
  synthetic[:k=v,...]      built-in cost model: length, cpu_ms, io_ms, kb (e.g. synthetic:io_ms=20,cpu_ms=0.5)
  package.module:callable  a factory returning a Dataset, or {"dataset": ..., **DataLoader kwargs}
  path/to/file.py:callable the same, from a file

exit codes: 0 done, 1 internal error (traceback in the run folder's runner.log), 2 bad usage or input,
130 interrupted (finished trials are kept in the run folder and in --json/--csv)
"""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line that names the problem, not a usage dump.
        self.exit(EXIT_USAGE, f"loadertop: error: {message} (see loadertop --help)\n")


def build_parser() -> Parser:
    p = Parser(
        prog="loadertop",
        description="Find the fastest PyTorch DataLoader configuration for your dataset on this machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"loadertop {__version__}")
    face = p.add_argument_group("output")
    face.add_argument("--headless", action="store_true", help="no TUI (automatic when stdout is not a terminal)")
    face.add_argument("--json", type=Path, metavar="PATH", help="write the result as JSON")
    face.add_argument("--csv", type=Path, metavar="PATH", help="write one CSV row per trial")
    face.add_argument("--out", type=Path, metavar="DIR", help="parent of run folders (~/.cache/loadertop/runs)")
    face.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")

    what = p.add_argument_group("what to measure")
    what.add_argument("--dataset", default="synthetic", metavar="SPEC", help="dataset spec (default: synthetic)")
    what.add_argument("--dataset-arg", action="append", default=[], metavar="KEY=VALUE",
                      help="keyword argument for the dataset factory (repeatable)")  # fmt: skip
    what.add_argument("--workers", default="auto", metavar="SPEC", help="num_workers: 0-16, 0,2,4,8, auto (default)")
    what.add_argument("--batch-size", default="32", metavar="LIST", help="batch sizes, e.g. 32,128 (default 32)")
    what.add_argument("--prefetch-factor", default="2", metavar="LIST", help="prefetch factors (default 2)")
    what.add_argument("--pin-memory", default="off", metavar="on,off", help="pin_memory values (default off)")
    what.add_argument("--persistent-workers", default="off", metavar="on,off", help="persistent_workers values")
    what.add_argument("--start-method", metavar="LIST", help="fork,forkserver,spawn (default: this Python's default)")
    what.add_argument("--step-ms", type=float, default=0.0, metavar="MS",
                      help="emulated training step per batch (CUDA: copy + kernel; CPU: sleep)")  # fmt: skip
    what.add_argument("--search", default="grid", choices=["grid"], help="search strategy (grid: every configuration)")

    how = p.add_argument_group("how to measure")
    how.add_argument("--trial-seconds", type=float, default=8.0, metavar="S", help="time budget per trial (default 8)")
    how.add_argument("--trial-timeout", type=float, default=60.0, metavar="S", help="fail trials stuck for S s")
    how.add_argument("--interval", type=float, default=0.5, metavar="S", help="probe interval (default 0.5)")
    how.add_argument("--tolerance", type=float, default=0.05, metavar="F", help="noise band, as a fraction (0.05)")
    how.add_argument("--no-skip-warmup", action="store_true",
                     help="count the start-up prefetch buffer as throughput (to see how much it inflates)")  # fmt: skip
    return p


def settings_from_args(args: argparse.Namespace) -> Settings:
    from loadertop.core.machine import usable_cpus

    for name in ("step_ms", "trial_seconds", "trial_timeout", "interval", "tolerance"):
        value = getattr(args, name)
        if not value >= 0 or (name != "step_ms" and value == 0):
            raise UsageError(f"--{name.replace('_', '-')} {value:g}: must be a positive number")
    if args.tolerance >= 1:
        raise UsageError(f"--tolerance {args.tolerance:g}: a fraction below 1, such as 0.05")
    dataset_args = []
    for item in args.dataset_arg:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--dataset-arg {item!r}: expected KEY=VALUE")
        dataset_args.append((key, value))
    kwargs = {}
    if args.start_method:
        kwargs["start_methods"] = parse_start_methods(args.start_method)
    return Settings(
        dataset=args.dataset,
        dataset_args=tuple(dataset_args),
        workers=parse_workers(args.workers, usable_cpus()),
        batch_sizes=parse_int_list(args.batch_size, "--batch-size"),
        prefetch_factors=parse_int_list(args.prefetch_factor, "--prefetch-factor"),
        pin_memory=parse_bool_list(args.pin_memory, "--pin-memory"),
        persistent_workers=parse_bool_list(args.persistent_workers, "--persistent-workers"),
        step_ms=args.step_ms,
        trial_seconds=args.trial_seconds,
        trial_timeout=args.trial_timeout,
        interval=args.interval,
        tolerance=args.tolerance,
        skip_warmup=not args.no_skip_warmup,
        search=args.search,
        **kwargs,
    )


def check_writable(path: Path | None, flag: str) -> None:
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder")
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} {path}: not writable")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
        check_writable(args.json, "--json")
        check_writable(args.csv, "--csv")
        headless = args.headless or not (sys.stdout.isatty() and sys.stdin.isatty())
        if headless:
            from loadertop.headless import run_headless

            return run_headless(settings, out_dir=args.out, json_path=args.json, csv_path=args.csv)
        from loadertop.tui import run_tui

        return run_tui(settings, out_dir=args.out)
    except UsageError as exc:
        if args.debug:
            raise
        print(f"loadertop: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"loadertop: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return EXIT_BUG
