"""A paper as one command: ``python -m sweep paper NAME`` runs every spec of a campaign that can run here,
each distinct trial once.

A campaign is a file ``search_spaces/campaigns/NAME.yaml`` naming its specs, or every shipped spec whose
``tags.paper`` is NAME (``sg-bert``, ``consert``, ``sct``). It runs in two steps on one Ray:

1. **Training**: the distinct trials of the specs whose trials are known before they run (no sampled
   axes, no scheduler; :attr:`~sweep.spec.sweep_spec.SweepSpec.trials_known`), each trial key once, go to one
   Ray Tune run, the campaign's own sweep ``paper-NAME`` (:func:`~sweep.spec.campaign.campaign_spec`), so no
   spec waits for another and the cluster stays full. Trials finished before, by this campaign or any sweep,
   are reused as in ``sweep run`` (:mod:`sweep.run.reuse`).
2. **Each spec**: every spec then runs as ``sweep run`` would, with its own MLflow experiment, parent run
   and summary; its trials are all in the store now, so each is a reused child run of its spec's parent,
   and the specs' tables and reports read them as members of the spec's sweep. Specs left out of step 1
   (sampled axes, ASHA or PBT) train here.

Specs that cannot run here (no hub model, no data) are listed with the reason and left out. Running the
command again continues an interrupted campaign: Ray restores step 1 and each spec's sweep.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from results.record import DEFAULT_TRACKING_URI
from sweep.run.reuse import Reuse
from sweep.spec.budget import BUDGETS
from sweep.spec.campaign import Campaign, Member, campaign_spec, missing_files, sharing, spec_models
from sweep.spec.ledger import load_ledger
from sweep.spec.options import SweepOptions
from sweep.spec.sweep_spec import SweepSpec


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
