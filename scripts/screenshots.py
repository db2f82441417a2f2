"""Make the README screenshots from the real app on a real sweep of the built-in workload.

    python scripts/screenshots.py                 # screenshots/{running,done}-{120x40,80x24}.svg
    python scripts/screenshots.py --step-ms 0     # a loader-bound picture instead
    python scripts/screenshots.py --attach        # screenshots/attach-{120x40,80x24}.svg only, of a real job
    python scripts/screenshots.py --nodes         # screenshots/nodes-{120x40,80x24}.svg only, two real agents
    python scripts/screenshots.py --stages        # screenshots/stages-{120x40,80x24}.svg only: `w` after a sweep

The app is built by the same `make_app` as the CLI and the tests; only the terminal is virtual. The attach
pictures are the attach app on a real training job (examples/train_watch.py --leak: 4 persistent workers reading a
list of dicts), attached through the engine's `open_session` as `loadertop attach PID` does, after a minute. The
nodes pictures are node 0's TUI at the end of a real two-node sweep on this machine: a second agent in a subprocess,
both launched as srun launches them (SLURM_* variables, node 0 at 127.0.0.1), joined as the CLI joins them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.pilot import Pilot  # noqa: E402

from loadertop.core.engine import SweepRequest, open_session  # noqa: E402
from loadertop.core.model.config import Settings  # noqa: E402
from loadertop.faces.tui.app import LoadertopApp, make_app  # noqa: E402
from loadertop.faces.tui.attach.app import AttachApp  # noqa: E402
from loadertop.faces.tui.widgets.stages import StagesScreen  # noqa: E402

SIZES = ((120, 40), (80, 24))


async def until(pilot: Pilot, predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: gave up waiting after {timeout:.0f} s")
        await pilot.pause(0.1)


async def shoot(app: LoadertopApp | AttachApp, pilot: Pilot, out: Path, name: str) -> None:
    for width, height in SIZES:
        await pilot.resize_terminal(width, height)
        await pilot.pause(0.2)
        app.clear_notifications()
        app.flush(everything=True)
        await pilot.pause(0.2)
        path = app.save_screenshot(f"{name}-{width}x{height}.svg", path=str(out))
        print(f"wrote {Path(path).relative_to(ROOT) if Path(path).is_relative_to(ROOT) else path}")
    await pilot.resize_terminal(*SIZES[0])


async def attach(out: Path, seconds: float = 60.0) -> int:
    """The attach view of a real job whose workers grow by copy-on-read, `seconds` after attaching."""
    jobs = Path(tempfile.mkdtemp(prefix="lt", dir="/tmp"))
    os.environ["LOADERTOP_JOBS_DIR"] = str(jobs)
    cmd = [sys.executable, str(ROOT / "examples" / "train_watch.py"), "--epochs", "100", "--workers", "4", "--leak",
           "--persistent-workers"]  # fmt: skip
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (jobs / str(job.pid) / "sock").exists():
            if time.monotonic() > deadline or job.poll() is not None:
                raise SystemExit("screenshots: the example job never became watchable")
            time.sleep(0.5)
        session = open_session(job.pid, interval=2.0)
        app = AttachApp(opener=open_session, jobs=list, interval=2.0, session=session)
        async with app.run_test(size=SIZES[0]) as pilot:
            await until(pilot, lambda: app.state.count >= seconds / 2.0, timeout=seconds * 3)
            await shoot(app, pilot, out, "attach")
            await pilot.press("q")
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(30)
    return 0


def _slurm(rank: int, port: int) -> dict[str, str]:
    return {"SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_NODEID": str(rank),
            "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_JOB_ID": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip


async def nodes(settings: Settings, out: Path) -> int:
    """Node 0's TUI at the end of a real two-node sweep (node 1: a headless loadertop in a subprocess)."""
    from loadertop.faces.cli import build_parser, join_launch, settings_from_args

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [
        "--headless",
        "--dataset",
        settings.dataset,
        "--workers",
        ",".join(map(str, settings.workers)),
        "--step-ms",
        str(settings.step_ms),
        "--trial-seconds",
        str(settings.trial_seconds),
        "--search",
        "grid",
    ]
    # Both nodes' settings from the same command line: node 0 refuses a node whose settings differ
    mine = settings_from_args(build_parser().parse_args(args))
    other = subprocess.Popen(
        [sys.executable, "-m", "loadertop", *args],
        env={**os.environ, **_slurm(1, port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.environ.update(_slurm(0, port))
    try:
        settings, link = join_launch(mine)
        with tempfile.TemporaryDirectory(prefix="loadertop-screenshots-") as runs:
            app = make_app(SweepRequest(settings, out_dir=Path(runs), nodes=link), theme=None)
            async with app.run_test(size=SIZES[0]) as pilot:
                await until(pilot, lambda: app.state.phase != "running", timeout=900)
                if app.state.phase != "finished":
                    raise SystemExit(f"screenshots: the sweep did not finish: {app.state.error}")
                await shoot(app, pilot, out, "nodes")
                await pilot.press("q")
    finally:
        other.wait(60)
    return 0


async def stages(out: Path) -> int:
    """The stages screen (`w`) after a short real sweep of torchvision's ImageFolder with its training transforms
    (benchmarks/workloads/tv_imagefolder.py: JPEGs written once into the benchmarks' cache)."""
    spec = f"{ROOT / 'benchmarks' / 'workloads' / 'tv_imagefolder.py'}:imagefolder"
    settings = Settings(dataset=spec, workers=(0, 2), trial_seconds=3.0, search="grid")
    with tempfile.TemporaryDirectory(prefix="loadertop-screenshots-") as runs:
        app = make_app(SweepRequest(settings, out_dir=Path(runs)), theme=None)
        async with app.run_test(size=SIZES[0]) as pilot:
            await until(pilot, lambda: app.state.phase != "running", timeout=900)
            await pilot.press("w")
            screen = app.screen
            if not isinstance(screen, StagesScreen):
                raise SystemExit("screenshots: w did not open the stages screen")
            await until(pilot, lambda: screen.report is not None or screen.error is not None, timeout=600)
            if screen.error is not None:
                raise SystemExit(f"screenshots: the stages were not measured: {screen.error}")
            await shoot(app, pilot, out, "stages")
            await pilot.press("escape", "q")
    return 0


async def main(args: argparse.Namespace) -> int:
    settings = Settings(
        dataset=args.dataset,
        workers=tuple(int(w) for w in args.workers.split(",")),
        step_ms=args.step_ms,
        trial_seconds=args.trial_seconds,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.attach:
        return await attach(out)
    if args.nodes:
        return await nodes(settings, out)
    if args.stages:
        return await stages(out)
    with tempfile.TemporaryDirectory(prefix="loadertop-screenshots-") as runs:
        app = make_app(SweepRequest(settings, out_dir=Path(runs)), theme=args.theme)
        async with app.run_test(size=SIZES[0]) as pilot:
            middle = len(settings.workers) // 2
            state = app.state

            def mid_trial() -> bool:
                live = state.live
                return (
                    state.current is not None
                    and state.current >= middle
                    and live is not None
                    and (len(live.batches_per_s) >= 6)
                )

            await until(pilot, lambda: mid_trial() or state.phase != "running", timeout=600)
            await shoot(app, pilot, out, "running")
            await until(pilot, lambda: state.phase != "running", timeout=900)
            if state.phase != "finished":
                raise SystemExit(f"screenshots: the sweep did not finish: {state.error}")
            await shoot(app, pilot, out, "done")
            await pilot.press("q")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "screenshots"))
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--workers", default="0,1,2,3,4,6,8")
    parser.add_argument("--step-ms", type=float, default=20.0, help="emulated training step per batch")
    parser.add_argument("--trial-seconds", type=float, default=6.0)
    parser.add_argument("--theme", default=None, help="light for the light theme")
    parser.add_argument("--attach", action="store_true", help="only the attach view, of a real job")
    parser.add_argument("--nodes", action="store_true", help="only node 0's view of a real two-node sweep")
    parser.add_argument("--stages", action="store_true", help="only the stages screen (w) after a short real sweep")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
