"""What to change beyond num_workers, from the stages measured: each rule fires only when the figures it rests on were
measured and hold, names the stage and its measured share, and the ceiling expected if followed (stage_ceilings.py's
arithmetic, on the same figures the report shows, so no advice contradicts a figure beside it).

- decode: a read or decode stage is the largest and at least DOMINANT of the pipeline's CPU → a faster decoder, or
  files stored closer to what is used;
- cache: that stage (or a tokenizer) dominates, the dataset's length is known and its prepared samples fit in half
  the memory available → cache them;
- uint8: float images of at least BIG_BATCH_MB a batch cross to the main process, and what their width costs (the
  hand-over, the collate, Normalize) is at least WORTH of the pipeline's CPU → send uint8, normalize on the GPU;
- main_process: the main process's own ceiling is below the CPUs' → more workers will not help past it;
- consumer: inside a sweep, the consumer's measured ceiling (the training step alone on a cached batch) is below
  every ceiling of the loader's (the CPUs', the main process's, the hand-over's) → more workers will not help;
- lazy_import: a package imported by the first sample for at least LAZY_S → every fresh worker pays it;
- pin_memory: pinning was measured and there is no GPU → it costs time for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadertop.core.engine.verdict import stage_ceilings as arithmetic
from loadertop.core.engine.wording import mb, num, pct, rate, seconds
from loadertop.core.model.stages import Advice, Stage, StageRow, StagesMeasurement

DOMINANT = 0.35  # of the pipeline's CPU: the largest stage from this share on "dominates"
BIG_BATCH_MB = 1.0  # float images per batch from which their width matters
WORTH = 0.05  # a change that saves less of the pipeline's CPU than this is not advised
LAZY_S = 0.05  # an import paid by each fresh worker from this long on
CACHE_MEMORY_SHARE = 0.5  # a cache may take at most this share of the memory available
DECODING = ("read", "decode", "read+decode")
PREPARING = (*DECODING, "tokenize")  # stages whose output is the same on every epoch: worth caching
ITEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@dataclass(frozen=True)
class Facts:
    """What every rule reads: the measurement, its stages (unattributed included) and rows, this machine."""

    measurement: StagesMeasurement
    stages: tuple[Stage, ...]
    rows: tuple[StageRow, ...]
    cpus: int
    mem_available_mb: float | None
    beside: arithmetic.Beside = arithmetic.NOTHING  # the sweep's consumer and transport ceilings, where measured

    @property
    def loader_ceiling(self) -> float | None:
        """The most the loader can deliver: the CPUs', the main process's and the hand-over's ceilings."""
        return arithmetic.lowest(arithmetic.cpu_ceiling(self.cpus, arithmetic.pipeline_cpu(self.stages)),
                                 arithmetic.main_ceiling(arithmetic.main_seconds(self.stages)),
                                 self.beside.transport)  # fmt: skip

    @property
    def ceiling(self) -> float | None:
        return arithmetic.lowest(self.loader_ceiling, self.beside.consumer)


def ms(value: float | None) -> str:
    return num(None if value is None else value * 1000, 2, " ms")


def size(nbytes: float) -> str:
    """A sample's bytes: KB below a MB, else the engine's MB."""
    return num(nbytes / 1024, 1, " KB") if nbytes < 2**20 else mb(nbytes / 2**20)


def stored_closer(name: str) -> str:
    """What "files stored closer to what is used" means for this stage's data, when its name says."""
    lowered = name.lower()
    if any(word in lowered for word in ("pil", "image", "jpeg", "png", "torchvision.io")):
        return " (smaller images, nearer the size the transforms crop to)"
    if any(word in lowered for word in ("soundfile", "librosa", "audio", "wav")):
        return " (shorter clips, the sample rate the model uses)"
    return ""


