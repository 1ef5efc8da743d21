"""A resumed sweep against the code that resumes it: would each trial it has run, or begun, get the settings it
ran with?

A sweep's Ray folder is named by its spec's hash (the spec file, ``--set`` and the budget), not by the code, so
``sweep resume`` after a pull or an upgrade restores the same experiment. Each trial that is not finished then
resolves its config again, from this code's defaults: where a default changed, it would go on from a checkpoint
trained under the old one, beside finished trials that keep the old one. Its tables would mix two settings
without a word. So a resume compares each trial run of the sweep (its stored
:class:`~results.record.TrialIdentity` and key parts, :mod:`sweep.spec.trial_key`) with the key this code gives
the same row, seed and axes:

- knobs, models or data that differ refuse the resume (exit 2, before Ray starts), naming each trial and knob;
- other training code, other library versions, or another precision that ``auto`` resolves to on this machine
  are said on the console, and the resume goes on: they change no setting of the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from results.names import UsageError
from results.reader import NoStore, child_runs, read_client, run_identity, trial_tags, variant_parent
from results.record import TrialIdentity, axes_text, plain
from results.schema import FAILED, FINISHED
from sweep.spec.sweep_spec import POINT, SweepSpec
from sweep.spec.trial_key import changed_knobs, trial_key

REFUSED_PARTS = ("knobs", "models", "data")
"""The key's parts that are settings: a resume that would change one is refused."""


@dataclass(frozen=True)
class Drift:
    """One trial run whose key differs from the key this code gives its row, seed and axes."""

    run_id: str
    label: str  # its row, seed and axes, as the console names a trial
    commit: str  # the commit it ran (empty outside a git checkout)
    parts: tuple[str, ...]  # the key's parts that differ (sweep.spec.trial_key.PARTS)
    ran: Mapping[str, str]  # its stored key parts
    now: Mapping[str, str]  # this code's
    knobs: Mapping[str, tuple[Any, Any]]  # each counted knob that differs: (ran, now)

    @property
    def refused(self) -> bool:
        return any(part in REFUSED_PARTS for part in self.parts)

    def describe(self) -> str:
        said = [f"{knob} {ran!r} -> {now!r}" for knob, (ran, now) in self.knobs.items()]
        said += [f"{part} differ{'' if part in ('models', 'libraries') else 's'}"
                 for part in self.parts if part in REFUSED_PARTS and part != "knobs"]
        return f"{self.label}: {'; '.join(said)}"


ConfigNow = Callable[[TrialIdentity], Mapping[str, Any] | None]
"""What this code resolves for a recorded trial (None: no trial of the spec is it)."""


def sweep_config(spec: SweepSpec) -> ConfigNow:
    """What a sweep's worker would run for a recorded trial (:meth:`SweepSpec.config_of`): the config of the
    spec's trial of the same row, seed and grid point, with the values Tune chose for it (sampled axes, PBT
    mutations) as the run records them."""
    by_point: dict[tuple[str, int], list[int]] = {}
    for index, trial in enumerate(spec.trials):
        by_point.setdefault((trial.point.row, trial.point.seed), []).append(index)
    chosen = spec.tune_chosen()

    def config_now(identity: TrialIdentity) -> Mapping[str, Any] | None:
        grid = plain(dict(identity.grid_point))
        index = next((index for index in by_point.get((identity.row, identity.seed), [])
                      if all(plain(spec.trials[index].point.axes.get(k)) == v for k, v in grid.items())), None)
        if index is None:
            return None
        picked = {knob: identity.knobs[knob] for knob in chosen if knob in identity.knobs}
        return spec.config_of({POINT: index, **identity.sampled, **picked})

    return config_now


def settings_drift(runs: Iterable[Any], config_now: ConfigNow) -> list[Drift]:
    """The trial runs (MLflow runs; failed ones and runs older than trial keys left out) whose key differs from
    the key of what this code resolves for them (``config_now``)."""
    found = []
    for run in runs:
        tags = trial_tags(run)
        if run.info.status == FAILED or not tags.trial_key_parts:
            continue
        identity = run_identity(run)
        now = config_now(identity)
        if now is None:
            continue
        key = trial_key(now)
        parts = tuple(key.differing(tags.trial_key_parts))
        if not parts:
            continue
        axes = axes_text(identity.axes)
        label = f"{identity.row or 'trial'} seed {identity.seed}{f' ({axes})' if axes else ''}"
        knobs = changed_knobs(identity.knobs, now) if "knobs" in parts else {}
        found.append(Drift(run.info.run_id, label, tags.git_commit, parts, tags.trial_key_parts, key.parts, knobs))
    return sorted(found, key=lambda drift: drift.label)


