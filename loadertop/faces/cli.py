"""Command line: parse, validate, pick a face (TUI on a terminal, headless otherwise).

Heavy imports (torch, textual) happen only after parsing, so `--help` and bad usage answer at once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from loadertop import __version__
from loadertop.core.model.config import Option, Settings, UsageError, settings_options
from loadertop.core.model.results import SweepResult, TrialResult

if TYPE_CHECKING:
    from loadertop.core.engine import NodeLink
    from loadertop.faces.openmetrics import MetricsServer

EXIT_USAGE = 2
EXIT_BUG = 1

EPILOG = """\
a running training job (with `for batch in loadertop.watch(loader):`, or any job with DataLoader workers):
  loadertop attach [PID]   watch it live: throughput, stall, epochs, workers' memory and leaks (attach --help)
  loadertop run -- CMD...  start a job with every DataLoader in it watched, its script unchanged (run --help)

where a sample's time goes (read, decode, each transform, collate, hand-over; the ceilings; what to change):
  loadertop stages --dataset SPEC   (stages --help)

a finished sweep as one file to share (the curve, the knee, the pick, memory, epoch restarts, the DataLoader line,
the machine; pip install "loadertop[report]"):
  loadertop report RUN --html FILE   (or --svg FILE, --png FILE; RUN: a run folder or a --json result; report --help)

dataset specs:
  synthetic[:k=v,...]      built-in cost model: length, cpu_ms, io_ms, kb (e.g. synthetic:io_ms=20,cpu_ms=0.5)
  imagefolder:PATH[:k=v]   PATH/<class>/<image>: Pillow decode, resize, centre crop, tensor; size=224,
                           resize=256, dtype=uint8|float (or as --dataset-arg KEY=VALUE)
  webdataset:PATTERN[:k=v] WebDataset tar shards (brace pattern or glob): size=, fields=jpg+cls, shuffle=
  hf:PATH[:k=v]            a Hugging Face dataset saved with save_to_disk: streaming=1, shards=N, split=,
                           columns=a+b (pip install "loadertop[scale]" for both)
  package.module:callable  a factory returning a Dataset (map-style or IterableDataset), or a mapping
                           {"dataset": ..., **DataLoader kwargs not swept: collate_fn, sampler, ...}
  path/to/file.py:callable the same, from a file (its folder goes on sys.path, for spawn workers too)

consumer specs (--consumer): package.module:callable or path/to/file.py:callable, a (batch) -> None step

knobs that need workers (prefetch factor, persistent workers, start method, in-order off) are not run
with 0 workers: the 0-worker loader is measured once and those combinations show as skipped

