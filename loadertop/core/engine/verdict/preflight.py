"""The pre-flight checks, worded with their numbers: /dev/shm against the batches in flight and the dataset's pickle
(before the first trial, from the runner's check: trial/preflight.py), and the time to first batch at the top worker
count forecast from the first rungs, then checked against the measurement.

Each is a PreflightCheck: "warning" when the sweep is likely to hurt or mislead (--strict turns the checks before the
first trial into an error), "info" otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from loadertop.core.engine.wording import mb, seconds
from loadertop.core.model.config import Settings, TrialConfig
from loadertop.core.model.figures import MB, mean_of, median_of
from loadertop.core.model.protocol import Checked
from loadertop.core.model.results import PreflightCheck, TrialResult

# The parent pickles the dataset once per spawn/forkserver worker, one after another, before the first batch: above
# this many seconds at the top worker count, the start-up is worth a warning.
SLOW_PICKLE_S = 2.0
FIT_MIN_COUNTS = 2  # worker counts (of 1 or more) a forecast of the first batch needs
WITHIN = 0.20  # a forecast within ±20% of the measured first batch holds


def before_trials(
    free_mb: float | None, checked: Checked, settings: Settings, planned: Sequence[TrialConfig]
) -> tuple[PreflightCheck, ...]:
    """The checks the runner's figures allow before the first trial."""
    checks = [shm_check(free_mb, checked, settings, planned)]
    methods = sorted({c.start_method for c in planned if c.start_method in ("spawn", "forkserver")})
    if methods and checked.pickle_bytes is not None:
        top = max((c.num_workers for c in planned if c.start_method in methods), default=0)
        checks.append(pickle_check(checked, methods, top))
    return tuple(checks)


def strict_error(checks: Sequence[PreflightCheck]) -> str | None:
    """--strict: the first warning as one line (and how many more), or None when there is none."""
    warned = [c for c in checks if c.level == "warning"]
    if not warned:
        return None
    more = f" (and {len(warned) - 1} more pre-flight warnings)" if len(warned) > 1 else ""
    return f"--strict: {warned[0].message}{more}"


def shm_check(
    free_mb: float | None, checked: Checked, settings: Settings, planned: Sequence[TrialConfig]
) -> PreflightCheck:
    """/dev/shm free against the most any planned configuration keeps in it: workers × prefetch × batch bytes ×
    ranks (every worker's prefetched batches wait there as shared tensors)."""
    loaded = [c for c in planned if c.num_workers > 0]
    if checked.batch_bytes is None or not loaded:
        why = "no configuration has workers" if not loaded else "the check read no batch (ranks read their own)"
        return PreflightCheck("shm", "info", f"pre-flight /dev/shm: not checked: {why}", {"free_mb": free_mb})
    worst = max(loaded, key=lambda c: c.num_workers * (c.prefetch_factor or 2) * _batch_mb(checked, c))
    batch_mb, prefetch = _batch_mb(checked, worst), worst.prefetch_factor or 2
    need = worst.num_workers * prefetch * batch_mb * settings.ranks
    numbers: dict[str, float | int | str | None] = {
        "workers": worst.num_workers, "prefetch_factor": prefetch, "batch_size": worst.batch_size,
        "batch_mb": batch_mb, "ranks": settings.ranks, "in_flight_mb": need, "free_mb": free_mb,
    }  # fmt: skip
    ranks = f" × {settings.ranks} ranks" if settings.ranks > 1 else ""
    sums = (f"{worst.num_workers} workers × prefetch {prefetch} × {mb(batch_mb)} a batch (batch "
            f"{worst.batch_size}){ranks} = {mb(need)} in flight")  # fmt: skip
    if free_mb is None:
        return PreflightCheck("shm", "info", f"pre-flight /dev/shm: {sums}; /dev/shm is absent", numbers)
    if need > free_mb:
        return PreflightCheck("shm", "warning", (
            f"pre-flight /dev/shm: {sums}, but /dev/shm has {mb(free_mb)} free: workers will die with 'Bus error' "
            "(Docker: --shm-size=8g or --ipc=host; Kubernetes: an emptyDir with medium: Memory)"), numbers)  # fmt: skip
    share = f"{need / free_mb:.0%}" if free_mb > 0 else "all"
    return PreflightCheck("shm", "info", f"pre-flight /dev/shm: {sums}, {share} of {mb(free_mb)} free", numbers)


