"""Stages shared between trials (``share_stages``, :mod:`trainers.training.shared_stages`): a trial that reads the
stages another trial trained reports, checkpoints and ends bit for bit as one that trains them itself; the key
leaves out only what those stages do not read; a failed or unkept stage is trained again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import trainers.data.nli_examples as nli
from sweep.run.models import load_trial_encoder
from tests.test_checkpoint import comparable
from tests.test_flow import NLI, TRIAL
from trainers.data.sources import STSSet
from trainers.method import Stage
from trainers.metrics import Metric
from trainers.objectives.nli import SBERTNLIObjective
from trainers.registry import get_method
from trainers.training.checkpoint import LocalSession
from trainers.training.loop import run_trial
from trainers.training.shared_stages import prefix_key

SPECS = Path(__file__).resolve().parents[1] / "search_spaces"
FLOW_AFTER_NLI = {**TRIAL, "nli_supervision": True, "nli_learning_rate": 1e-3, "eval_every": 1, "max_steps": 5}


@pytest.fixture
def nli_stages(monkeypatch) -> list[int]:
    """The fake labelled NLI, and a count of the NLI stages built (one per trial that trains its NLI stage)."""
    monkeypatch.setattr(nli, "load_nli_pairs", lambda pair_set: list(NLI))
    built: list[int] = []
    build = SBERTNLIObjective.__init__

    def counting(self, config, encoder):
        built.append(1)
        build(self, config, encoder)

    monkeypatch.setattr(SBERTNLIObjective, "__init__", counting)
    return built


def trial(config: dict, folder) -> tuple[list[dict], dict, dict[str, torch.Tensor]]:
    """The trial's reports, its final figures and its final encoder's weights (from its final checkpoint)."""
    reports: list[dict] = []
    final = run_trial(config, LocalSession(folder, reports.append, keep=1))
    encoder = load_trial_encoder(next(folder.glob("checkpoint_*")))[0]
    return reports, final, encoder.state_dict()


CONSERT_AFTER_NLI = {"method": "consert", "supervision": "joint-unsup", "batch_size": 4, "train_limit": 24,
                     "max_steps": 5, "eval_every": 1, "learning_rate": 1e-3, "nli_learning_rate": 1e-3,
                     "eval_precision": "fp32"}
SHARERS = {  # two trials that differ only in what their last stage reads
    "flow, BERT-flow's target corpora (ConSERT Table 3)": (
        {**FLOW_AFTER_NLI, "train_corpus": "stsb_target"}, {"train_corpus": "sts12_target"}),
    "ConSERT joint-unsup, few-shot transfer (ConSERT Figure 6)": (
        CONSERT_AFTER_NLI, {"transfer_limit": 8}),
}


@pytest.mark.parametrize("case", list(SHARERS))
def test_a_trial_that_reads_the_nli_stage_equals_one_that_trains_it(case, tiny_bert, use_tiny_sts, nli_stages,
                                                                    tmp_path):
    """The second trial reads the first's NLI stage and reports every evaluation, both stages' losses, learning
    rates and dev scores, the test figures and the final weights that it reports trained alone (share_stages off,
    its own NLI stage)."""
    config, change = SHARERS[case]
    first = {**config, "model": tiny_bert}
    second = {**first, **change}
    _, first_final, _ = trial(first, tmp_path / "first")
    assert (len(nli_stages), first_final[Metric.STAGES_REUSED]) == (1, 0.0)

    reports, final, weights = trial(second, tmp_path / "read")
    assert (len(nli_stages), final[Metric.STAGES_REUSED]) == (1, 1.0)  # it built no NLI stage
    alone_reports, alone, alone_weights = trial({**second, "share_stages": False}, tmp_path / "alone")
    assert len(nli_stages) == 2 and Metric.STAGES_REUSED not in alone

    assert {r["stage"] for r in alone_reports[:-1]} == {0, 1}
    assert [comparable(r) for r in reports[:-1]] == [comparable(r) for r in alone_reports[:-1]]
    assert comparable(final) == comparable(alone)
    assert weights.keys() == alone_weights.keys()
    assert all(torch.equal(weights[name], alone_weights[name]) for name in weights)


def test_a_trial_that_changes_what_the_nli_stage_reads_trains_its_own(tiny_bert, use_tiny_sts, nli_stages,
                                                                      tmp_path):
    config = {**FLOW_AFTER_NLI, "model": tiny_bert, "max_steps": 3}
    finals = [run_trial(config), run_trial({**config, "checkpoint_every": 0})]  # bookkeeping: read
    assert [f[Metric.STAGES_REUSED] for f in finals] == [0.0, 1.0] and len(nli_stages) == 1
    for changed in ({"nli_learning_rate": 3e-3}, {"seed": 2}, {"eval_max_pairs": 5}, {"nli_classifier": "linear"}):
        assert run_trial({**config, **changed})[Metric.STAGES_REUSED] == 0.0, changed
    assert len(nli_stages) == 5


def test_a_stage_that_fails_keeps_nothing_and_one_past_the_bound_is_not_kept(tiny_bert, use_tiny_sts, nli_stages,
                                                                              monkeypatch, tmp_path):
    config = {**FLOW_AFTER_NLI, "model": tiny_bert, "max_steps": 3}
    step = SBERTNLIObjective.loss

    def failing(self, batch):
        raise RuntimeError("the NLI stage failed")

    monkeypatch.setattr(SBERTNLIObjective, "loss", failing)
    with pytest.raises(RuntimeError, match="the NLI stage failed"):
        run_trial(config)
    monkeypatch.setattr(SBERTNLIObjective, "loss", step)
    assert run_trial({**config, "shared_stages_gb": 0.0})[Metric.STAGES_REUSED] == 0.0  # trained, not kept
    assert run_trial(config)[Metric.STAGES_REUSED] == 0.0  # trained and kept
    assert run_trial(config)[Metric.STAGES_REUSED] == 1.0
    assert len(nli_stages) == 3  # the failed one, the unkept one, the kept one


def test_the_key_leaves_out_the_corpus_only_when_no_shared_stage_reads_it(tiny_bert):
    method = get_method("consert")
    config = method.resolve({"model": tiny_bert, "supervision": "sup-unsup"})
    knobs = method.all_knobs

    def key(stages, **changed):
        return prefix_key({**config, **changed}, stages, [["a pair"]], {}, torch.device("cpu"), knobs)

    nli_stage = Stage("sup", "trainers.objectives.consert:NLIObjective", reads_corpus=False)
    corpus_stage = Stage("unsup", "trainers.objectives.consert:ConSERTObjective")
    assert key([nli_stage]) == key([nli_stage], train_corpus="sts12_target", transfer_limit=8)
    assert key([corpus_stage]) != key([corpus_stage], train_corpus="sts12_target")
    assert key([corpus_stage]) != key([corpus_stage], transfer_limit=8)
    assert key([nli_stage]) == key([nli_stage], checkpoint_every=5, share_stages=False)  # bookkeeping
    assert key([nli_stage]) != key([nli_stage], learning_rate=1e-4)
    assert key([nli_stage]) != key([Stage("sup", nli_stage.objective, overrides={"epochs": 2}, reads_corpus=False)])
    assert key([nli_stage]) != prefix_key(config, [nli_stage], [["another pair"]], {}, torch.device("cpu"),
                                          knobs)
    dev = STSSet("stsb-dev", ("A man sings.",), ("A man is singing.",), np.array([4.8]), ("",))
    other_score = STSSet("stsb-dev", dev.sentence1, dev.sentence2, np.array([4.6]), ("",))
    keys = {json.dumps(prefix_key(config, [nli_stage], [["a pair"]], sets, torch.device("cpu"), knobs))
            for sets in ({}, {"stsb-dev": dev}, {"stsb-dev": other_score})}
    assert len(keys) == 3  # the dev evaluations the stages report read the STS sets


@pytest.mark.parametrize("spec_file, rows, method_name, differing, per_seed", [
    ("consert_supervised.yaml", "BERT-base-flow", "flow", "train_corpus", 7),  # Li et al.'s "SBERT-base-flow (target)"
    ("consert_supervised_large.yaml", "BERT-large-flow", "flow", "train_corpus", 7),  # and "SBERT-large-flow"
    ("consert_few_shot_supervised.yaml", "", "consert", "transfer_limit", 6),  # Figure 6 under NLI supervision
])
def test_the_papers_rows_that_differ_in_their_corpus_alone_train_one_nli_stage_per_seed(spec_file, rows, method_name,
                                                                                      differing, per_seed):
    """The rows differ only in a knob that their NLI stage does not read: one key per seed, so one trial trains the
    stage and the others read it."""
    from sweep.spec.sweep_spec import load_spec

    spec = load_spec(SPECS / spec_file, check_environment=False)
    method = get_method(method_name)
    trials = [t for t in spec.trials if t.point.row.startswith(rows) and t.config["method"] == method_name]
    keys: dict[int, set[str]] = {}
    for trial_ in trials:
        prefix = method.stages(trial_.config)[:-1]
        assert [stage.reads_corpus for stage in prefix] == [False]  # an NLI stage, then the last
        key = prefix_key(trial_.config, prefix, [["the NLI pairs"]], {}, torch.device("cpu"), method.all_knobs)
        keys.setdefault(trial_.config["seed"], set()).add(json.dumps(key, sort_keys=True))
    assert len(trials) == per_seed * len(keys) and all(len(seed_keys) == 1 for seed_keys in keys.values())
    assert len({trial_.config[differing] for trial_ in trials}) == per_seed


def test_sweep_plan_counts_the_stages_trained_and_read():
    """ConSERT Table 3: per seed, the seven flow rows train one NLI stage; sup-unsup, joint-unsup and joint-unsup
    at a lower NLI rate train one each; the one-stage rows (sup, joint) train none before their last."""
    from sweep.commands.plan import shared_stage_lines
    from sweep.spec.sweep_spec import load_spec

    spec = load_spec(SPECS / "consert_supervised.yaml", check_environment=False)
    seeds = len(spec.seeds)
    two_stage = [t for t in spec.trials if t.config.get("nli_supervision") or
                 t.config.get("supervision") in ("sup-unsup", "joint-unsup")]
    assert len(two_stage) == 10 * seeds
    (line,) = shared_stage_lines(spec)
    assert line.startswith(f"shared stages: {10 * seeds} trials begin with stages before their last (joint, nli, "
                           f"sup): on one node {4 * seeds} train those stages and {6 * seeds} read them")
    unshared = load_spec(SPECS / "consert_supervised.yaml", {"share_stages": False}, check_environment=False)
    assert shared_stage_lines(unshared) == [f"unshared stages: {10 * seeds} trials train their stages before the "
                                            "last themselves (share_stages false)"]


def train_or_read(root: str, marker: str, results) -> None:
    """A process's trial of one shared key: its 'stages' take a second and set the weights to 3."""
    import time

    from trainers.training.checkpoint import TrialSession
    from trainers.training.shared_stages import SharedStages

    encoder = torch.nn.Linear(2, 2)

    def train(session: TrialSession) -> int:
        with open(marker, "a", encoding="utf-8") as handle:
            handle.write("trained\n")
        time.sleep(1.0)
        torch.nn.init.constant_(encoder.weight, 3.0)
        session.report({"step": 7, "dev_spearman": 0.5})
        return 7

    reports: list[dict] = []
    steps, read = SharedStages(Path(root), 10**9).train_once({"key": "one"}, encoder, TrialSession(reports.append),
                                                            train)
    results.put((steps, read, encoder.weight.tolist(), reports))


def test_two_processes_of_one_key_train_once_the_other_waits_and_reads(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    marker = tmp_path / "trained.txt"
    processes = [context.Process(target=train_or_read, args=(str(tmp_path / "shared"), str(marker), results))
                 for _ in range(2)]
    for process in processes:
        process.start()
    outcomes = sorted(results.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    assert marker.read_text(encoding="utf-8") == "trained\n"
    assert [read for _, read, _, _ in outcomes] == [False, True]
    assert all(steps == 7 and weights == [[3.0, 3.0], [3.0, 3.0]] and reports == [{"step": 7, "dev_spearman": 0.5}]
               for steps, _, weights, reports in outcomes)


def test_the_stages_are_kept_in_shared_stages_dir_when_it_is_set(tiny_bert, use_tiny_sts, nli_stages, tmp_path):
    folder = tmp_path / "kept here"
    config = {**FLOW_AFTER_NLI, "model": tiny_bert, "max_steps": 3, "shared_stages_dir": str(folder)}
    assert [run_trial(config)[Metric.STAGES_REUSED] for _ in range(2)] == [0.0, 1.0]
    (kept,) = [p for p in folder.iterdir() if p.is_dir()]
    assert (kept / "state.pt").is_file() and (kept / "reports.json").is_file()
