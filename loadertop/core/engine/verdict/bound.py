"""What bounds a trial, decided once: every label of the results table and of the recommendation comes from here.

The decision reads the CPU share of the machine: the trial's processes together (its workers and the training
process) against the usable CPUs, and, with fewer workers than CPUs, against the CPUs its loading could occupy.
One worker's CPU is no evidence on its own: eight workers sharing two saturated cores show 14% each, and are
CPU-bound, not waiting on I/O.

Order: CPU-bound (the machine's CPUs nearly all used by the trial), consumer-bound (the training step hardly
waits), main-process-bound (the training process itself is busy), CPU-bound again when other processes held the
CPUs while the loader stalled (contended: the trial's own share is low because it got little CPU, not because it
waited), I/O-bound (stalled, yet most of the CPUs open to it idle), else loader-bound (CPU to spare and the consumer
waits: more workers may help)."""

from __future__ import annotations

from dataclasses import dataclass

from loadertop.core.model.results import MachineInfo, TrialResult

CPU_SATURATED = 0.75  # share of the usable CPUs (all the trial's processes) from which a trial is CPU-bound
IO_IDLE = 0.5  # a stalled loader below this share of the CPUs it could use is waiting, not computing
CONSUMER_BOUND_STALL = 0.05  # the consumer waits less than this: the loader keeps up
MAIN_PROCESS_BUSY = 90.0  # percent of one CPU: the training process itself is the bottleneck
IO_STALL_ZERO_WORKERS = 0.5  # with 0 workers a low CPU means waiting only when loading takes most of the time

CPU_BOUND = "CPU-bound"
CONSUMER_BOUND = "consumer-bound"
MAIN_BOUND = "main-process-bound"
IO_BOUND = "I/O-bound"
LOADER_BOUND = "loader-bound"


@dataclass(frozen=True)
class Bound:
    """The verdict and the figures it rests on (each None when not measured)."""

    kind: str | None  # one of the labels above; None when neither CPU nor stall data decide it
    cpus: float | None  # CPUs the trial's processes used together
    share: float | None  # `cpus` over the usable CPUs
    busy: float | None  # the larger of `share` and the loading's share of the CPUs it could occupy
    stall: float | None
    main_cpu: float | None  # percent of one CPU
    per_worker: float | None  # percent of one CPU, the workers' CPU shared out
    machine: float | None = None  # CPUs every process used, the trial's and others' (None: not read)

    @property
    def contended(self) -> bool:
        """CPU-bound on CPUs that other processes held, not on the trial's own use of them."""
        return self.kind == CPU_BOUND and (self.share is None or self.share < CPU_SATURATED)


def capacity(machine: MachineInfo) -> float:
    """The usable CPUs in percent of one CPU, the unit of `cpu_percent`."""
    return max(1, machine.usable_cpus) * 100.0


def cpu_share(t: TrialResult, machine: MachineInfo) -> float | None:
    """The share of the machine's usable CPUs the trial's processes used together (workers and main)."""
    return None if t.cpu_percent is None else t.cpu_percent / capacity(machine)


def per_worker_cpu(t: TrialResult) -> float | None:
    """The workers' CPU (all processes less the main one) per worker, in percent of one CPU. None for thread
    workers: they share the trial process's CPU with it, so no figure of theirs was measured."""
    nw = t.config.num_workers
    if nw <= 0 or t.cpu_percent is None or in_process(t):
        return None
    return _loading_cpu(t) / nw


def in_process(t: TrialResult) -> bool:
    """The trial's workers are threads of the training process: --worker-method thread, or a torchdata.nodes
    graph whose mappers kept their thread method (the trial started no worker process)."""
    return t.config.num_workers > 0 and (t.config.worker_method == "thread" or t.worker_processes == 0)


def _loading_cpu(t: TrialResult) -> float:
    """The CPU of the processes that load: the workers (everything but the main process), or with 0 workers the
    training process. Thread workers load inside the training process: all of its CPU is theirs."""
    total = t.cpu_percent or 0.0
    if t.config.num_workers == 0 or in_process(t):
        return t.main_cpu_percent if t.main_cpu_percent is not None else total
    return max(0.0, total - t.main_cpu_percent) if t.main_cpu_percent is not None else total


def busy_share(t: TrialResult, machine: MachineInfo) -> float | None:
    """How busy the CPUs open to the trial's loading were: the machine's share, or, when fewer loading processes
    than CPUs can occupy only some of them, the loading's share of those (whichever is larger)."""
    share = cpu_share(t, machine)
    if share is None:
        return None
    reach = min(max(1, t.config.num_workers), max(1, machine.usable_cpus))
    return max(share, _loading_cpu(t) / (reach * 100.0))


def bound_of(t: TrialResult, machine: MachineInfo) -> Bound:
    """What bounds a finished trial within its steady window (the module's order)."""
    share, busy, stall, main = cpu_share(t, machine), busy_share(t, machine), t.stall_fraction, t.main_cpu_percent
    cpus = None if t.cpu_percent is None else t.cpu_percent / 100.0

    machine_cpus = None if t.machine_cpu_percent is None else max(t.machine_cpu_percent, t.cpu_percent or 0.0) / 100.0

    def verdict(kind: str | None) -> Bound:
        return Bound(kind, cpus, share, busy, stall, main, per_worker_cpu(t), machine_cpus)

    if share is not None and share >= CPU_SATURATED:
        return verdict(CPU_BOUND)
    if stall is None:
        return verdict(None)
    if stall < CONSUMER_BOUND_STALL:
        return verdict(CONSUMER_BOUND)
    if main is not None and main >= MAIN_PROCESS_BUSY:
        return verdict(MAIN_BOUND)
    waits = t.config.num_workers > 0 or stall >= IO_STALL_ZERO_WORKERS  # a small stall is just the step's time
    if machine_cpus is not None and machine_cpus * 100.0 >= CPU_SATURATED * capacity(machine) and waits:
        return verdict(CPU_BOUND)  # others held the CPUs: the loading got little, it did not wait for I/O
    if busy is not None and busy < IO_IDLE and waits and (t.config.num_workers > 0 or main is not None):
        return verdict(IO_BOUND)
    return verdict(LOADER_BOUND)
