"""A sweep's conclusion: from its finished trials to the SweepResult every face shows (reasons, knee,
recommendation, USL fit). Computed once, at the end, because reasons compare each trial with the best of the sweep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from loadertop.core.engine.nodes.node_rows import pacing
from loadertop.core.engine.nodes.rank_notes import ranks_note, with_notes
from loadertop.core.engine.verdict.analysis import analyze, rule_notes
from loadertop.core.engine.verdict.band import finished, merge_repeats
from loadertop.core.engine.verdict.knee import worker_curve
from loadertop.core.engine.verdict.reasons import annotate, has_cuda
from loadertop.core.engine.verdict.rerun import Evidence, fold_rerun
from loadertop.core.engine.verdict.snippet import UserArgs, graph_snippet, snippet
from loadertop.core.engine.verdict.stage_reason import cite_stages
from loadertop.core.engine.verdict.stops import last_stop
from loadertop.core.engine.verdict.usl import fit_curve
from loadertop.core.model.config import Settings
from loadertop.core.model.protocol import Checked
from loadertop.core.model.results import Ceiling, MachineInfo, Recommendation, SearchStep, SweepResult, TrialResult
from loadertop.core.model.stages import StagesReport


@dataclass(frozen=True)
class Conclusion:
    result: SweepResult  # run_dir, interrupted and wall_s are the driver's to fill in
    notes: tuple[str, ...]  # what the analysis wants said (knee rules, the USL fit)


@dataclass(frozen=True)
class DatasetFacts:
    """What the runner's check found about the dataset that shapes the conclusion (model/protocol.py Checked)."""

    iterable: bool = False  # an IterableDataset: its per-rank snippet gets no DistributedSampler
    loader_args: tuple[str, ...] = ()  # the DataLoader arguments the factory returned, as "name=text"
    graph: tuple[str, ...] = ()  # a torchdata.nodes graph's swept nodes: the snippet is their constructor lines
    loader: str = "DataLoader"  # the class the trials built (a factory's StatefulDataLoader: the snippet's too)

    @classmethod
    def of(cls, checked: Checked) -> DatasetFacts:
        return cls(checked.iterable, checked.extra_args, checked.graph, checked.loader)


def conclude(
    trials: list[TrialResult],
    settings: Settings,
    machine: MachineInfo,
    *,
    ceilings: tuple[Ceiling, ...] = (),
    search_trace: tuple[SearchStep, ...] = (),
    dataset: DatasetFacts = DatasetFacts(),
    rerun_of: SweepResult | None = None,
    stages: StagesReport | None = None,
) -> Conclusion:
    """The sweep's result from its trials. With `rerun_of` (a row rerun) the trials replace that result's rows of
    the same configurations and the whole table is judged again (engine/verdict/rerun.py). `stages`: where a sample's
    time goes, measured after the trials (kept in the result; a CPU-bound recommendation's reason may cite it)."""
    evidence = Evidence(tuple(trials), settings, tuple(ceilings), tuple(search_trace), dataset.iterable)
    if rerun_of is not None:
        evidence = fold_rerun(rerun_of, evidence)
    conclusion = _judge(evidence, machine, UserArgs(_pairs(dataset.loader_args), loader=dataset.loader))
    conclusion = _with_stages(conclusion, stages, machine) if stages is not None else conclusion
    return _as_graph(conclusion, dataset.graph, machine) if dataset.graph else conclusion


def _with_stages(conclusion: Conclusion, stages: StagesReport, machine: MachineInfo) -> Conclusion:
    result = dataclasses.replace(conclusion.result, stages=stages)
    rec = result.recommendation
    merged = merge_repeats(finished(list(result.trials)))  # the recommendation is judged on its runs together
    chosen = next((t for t in merged if rec is not None and t.config == rec.config), None)
    if rec is not None and chosen is not None:
        rec = dataclasses.replace(rec, reason=cite_stages(rec.reason, chosen, machine, stages))
        result = dataclasses.replace(result, recommendation=rec)
    return dataclasses.replace(conclusion, result=result)


def _as_graph(conclusion: Conclusion, graph: tuple[str, ...], machine: MachineInfo) -> Conclusion:
    """A torchdata.nodes graph's result: its swept nodes kept, and the snippet is their constructor lines."""
    result = dataclasses.replace(conclusion.result, graph=graph)
    rec = result.recommendation
    if rec is not None:
        swept = bool(result.settings.worker_methods)  # --worker-method given: the mappers took the config's
        pasted = graph_snippet(graph, rec.config, machine.default_start_method, swept)
        result = dataclasses.replace(result, recommendation=dataclasses.replace(rec, snippet=pasted))
    return dataclasses.replace(conclusion, result=result)


def _pairs(loader_args: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple((a.partition("=")[0], a.partition("=")[2]) for a in loader_args)


def _judge(evidence: Evidence, machine: MachineInfo, user: UserArgs) -> Conclusion:
    settings = evidence.settings
    annotated = [
        with_notes(t, settings.ranks, machine.usable_cpus)
        for t in annotate(evidence.trials, machine, settings.tolerance, evidence.ceilings, bool(settings.consumer))
    ]
    knee, recommendation = analyze(annotated, settings, machine, evidence.ceilings, last_stop(evidence.search_trace))
    recommendation = _per_rank(recommendation, annotated, settings, machine, evidence.iterable, user)
    usl = fit_curve(worker_curve(annotated, settings.tolerance))
    result = SweepResult(
        machine=machine,
        settings=settings,
        trials=tuple(annotated),
        knee=knee,
        recommendation=recommendation,
        ceilings=evidence.ceilings,
        usl=usl,
        search_trace=evidence.search_trace,
        iterable=evidence.iterable,
        loader=user.loader,
    )
    return Conclusion(result, tuple(rule_notes(knee, usl, settings.tolerance)))


def _per_rank(
    rec: Recommendation | None,
    trials: list[TrialResult],
    settings: Settings,
    machine: MachineInfo,
    iterable: bool,
    user: UserArgs,
) -> Recommendation | None:
    """The recommended trial's data warnings belong in its reason; with --ranks the recommendation is per rank: say
    what that means for the node, and shard the snippet as the measurement did. The snippet keeps what the
    dataset factory passes the DataLoader (shuffle, drop_last, collate_fn, ...)."""
    if rec is None:
        return rec
    chosen = [t for t in trials if t.index == rec.trial_index]
    warnings = [w for t in chosen for w in t.warnings]
    paced = [p for p in (pacing(t) for t in chosen) if p]  # many nodes: the rank that paces the job, and its cost
    if warnings or paced:
        rec = dataclasses.replace(rec, reason="; ".join([rec.reason, *warnings, *paced]))
    pasted = rec.config if has_cuda(machine) else dataclasses.replace(rec.config, pin_memory=False)  # as analyze
    if settings.ranks < 2:
        return dataclasses.replace(rec, snippet=snippet(pasted, machine.default_start_method, user=user))
    extra = () if iterable else ("sampler=DistributedSampler(dataset)",)
    return dataclasses.replace(
        rec,
        reason=f"{rec.reason}; {ranks_note(rec.config.num_workers, settings.ranks, machine.usable_cpus)}",
        snippet=snippet(pasted, machine.default_start_method, extra, user=user),
    )