def _batch_mb(checked: Checked, config: TrialConfig) -> float:
    total = float(checked.batch_bytes or 0)
    if checked.batch_samples:  # the check's batch was a few samples: scale to the configuration's batch size
        total = total / checked.batch_samples * config.batch_size
    return total / MB


def pickle_check(checked: Checked, methods: Sequence[str], top: int) -> PreflightCheck:
    """The dataset's pickle: each spawn/forkserver worker's start-up pays its pickling (in the parent, one worker
    after another) and its unpickling (in the worker); and one worker's whole start-up, measured."""
    dumps, loads = checked.pickle_dumps_s or 0.0, checked.pickle_loads_s or 0.0
    nbytes = checked.pickle_bytes or 0
    serial = top * dumps + loads  # the last worker's start-up waits for every pickle before its own
    numbers: dict[str, float | int | str | None] = {
        "methods": "/".join(methods), "pickle_mb": nbytes / MB, "dumps_s": dumps, "loads_s": loads, "workers": top,
        "pickles_s": serial, "start_method": checked.start_method, "worker_start_s": checked.worker_start_s,
    }  # fmt: skip
    said = (f"pre-flight pickle: the dataset pickles to {_size(nbytes)} for {'/'.join(methods)} workers in "
            f"{_short(dumps)} (unpickling {_short(loads)}): {_short(dumps + loads)} of each worker's start-up, "
            f"{_short(serial)} before the last of {top} workers can start")  # fmt: skip
    if checked.start_method and checked.worker_start_s is not None:
        said += (f"; one {checked.start_method} worker started with it in {_short(checked.worker_start_s)} "
                 "(measured: a new interpreter, its imports, the dataset)")  # fmt: skip
    if serial >= SLOW_PICKLE_S:
        said += "; keep file lists and arrays out of the dataset object (open or map them in worker_init_fn)"
        return PreflightCheck("pickle", "warning", said, numbers)
    return PreflightCheck("pickle", "info", said, numbers)


def _size(nbytes: int) -> str:
    return mb(nbytes / MB) if nbytes >= MB else f"{nbytes / 1024:.0f} KB" if nbytes >= 1024 else f"{nbytes} bytes"


def _short(value: float) -> str:
    return seconds(value) if value >= 0.01 else f"{value * 1000:.1f} ms"


@dataclass(frozen=True)
class Points:
    """One configuration's first batches per worker count (1 or more), with what explains them: the time iter()
    took to start the workers at each count (None where not recorded), and its 0-worker trial's first batch (the
    batch's own work, without any worker) and the share of that work spent on a CPU (None when not measured)."""

    by_workers: dict[int, float]
    alone_s: float | None
    starts: dict[int, float | None] = field(default_factory=dict)
    alone_cpu_share: float | None = None

    def below(self, top: int) -> Points:
        return Points({n: s for n, s in self.by_workers.items() if n < top}, self.alone_s,
                      {n: s for n, s in self.starts.items() if n < top}, self.alone_cpu_share)  # fmt: skip


def first_batch_points(trials: Sequence[TrialResult], method: str | None = None) -> Points:
    """Median time to first batch per worker count, over the configuration measured at the most worker counts (its
    other knobs fixed; of `method` when given): start-up per worker is only comparable with the same batch and
    start method."""
    groups: dict[TrialConfig, dict[int, list[TrialResult]]] = {}
    for t in trials:
        wanted = method is None or t.config.start_method == method
        if t.status == "ok" and t.first_batch_s is not None and t.config.num_workers > 0 and wanted:
            key = replace(t.config, num_workers=0)
            groups.setdefault(key, {}).setdefault(t.config.num_workers, []).append(t)
    if not groups:
        return Points({}, None)
    key, best = max(groups.items(), key=lambda item: len(item[1]))
    zero = [t for t in trials if t.status == "ok" and t.first_batch_s is not None and t.config.num_workers == 0
            and (t.config.batch_size, t.config.pin_memory) == (key.batch_size, key.pin_memory)]  # fmt: skip
    shares = [t.cpu_percent / 100 for t in zero if t.cpu_percent is not None]
    return Points(
        {n: median_of(t.first_batch_s or 0.0 for t in ts) or 0.0 for n, ts in sorted(best.items())},
        median_of(t.first_batch_s or 0.0 for t in zero),
        {n: median_of(t.workers_start_s for t in ts) for n, ts in sorted(best.items())},
        min(1.0, median_of(shares) or 0.0) if shares else None,
    )


