"""Where a sample's time goes: the figures `loadertop stages` measures in its child process (StagesMeasurement, one
process, 0 workers) and the report the engine draws from them (StagesReport: shares, ceilings, advice).

Every time is per sample and in seconds; a stage's `part` says who pays it once the loader has workers:
- "sample": inside the 0-worker time (the dataset's read, decode, transforms, its other calls, the collate);
  these add up to the 0-worker time, or the report holds an "unattributed" stage with the gap;
- "handoff": what a worker adds to hand its batch over (the batch put into shared memory and pickled);
- "main": the main process's own work on each batch (receiving it, pin_memory, the copy to the GPU).
A figure not measured is None, and the stage's note says why. Faces render StagesReport only; `to_dict` is the
`stages` key of `--json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

# What attach and run say where a sweep's stages would be: a live job's are not measured.
LIVE_STAGES = (
    "stages: not measured on a live job (profiling its samples costs far more than 1% of their time); "
    "run `loadertop stages --dataset SPEC` on the same dataset"
)
STAGES_VERSION = 1  # the report's (the JSON's `stages.version`); the child's protocol has its own
PARTS = ("sample", "handoff", "main")
# What a stage is: read and decode (apart or together), a transform found on the dataset, another call of its
# __getitem__ (or its iterator), the code of __getitem__ itself, the collate, the transfer, pinning, the copy.
KINDS = ("read", "decode", "read+decode", "tokenize", "transform", "call", "own", "collate", "transfer",
         "pin_memory", "to_device", "unattributed")  # fmt: skip


def _checked(kind: Any, data: Any) -> dict[str, Any]:
    """A flat record's fields from JSON: an object with no unknown key (a missing one fails in the constructor)."""
    if not isinstance(data, dict):
        raise ValueError(f"expected an object, got {data!r}")
    known = {f.name for f in fields(kind)}
    if unknown := sorted(set(data) - known):
        raise ValueError(f"{kind.__name__}: unknown fields {', '.join(unknown)}")
    return data


@dataclass(frozen=True)
class Stage:
    """One stage of a sample's way to the training step, measured per sample."""

    name: str  # as the user reads it: "read+decode (PIL.Image.open/convert)", "RandomResizedCrop", "collate"
    kind: str  # one of KINDS
    part: str  # one of PARTS
    wall_s: float | None  # seconds per sample; None: not measured (the note says why)
    cpu_s: float | None  # CPU seconds per sample
    note: str = ""

    @classmethod
    def from_dict(cls, data: Any) -> Stage:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class LazyImport:
    """A package first imported by the first sample (inside __getitem__): every fresh worker imports it again."""

    package: str  # top-level name: "librosa"
    modules: int  # how many modules it added to sys.modules
    seconds: float | None  # its import statement's time; None: loaded another way (importlib), not timed

    @classmethod
    def from_dict(cls, data: Any) -> LazyImport:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class LibraryShare:
    """A library's share of the profiled sample time (its functions' own time, wherever they were called from)."""

    library: str  # a top-level package ("torch", "PIL"), "stdlib", or the user's own module
    share: float

    @classmethod
    def from_dict(cls, data: Any) -> LibraryShare:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class Replay:
    """A "what if" measured: the sample's largest stage (a hooked one) computed once for a batch or two, then the
    0-worker loader run with that stage replaced by its recorded outputs: its time per sample without the stage."""

    stage: str  # the stage's name, as its row
    samples: int  # samples the replayed loader delivered
    wall_s: float  # per sample, the 0-worker loader without the stage
    cpu_s: float

    @classmethod
    def from_dict(cls, data: Any) -> Replay:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class StagesMeasurement:
    """What the child measured on the user's dataset, in one process (also the protocol's message: TYPE)."""

    TYPE: ClassVar[str] = "measured"
    spec: str
    dataset: str  # its class name
    length: int | None  # None: an IterableDataset without __len__
    iterable: bool
    batch_size: int
    samples: int  # samples timed plainly (each instrumented way timed about as many)
    elapsed_s: float  # how long the interleaved rounds took
    sample_wall_s: float  # dataset[i] (or next(iterator)), plain: no hook, no profiler
    sample_cpu_s: float
    loader_wall_s: float  # a 0-worker DataLoader with the dataset's own collate, per sample: the reference
    loader_cpu_s: float
    stages: tuple[Stage, ...]  # every part's; "unattributed" is the engine's to add
    libraries: tuple[LibraryShare, ...]  # the profile's time by library, largest first
    hooks_overhead: float | None  # the timing hooks' cost: hooked CPU time / plain CPU time - 1 (None: no hook)
    profile_overhead: float | None  # cProfile's: profiled CPU time / plain CPU time - 1
    batch_bytes: int  # the tensors of one collated batch
    tensors: tuple[str, ...]  # "float32 32×3×224×224", one per tensor of the batch
    float_image_bytes: int  # of those bytes, float tensors shaped like images (4 or more dimensions)
    decoded_bytes: float | None  # per sample, what the read+decode stage returned (the size a cache would hold)
    first_sample_s: float | None  # the first dataset[0] in a fresh process
    worker_first_batch_s: float | None  # a fresh 1-worker DataLoader's first batch (fork)
    main_first_batch_s: float | None  # a 0-worker DataLoader's first batch once the process is warm
    lazy_imports: tuple[LazyImport, ...]
    cuda: bool
    notes: tuple[str, ...] = ()  # what was not measured, and why
    # Of the profiled CPU time, the share that holds the GIL (Python code, C functions of libraries not known to
    # release it): thread workers run it one at a time. The rest is C code of torch, Pillow, NumPy, Arrow..., which
    # may release it. None: not profiled.
    gil_share: float | None = None
    reference: str = "a DataLoader with the dataset's collate"  # what the 0-worker time is
    replay: Replay | None = None  # the largest stage replayed from its recorded outputs; None: not a hooked stage

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> StagesMeasurement:
        fields_ = dict(_checked(cls, data))
        fields_["stages"] = tuple(Stage.from_dict(s) for s in fields_.get("stages") or ())
        fields_["libraries"] = tuple(LibraryShare.from_dict(s) for s in fields_.get("libraries") or ())
        fields_["lazy_imports"] = tuple(LazyImport.from_dict(s) for s in fields_.get("lazy_imports") or ())
        fields_["tensors"] = tuple(fields_.get("tensors") or ())
        fields_["notes"] = tuple(fields_.get("notes") or ())
        fields_["replay"] = Replay.from_dict(fields_["replay"]) if fields_.get("replay") else None
        return cls(**fields_)