def dominant(facts: Facts, kinds: Sequence[str]) -> StageRow | None:
    """The sample's largest stage by CPU when it is of one of `kinds` and holds at least DOMINANT of the CPU."""
    sample = [r for r in facts.rows if r.stage.part == "sample" and r.stage.kind != "unattributed"]
    top = max(sample, key=lambda r: r.cpu_share or 0.0, default=None)
    if top is None or top.stage.kind not in kinds or (top.cpu_share or 0.0) < DOMINANT:
        return None
    return top


def decode_rule(facts: Facts) -> Advice | None:
    row = dominant(facts, DECODING)
    if row is None:
        return None
    text = (f"{row.stage.name} is {pct(row.cpu_share)} of the pipeline's CPU time, its largest stage: a faster "
            f"decoder, or files stored closer to what the pipeline uses{stored_closer(row.stage.name)}; were it "
            f"free: ~{rate(row.if_free)} samples/s (now ~{rate(facts.ceiling)})")  # fmt: skip
    return Advice("decode", row.stage.name, row.cpu_share, row.if_free, text)


def cache_rule(facts: Facts) -> Advice | None:
    row, m = dominant(facts, PREPARING), facts.measurement
    if row is None or m.length is None or facts.mem_available_mb is None:
        return None
    decoded = m.decoded_bytes if row.stage.kind in DECODING else None
    per_sample = decoded if decoded is not None else m.batch_bytes / max(1, m.batch_size)
    total_mb = m.length * per_sample / 2**20
    if per_sample <= 0 or total_mb >= CACHE_MEMORY_SHARE * facts.mem_available_mb:
        return None
    what = ("the tokenized samples" if row.stage.kind == "tokenize" else
            "the decoded images (the transforms after them stay random)" if decoded is not None else
            "the decoded samples")  # fmt: skip
    text = (f"cache {what}: {m.length} × {size(per_sample)} = {mb(total_mb)} fits in memory "
            f"({mb(facts.mem_available_mb)} available), and {row.stage.name} is {pct(row.cpu_share)} of the "
            f"pipeline's CPU time: ~{rate(row.if_free)} samples/s without it (now ~{rate(facts.ceiling)})")  # fmt: skip
    return Advice("cache", row.stage.name, row.cpu_share, row.if_free, text)


def uint8_bytes(tensors: Sequence[str]) -> tuple[float, float]:
    """(bytes of the batch's float tensors shaped like images, the same tensors' bytes as uint8)."""
    wide = narrow = 0.0
    for text in tensors:
        dtype, _, shape = text.partition(" ")
        dims = [int(d) for d in shape.split("×") if d.isdigit()]
        if dtype in ITEM_BYTES and len(dims) >= 4:
            count = 1
            for d in dims:
                count *= d
            wide, narrow = wide + count * ITEM_BYTES[dtype], narrow + count
    return wide, narrow


def uint8_rule(facts: Facts) -> Advice | None:
    m = facts.measurement
    wide, narrow = uint8_bytes(m.tensors)
    transfer = [s for s in facts.stages if s.kind == "transfer" and s.cpu_s is not None]
    if wide < BIG_BATCH_MB * 2**20 or not transfer or m.batch_bytes <= 0:
        return None
    kept = (m.batch_bytes - wide + narrow) / m.batch_bytes  # what the bytes-bound stages keep of their cost
    by_bytes = [s for s in facts.stages if s.kind in ("transfer", "collate") and s.cpu_s is not None]
    normalize = [s for s in facts.stages if s.kind == "transform" and s.name.startswith("Normalize")]
    saved_cpu = sum((s.cpu_s or 0.0) * (1 - kept) for s in by_bytes) + sum(s.cpu_s or 0.0 for s in normalize)
    saved_main = sum((s.wall_s or 0.0) * (1 - kept) for s in by_bytes if s.part == "main")
    total = arithmetic.pipeline_cpu(facts.stages)
    if total <= 0 or saved_cpu / total < WORTH:
        return None
    after = arithmetic.lowest(arithmetic.cpu_ceiling(facts.cpus, total - saved_cpu),
                              arithmetic.main_ceiling(arithmetic.main_seconds(facts.stages) - saved_main),
                              facts.beside.consumer, facts.beside.transport)  # fmt: skip
    what = "the hand-over, the collate" + (" and Normalize" if normalize else "")
    text = (
        f"float images cross to the main process ({mb(wide / 2**20)} a batch, {mb(narrow / 2**20)} as uint8): "
        f"{what} are {pct(saved_cpu / total)} of the pipeline's CPU time that uint8 would save; send uint8 and "
        f"normalize in the training step (on the GPU): ~{rate(after)} samples/s (now ~{rate(facts.ceiling)})"
    )
    return Advice("uint8", transfer[0].name, saved_cpu / total, after, text)