@dataclass(frozen=True)
class Fit:
    """first batch(w) = per_worker × w + base + the batch's own work: the parent starts the workers one by one
    (iter() times it: per_worker), then each computes its first batch at once with the others, so the CPU part of
    the batch's work (cpu_share of alone_s) is shared among them once they outnumber the usable CPUs, while its
    waiting part is not; base is what is left (the batch's trip back, a worker's first steps); crowd is what each
    worker past the CPUs adds beyond that (its own first steps' CPU, shared too).
    Without a 0-worker first batch, alone_s is 0: a line, base + per_worker × w."""

    base: float
    alone_s: float
    cpus: int
    per_worker: float
    cpu_share: float = 1.0
    crowd: float = 0.0

    def at(self, workers: int) -> float:
        return self.per_worker * workers + self.base + self.work(workers) + self.crowd * max(0, workers - self.cpus)

    def work(self, workers: int) -> float:
        return self.alone_s * ((1 - self.cpu_share) + self.cpu_share * max(1.0, workers / self.cpus))

    def text(self) -> str:
        if not self.alone_s:
            return f"{seconds(self.base)} + {_short(self.per_worker)} a worker"
        on_cpu = f"{self.cpu_share:.0%} of it on a CPU, " if self.cpu_share < 1 else ""
        base = f" {'+' if self.base >= 0 else '-'} {_short(abs(self.base))} more" if self.base else ""
        crowd = f" + {_short(self.crowd)} a worker past the CPUs" if self.crowd else ""
        return (f"the batch alone {seconds(self.alone_s)}, {on_cpu}shared over {self.cpus} CPUs, + "
                f"{_short(self.per_worker)} to start each worker{base}{crowd}")  # fmt: skip


def fit(points: Points, cpus: int) -> Fit:
    """The start-up per worker as iter() timed it (else by least squares over the rungs), and what the rungs'
    first batches leave beside it and the batch's own work."""
    cpus, below = max(1, cpus), points.by_workers
    if points.alone_s is None:  # no batch alone to start from: a line through the rungs
        xs, ys = list(below), list(below.values())
        mx, my = mean_of(xs) or 0.0, mean_of(ys) or 0.0
        spread = sum((x - mx) ** 2 for x in xs)
        per = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
        return Fit(my - per * mx, 0.0, cpus, per)
    model = Fit(0.0, points.alone_s, cpus, 0.0, 1.0 if points.alone_cpu_share is None else points.alone_cpu_share)
    starts = [(w, points.starts.get(w)) for w in below]
    if all(s is not None for _, s in starts):  # iter() timed the start-up at each rung: only the rest is fitted
        per = sum(s or 0.0 for _, s in starts) / sum(below)
        rest = {w: s - per * w - model.work(w) for w, s in below.items()}
        within = [r for w, r in rest.items() if w <= cpus]
        past = {w - cpus: r for w, r in rest.items() if w > cpus}
        if not within or not past:
            return replace(model, per_worker=per, base=median_of(rest.values()) or 0.0)
        # Past the CPUs, what the rungs leave above the rest, per worker past them (CPU-bound batches left 0.02-0.03
        # s a worker: ×1.7 at 32 workers without it); never below 0, which is the rungs' noise
        base = median_of(within) or 0.0
        crowd = max(0.0, sum((r - base) * x for x, r in past.items()) / sum(x * x for x in past))
        return replace(model, per_worker=per, base=base, crowd=crowd)
    rest = {w: s - model.work(w) for w, s in below.items()}
    # A start-up is never negative: a fit below 0 is the rungs' noise (it printed "+ -0.00 s a worker")
    return replace(model, per_worker=max(0.0, sum(w * r for w, r in rest.items()) / sum(w * w for w in rest)))


def forecast(trials: Sequence[TrialResult], top: int, cpus: int) -> str | None:
    """Mid-sweep: the first batch at the top planned count, from the rungs measured so far (None: too few yet, or
    the top count is measured already)."""
    points = first_batch_points(trials)
    below = points.below(top)
    if len(below.by_workers) < FIT_MIN_COUNTS or top in points.by_workers:
        return None
    model = fit(below, cpus)
    counts = ", ".join(map(str, below.by_workers))
    return (f"pre-flight first batch: from {counts} workers ({model.text()}), the first batch at {top} workers "
            f"should take {seconds(model.at(top))}")  # fmt: skip