many nodes: one loadertop per node, the same arguments on every node; node 0 plans, shows and writes --json/--csv,
the others measure each trial at the same moment, headless (--join-timeout S: how long node 0 waits for them)
  torchrun --nnodes N --nproc-per-node 1 --node-rank K --master-addr HOST --master-port PORT -m loadertop ...
  srun --ntasks-per-node 1 loadertop ...   (node 0's address: MASTER_ADDR, else the first host of the job)

exit codes: 0 done, 1 internal error (traceback in the run folder's runner.log), 2 bad usage or input,
130 interrupted (finished trials are kept in the run folder and in --json/--csv)
"""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line that names the problem, not a usage dump.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


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
    face.add_argument("--csv", type=Path, metavar="PATH", help="write the results as CSV, one row per configuration")
    face.add_argument("--out", type=Path, metavar="DIR", help="parent of run folders (~/.cache/loadertop/runs)")
    face.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")
    face.add_argument("--compare", type=Path, metavar="RUN",
                      help="show the change per configuration against a run folder or result.json")  # fmt: skip
    face.add_argument("--resume", type=Path, metavar="RUN",
                      help="keep the trials a run folder finished (same dataset); measure only the rest")  # fmt: skip

    add_settings(p)
    return p


def add_settings(parser: argparse.ArgumentParser) -> None:
    """One flag per Settings field that has one, from the field's Option (flag, help, metavar, choices): the
    parser holds no default of its own, so a flag not given reaches build_settings as None."""
    by_group: dict[str, list[tuple[str, Option]]] = {}
    for _, opt in settings_options():
        if opt.flag:
            by_group.setdefault(opt.group, []).append((opt.flag, opt))
    for title, opts in by_group.items():
        group = parser.add_argument_group(title)
        for flag, opt in opts:
            spec: dict[str, Any] = {"dest": opt.key, "default": None, "help": opt.help.replace("%", "%%")}
            if opt.const is not None:
                spec.update(action="store_const", const=opt.const)
            else:
                spec.update(metavar=opt.metavar, action="append" if opt.kind == "pairs" else "store")
            if opt.choices and opt.kind == "choice" and opt.const is None:  # words are checked by build_settings
                spec["choices"] = opt.choices
            group.add_argument(flag, **spec)
            if opt.off_flag:
                group.add_argument(opt.off_flag, dest=opt.key, default=None, action="store_const", const="off",
                                   help=f"{opt.flag}: never")  # fmt: skip


def settings_from_args(args: argparse.Namespace) -> Settings:
    from loadertop.core.engine import build_settings

    return build_settings({opt.key: getattr(args, opt.key) for _, opt in settings_options() if opt.flag})


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


def runs_from_args(args: argparse.Namespace, settings: Settings) -> tuple[SweepResult | None, list[TrialResult]]:
    """`--compare RUN` as a SweepResult and `--resume RUN` as its finished trials; UsageError when unusable."""
    from loadertop.core.engine import read_run, read_settings, read_trials_strict

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


def build_attach_parser() -> Parser:
    p = Parser(
        prog="loadertop attach",
        description="Watch a running training job's data loading live: throughput, stall, workers' memory.",
        epilog="exit codes: 0 the job ended, 2 bad target (one line), 130 interrupted",
    )
    p.add_argument("target", nargs="?", help="the job's PID, its job folder or socket (none: list the jobs)")
    p.add_argument("--headless", action="store_true", help="no TUI (automatic when stdout is not a terminal)")
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between updates (2)")
    p.add_argument("--json", type=Path, metavar="PATH", help="append one JSON object per interval to PATH")
    p.add_argument("--openmetrics", metavar="HOST:PORT",
                   help="serve /metrics in the OpenMetrics text format (HOST: 127.0.0.1 if left out)")  # fmt: skip
    p.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")
    return p


def attach_main(argv: list[str]) -> int:
    """`loadertop attach [TARGET]`: the TUI on a terminal, else (or with --headless) lines on stdout."""
    args = build_attach_parser().parse_args(argv)
    target: int | str | None = args.target
    if isinstance(target, str) and target.strip().isdigit():
        target = int(target)

    def run() -> int:
        if not args.interval > 0:
            raise UsageError(f"--interval {args.interval:g}: must be more than 0 seconds")
        check_writable(args.json, "--json")  # appended to: an existing file is fine
        if args.openmetrics is not None and target is None:
            raise UsageError("--openmetrics needs the job: loadertop attach PID --openmetrics HOST:PORT")
        metrics = open_metrics(args.openmetrics)
        try:
            if args.headless or not (sys.stdout.isatty() and sys.stdin.isatty()):
                from loadertop.faces.headless_attach import run_attach_headless

                return run_attach_headless(target, interval=args.interval, json_path=args.json, metrics=metrics)
            from loadertop.faces.tui import run_attach

            return run_attach(target, interval=args.interval, json_path=args.json, metrics=metrics)
        finally:
            if metrics is not None:
                metrics.close()

    return one_line_errors("loadertop attach", args.debug, run)


def open_metrics(address: str | None) -> MetricsServer | None:
    """--openmetrics: the server, listening (UsageError when prometheus-client is missing or the port busy)."""
    if address is None:
        return None
    from loadertop.faces.openmetrics import MetricsServer

    server = MetricsServer(address)
    print(f"loadertop: OpenMetrics on {server.url}", file=sys.stderr)
    return server


def build_run_parser() -> Parser:
    p = Parser(
        prog="loadertop run",
        usage="loadertop run [options] -- CMD ARGS...",
        description="Start a training job with every torch DataLoader iteration in it watched (its script "
        "unchanged) and show it as `loadertop attach` does; the job folder lets other shells attach too.",
        epilog="LOADERTOP_WATCH=0 in the environment turns the hook off (the job runs plainly). exit codes: the "
        "job's (a signal N: 128+N), 2 bad usage or a command not found (one line)",
    )
    p.add_argument("--headless", action="store_true", help="no TUI (automatic when stdout is not a terminal)")
    p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between updates (2)")
    p.add_argument("--json", type=Path, metavar="PATH", help="append one JSON object per interval to PATH")
    p.add_argument(
        "--tune",
        type=float,
        metavar="BUDGET_S",
        help="tune the first loader the job iterates, in place, for BUDGET_S s (as loadertop.tune)",
    )
    p.add_argument("--openmetrics", metavar="HOST:PORT",
                   help="serve /metrics in the OpenMetrics text format (HOST: 127.0.0.1 if left out)")  # fmt: skip
    p.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")
    return p


def run_main(argv: list[str]) -> int:
    """`loadertop run [options] -- CMD ARGS...`: the job's exit code; 2 (one line) for bad usage."""
    if "--" in argv:
        split = argv.index("--")
        options, command = argv[:split], argv[split + 1 :]
    else:
        options, command = argv, []
    args = build_run_parser().parse_args(options)
    if not command:
        print("loadertop run: error: no command after --: loadertop run [options] -- CMD ARGS...", file=sys.stderr)
        return EXIT_USAGE

    def run() -> int:
        if not args.interval > 0:
            raise UsageError(f"--interval {args.interval:g}: must be more than 0 seconds")
        check_writable(args.json, "--json")
        headless = args.headless or not (sys.stdout.isatty() and sys.stdin.isatty())
        metrics = open_metrics(args.openmetrics)
        try:
            if headless:
                from loadertop.faces.headless_attach import run_job_headless

                return run_job_headless(command, interval=args.interval, json_path=args.json, tune_s=args.tune,
                                        metrics=metrics)  # fmt: skip
            from loadertop.faces.tui import run_job

            return run_job(command, interval=args.interval, json_path=args.json, tune_s=args.tune, metrics=metrics)
        finally:
            if metrics is not None:
                metrics.close()

    return one_line_errors("loadertop run", args.debug, run)


def build_stages_parser() -> Parser:
    p = Parser(
        prog="loadertop stages",
        description="Where a sample's time goes: each stage of the dataset's pipeline (read, decode, each transform, "
        "its other calls, the collate, the hand-over to the main process, pin_memory, the copy to the GPU) measured "
        "in one process with 0 workers, the ceiling each sets on this machine, and what to change beyond num_workers.",
        epilog="exit codes: 0 done, 1 internal error, 2 bad usage or a dataset that fails (one line), 130 interrupted",
    )
    p.add_argument("--dataset", default=None, metavar="SPEC", help="dataset spec, as `loadertop --help` lists them "
                   "(default: synthetic)")  # fmt: skip
    p.add_argument("--dataset-arg", action="append", dest="dataset_args", metavar="KEY=VALUE",
                   help="keyword argument for the dataset factory (repeatable)")  # fmt: skip
    p.add_argument("--seconds", type=float, default=5.0, metavar="S", help="measure for about S seconds (5)")
    p.add_argument("--samples", type=int, default=300, metavar="N",
                   help="or until each way of timing has seen N samples, if sooner (300)")  # fmt: skip
    p.add_argument("--batch-size", default="32", metavar="N", help="the batch the collate and the hand-over are "
                   "measured with (32)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="give up after S seconds (default: 240 + 4 × --seconds)")  # fmt: skip
    p.add_argument("--json", type=Path, metavar="PATH", help='write the report as JSON ({"stages": {...}})')
    p.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")
    return p


def stages_main(argv: list[str]) -> int:
    """`loadertop stages --dataset SPEC`: the stage table on stdout (headless), --json on disk."""
    args = build_stages_parser().parse_args(argv)

    def run() -> int:
        from loadertop.core.engine import stages, write_stages_json

        check_writable(args.json, "--json")
        if not args.seconds > 0:
            raise UsageError(f"--seconds {args.seconds:g}: must be more than 0")
        print(f"loadertop stages: measuring {args.dataset or 'synthetic'} for about {args.seconds:g} s "
              f"(0 workers, one process) ...", file=sys.stderr)  # fmt: skip
        with Stopped() as stopped:  # the child is killed on the way out, whichever signal ends it
            report = stages(args.dataset, dataset_args=args.dataset_args, seconds=args.seconds,
                            samples=args.samples, batch_size=args.batch_size, timeout=args.timeout)  # fmt: skip
        if stopped.signum is not None:
            return 130 if stopped.signum == signal.SIGINT else 128 + stopped.signum
        from loadertop.faces.headless_stages import print_stages

        print_stages(report, sys.stdout)
        if args.json is not None:
            write_stages_json(report, args.json)
        return 0

    return one_line_errors("loadertop stages", args.debug, run)


def build_report_parser() -> Parser:
    p = Parser(
        prog="loadertop report",
        description="A finished sweep as one file to attach to a pull request or a chat: samples/s against "
        "num_workers with its spread, the knee, the pick, memory and epoch restarts per configuration, the reason, "
        "the DataLoader line and the machine. The HTML page holds its figure inline and loads nothing.",
        epilog='needs matplotlib: pip install "loadertop[report]". exit codes: 0 written, 2 bad input (one line)',
    )
    p.add_argument("run", type=Path, metavar="RUN", help="a run folder (its result.json) or a result file (--json)")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML page")
    p.add_argument("--svg", type=Path, metavar="FILE", help="write the picture as SVG")
    p.add_argument("--png", type=Path, metavar="FILE", help="write the picture as PNG")
    p.add_argument("--debug", action="store_true", help="print tracebacks instead of one-line errors")
    return p


def report_main(argv: list[str]) -> int:
    """`loadertop report RUN --html FILE` (and/or --svg, --png): the files written, their paths on stdout."""
    args = build_report_parser().parse_args(argv)

    def run() -> int:
        outputs = {fmt: getattr(args, fmt) for fmt in ("html", "svg", "png") if getattr(args, fmt) is not None}
        if not outputs:
            raise UsageError("name a file to write: --html FILE, --svg FILE or --png FILE")
        for fmt, path in outputs.items():
            check_writable(path, f"--{fmt}")
        from loadertop.faces.report_file import load, write

        for path in write(load(args.run), outputs):
            print(path)
        return 0

    return one_line_errors("loadertop report", args.debug, run)


class Stopped:
    """Ctrl-C, SIGTERM and SIGHUP end the block as an exception would (its `finally` runs: a child is killed) and are
    kept in `signum`. Set whatever the shell gave: a job started in the background inherits SIGINT ignored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, Any] = {}

    def _stop(self, signum: int, _frame: object) -> None:
        self.signum = signum
        raise _Stop

    def __enter__(self) -> Stopped:
        self._before = {sig: signal.signal(sig, self._stop) for sig in self.SIGNALS}
        return self

    def __exit__(self, kind: type[BaseException] | None, *_rest: object) -> bool:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)
        return kind is _Stop


class _Stop(BaseException):
    """Raised by Stopped's handler; caught by Stopped itself."""


def one_line_errors(prog: str, debug: bool, run: Callable[[], int]) -> int:
    """Run a command: bad input is one line and exit 2, Ctrl-C is 130, a bug one line and 1 (--debug: raise)."""
    try:
        return run()
    except UsageError as exc:  # AttachError included
        if debug:
            raise
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"{prog}: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return EXIT_BUG


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "attach":
        return attach_main(argv[1:])
    if argv and argv[0] == "run":
        return run_main(argv[1:])
    if argv and argv[0] == "stages":
        return stages_main(argv[1:])
    if argv and argv[0] == "report":
        return report_main(argv[1:])
    args = build_parser().parse_args(argv)

    def run() -> int:
        # Many nodes: join first, so a node that fails its own checks leaves the sweep at once rather than
        # never joining; node 0 failing stops the others.
        settings, link = join_launch(settings_from_args(args))
        try:
            return sweep_here(args, settings, link) or (link.exit_code if link is not None else 0)
        except BaseException:
            if link is not None:
                link.stop()
            raise
        finally:
            if link is not None:
                link.close()

    return one_line_errors("loadertop", args.debug, run)


def join_launch(settings: Settings) -> tuple[Settings, NodeLink | None]:
    """Under torchrun or srun with more than one node: join the other nodes' agents (they must all agree) and
    return this node's settings and link; otherwise the settings as they are and no link."""
    from loadertop.core.engine import detect_launch

    launch = detect_launch(os.environ)
    if launch is None:
        return settings, None
    from loadertop.core.nodes import join_nodes  # torch.distributed: only on a many-node launch

    settings, link = join_nodes(settings, launch)
    hosts = ", ".join(f"node {n.node_rank} {n.hostname}" for n in link.nodes())
    role = "this node plans and shows" if launch.node_rank == 0 else "this node measures node 0's trials, headless"
    print(f"loadertop: node {launch.node_rank} of {launch.nodes} ({launch.launcher}): all joined ({hosts}); {role}",
          file=sys.stderr)  # fmt: skip
    return settings, link


def sweep_here(args: argparse.Namespace, settings: Settings, link: NodeLink | None) -> int:
    """Check this node's outputs and inputs, then run the face: node 0 (or the only node) as asked, a follower
    headless (node 0 writes --json and --csv)."""
    headless = args.headless or not (sys.stdout.isatty() and sys.stdin.isatty())
    if link is not None and link.node_rank != 0:
        headless, args.json, args.csv = True, None, None
    check_writable(args.json, "--json")
    check_writable(args.csv, "--csv")
    if args.json is not None and args.csv is not None and args.json.resolve() == args.csv.resolve():
        raise UsageError(f"--json and --csv both name {args.json}: one would overwrite the other")
    previous, kept = runs_from_args(args, settings)
    return run_face(args, settings, headless, previous, kept, link)


def run_face(
    args: argparse.Namespace,
    settings: Settings,
    headless: bool,
    previous: SweepResult | None,
    kept: list[TrialResult],
    link: NodeLink | None,
) -> int:
    from loadertop.core.engine import SweepRequest

    request = SweepRequest(settings, out_dir=args.out, previous=previous, resume=tuple(kept), json_path=args.json,
                           csv_path=args.csv, nodes=link)  # fmt: skip
    if headless:
        from loadertop.faces.headless import run_headless

        return run_headless(request)
    from loadertop.faces.tui import run_tui

    return run_tui(request)