def resume_refusal(spec: SweepSpec, drifts: list[Drift]) -> str | None:
    """Why ``spec``'s sweep cannot be resumed with this code (its trials whose settings would change), or None."""
    refused = [drift for drift in drifts if drift.refused]
    if not refused:
        return None
    commits = sorted({drift.commit for drift in refused if drift.commit})
    ran = f" (commit {', '.join(commits)})" if commits else ""
    parts = {part for drift in refused for part in drift.parts}
    ways = [f"the code it ran with (git checkout {commits[-1]})" if commits else "the code it ran with"] \
        if "knobs" in parts else []
    ways += [f"the {' and '.join(part for part in ('models', 'data') if part in parts)} it ran with"] \
        if parts & {"models", "data"} else []
    lines = [f"sweep {spec.name!r} (spec hash {spec.spec_hash}) cannot be resumed with this code: it gives "
             f"{len(refused)} of the trials the sweep has run or begun other settings than they ran with{ran}, "
             "and the sweep's results would mix both:"]
    lines += [f"  {drift.describe()}" for drift in refused]
    lines.append(f"finish it with {' and '.join(ways)}, or run it afresh with another --tracking-uri and --storage")
    return "\n".join(lines)


def resume_notes(drifts: list[Drift]) -> list[str]:
    """What the console says of the trials that resume under other code, libraries or precision: one line for
    each part, with what they ran and what they get now."""
    lines = []
    for part, what in (("code", "training code"), ("libraries", "libraries"), ("precision", "precision")):
        differing = [drift for drift in drifts if part in drift.parts and not drift.refused]
        if not differing:
            continue
        if part == "code":
            commits = sorted({drift.commit for drift in differing if drift.commit})
            change = f"{'commit ' + ', '.join(commits) if commits else 'another trainers/'} -> this checkout"
        else:
            change = "; ".join(sorted({f"{drift.ran.get(part, '?')} -> {drift.now[part]}" for drift in differing}))
        lines.append(f"resuming with other {what} than {len(differing)} of this sweep's trials ran ({change}): "
                     "their knobs, models and data are the same")
    return lines


def check_resume(spec: SweepSpec, runs: Iterable[Any], config_now: ConfigNow | None = None) -> list[str]:
    """Refuse to resume ``spec``'s sweep (:class:`UsageError`) when this code would change a setting of one of
    its trial ``runs`` (:func:`settings_drift`; by default what its workers would run, :func:`sweep_config`);
    else what the console says of the other differences."""
    drifts = settings_drift(runs, config_now or sweep_config(spec))
    if refusal := resume_refusal(spec, drifts):
        raise UsageError(refusal)
    return resume_notes(drifts)


def stored_runs(spec: SweepSpec, tracking_uri: str) -> list:
    """The trial runs of ``spec``'s variant in the store at ``tracking_uri``, read without writing (none without a
    store, an experiment or the variant's parent run)."""
    try:
        client = read_client(tracking_uri)
    except NoStore:
        return []
    experiment = client.get_experiment_by_name(spec.name)
    parent = variant_parent(client, experiment.experiment_id, spec.spec_hash) if experiment else None
    return child_runs(client, experiment.experiment_id, parent.info.run_id) if parent else []


def resume_lines(spec: SweepSpec, tracking_uri: str) -> list[str]:
    """What ``sweep plan`` says of a variant whose trial runs the store at ``tracking_uri`` holds already: how many,
    and what its resume would say; a resume that would be refused is refused here too (:func:`check_resume`)."""
    runs = stored_runs(spec, tracking_uri)
    if not runs:
        return []
    finished = sum(run.info.status == FINISHED for run in runs)
    return [f"resume: the store holds {len(runs)} trial runs of this variant ({finished} finished); a run with "
            "its --storage continues it", *check_resume(spec, runs)]
