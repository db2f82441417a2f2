"""Make the README screenshots from the real app on a real sweep of the built-in workload.

    python scripts/screenshots.py                 # screenshots/{running,done}-{120x40,80x24}.svg
    python scripts/screenshots.py --step-ms 0     # a loader-bound picture instead
    python scripts/screenshots.py --attach        # screenshots/attach-{120x40,80x24}.svg only, from a fake job

The app is built by the same `make_app` as the CLI and the tests; only the terminal is virtual. The attach
pictures are the attach app fed the deterministic demo stream (a watched job whose worker w2 leaks), not a real job.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.pilot import Pilot  # noqa: E402

from loadertop.core.model.config import Settings  # noqa: E402
from loadertop.tui.app import LoadertopApp, make_app  # noqa: E402
from loadertop.tui.attach.app import AttachApp  # noqa: E402
from loadertop.tui.attach.demo import FakeSession, demo_stream  # noqa: E402

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


async def attach(out: Path) -> int:
    """The attach view at 40 intervals of the demo stream (an epoch every 20 s, a leak warning from interval 10)."""
    stream = demo_stream(40)
    session = FakeSession(stream)
    app = AttachApp(opener=lambda target: session, jobs=list, interval=2.0, session=session)
    async with app.run_test(size=SIZES[0]) as pilot:
        await until(pilot, lambda: app.state.count == len(stream), timeout=30)
        await shoot(app, pilot, out, "attach")
        await pilot.press("q")
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
    with tempfile.TemporaryDirectory(prefix="loadertop-screenshots-") as runs:
        app = make_app(settings, out_dir=Path(runs), theme=args.theme)
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
    parser.add_argument("--attach", action="store_true", help="only the attach view, from a fake job's stream")
    raise SystemExit(asyncio.run(main(parser.parse_args())))
