"""Trials a sweep takes from the tracking store instead of training them: FINISHED trial runs, in any
experiment, whose key (:mod:`sweep.spec.trial_key`) is the key of a trial the sweep would run.

A reused trial still goes through Ray Tune (its trainable reports the source run's metrics at once and
trains nothing) and gets its own child run under the sweep's parent, tagged with the run it comes from
(:attr:`~results.record.Tag.REUSED_FROM`) and pointing at that run's checkpoint and kept model, so the
MLflow UI, the summary, every report, ``sweep export`` and ``sweep evaluate`` see it as a member of the
sweep. Sweeps with sampled axes or PBT draw their trials as they run, so they reuse nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from results.reader import all_pages, run_identity, trial_tags
from results.record import TRIAL_FILTER, Tag, TrialIdentity
from sweep.spec.sweep_spec import SweepSpec
from sweep.spec.trial_key import TrialKey, changed_knobs, trial_key
from trainers.metrics import Metric

COPIED_TAGS = (Tag.CHECKPOINT, Tag.CHECKPOINT_STEP, Tag.MODEL, Tag.MODEL_URI)
"""What a reused trial's run takes from its source's tags: where its encoder is."""


@dataclass(frozen=True)
class Source:
    """A FINISHED trial run that a trial of this sweep can stand on."""

    run_id: str
    sweep: str
    metrics: Mapping[str, float]
    tags: Mapping[str, str]
    other_code: bool = False
    """Its key differs in the training code only (taken with ``--reuse-other-code``)."""

    def run_tags(self) -> dict[str, str]:
        """The tags a reused trial's own run gets from it."""
        marks = {Tag.REUSED_OTHER_CODE: "true"} if self.other_code else {}
        return {Tag.REUSED_FROM: self.run_id, Tag.REUSED_SWEEP: self.sweep, **marks,
                **{tag: self.tags[tag] for tag in COPIED_TAGS if tag in self.tags}}


@dataclass(frozen=True)
class Reuse:
    """For each trial of the spec (its index in :attr:`SweepSpec.trials`): the run it is taken from, or,
    for a trial trained afresh, why the nearest finished run of the same row and seed does not do."""

    sources: Mapping[int, Source] = field(default_factory=dict)
    misses: Mapping[int, str] = field(default_factory=dict)
    trained: Mapping[int, str] = field(default_factory=dict)
    """Each trial the sweep trains (no source) -> its key, which it claims while it runs (:mod:`sweep.run.claims`)."""
    kept: frozenset[int] = frozenset()
    """Trials that finished in this sweep before (a resumed sweep keeps them): neither reused nor trained."""

    def metrics(self) -> dict[int, dict[str, float]]:
        """What each reused trial's trainable reports instead of training."""
        return {index: dict(source.metrics) for index, source in self.sources.items()}

    def describe(self, spec: SweepSpec) -> list[str]:
        """Lines for ``sweep plan`` and the start of a sweep."""
        if not self.sources and not self.misses:
            return []
        sweeps: dict[str, int] = {}
        for source in self.sources.values():
            sweeps[source.sweep] = sweeps.get(source.sweep, 0) + 1
        lines = [f"reuse: {len(self.sources)} of {len(spec.trials) - len(self.kept)} trials finished before, "
                 "taken from the store"
                 + (f" ({', '.join(f'{name}: {n}' for name, n in sweeps.items())})" if sweeps else "")
                 + ("; --no-reuse trains them" if self.sources else "")]
        for index, source in sorted(self.sources.items()):
            if source.other_code:
                point = spec.trials[index].point
                lines.append(f"  reused from other training code: {point.row or 'trial'} seed {point.seed}: "
                             f"run {source.run_id} of sweep {source.sweep}")
        for index, reason in sorted(self.misses.items()):
            point = spec.trials[index].point
            lines.append(f"  not reused: {point.row or 'trial'} seed {point.seed}: {reason}")
        return lines


def finished_runs(client) -> list:
    """Every FINISHED trial run of the store that carries a key and ran to its final test."""
    experiments = all_pages(lambda token: client.search_experiments(max_results=1000, page_token=token))
    ids = [experiment.experiment_id for experiment in experiments]
    runs = all_pages(lambda token: client.search_runs(
        ids, filter_string=f"{TRIAL_FILTER} and attributes.status = 'FINISHED'", max_results=1000,
        page_token=token)) if ids else []
    return [run for run in runs if (tags := trial_tags(run)).trial_key is not None
            and Metric.is_final(run.data.metrics) and not tags.stopped_by_scheduler]


