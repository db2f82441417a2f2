"""The must-show captures of issue 20 (benchmarks/INTEGRATIONS.md): a real Lightning Trainer.fit and a real Hugging
Face Trainer.train (tests/framework_jobs.py's tiny CPU jobs, run for more epochs), each attached with
`loadertop attach PID` in a tmux pane 120x40 mid-run; each tuned 30 s with the lines it printed; `curl /metrics` from
a live `attach --openmetrics`; under torchrun --nproc-per-node 2, the per-rank view with the slowest rank named.
Prints Markdown on stdout. Usage: python benchmarks/integrations_capture.py [--torchrun (that part only)]"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from framework_jobs import HF_JOB, LIGHTNING_JOB, TORCHVISION_SHIM  # noqa: E402
from test_live_ranks import RANK_JOB  # noqa: E402

PY = sys.executable
LOADERTOP = f"{PY} -m loadertop"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(name: str, script: str, args: list[str], tmp: Path, env: dict[str, str], long: bool) -> subprocess.Popen[str]:
    if long:  # run until asked to stop, so the pane is captured mid-run
        script = script.replace("max_epochs=8", "max_epochs=1000")
        script = script.replace("num_train_epochs=8", "num_train_epochs=1000")
        # epochs of 0.7 s restart the workers often; kept between epochs, the Workers pane always has them
        script = script.replace("num_workers=2)", "num_workers=2, persistent_workers=True)")
        hf = "dataloader_num_workers=2,"
        script = script.replace(hf, hf + " dataloader_persistent_workers=True,")
    path = tmp / f"job_{name}.py"
    path.write_text(TORCHVISION_SHIM + script)
    return subprocess.Popen([PY, str(path), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip


def wait_sock(jobs: Path, pid: int, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while not (jobs / str(pid) / "sock").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"pid {pid} never published")
        time.sleep(0.2)


def tmux_attach(session: str, pid: int, env: dict[str, str], wait_s: float) -> str:
    exports = f"LOADERTOP_JOBS_DIR={env['LOADERTOP_JOBS_DIR']} PYTHONPATH={ROOT}"
    subprocess.run(
        [
            "tmux",
            "new",
            "-d",
            "-s",
            session,
            "-x",
            "120",
            "-y",
            "40",
            f"env {exports} {LOADERTOP} attach {pid} --interval 1",
        ],
        check=True,
    )
    time.sleep(wait_s)
    pane = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
    subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    return pane.rstrip()


def section(title: str, command: str, text: str) -> None:
    print(f"\n### {title}\n\n```\n$ {command}\n{text.rstrip()}\n```")


def torchrun(tmp: Path, env: dict[str, str], jobs: Path) -> None:
    """(e) torchrun --nproc-per-node 2, rank 1's dataset 8x slower a sample: attach on the launcher's pid (headless,
    the TUI, --openmetrics), then `loadertop run --headless -- torchrun ...`."""
    script = tmp / "ranks_job.py"
    script.write_text(RANK_JOB.replace("time.monotonic() + 40", "time.monotonic() + float(sys.argv[2])"))
    stop = tmp / "stop-ranks"
    argv = [
        str(Path(PY).with_name("torchrun")),
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(script),
        str(stop),
    ]
    shown = f"torchrun --nproc-per-node 2 --master-port {argv[6]} ranks_job.py STOP"
    launcher = subprocess.Popen([*argv, "90"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len([p for p in jobs.iterdir() if (p / "sock").exists()]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        attach = subprocess.run([PY, "-m", "loadertop", "attach", str(launcher.pid), "--headless", "--interval", "2"],
                                env=env, capture_output=True, text=True, timeout=7)  # fmt: skip
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        section(
            f"torchrun: `loadertop attach {launcher.pid} --headless` on the launcher's pid (7 s)",
            f"{shown} &\n$ loadertop attach {launcher.pid} --headless --interval 2",
            out,
        )
    else:
        section("torchrun: attach --headless (ended early)", "", attach.stdout + attach.stderr)
    try:
        pane = tmux_attach("lt-ranks", launcher.pid, env, 8)
        section(
            f"torchrun: `loadertop attach {launcher.pid}` (the launcher) in tmux 120x40, mid-run",
            f"tmux new -d -s lt-ranks -x 120 -y 40 'loadertop attach {launcher.pid} --interval 1'; sleep 8; "
            f"tmux capture-pane -p -t lt-ranks",
            pane,
        )
        port = free_port()
        metrics = subprocess.Popen([PY, "-m", "loadertop", "attach", str(launcher.pid), "--headless", "--interval",
                                    "1", "--openmetrics", f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(6)
        body = subprocess.run(["curl", "-s", f"127.0.0.1:{port}/metrics"], capture_output=True, text=True).stdout
        metrics.terminate()
        metrics.wait(10)
        wanted = ("samples_per_second", "stall_fraction", "data_wait_seconds", "rank_slowest", "loadertop_workers")
        section(
            "torchrun: `curl /metrics` from `attach LAUNCHER --openmetrics` (the per-rank families)",
            f"loadertop attach {launcher.pid} --headless --openmetrics 127.0.0.1:{port} &\n$ sleep 6; "
            f"curl -s 127.0.0.1:{port}/metrics | grep -E 'samples_per_second|stall|data_wait|slowest|workers'",
            "\n".join(line for line in body.splitlines() if any(w in line for w in wanted)),
        )
    finally:
        stop.touch()
        launcher.wait(60)
    stop.unlink()
    run = subprocess.run([PY, "-m", "loadertop", "run", "--headless", "--interval", "2", "--", *argv, "9"], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    section(
        f"torchrun: `loadertop run --headless -- torchrun ...` (exit {run.returncode}; the ranks stop after 9 s)",
        f"loadertop run --headless --interval 2 -- {shown} 9",
        run.stdout + run.stderr,
    )


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="lt-capture-"))
    jobs = tmp / "jobs"
    jobs.mkdir()
    env = {**os.environ, "LOADERTOP_JOBS_DIR": str(jobs), "PYTHONPATH": str(ROOT)}
    if "--torchrun" in sys.argv:
        torchrun(tmp, env, jobs)
        return
    frameworks = [
        ("lightning", LIGHTNING_JOB, lambda stop, budget: [str(stop), *budget]),
        ("hf", HF_JOB, lambda stop, budget: [str(stop), str(tmp / "hf-out"), *budget]),
    ]
    for name, script, argv in frameworks:
        stop = tmp / f"stop-{name}"
        job = start(name, script, argv(stop, []), tmp, env, long=True)
        try:
            wait_sock(jobs, job.pid)
            time.sleep(3)
            pane = tmux_attach(f"lt-{name}", job.pid, env, 10)
            section(
                f"{name}: `loadertop attach {job.pid}` in tmux 120x40, mid-run",
                f"tmux new -d -s lt-{name} -x 120 -y 40 'loadertop attach {job.pid} --interval 1'; sleep 10; "
                f"tmux capture-pane -p -t lt-{name}",
                pane,
            )
            if name == "lightning":
                port = free_port()
                metrics = subprocess.Popen(
                    [
                        PY,
                        "-m",
                        "loadertop",
                        "attach",
                        str(job.pid),
                        "--headless",
                        "--interval",
                        "1",
                        "--openmetrics",
                        f"127.0.0.1:{port}",
                    ],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                time.sleep(6)
                body = subprocess.run(
                    ["curl", "-s", f"127.0.0.1:{port}/metrics"], capture_output=True, text=True
                ).stdout
                metrics.terminate()
                lines, _ = metrics.communicate(timeout=10)
                section(
                    "`--openmetrics`: `curl /metrics` from a live attach (Lightning job)",
                    f"loadertop attach {job.pid} --headless --interval 1 --openmetrics 127.0.0.1:{port} &\n"
                    f"$ sleep 6; curl -s 127.0.0.1:{port}/metrics",
                    body,
                )
                section("the attach's own lines meanwhile", f"loadertop attach {job.pid} --headless ...", lines)
        finally:
            stop.touch()
            try:
                job.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                job.kill()
                job.communicate()
        began = time.monotonic()
        tuned = start(f"{name}-tune", script, argv(tmp / "never", ["30"]), tmp, env, long=True)
        out, _ = tuned.communicate(timeout=240)
        keep = [
            line
            for line in out.splitlines()
            if "loadertop" in line.lower() or line.startswith("{") or "TrainingArguments(" in line
        ]
        how = (
            "LoadertopCallback(tune_budget_s=30)"
            if name == "lightning"
            else "LoadertopTrainer(..., loadertop_tune_budget_s=30)"
        )
        section(
            f"{name}: tuned 30 s with {how} (exit {tuned.returncode}, {time.monotonic() - began:.0f} s)",
            f"python job_{name}.py STOP{' OUT' if name == 'hf' else ''} 30",
            "\n".join(keep),
        )
    torchrun(tmp, env, jobs)


if __name__ == "__main__":
    main()