def main_process_rule(facts: Facts) -> Advice | None:
    main = [r for r in facts.rows if r.stage.part == "main" and r.stage.wall_s]
    main_s = arithmetic.main_seconds(facts.stages)
    by_cpu = arithmetic.cpu_ceiling(facts.cpus, arithmetic.pipeline_cpu(facts.stages))
    by_main = arithmetic.main_ceiling(main_s)
    if not main or by_main is None or by_cpu is None or by_main >= by_cpu:
        return None
    top = max(main, key=lambda r: r.stage.wall_s or 0.0)
    text = (
        f"the main process caps the pipeline at ~{rate(by_main)} samples/s ({ms(main_s)} per sample, "
        f"{top.stage.name} the most), below the CPUs' ~{rate(by_cpu)}: more workers will not help past it"
    )
    return Advice("main_process", top.stage.name, top.share, by_main, text)


def consumer_rule(facts: Facts) -> Advice | None:
    consumer, loader = facts.beside.consumer, facts.loader_ceiling
    if consumer is None or loader is None or consumer >= loader:
        return None
    text = (
        f"the consumer is the ceiling: the training step alone takes ~{rate(consumer)} samples/s (the sweep measured "
        f"it {facts.beside.consumer_basis}), below the loader's ~{rate(loader)}: more workers will not help, a "
        f"faster step will"
    )
    return Advice("consumer", "the consumer", None, consumer, text)


def lazy_import_rules(facts: Facts) -> list[Advice]:
    m, found = facts.measurement, []
    for lazy in m.lazy_imports:
        if lazy.seconds is None or lazy.seconds < LAZY_S:
            continue
        share = lazy.seconds / m.worker_first_batch_s if m.worker_first_batch_s else None
        modules = f"{lazy.modules} module" + ("s" if lazy.modules != 1 else "")
        text = (
            f"{lazy.package} is imported inside the first sample ({seconds(lazy.seconds)}, {modules}): every fresh "
            f"worker pays it again, every epoch without persistent_workers; import it at the top of the dataset's "
            f"module (fork workers inherit it), or set persistent_workers=True"
        )
        found.append(Advice("lazy_import", "worker start", share, None, text))
    return found


def pin_memory_rule(facts: Facts) -> Advice | None:
    row = next((r for r in facts.rows if r.stage.kind == "pin_memory" and r.stage.wall_s is not None), None)
    if row is None or facts.measurement.cuda:
        return None
    text = (
        f"pin_memory costs {ms(row.stage.wall_s)} per sample in the main process and there is no GPU to copy "
        f"to: leave it off (~{rate(row.if_free)} samples/s without it)"
    )
    return Advice("pin_memory", row.stage.name, row.share, row.if_free, text)


RULES: tuple[Callable[[Facts], Advice | None], ...] = (
    consumer_rule, decode_rule, cache_rule, uint8_rule, main_process_rule,
)  # fmt: skip
LAST_RULES: tuple[Callable[[Facts], Advice | None], ...] = (pin_memory_rule,)


def advise(facts: Facts) -> tuple[Advice, ...]:
    """Every rule whose premise holds, in the order above (the lazy imports before pin_memory's)."""
    found = [advice for rule in RULES if (advice := rule(facts)) is not None]
    found += lazy_import_rules(facts)
    found += [advice for rule in LAST_RULES if (advice := rule(facts)) is not None]
    return tuple(found)
