"""A paper as one command: ``python -m sweep paper NAME`` runs every spec of a campaign that can run here,
each distinct trial once.

A campaign is a file ``search_spaces/campaigns/NAME.yaml`` naming its specs, or every shipped spec whose
``tags.paper`` is NAME (``sg-bert``, ``consert``, ``sct``). It runs in two steps on one Ray:

1. **Training**: the distinct trials of the specs whose trials are known before they run (no sampled
   axes, no scheduler; :func:`sweep.run.reuse.reusable`), each trial key once, go to one Ray Tune run, the
   campaign's own sweep ``paper-NAME`` (:func:`campaign_spec`), so no spec waits for another and the
   cluster stays full. Trials finished before, by this campaign or any sweep, are reused as in
   ``sweep run`` (:mod:`sweep.run.reuse`).
2. **Each spec**: every spec then runs as ``sweep run`` would, with its own MLflow experiment, parent run
   and summary; its trials are all in the store now, so each is a reused child run of its spec's parent,
   and the specs' tables and reports read them as members of the spec's sweep. Specs left out of step 1
   (sampled axes, ASHA or PBT) train here.

Specs that cannot run here (no hub model, no data) are listed with the reason and left out. Running the
command again continues an interrupted campaign: Ray restores step 1 and each spec's sweep.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from results.record import DEFAULT_TRACKING_URI
from sweep.run.reuse import Reuse, reusable
from sweep.spec.budget import BUDGETS
from sweep.spec.ledger import SpecLedger, load_ledger
from sweep.spec.options import SweepOptions
from sweep.spec.rows import Row
from sweep.spec.source import read_spec_yaml
from sweep.spec.sweep_spec import SpecError, SweepSpec, Trial, TrialPoint, load_spec, row_method
from sweep.spec.trial_key import trial_key
from trainers.data.sources import is_missing_file

SEARCH_SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
CAMPAIGNS = SEARCH_SPACES / "campaigns"
CAMPAIGN_PREFIX = "paper-"
"""The campaign's own sweep (step 1) is named ``paper-NAME``."""


@dataclass(frozen=True)
class Member:
    """A spec of the campaign: loaded, or why it cannot run here."""

    path: Path
    spec: SweepSpec | None = None
    problem: str | None = None
    layout: SweepSpec | None = None
    """A spec that cannot run here, loaded without asking this machine: its models and files (None when it
    is invalid as well)."""

    @property
    def planned(self) -> SweepSpec | None:
        """The spec as it would run: loaded, or its layout."""
        return self.spec or self.layout

    @property
    def trained_together(self) -> bool:
        """Whether its trials go to the campaign's one Tune run: known before they run (no sampled axes, no
        searcher, no adaptive seeds) and run to the end (no scheduler)."""
        return (self.spec is not None and reusable(self.spec) and not self.spec.scheduler
                and self.spec.search is None and self.spec.seed_rounds is None)


@dataclass(frozen=True)
class Campaign:
    name: str
    description: str
    source: Path
    """The campaign file, or the folder of the specs whose ``tags.paper`` names it."""
    members: tuple[Member, ...]

    @property
    def runnable(self) -> list[Member]:
        return [member for member in self.members if member.spec is not None]

    @property
    def sweep_name(self) -> str:
        return CAMPAIGN_PREFIX + self.name


def campaign_names() -> list[str]:
    """Every campaign: the files under ``search_spaces/campaigns`` and the papers the specs are tagged with."""
    papers = {spec_paper(path) for path in SEARCH_SPACES.glob("*.yaml")} - {None, "none"}
    return sorted(papers | {path.stem for path in CAMPAIGNS.glob("*.yaml")})


def spec_paper(path: Path) -> str | None:
    raw = read_spec_yaml(path)
    return (raw.get("tags") or {}).get("paper") if isinstance(raw, dict) else None


def campaign_name(name: str) -> str:
    """A campaign's name: ``name`` itself, or the stem of a campaign file's path."""
    return Path(name).stem if name.endswith((".yaml", ".yml")) else name