@dataclass(frozen=True)
class StageRow:
    """A stage as the report shows it: its share of the 0-worker time (of the stages in its part, for a handoff or
    main stage) and of the pipeline's CPU time, and the ceiling on this machine if it cost nothing."""

    stage: Stage
    share: float | None  # of the 0-worker time per sample (a sample stage) or of its part's time
    cpu_share: float | None  # of the whole pipeline's CPU seconds per sample
    if_free: float | None  # samples/s on this machine's CPUs were this stage free

    @classmethod
    def from_dict(cls, data: Any) -> StageRow:
        fields_ = dict(_checked(cls, data))
        return cls(**{**fields_, "stage": Stage.from_dict(fields_.get("stage"))})


@dataclass(frozen=True)
class Ceiling:
    """A bound on samples/s on this machine, with the arithmetic it rests on."""

    name: str  # "the whole pipeline", "the main process", "if decode were free"
    samples_per_s: float | None
    basis: str  # "2 CPUs ÷ 5.1 CPU ms per sample"

    @classmethod
    def from_dict(cls, data: Any) -> Ceiling:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class Advice:
    """One suggestion, grounded: the stage and the measured share it rests on, and the ceiling if followed."""

    rule: str  # which rule: decode, uint8, cache, lazy_import, pin_memory
    stage: str  # the stage's name
    share: float | None  # the measured share it rests on
    ceiling: float | None  # samples/s expected if followed (None: the rule names no figure)
    text: str

    @classmethod
    def from_dict(cls, data: Any) -> Advice:
        return cls(**_checked(cls, data))


@dataclass(frozen=True)
class StagesReport:
    """The engine's reading of a StagesMeasurement on this machine: what every face shows."""

    version: int  # STAGES_VERSION
    measurement: StagesMeasurement
    rows: tuple[StageRow, ...]  # sample part (unattributed last), then handoff, then main
    stages_wall_s: float  # the sample stages' sum, unattributed left out
    reference_wall_s: float  # the 0-worker time per sample (measurement.loader_wall_s)
    gap: float  # (reference - sum) / reference: within ±10% no unattributed stage is added
    cpus: int  # usable CPUs
    pipeline_cpu_s: float  # every part's CPU seconds per sample
    ceilings: tuple[Ceiling, ...]  # the whole pipeline first
    advice: tuple[Advice, ...]
    mem_available_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> StagesReport:
        """The report `to_dict` wrote (a sweep's result.json keeps one). ValueError for another STAGES_VERSION or a
        record that is not one."""
        fields_ = dict(_checked(cls, data))
        if fields_.get("version") != STAGES_VERSION:
            raise ValueError(f"stages version {fields_.get('version')!r}, this loadertop reads {STAGES_VERSION}")
        return cls(**{
            **fields_,
            "measurement": StagesMeasurement.from_dict(fields_.get("measurement")),
            "rows": tuple(StageRow.from_dict(r) for r in fields_.get("rows") or ()),
            "ceilings": tuple(Ceiling.from_dict(c) for c in fields_.get("ceilings") or ()),
            "advice": tuple(Advice.from_dict(a) for a in fields_.get("advice") or ()),
        })  # fmt: skip
