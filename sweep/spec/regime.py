"""What a plan knows of each trial without training it, and the warnings it draws from that.

Each trained trial is planned from the config the spec resolved for it: its stages' examples (labelled NLI by
its known size), its steps by the training loop's own count (corpus size, batch size, epochs, max_steps), its dev
evaluations, and the key of the stages it shares on a node (``sweep plan``, ``--estimate``). Then the warnings,
where a budget leaves a method outside the regime of its paper: not refusals, as a short run is often what the
user wants: the method's ``regime`` check (SCT: instance queues that cannot fill) and the loop's (evaluation).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from sweep.spec.environment import attribute, holds_for
from sweep.spec.sweep_spec import SweepSpec
from trainers.data.nli_examples import NLI_PAIR_SETS, nli_examples
from trainers.knobs import Problem
from trainers.method import Config, Method, Stage, settings_read
from trainers.training.steps import load_examples, planned_evaluations, total_steps


def stage_needs_hub(stage: Stage, config: Mapping[str, Any]) -> bool:
    """Whether reading the stage's training examples needs the hub: labelled NLI (ConSERT's supervised
    settings, BERT-flow's nli_supervision), or a corpus of NLI sentences or of hub STS that no back-translation
    file replaces."""
    corpus_on_hub = config.get("train_corpus") == "nli_sentences" or config["sts_source"] == "hub"
    return stage.examples is nli_examples or (corpus_on_hub and not config.get("bt_file"))


def stage_counts(method: Method, config: Mapping[str, Any], counted: dict) -> list[tuple[Config, int | None]]:
    """Each stage's config and its count of training examples (None where counting needs the hub: a corpus of
    NLI sentences or of hub STS). Labelled NLI is a fixed set, counted without reading it
    (:data:`~trainers.data.nli_examples.NLI_PAIR_SETS`). ``counted`` keeps the counts across the trials of a
    plan."""
    planned: list[tuple[Config, int | None]] = []
    for stage in method.stages(config):
        stage_config = {**config, **stage.overrides}
        if stage.examples is nli_examples:
            planned.append((stage_config, NLI_PAIR_SETS[stage_config["nli_pairs"]]))
            continue
        if stage_needs_hub(stage, stage_config):
            planned.append((stage_config, None))
            continue
        key = (method.name, stage.name, config.get("train_corpus"), config.get("bt_file"), config.get("view1"),
               config.get("view2"), stage_config["train_limit"], stage_config["train_subset_repeat"],
               config["sts_source"])  # a stage may set its own limit
        if key not in counted:
            counted[key] = len(load_examples(stage, stage_config))
        planned.append((stage_config, counted[key]))
    return planned


def planned_stages(method: Method, config: Mapping[str, Any], counted: dict) -> list[tuple[Config, int]] | None:
    """Each stage's config and its count of training examples; None where one count needs the hub."""
    counts = stage_counts(method, config, counted)
    known = [(stage_config, count) for stage_config, count in counts if count is not None]
    return known if len(known) == len(counts) else None


def shared_prefix(method: Method, config: Mapping[str, Any]) -> str | None:
    """What keys the trial's stages before its last where they are shared on a node (``share_stages``,
    :mod:`trainers.training.shared_stages`): the settings they read, as JSON; None where it has no such stages
    or shares none. The rest of the trial's key (the models' and data's content, device, code) is the same for
    every trial of a spec on one node."""
    prefix = method.stages(config)[:-1] if method.trains else ()
    if not prefix or not config["share_stages"]:
        return None
    return json.dumps(settings_read(config, prefix, method.all_knobs), sort_keys=True)


def planned_steps(method: Method, config: Mapping[str, Any], counted: dict) -> int | None:
    """Steps the trial will train over its stages (None where counting needs the hub, without max_steps)."""
    stages = planned_stages(method, config, counted)
    if stages is None:
        return config["max_steps"] or None
    return sum(total_steps(stage_config, examples) for stage_config, examples in stages)


def planned_dev_evaluations(method: Method, config: Mapping[str, Any], counted: dict) -> int | None:
    """STS-B dev evaluations the trial will score over its stages if it does not stop early (None where counting
    needs the hub)."""
    stages = planned_stages(method, config, counted)
    if stages is None:
        return None
    return sum(planned_evaluations(stage_config, examples) for stage_config, examples in stages)


def evaluation_warnings(config: Mapping[str, Any], evaluations: int) -> list[Problem]:
    """A trial that selects its dev-best state but scores only one (final_state 'last' selects nothing)."""
    if evaluations <= 1 and config["final_state"] != "last":
        return [Problem("eval_every", f"STS-B dev is evaluated once (eval_every {config['eval_every']}, "
                        f"eval_grid {config['eval_grid']!r}), so no better earlier state can be selected")]
    return []


def regime_warnings(spec: SweepSpec) -> list[str]:
    """Every warning of the spec's trained rows x grid points, each said once."""
    rows_with: dict[str, list[str]] = {}
    counted: dict = {}
    for trial in spec.distinct_trials():
        method, row = spec.method_of(trial.point.row), trial.point.row
        if not method.trains:
            continue
        steps = planned_steps(method, trial.config, counted)
        if steps is None:
            continue
        evaluations = planned_dev_evaluations(method, trial.config, counted)
        warnings = method.regime(trial.config, steps)
        if evaluations is not None:
            warnings += evaluation_warnings(trial.config, evaluations)
        for warning in warnings:
            holds_for(rows_with, warning, row)
    return attribute(spec, rows_with, {})