def first_batch_checks(trials: Sequence[TrialResult], cpus: int) -> tuple[PreflightCheck, ...]:
    """After the sweep: each worker count's measured first batch against the forecast from the counts below it (at
    least FIT_MIN_COUNTS of them); or one line saying there were too few rungs to forecast from."""
    points = first_batch_points(trials)
    counts = list(points.by_workers)
    checks = []
    for i, n in enumerate(counts):
        if i >= FIT_MIN_COUNTS:
            below = points.below(n)
            checks.append(_against(n, points.by_workers[n], fit(below, cpus), below.by_workers))
    if not checks:
        said = ", ".join(map(str, counts))
        at = f"at {said} workers only" if counts else "at no count of 1 or more workers"
        why = (f"pre-flight first batch: no forecast: it needs {FIT_MIN_COUNTS} worker counts below the one "
               f"forecast, and the first batch was measured {at}")  # fmt: skip
        return (PreflightCheck("first_batch", "info", why, {"measured_counts": said}),)
    return tuple(checks)


def start_checks(trials: Sequence[TrialResult], checked: Checked | None, cpus: int) -> tuple[PreflightCheck, ...]:
    """Spawn or forkserver trials' first batch against the forecast from the check alone, before any trial: the
    workers start at once, each as long as the one timed in the check, sharing the usable CPUs; then the batch's own
    work (the 0-worker first batch), shared the same way; plus the parent pickling the dataset once per worker."""
    if checked is None or checked.start_method is None or checked.worker_start_s is None:
        return ()
    method, start_s = checked.start_method, checked.worker_start_s
    points = first_batch_points(trials, method)
    alone, cpus = points.alone_s or 0.0, max(1, cpus)
    checks = []
    for workers, measured in points.by_workers.items():
        predicted = (start_s + alone) * max(1.0, workers / cpus) + workers * (checked.pickle_dumps_s or 0.0)
        ratio = measured / predicted if predicted > 0 else None
        held = ratio is not None and abs(ratio - 1) <= WITHIN
        times = f"×{ratio:.2f}" if ratio is not None else "no ratio"
        said = (f"pre-flight first batch at {workers} {method} workers: forecast {seconds(predicted)} before any "
                f"trial (one worker's start {seconds(start_s)} and the batch alone {seconds(alone)}, shared over "
                f"{cpus} CPUs), measured {seconds(measured)} ({times}, {'within' if held else 'outside'} "
                f"±{WITHIN:.0%})")  # fmt: skip
        numbers: dict[str, float | int | str | None] = {
            "workers": workers, "start_method": method, "predicted_s": predicted, "measured_s": measured,
            "ratio": ratio, "worker_start_s": start_s, "alone_s": points.alone_s, "cpus": cpus,
        }  # fmt: skip
        checks.append(PreflightCheck("first_batch", "info" if held else "warning", said, numbers))
    return tuple(checks)


def _against(workers: int, measured: float, model: Fit, below: dict[int, float]) -> PreflightCheck:
    predicted = model.at(workers)
    ratio = measured / predicted if predicted > 0 else None
    held = ratio is not None and abs(ratio - 1) <= WITHIN
    counts = ", ".join(map(str, below))
    verdict = f"within ±{WITHIN:.0%}" if held else f"outside ±{WITHIN:.0%}: start-up does not follow the rungs below"
    times = f"×{ratio:.2f}" if ratio is not None else "no ratio: the forecast is not positive"
    said = (f"pre-flight first batch at {workers} workers: forecast {seconds(predicted)} from {counts} "
            f"workers ({model.text()}), measured {seconds(measured)} ({times}, {verdict})")  # fmt: skip
    numbers: dict[str, float | int | str | None] = {
        "workers": workers, "predicted_s": predicted, "measured_s": measured, "ratio": ratio, "fit_counts": counts,
        "alone_s": model.alone_s or None, "cpus": model.cpus, "base_s": model.base, "per_worker_s": model.per_worker,
        "cpu_share": model.cpu_share if model.alone_s else None, "crowd_s": model.crowd,
    }  # fmt: skip
    return PreflightCheck("first_batch", "info" if held else "warning", said, numbers)