def campaign_specs(name: str) -> tuple[Path, str, list[Path]]:
    """The campaign's source, description and spec files, in their order (``name``: a campaign, or the path
    of a campaign file)."""
    file = Path(name) if name.endswith((".yaml", ".yml")) else CAMPAIGNS / f"{name}.yaml"
    if file.exists():
        raw = read_spec_yaml(file)
        specs = raw.get("specs") if isinstance(raw, dict) else None
        if specs is None and isinstance(raw, dict) and "method" in raw:
            raise SpecError([f"{file}: a sweep spec, not a campaign (a campaign file lists `specs:`): run it with "
                             f"`python -m sweep run {file}`"])
        if not isinstance(specs, list) or not specs or not all(isinstance(s, str) for s in specs):
            raise SpecError([f"{file}: specs: expected a list of spec files (relative to {file.parent}), "
                             f"got {specs!r}"])
        missing = [s for s in specs if not (file.parent / s).is_file()]
        if missing:
            raise SpecError([f"{file}: specs: no such spec file: {', '.join(missing)}"])
        return file, str(raw.get("description", "")), [(file.parent / s).resolve() for s in specs]
    paths = [path for path in sorted(SEARCH_SPACES.glob("*.yaml")) if spec_paper(path) == name]
    if not paths:
        raise SpecError([f"sweep paper: unknown campaign {name!r} (campaigns: {', '.join(campaign_names())})"])
    return SEARCH_SPACES, f"every spec of {name}", paths


def load_campaign(name: str, budget: str | None = None, address: str | None = None) -> Campaign:
    """The campaign's specs, each loaded with the budget, or the reason it cannot run on this machine."""
    source, description, paths = campaign_specs(name)
    members = []
    for path in paths:
        try:
            spec = load_spec(path, budget=BUDGETS[budget] if budget else None, address=address)
        except SpecError as error:
            first = str(error.problems[0]).removeprefix(f"{path}: ")
            more = f" (and {len(error.problems) - 1} more: `python -m sweep plan {_shown(path)}`)" \
                if len(error.problems) > 1 else ""
            members.append(Member(path, problem=first + more, layout=_layout(path, budget)))
            continue
        if spec.glue is not None:
            members.append(Member(path, problem=f"GLUE fine-tuning: `python -m sweep glue {_shown(path)}`"))
        else:
            members.append(Member(path, spec))
    return Campaign(campaign_name(name), description, source, tuple(members))


def _layout(path: Path, budget: str | None) -> SweepSpec | None:
    try:
        return load_spec(path, budget=BUDGETS[budget] if budget else None, check_environment=False)
    except SpecError:
        return None


def spec_models(spec: SweepSpec, ledger: Mapping[str, SpecLedger]) -> str:
    """The models the spec's trials load (the ``model`` knob, resolved: not the paper's label), and the
    paper's where the settings ledger says it is another."""
    ours = list(dict.fromkeys(str(trial.config["model"]) for trial in spec.trials))
    record = ledger.get(spec.path.name)
    papers = dict.fromkeys(str(settings["model"].value) for settings in (record.settings.values() if record else ())
                           if "model" in settings)
    theirs = [model for model in papers if model not in ours]
    return ", ".join(ours) + (f" (paper: {', '.join(theirs)})" if theirs else "")


def missing_files(spec: SweepSpec) -> list[str]:
    """The files the spec's trials name that are not here (``bt_file``; a ``train_corpus`` that is no named
    corpus), each once, with its knob."""
    missing: dict[str, str] = {}
    for trial in spec.trials:
        bt_file, corpus = trial.config.get("bt_file"), trial.config.get("train_corpus")
        if bt_file and not Path(bt_file).is_file():
            missing.setdefault(str(bt_file), "bt_file")
        if corpus and is_missing_file(corpus):
            missing.setdefault(str(corpus), "train_corpus")
    return [f"{name} ({knob})" for name, knob in missing.items()]


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(SEARCH_SPACES.parent))
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Sharing:
    """Each spec's trials, and which of them an earlier spec of the campaign already runs (same key)."""

    keys: Mapping[str, list[str]]
    """Spec name -> the trial key of each of its trials, in :attr:`SweepSpec.trials` order."""

    def distinct(self) -> int:
        return len({key for keys in self.keys.values() for key in keys})

    def new_in(self) -> dict[str, int]:
        """Spec name -> its trials that no earlier spec runs."""
        seen: set[str] = set()
        new = {}
        for name, keys in self.keys.items():
            new[name] = len(set(keys) - seen)
            seen.update(keys)
        return new


def sharing(members: Sequence[Member]) -> Sharing:
    return Sharing({m.spec.name: [trial_key(t.config).key for t in m.spec.trials]
                    for m in members if m.trained_together})


