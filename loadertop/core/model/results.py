"""Result records: one per trial, one per sweep. `SweepResult.to_dict()` is the JSON export."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from loadertop.core.model.config import Settings, TrialConfig, UsageError
from loadertop.core.model.nodes import NodeInfo, NodeTrial
from loadertop.core.model.stages import StagesReport
from loadertop.core.model.status import Status

RESULT_VERSION = 1  # a result file of another version is refused (check_version), never misread


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total_mb: float


@dataclass(frozen=True)
class MachineInfo:
    """The machine as the job sees it (affinity and cgroup limits applied)."""

    hostname: str
    platform: str
    python: str
    torch: str | None
    logical_cpus: int
    usable_cpus: int
    cpu_quota: float | None  # cgroup cpu.max as CPUs, None when unlimited
    mem_total_mb: float
    mem_available_mb: float
    cgroup_mem_headroom_mb: float | None  # memory.max - memory.current, None when unlimited
    shm_free_mb: float | None
    default_start_method: str
    gpus: tuple[GpuInfo, ...] = ()
    gpu_unavailable: str | None = None  # "unavailable: reason" when NVML cannot be used
    # The user's dataset as the sweep built it: what, how long, and whether every trial was forked from one build.
    dataset_build: str = ""
    dataset_build_s: float | None = None

    def summary(self) -> str:
        gpus = f"{len(self.gpus)} GPU ({self.gpus[0].name})" if self.gpus else "no GPU"
        return (
            f"{self.hostname}: {self.usable_cpus} usable CPUs (of {self.logical_cpus}), "
            f"{self.mem_total_mb / 1024:.1f} GiB RAM ({self.mem_available_mb / 1024:.1f} free), {gpus}"
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MachineInfo:
        gpus = tuple(GpuInfo(**g) for g in data.get("gpus", ()))
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "gpus"}
        return cls(gpus=gpus, **fields)


@dataclass(frozen=True)
class TrialResult:
    """The measured outcome of one configuration. Numbers are None when not measured."""

    index: int
    config: TrialConfig
    status: Status
    error: str | None = None
    samples_per_s: float | None = None
    batches_per_s: float | None = None
    spread: float | None = None  # IQR / median of block throughput
    first_batch_s: float | None = None
    # The part of first_batch_s that iter(loader) took: the parent starting its workers one by one (a fork each;
    # spawn and forkserver workers are only launched there, their imports come after). None: not measured.
    workers_start_s: float | None = None
    stall_fraction: float | None = None  # time blocked in next() / (blocked + consumer step)
    worker_uss_mb: tuple[float, ...] = ()  # per worker, median over the steady window
    worker_uss_slope_mb_per_min: tuple[float | None, ...] = ()  # MB/min per worker; None where unfit
    worker_uss_climbing: tuple[bool, ...] = ()  # per worker: its USS climbs steadily (engine/verdict/memory.py)
    leak: str | None = None  # the sentence when a worker's USS climbs (copy-on-read?), else None
    total_pss_mb: float | None = None  # main + workers, proportional share of shared pages
    # Processes of other parked trials (the finalists' pools) alive while this run's memory was read. 0: read
    # alone, this run's own PSS. More: its PSS was split with them, so the row shows a run read alone.
    parked_beside: int = 0
    rss_mb: float | None = None  # main + workers; includes shared pages (double counts)
    cpu_percent: float | None = None  # main + workers, percent of one CPU
    main_cpu_percent: float | None = None
    # Worker processes the trial started (0: its workers were threads in the trial process, whose CPU is in
    # main_cpu_percent, so no per-worker CPU was measured). None: not recorded (an older result).
    worker_processes: int | None = None
    # Every process's CPU on the CPUs open to loadertop, mean over the window, percent of one CPU: with cpu_percent,
    # how much of the machine other processes held while the trial ran. None: not read (an older result).
    machine_cpu_percent: float | None = None
    gpu_util: float | None = None  # mean NVML utilization over the steady window; None when unavailable
    gpu_mem_mb: float | None = None
    reason: str = ""
    blocks: int = 0
    measured_s: float = 0.0
    warmup_batches: int = 0
    stable: bool = False  # spread reached the target before the time budget ran out
    # Stopped early, before settling: its blocks all lay clearly beyond an edge of the decision the search measured
    # it for (a clear gain or a clear loss on the climb), so more blocks could not change that decision.
    decided: bool = False
    # Measured again on the workers an earlier run of this configuration started (parked between the finalists'
    # runs): its start-up was not paid again; first_batch_s and epoch_restart_s are that earlier run's.
    warm: bool = False
    # The epoch boundary: from the last batch of an epoch to the first of the next (worker restart unless
    # persistent_workers); measured by ending an epoch early after the steady window. None if it could not be.
    epoch_restart_s: float | None = None
    # Set when the epoch was shorter than the trial: blocks were then whole epochs of this many batches, each
    # boundary included (the throughput training sees); None when the blocks ran inside one epoch.
    epoch_batches: int | None = None
    # samples/s ÷ the consumer's ceiling; None when there is no ceiling, or it read low (the trial beat it)
    fraction_of_ceiling: float | None = None
    repeat_of: int | None = None  # index of the first trial of the same configuration (a finalist re-measured)
    ranks: int = 1  # loader replicas measured at once (--ranks); rates above are their sum
    rank_samples_per_s: tuple[float, ...] = ()  # each rank's own samples/s, when ranks > 1
    warnings: tuple[str, ...] = ()  # what the trial found wrong with the data, e.g. unsharded IterableDataset workers
    # The wait in next() per batch over the counted blocks, ms (the worst rank's with --ranks). The first batch after
    # an epoch boundary is not in them: that burst is epoch_restart_s, and each one crossed is in boundary_wait_ms.
    wait_ms_p50: float | None = None
    wait_ms_p95: float | None = None
    wait_ms_p99: float | None = None
    boundary_wait_ms: tuple[float, ...] = ()  # the wait for the first batch after each epoch boundary crossed (last 32)
    rank_wait_ms_p99: tuple[float, ...] = ()  # each rank's p99, when ranks > 1
    main_threads: int | None = None  # intra-op threads of the trial's main process (where the consumer steps)
    # Many nodes (model/nodes.py): each node's samples/s (its ranks summed), in node rank order; every node's share;
    # and the rank that paced the job, e.g. "node 1 (gpu-b) rank 0". Empty / None on one node.
    node_samples_per_s: tuple[float, ...] = ()
    node_trials: tuple[NodeTrial, ...] = ()
    slowest_rank: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in _TUPLES:
            data[name] = list(getattr(self, name))
        data["node_trials"] = [n.to_dict() for n in self.node_trials]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["config"] = TrialConfig.from_dict(data["config"])
        for name in _TUPLES:
            fields[name] = tuple(fields.get(name) or ())
        fields["node_trials"] = tuple(NodeTrial.from_dict(n) for n in data.get("node_trials") or ())
        return cls(**fields)


# Its fields of plain values in a tuple (lists in JSON), read off their annotations: a field added is kept too.
_TUPLES: tuple[str, ...] = tuple(
    f.name for f in fields(TrialResult) if str(f.type).startswith("tuple[") and f.name != "node_trials"
)


@dataclass(frozen=True)
class Knee:
    """Where adding workers stops paying. `num_workers` is None when the curve shows no clear knee."""

    num_workers: int | None
    rule: str  # which rule chose it, e.g. "kneedle" or "noise band"
    reason: str
    # What each rule says on its own (annotations beside the choice, so not part of equality).
    kneedle: int | None = field(default=None, compare=False)
    noise_band: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Ceiling:
    """The consumer alone on a cached batch: the most the loader could ever be asked for, per batch size; or
    (kind "transport") the most batches the DataLoader hands over from workers, per batch size and worker count.

    `samples_per_s` is None when the consumer does no work (no CUDA and --step-ms 0): nothing but the loader
    bounds throughput then, and `note` says so."""

    batch_size: int
    samples_per_s: float | None
    note: str = ""
    spread: float | None = None
    # "consumer", or "transport": what workers can hand over at `num_workers` (a null dataset with the dataset's
    # own batch structure, engine/verdict/transport_bound.py); the fields below are the transport ceiling's.
    kind: str = "consumer"
    num_workers: int | None = None
    pin_memory: bool | None = None
    batches_per_s: float | None = None
    gib_per_s: float | None = None
    batch_mb: float | None = None
    tensors: int | None = None
    float_images: bool | None = None

    @property
    def key(self) -> tuple[str, int, int | None, bool | None]:
        """What one measurement of a ceiling stands for (a fresh one replaces the one with the same key)."""
        return self.kind, self.batch_size, self.num_workers, self.pin_memory


@dataclass(frozen=True)
class UslFit:
    """Universal Scalability Law, X(N) = λN / (1 + α(N−1) + βN(N−1)), fitted to samples/s against workers (N ≥ 1).

    α is contention (the part that does not parallelise), β is coherency (cost that grows with pairs of workers);
    the throughput peaks at N* = sqrt((1−α)/β), None when β is 0 (no retrograde region)."""

    lam: float
    alpha: float
    beta: float
    r2: float
    points: int
    peak_workers: float | None
    peak_samples_per_s: float | None
    note: str = ""

    def predict(self, n: float) -> float:
        return self.lam * n / (1.0 + self.alpha * (n - 1.0) + self.beta * n * (n - 1.0))


@dataclass(frozen=True)
class SearchStep:
    """One decision of the search, in order: what it measured next, or why it stopped."""

    phase: str  # "plan", "climb", "stop", "refine", "knobs", "repeat", "done", "rerun"
    message: str
    config: str | None = None  # the label of the configuration it chose, if any
    # How the climb stopped, on its "stop" step (engine/verdict/stops.py names the kinds: top, peak, ceiling, transport,
    # flat, saturated, memory, fault), the rung it stopped at and the number behind it (N*, the ceiling's
    # samples/s, the most workers the memory budget allows): what the recommendation's reason says, unparsed.
    stop: str | None = None
    stop_workers: int | None = None
    stop_value: float | None = None


@dataclass(frozen=True)
class Recommendation:
    config: TrialConfig
    samples_per_s: float
    reason: str
    snippet: str
    trial_index: int
    # The configurations on its worker curve within noise of the best, by worker count (the recommendation, the
    # cheapest, among them); empty in results written before it was kept.
    equivalent: tuple[TrialConfig, ...] = ()
    close: bool = False  # a close call: the choice sits near the edge of the noise band

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recommendation:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["config"] = TrialConfig.from_dict(data["config"])
        fields["equivalent"] = tuple(TrialConfig.from_dict(c) for c in data.get("equivalent") or ())
        return cls(**fields)


@dataclass(frozen=True)
class PreflightCheck:
    """One pre-flight check (engine/verdict/preflight.py): /dev/shm, the dataset's pickle, the time to first batch.
    `numbers` holds the figures the message states, by name, for a reader of the JSON."""

    check: str  # "shm" | "pickle" | "first_batch"
    level: str  # "info" | "warning"
    message: str
    numbers: dict[str, float | int | str | None] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreflightCheck:
        return cls(data["check"], data["level"], data["message"], dict(data.get("numbers") or {}))


@dataclass(frozen=True)
class SweepResult:
    machine: MachineInfo
    settings: Settings
    trials: tuple[TrialResult, ...]
    knee: Knee | None
    recommendation: Recommendation | None
    run_dir: str | None = None
    interrupted: bool = False
    wall_s: float = 0.0
    version: int = field(default=RESULT_VERSION)
    ceilings: tuple[Ceiling, ...] = ()
    usl: UslFit | None = None
    search_trace: tuple[SearchStep, ...] = ()
    iterable: bool = False  # the dataset is an IterableDataset (the runner's check): --ranks shards it differently
    nodes: tuple[NodeInfo, ...] = ()  # a many-node sweep's nodes, in node rank order; empty on one node
    preflight: tuple[PreflightCheck, ...] = ()  # the checks before the first trial, and the first batch's forecast
    # A torchdata.nodes graph's swept nodes with the arguments the user built them with (constructor text); empty
    # for a Dataset.
    graph: tuple[str, ...] = ()
    loader: str = "DataLoader"  # the loader class the trials built (a factory's StatefulDataLoader stays one)
    # Where a sample's time goes, measured after the trials on the sweep's dataset when that is cheap beside the
    # sweep (engine/verdict/stage_plan.py) or asked for (--stages); None otherwise, and `stages_note` says why.
    stages: StagesReport | None = None
    stages_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "machine": asdict(self.machine),
            "settings": self.settings.to_dict(),
            "trials": [t.to_dict() for t in self.trials],
            "knee": asdict(self.knee) if self.knee else None,
            "recommendation": asdict(self.recommendation) if self.recommendation else None,
            "run_dir": self.run_dir,
            "interrupted": self.interrupted,
            "wall_s": self.wall_s,
            "ceilings": [asdict(c) for c in self.ceilings],
            "usl": asdict(self.usl) if self.usl else None,
            "search_trace": [asdict(s) for s in self.search_trace],
            "iterable": self.iterable,
            "nodes": [n.to_dict() for n in self.nodes],
            "preflight": [asdict(p) for p in self.preflight],
            "graph": list(self.graph),
            "loader": self.loader,
            "stages": self.stages.to_dict() if self.stages else None,
            "stages_note": self.stages_note,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepResult:
        """UsageError (one line) for a result of another version: every reader of a result file comes here."""
        check_version(data)
        rec = data.get("recommendation")
        knee = data.get("knee")
        return cls(
            machine=MachineInfo.from_dict(data["machine"]),
            settings=Settings.from_dict(data["settings"]),
            trials=tuple(TrialResult.from_dict(t) for t in data["trials"]),
            knee=Knee(**knee) if knee else None,
            recommendation=Recommendation.from_dict(rec) if rec else None,
            run_dir=data.get("run_dir"),
            interrupted=data.get("interrupted", False),
            wall_s=data.get("wall_s", 0.0),
            version=data.get("version", RESULT_VERSION),
            ceilings=tuple(Ceiling(**c) for c in data.get("ceilings") or ()),
            usl=UslFit(**data["usl"]) if data.get("usl") else None,
            search_trace=tuple(SearchStep(**s) for s in data.get("search_trace") or ()),
            iterable=data.get("iterable", False),
            nodes=tuple(NodeInfo.from_dict(n) for n in data.get("nodes") or ()),
            preflight=tuple(PreflightCheck.from_dict(p) for p in data.get("preflight") or ()),
            graph=tuple(data.get("graph") or ()),
            loader=data.get("loader") or "DataLoader",
            **_stages(data),
        )


def _stages(data: dict[str, Any]) -> dict[str, Any]:
    """The result's stages, read back; a block of another stages version is left out, said in the note (the sweep's
    own figures stay readable). A result written before the key existed has none."""
    note = data.get("stages_note") or ""
    if not data.get("stages"):
        return {"stages": None, "stages_note": note}
    try:
        return {"stages": StagesReport.from_dict(data["stages"]), "stages_note": note}
    except (ValueError, TypeError) as exc:
        return {"stages": None, "stages_note": f"the stages were not read: {exc}"}


def check_version(data: dict[str, Any]) -> None:
    """A result written by another loadertop's format is refused in one line: its fields may mean other things.
    A result without a version is read as this one (results before the field was written)."""
    version = data.get("version", RESULT_VERSION)
    if version != RESULT_VERSION:
        raise UsageError(
            f"result version {version!r}, this loadertop reads result version {RESULT_VERSION} "
            f"(read it with the loadertop that wrote it)"
        )
