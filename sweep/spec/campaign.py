"""A campaign: a paper's specs, named by a file ``search_spaces/campaigns/NAME.yaml`` that lists them, or every
shipped spec whose ``tags.paper`` is NAME (``sg-bert``, ``consert``, ``sct``). Here it is loaded (each spec, or
why it cannot run on this machine), and the distinct trials of the specs whose trials are known before they run
(:attr:`~sweep.spec.sweep_spec.SweepSpec.trials_known`) make one sweep, the campaign's own ``paper-NAME``
(:func:`campaign_spec`). ``python -m sweep paper NAME`` runs it (:mod:`sweep.commands.campaign`);
``python -m reports.paper NAME`` reports it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from sweep.spec.budget import BUDGETS
from sweep.spec.ledger import SpecLedger
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
        return (self.spec is not None and self.spec.trials_known and not self.spec.scheduler
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