def campaign_spec(campaign: Campaign, shared: Sharing | None = None) -> SweepSpec:
    """One sweep of the distinct trials of the campaign's specs that are trained together: a row per spec
    row (``SPEC: ROW``, its method kept), each trial key once, in the specs' order. Each trial keeps the
    config its own spec resolved; only the knobs Tune would choose could change it, and these specs have none.
    ``shared``: the specs' trial keys, when the caller has them."""
    together = [member.spec for member in campaign.runnable if member.trained_together]
    if not together:
        raise SpecError([f"{campaign.source}: no spec of campaign {campaign.name!r} can be trained together here"])
    keys = (shared or sharing(campaign.members)).keys
    first = together[0]
    rows: list[Row] = []
    trials: list[Trial] = []
    seen: set[str] = set()
    for spec in together:
        for row in spec.rows:
            name = f"{spec.name}: {row.name}"
            rows.append(Row(name, {"method": row_method(spec, row).name}))
        for trial, key in zip(spec.trials, keys[spec.name]):
            if key not in seen:
                seen.add(key)
                point = trial.point
                trials.append(Trial(TrialPoint(f"{spec.name}: {point.row}", point.seed, point.axes), trial.config))
    digest = hashlib.sha256(json.dumps([[s.name, s.spec_hash] for s in together]).encode()).hexdigest()[:16]
    return dataclasses.replace(
        first,
        path=campaign.source, name=campaign.sweep_name, tags={"paper": campaign.name, "table": "campaign"},
        description=f"campaign {campaign.name}: the distinct trials of {', '.join(s.name for s in together)}",
        base={}, rows=tuple(rows), seeds=tuple(sorted({seed for spec in together for seed in spec.seeds})),
        grid={}, sample={}, num_samples=1, scheduler=None, search=None, seed_rounds=None, symmetric=None,
        reference=None,
        reference_differences={}, evaluations=(),
        max_concurrent_trials=max(spec.max_concurrent_trials or 0 for spec in together),
        max_failures=max(spec.max_failures for spec in together),
        # Every trial's encoder stays: each spec of the campaign keeps (or deletes) its own when it runs.
        keep_models="all", log_models=False, spec_hash=digest, trials=tuple(trials),
    )


def plan_lines(campaign: Campaign, budget: str | None = None, reused: Callable[[SweepSpec], Reuse] | None = None,
               estimate: Callable[[SweepSpec], list[str]] | None = None) -> list[str]:
    """What ``sweep paper NAME --plan`` prints: each spec's trials, what it shares with the specs before
    it, the model it loads, the distinct total, the files that are missing, what ``budget`` caps, and
    (``reused``: what the store holds of a spec, other training code's runs included) what is reused.
    ``estimate``: the lines of ``--estimate`` for a spec (:func:`sweep.commands.estimate.estimate`), asked of the
    trials to train: the campaign's own sweep without the reused ones, then each spec trained on its own."""
    lines = [f"campaign {campaign.name}: {campaign.description}".rstrip(": ")]
    lines.append(f"budget {budget}: caps {BUDGETS[budget].caps()}" if budget else
                 "budget: none (each spec's own steps, evaluation pairs and seeds; --budget smoke caps them)")
    shared = sharing(campaign.members)
    new = shared.new_in()
    ledger = load_ledger()
    width = max(len(member.path.stem) for member in campaign.members) + 2
    lines.append(f"{'spec':<{width}}{'trials':>7}{'new':>6}  model; note")
    for member in campaign.members:
        model = spec_models(member.planned, ledger) if member.planned is not None else "-"
        if member.spec is None:
            lines.append(f"{member.path.stem:<{width}}{'-':>7}{'-':>6}  {model}; cannot run here: {member.problem}")
            continue
        spec = member.spec
        if member.trained_together:
            note = "" if new[spec.name] == spec.trials_to_run else \
                f"{spec.trials_to_run - new[spec.name]} trained by an earlier spec"
        else:
            note = "trained on its own (sampled axes, a searcher, adaptive seeds or a scheduler decide its trials)"
        count = new.get(spec.name, spec.trials_to_run)
        lines.append(f"{spec.name:<{width}}{spec.trials_to_run:>7}{count:>6}  {model}" + (f"; {note}" if note else ""))
    apart = sum(m.spec.trials_to_run for m in campaign.runnable if not m.trained_together)
    total = sum(m.spec.trials_to_run for m in campaign.runnable)
    lines.append(f"{total} trials in its specs, {shared.distinct() + apart} distinct "
                 f"({total - shared.distinct() - apart} shared between specs)")
    missing = [f"{member.path.stem}: {', '.join(files)}" for member in campaign.members
               if member.planned is not None and (files := missing_files(member.planned))]
    if missing:
        lines.append(f"missing files: {'; '.join(missing)}")
    together = campaign_spec(campaign, shared) if shared.keys else None
    if reused is not None and together is not None:
        found = reused(together).sources
        taken = {index for index, source in found.items() if not source.other_code}
        lines.append(f"reuse: {len(taken)} of the {shared.distinct()} distinct trials are in the store already; "
                     f"{shared.distinct() - len(taken) + apart} to train")
        if other_code := len(found) - len(taken):
            lines.append(f"  {other_code} of those to train are in the store from other training code "
                         "(their key differs in the code digest only; `--reuse-other-code` takes them)")
        together = dataclasses.replace(together, trials=tuple(
            trial for index, trial in enumerate(together.trials) if index not in taken))
    if estimate is None:
        lines.append("time: `--plan --estimate` times a few steps of each distinct method and model here and "
                     "prints the wall time of the trials to train")
        return lines
    if together is not None and together.trials:
        lines.append(f"time of {campaign.sweep_name}, the {len(together.trials)} distinct trials to train:")
        lines += [f"  {line}" for line in estimate(together)]
    for member in campaign.runnable:
        if not member.trained_together:
            lines.append(f"time of {member.spec.name}, trained on its own:")
            lines += [f"  {line}" for line in estimate(member.spec)]
    if (together is None or not together.trials) and not apart:
        lines.append("estimate: nothing to train (every trial is in the store)")
    return lines


