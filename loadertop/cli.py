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
from loadertop.core.model.config import (
    Settings,
    UsageError,
    parse_bool_list,
    parse_int_list,
    parse_start_methods,
    parse_workers,
)
from loadertop.core.model.results import SweepResult, TrialResult

EXIT_USAGE = 2
EXIT_BUG = 1

EPILOG = """\
dataset specs:
  synthetic[:k=v,...]      built-in cost model: length, cpu_ms, io_ms, kb (e.g. synthetic:io_ms=20,cpu_ms=0.5)
  imagefolder:PATH[:k=v]   PATH/<class>/<image>: Pillow decode, resize, centre crop, tensor; size=224,
                           resize=256, dtype=uint8|float (or as --dataset-arg KEY=VALUE)
  package.module:callable  a factory returning a Dataset (map-style or IterableDataset), or a mapping
                           {"dataset": ..., **DataLoader kwargs not swept: collate_fn, sampler, ...}
  path/to/file.py:callable the same, from a file (its folder goes on sys.path, for spawn workers too)

consumer specs (--consumer): package.module:callable or path/to/file.py:callable, a (batch) -> None step

knobs that need workers (prefetch factor, persistent workers, start method, in-order off) are not run
with 0 workers: the 0-worker loader is measured once and those combinations show as skipped

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
    face.add_argument("--compare", type=Path, metavar="RUN",
                      help="show the change per configuration against a run folder or result.json")  # fmt: skip
    face.add_argument("--resume", type=Path, metavar="RUN",
                      help="keep the trials a run folder finished (same dataset); measure only the rest")  # fmt: skip

    what = p.add_argument_group("what to measure")
    what.add_argument("--dataset", default="synthetic", metavar="SPEC", help="dataset spec (default: synthetic)")
    what.add_argument("--dataset-arg", action="append", default=[], metavar="KEY=VALUE",
                      help="keyword argument for the dataset factory (repeatable)")  # fmt: skip
    what.add_argument("--workers", default="auto", metavar="SPEC",
                      help="num_workers: 0-16, 0,2,4,8, auto (default; adaptive: to 64, grid: a ladder)")  # fmt: skip
    what.add_argument("--batch-size", default="32", metavar="LIST", help="batch sizes, e.g. 32,128 (default 32)")
    what.add_argument("--prefetch-factor", default="2", metavar="LIST", help="prefetch factors (default 2)")
    what.add_argument("--pin-memory", default="off", metavar="on,off", help="pin_memory values (default off)")
    what.add_argument("--persistent-workers", default="off", metavar="on,off",
                      help="persistent_workers values; each trial also measures the epoch boundary")  # fmt: skip
    what.add_argument("--start-method", metavar="LIST", help="fork,forkserver,spawn (default: this Python's default)")
    what.add_argument("--in-order", default="on", metavar="on,off",
                      help="DataLoader in_order values (off: batches as workers finish; torch >= 2.6)")  # fmt: skip
    what.add_argument("--step-ms", type=float, default=0.0, metavar="MS",
                      help="emulated training step per batch (CUDA: copy + kernel; CPU: sleep)")  # fmt: skip
    what.add_argument("--consumer", default="", metavar="SPEC",
                      help="your training step, module:callable or file.py:callable taking a batch; its time "
                           "is the step time of the stall fraction (replaces --step-ms)")  # fmt: skip
    what.add_argument("--ranks", type=int, default=1, metavar="R",
                      help="run R loader replicas at once, as torchrun --nproc-per-node R would (gloo, "
                           "DistributedSampler); workers are per rank (default 1)")  # fmt: skip
    what.add_argument("--search", default="adaptive", choices=["adaptive", "grid"],
                      help="adaptive (default): climb, bisect, repeat the finalists; grid: all of them")  # fmt: skip

    how = p.add_argument_group("how to measure")
    how.add_argument("--trial-seconds", type=float, default=8.0, metavar="S",
                     help="time budget per trial, from its first batch (default 8)")  # fmt: skip
    how.add_argument("--trial-timeout", type=float, default=60.0, metavar="S", help="fail trials stuck for S s")
    how.add_argument("--mem-floor", default="", metavar="SIZE",
                     help="free memory no trial may take: 4GiB, 512MiB or 10%%; 0 = off "
                          "(default: the larger of 10%% of memory and 2 GiB)")  # fmt: skip
    how.add_argument("--files-per-sample", type=int, default=1, metavar="N",
                     help="open files one sample holds (for the ulimit -n warning; default 1)")  # fmt: skip
    how.add_argument("--interval", type=float, default=0.5, metavar="S", help="probe interval (default 0.5)")
    how.add_argument("--tolerance", type=float, default=0.05, metavar="F", help="noise band, as a fraction (0.05)")
    how.add_argument("--no-skip-warmup", action="store_true",
                     help="count the start-up prefetch buffer as throughput (to see how much it inflates)")  # fmt: skip
    return p


def settings_from_args(args: argparse.Namespace) -> Settings:
    from loadertop.core.machine.facts import usable_cpus

    for name in ("step_ms", "trial_seconds", "trial_timeout", "interval", "tolerance"):
        value = getattr(args, name)
        if not value >= 0 or (name != "step_ms" and value == 0):
            raise UsageError(f"--{name.replace('_', '-')} {value:g}: must be a positive number")
    if args.tolerance >= 1:
        raise UsageError(f"--tolerance {args.tolerance:g}: a fraction below 1, such as 0.05")
    if args.files_per_sample < 1:
        raise UsageError(f"--files-per-sample {args.files_per_sample}: must be at least 1")
    if not 1 <= args.ranks <= 64:
        raise UsageError(f"--ranks {args.ranks}: from 1 to 64 ranks")
    if args.consumer and args.step_ms:
        raise UsageError("--consumer runs your own step; drop --step-ms (it emulates one)")
    from loadertop.core.machine.guards import memory_total_mb, parse_mem_floor

    parse_mem_floor(args.mem_floor, memory_total_mb())  # one line now rather than a traceback later
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
        workers=parse_workers(args.workers, max(1, usable_cpus() // args.ranks), args.search),  # per rank
        batch_sizes=parse_int_list(args.batch_size, "--batch-size"),
        prefetch_factors=parse_int_list(args.prefetch_factor, "--prefetch-factor"),
        pin_memory=parse_bool_list(args.pin_memory, "--pin-memory"),
        persistent_workers=parse_bool_list(args.persistent_workers, "--persistent-workers"),
        in_order=parse_bool_list(args.in_order, "--in-order"),
        step_ms=args.step_ms,
        consumer=args.consumer,
        ranks=args.ranks,
        trial_seconds=args.trial_seconds,
        trial_timeout=args.trial_timeout,
        mem_floor=args.mem_floor,
        files_per_sample=args.files_per_sample,
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
    # access() says yes to root everywhere; the export is written as a temporary file there, so try one.
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: not writable ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)


def runs_from_args(
    args: argparse.Namespace, settings: Settings, headless: bool
) -> tuple[SweepResult | None, list[TrialResult]]:
    """`--compare RUN` as a SweepResult and `--resume RUN` as its finished trials; UsageError when unusable."""
    from loadertop.core.engine import read_run, read_settings, read_trials_strict

    if args.resume is not None and not headless:
        raise UsageError("--resume works with --headless (the TUI cannot resume a run yet)")
    previous = kept = None
    try:
        if args.compare is not None:
            previous = read_run(args.compare)
        if args.resume is not None:
            old = read_settings(args.resume)
            kept = read_trials_strict(args.resume)
    except ValueError as exc:
        flag = "--compare" if previous is None and args.compare is not None else "--resume"
        raise UsageError(f"{flag} {exc}") from None
    if kept is not None:
        for name in ("dataset", "dataset_args", "step_ms", "consumer", "ranks"):
            then, now = getattr(old, name, None), getattr(settings, name, None)
            if then != now:
                raise UsageError(
                    f"--resume {args.resume}: that run measured {name}={then!r}, this one asks for {now!r}; "
                    f"a resumed sweep must measure the same thing"
                )
    return previous, list(kept or [])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
        check_writable(args.json, "--json")
        check_writable(args.csv, "--csv")
        if args.json is not None and args.csv is not None and args.json.resolve() == args.csv.resolve():
            raise UsageError(f"--json and --csv both name {args.json}: one would overwrite the other")
        headless = args.headless or not (sys.stdout.isatty() and sys.stdin.isatty())
        previous, kept = runs_from_args(args, settings, headless)
        if headless:
            from loadertop.headless import run_headless

            return run_headless(
                settings, out_dir=args.out, json_path=args.json, csv_path=args.csv,
                previous=previous, resume=kept,
            )  # fmt: skip
        from loadertop.tui import run_tui

        return run_tui(settings, out_dir=args.out, previous=previous)
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