def source_of(run, other_code: bool = False) -> Source:
    """The run a trial reused from ``run`` stands on: ``run`` itself, or the run it was reused from."""
    tags = trial_tags(run)
    if tags.reused_from is not None:  # itself reused: point at the run that trained it
        return Source(tags.reused_from, tags.reused_sweep, dict(run.data.metrics), run.data.tags,
                      other_code or tags.reused_other_code)
    return Source(run.info.run_id, tags.sweep_name or "", dict(run.data.metrics), run.data.tags, other_code)


def plan_reuse(spec: SweepSpec, client, parent_run_id: str | None = None, other_code: bool = False) -> Reuse:
    """What each trial of ``spec`` takes from the store; with ``other_code``, also runs whose key differs in
    the training code only. The trials whose key a finished run under ``parent_run_id`` (this sweep's own)
    has are kept by its resume: they take nothing from the store."""
    if not spec.trials_known:
        return Reuse()
    stored = [(run, trial_tags(run)) for run in finished_runs(client)]
    own = {tags.trial_key for _, tags in stored if parent_run_id is not None and tags.parent_run_id == parent_run_id}
    others = [(run, tags) for run, tags in stored if tags.parent_run_id != parent_run_id]
    by_key: dict[str | None, Any] = {}
    by_key_without_code: dict[str | None, Any] = {}
    for run, tags in sorted(others, key=lambda pair: pair[0].info.start_time or 0):
        by_key.setdefault(tags.trial_key, run)  # the earliest: the one that trained
        by_key_without_code.setdefault(tags.trial_key_without_code, run)
    by_point: dict[tuple[str, int, str], list[tuple[Any, TrialIdentity]]] = {}  # (row, seed, method) -> runs
    for run, _ in others:
        identity = run_identity(run)
        by_point.setdefault((identity.row, identity.seed, identity.method), []).append((run, identity))
    sources, misses, trained, kept = {}, {}, {}, set()
    for index, trial in enumerate(spec.trials):
        key = trial_key(trial.config)
        if key.key in own:
            kept.add(index)
            continue
        if key.key in by_key:
            sources[index] = source_of(by_key[key.key])
            continue
        if other_code and key.key_without_code in by_key_without_code:
            sources[index] = source_of(by_key_without_code[key.key_without_code], other_code=True)
            continue
        trained[index] = key.key
        near = by_point.get((trial.point.row, trial.point.seed, trial.config["method"]), [])
        if reason := _nearest_miss(key, trial, near):
            misses[index] = reason
    return Reuse(sources, misses, trained, frozenset(kept))


def _nearest_miss(key: TrialKey, trial, near: list[tuple[Any, TrialIdentity]]) -> str | None:
    """Why the finished runs of the same row, method and seed (``near``, with their identities) are not this
    trial (the parts that differ, and the knobs among them), or None when there are none."""
    if not near:
        return None
    differing = [key.differing(trial_tags(run).trial_key_parts) for run, _ in near]
    nearest = min(range(len(near)), key=lambda at: len(differing[at]))
    (run, identity), parts = near[nearest], differing[nearest]
    said = [f"{part} differ{'s' if part not in ('knobs', 'models', 'libraries') else ''}" for part in parts]
    if "knobs" in parts:
        said[parts.index("knobs")] = f"knobs differ ({', '.join(changed_knobs(identity.knobs, trial.config))})"
    return f"{', '.join(said)} from run {run.info.run_id} of sweep {trial_tags(run).sweep_name or '?'}"


def reuse_lines(spec: SweepSpec, tracking_uri: str, other_code: bool = False) -> list[str]:
    """What ``sweep run`` would reuse from the store at ``tracking_uri`` (nothing said when it does not exist)."""
    from results.reader import NoStore, read_client

    try:
        client = read_client(tracking_uri)
    except NoStore:
        return []
    if not spec.trials_known:
        return ["reuse: none (sampled axes and PBT draw their trials as they run)"]
    lines = plan_reuse(spec, client, other_code=other_code).describe(spec)
    return lines or [f"reuse: none of the {len(spec.trials)} trials is in the store"]