def member_options(campaign_options: SweepOptions, member: Member) -> SweepOptions:
    """``sweep run`` of one spec of the campaign, with the campaign's budget, store and cluster."""
    return dataclasses.replace(campaign_options, spec_path=str(member.path))


def run_campaign(options: SweepOptions, campaign: Campaign, verbose: bool = False) -> int:
    """Step 1 (the distinct trials, one Tune run), then each spec as ``sweep run``; a line per spec, and the
    exit code of ``sweep run``: 1 when a trial failed, the signal's when one stopped the campaign."""
    from sweep.commands.summary import finish_sweep, trial_counts
    from sweep.run.engine import run

    started = time.monotonic()  # one clock for every sweep's lines: their stamps only move forward
    for member in campaign.members:
        if member.spec is None:
            print(f"{member.path.stem}: left out, it cannot run here: {member.problem}")
    steps: list[tuple[SweepOptions, SweepSpec]] = []
    if any(member.trained_together for member in campaign.runnable):
        steps.append((dataclasses.replace(options, campaign=campaign.name), campaign_spec(campaign)))
    steps += [(member_options(options, member), member.spec) for member in campaign.runnable]
    again = f"python -m sweep paper {campaign.name}" + (f" --budget {options.budget}" if options.budget else "")
    code = 0
    for step_options, spec in steps:
        outcome = run(step_options, spec, verbose, started)
        finish_sweep(spec, options.tracking_uri)
        kept = ""
        if outcome.kept:  # the counts are the sweep's whole history; say what this command added to it
            kept = (f"; all {outcome.kept} from an earlier run of {spec.name}, kept: nothing trained now"
                    if outcome.kept == len(outcome.results) else
                    f"; {outcome.kept} of them from an earlier run of {spec.name}, kept")
        print(f"{spec.name}: {trial_counts(spec, options.tracking_uri)}{kept}", flush=True)
        if outcome.stopped_by or outcome.stop_reason:
            print(f"stopped: {outcome.stop_reason or outcome.stopped_by.name}; to continue the campaign: {again}")
            return 75 if outcome.stop_reason else 128 + int(outcome.stopped_by)
        code = max(code, 1 if any(result.error is not None for result in outcome.results) else 0)
    print(f"\nnext:\n  python -m reports.paper {campaign.name}"
          + ("" if options.tracking_uri == DEFAULT_TRACKING_URI else f" --tracking-uri {options.tracking_uri}"))
    return code
