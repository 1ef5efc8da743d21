"""GLUE fine-tuning (SG-BERT Table 10): the first 10% of validation selects and the last 90% reports, the
metrics as GLUE computes them, GLUE's file layout, a fine-tuning run of the tiny BERT on a trivially
separable fixture task, ``python -m sweep glue`` into MLflow, the parquet and Table 10, and bad input
refused with exit 2. The fixture files are written here in GLUE's download layout."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from mlflow import MlflowClient

from reports.collect import collect
from reports.paper_tables import build_tables
from reports.table_specs import load_table_specs, parse_table_spec
from results.reader import recorded_identity
from results.render import to_markdown
from sweep.commands.cli import main as sweep_main
from sweep.spec.sweep_spec import POINT, load_spec
from sweep.spec.trial_key import trial_key
from sweep.tracking.tracker import MLflowTracker
from tests.conftest import write_spec
from trainers.data.glue_tasks import GLUE_KNOBS, Examples, load_local, parse_glue, split_validation
from trainers.data.sources import DataError
from trainers.metrics import Glue
from trainers.registry import get_method
from trainers.training.glue import fine_tune, scores

CUES = {1: "good", 0: "bad"}  # the label is the first word: trivially separable
FILLERS = ["film today", "story here", "day for us", "meal tonight", "book to read", "song on air", "game we saw"]


def sentence(label: int, index: int) -> str:
    return f"{CUES[label]} {FILLERS[index % len(FILLERS)]}"


def labels_of(n: int, flipped: int = 0) -> list[tuple[int, int]]:
    """(cue, gold label) of n examples; the first ``flipped`` have the other label than their cue."""
    return [(i % 2, 1 - i % 2 if i < flipped else i % 2) for i in range(n)]


def write_task(folder: Path, task: str, split: str, rows: list[tuple[int, int]]) -> None:
    """One GLUE TSV of ``rows`` (cue, gold label), in the task's own columns and label names."""
    entail = {0: "entailment", 1: "not_entailment"}
    lines = []
    for i, (cue, label) in enumerate(rows):
        first, second = sentence(cue, i), f"it was {FILLERS[(i + 3) % len(FILLERS)]}"
        lines.append({
            "qnli": f"{i}\t{first}\t{second}\t{entail[label]}",
            "sst2": f"{first}\t{label}",
            "cola": f"gj04\t{label}\t{'' if label else '*'}\t{first}",
            "mrpc": f"{label}\t{100 + i}\t{200 + i}\t{first}\t{second}",
            "rte": f"{i}\t{first}\t{second}\t{entail[label]}",
        }[task])
    header = {"qnli": "index\tquestion\tsentence\tlabel", "sst2": "sentence\tlabel", "cola": None,
              "mrpc": "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", "rte": "index\tsentence1\tsentence2\tlabel"}[task]
    path = (folder / {"qnli": "QNLI", "sst2": "SST-2", "cola": "CoLA", "mrpc": "MRPC", "rte": "RTE"}[task]
            / f"{split}.tsv")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(([header] if header else []) + lines) + "\n", encoding="utf-8")


def glue_folder(folder: Path, n_train: int = 64, n_dev: int = 100, flipped: int = 0) -> Path:
    for task in Glue.TASKS:
        write_task(folder, task, "train", labels_of(n_train))
        write_task(folder, task, "dev", labels_of(n_dev, flipped))
    return folder


def glue_spec_file(tmp_path: Path, rows: dict[str, str], glue=None, name: str = "sg_glue") -> Path:
    first = next(iter(rows))  # the reference row; the others start from another encoder
    raw = {"name": name, "method": "none", "base": {"pooling": "cls"}, "reference": first,
           "rows": [{"name": row, "set": {"model": model},
                     **({"changes": ["model"] if model != rows[first] else []} if row != first else {})}
                    for row, model in rows.items()], "seeds": [1]}
    if glue is not None:
        raw[Glue.KEY] = glue
    return write_spec(tmp_path, raw)


FAST = {"learning_rate": 1e-3, "batch_size": 16, "epochs": 10, "max_seq_length": 16, "eval_every": 2,
        "adam_implementation": "torch"}
"""Knobs with which the tiny random BERT learns the cue in a few dozen steps. torch's Adam: transformers' epsilon,
on the uncorrected root (GLUE's default), damps this model's small gradients at this rate, and the cue is learnt
in fewer of the seeds (measured, seeds 1 to 3: 92, 100 and 70, where torch's update, or transformers' at epsilon
1e-12, reaches 100 in each)."""


# ---------------------------------------------------------------- the split and the metrics


def test_the_first_tenth_of_validation_selects_and_the_rest_reports():
    validation = Examples((tuple(f"s{i}" for i in range(25)), tuple(f"t{i}" for i in range(25))), tuple(range(25)))
    select, report = split_validation(validation)
    assert select.labels == (0, 1) and select.texts == (("s0", "s1"), ("t0", "t1"))  # floor(25 x 0.1) = 2
    assert report.labels == tuple(range(2, 25)) and report.texts[1][0] == "t2"
    mrpc = Examples((tuple(map(str, range(408))),), tuple(range(408)))  # MRPC's validation set
    assert [len(part) for part in split_validation(mrpc)] == [40, 368]
    with pytest.raises(DataError, match="no first 10%"):
        split_validation(Examples((tuple("abcdefghi"),), tuple(range(9))))


def test_metrics_against_hand_computed_values():
    gold, predicted = [1, 1, 1, 0, 0], [1, 1, 0, 1, 0]  # TP 2, FN 1, FP 1, TN 1
    assert scores("sst2", gold, predicted) == {Glue.ACCURACY: pytest.approx(60.0)}
    # F1 of class 1 = 2TP / (2TP + FP + FN) = 4/6; accuracy 3/5.
    assert scores("mrpc", gold, predicted) == {Glue.F1: pytest.approx(400 / 6), Glue.ACCURACY: pytest.approx(60.0)}
    # Matthews = (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3 * 3 * 2 * 2) = 1/6.
    assert scores("cola", gold, predicted) == {Glue.MATTHEWS: pytest.approx(100 / 6)}
    assert scores("cola", [1, 0, 1, 0], [0, 1, 0, 1]) == {Glue.MATTHEWS: pytest.approx(-100.0)}
    assert scores("rte", [0, 0, 1], [0, 0, 1]) == {Glue.ACCURACY: 100.0}


# ---------------------------------------------------------------- the data


def test_every_task_is_read_from_glues_layout(tmp_path):
    data = load_local(glue_folder(tmp_path / "glue", n_train=6, n_dev=20, flipped=1))
    assert set(data) == set(Glue.TASKS)
    for task, found in data.items():
        assert len(found.train) == 6 and len(found.validation) == 20, task
        assert found.train.labels[:3] == (0, 1, 0), task  # entailment -> 0 (QNLI, RTE), as the hub gives it
        assert found.validation.labels[:3] == (1, 1, 0), task  # the first dev example's label is flipped
        assert found.train.texts[0][1] == sentence(1, 1), task
        assert len(found.train.texts) == (1 if task in ("sst2", "cola") else 2), task
    assert data["mrpc"].train.texts[1][0] == f"it was {FILLERS[3]}"  # '#2 String', not an id column
    only = load_local(tmp_path / "glue", ["rte"])
    assert list(only) == ["rte"]


def test_bad_glue_files_name_the_file_line_and_what_was_expected(tmp_path):
    folder = glue_folder(tmp_path / "glue", n_train=4, n_dev=20)
    cola = folder / "CoLA" / "dev.tsv"
    lines = cola.read_text(encoding="utf-8").splitlines()
    cola.write_text("\n".join([lines[0], lines[1].replace("\t1\t", "\tx\t", 1), *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"CoLA/dev.tsv:2: label 'x': expected one of \['0', '1'\]"):
        load_local(folder, ["cola"])
    (folder / "RTE" / "train.tsv").unlink()
    with pytest.raises(DataError, match=r"RTE/train.tsv: file not found \(expected GLUE's RTE TSV"):
        load_local(folder, ["rte"])
    (folder / "SST-2" / "dev.tsv").write_text("text\tlabel\ngood day\t1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"SST-2/dev.tsv: header \['text', 'label'\] lacks the columns \['sentence'\]"):
        load_local(folder, ["sst2"])


# ---------------------------------------------------------------- fine-tuning


def test_fine_tuning_learns_and_keeps_the_state_best_on_the_first_tenth(tmp_path, tiny_bert):
    # The first 10 validation examples (the selection part) have 3 labels against their cue; the other 90
    # follow it. A classifier that learned the cue scores 70 on the selection part and 100 on the rest.
    data = load_local(glue_folder(tmp_path / "glue", n_train=64, n_dev=100, flipped=3), ["sst2"])["sst2"]
    options, problems = parse_glue(FAST)
    assert not problems
    config = get_method("none").resolve({"model": tiny_bert})
    tuned = fine_tune(config, "sst2", data, options, seed=1)
    metrics, curve = tuned.metrics, tuned.curve
    assert metrics[Glue.test("sst2", Glue.ACCURACY)] >= 95.0, (metrics, curve)  # chance is 50
    # The selection part's curve: a score every 2 steps of 10 epochs x 4 batches, the last step included.
    assert [step for step, _ in curve] == list(range(2, 41, 2))
    best = max(score for _, score in curve)
    assert metrics[Glue.selection("sst2", Glue.ACCURACY)] == best
    assert metrics[Glue.best_step("sst2")] == next(step for step, score in curve if score == best)
    # The returned classifier is the selected state: scored here, independently, on each part.
    first = data.validation.part(0, 10)
    rest = data.validation.part(10)
    hits = lambda part: sum(p == g for p, g in zip(tuned.classifier.predict(part, 8, 16), part.labels))  # noqa: E731
    assert metrics[Glue.selection("sst2", Glue.ACCURACY)] == pytest.approx(100 * hits(first) / 10)
    assert metrics[Glue.test("sst2", Glue.ACCURACY)] == pytest.approx(100 * hits(rest) / 90)


def test_fine_tuning_a_pair_task_reports_its_statistics(tmp_path, tiny_bert):
    data = load_local(glue_folder(tmp_path / "glue", n_train=64, n_dev=40), ["mrpc"])["mrpc"]
    options, _ = parse_glue({**FAST, "max_seq_length": 24, "eval_every": 0, "max_steps": 6, "train_limit": 32})
    tuned = fine_tune(get_method("none").resolve({"model": tiny_bert}), "mrpc", data, options, seed=2)
    assert set(tuned.metrics) == {Glue.test("mrpc", Glue.F1), Glue.test("mrpc", Glue.ACCURACY),
                                  Glue.selection("mrpc", Glue.F1), Glue.selection("mrpc", Glue.ACCURACY),
                                  Glue.best_step("mrpc")}
    # The first 32 examples (train_limit) make epochs of 2 batches of 16; eval_every 0 scores at each
    # epoch's end, and after the last step (max_steps).
    assert [step for step, _ in tuned.curve] == [2, 4, 6]
    assert all(0.0 <= v <= 100.0 for v in tuned.metrics.values())


# ---------------------------------------------------------------- python -m sweep glue


def test_sweep_glue_fine_tunes_each_row_into_mlflow_the_parquet_and_table10(tmp_path, tracking_uri, tiny_bert,
                                                                            use_tiny_sts, monkeypatch, capsys):
    """Rows are the table's; one starts from an exported sentence-transformers folder (sweep export's
    format), one from a plain Hugging Face folder."""
    from sweep.run.models import save_sentence_transformer
    from trainers.models.encoder import SentenceEncoder

    exported = tmp_path / "exported"
    save_sentence_transformer(SentenceEncoder.from_pretrained(tiny_bert, "mean"), exported, 32)
    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=32, n_dev=40)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert, "SG-OPT": str(exported)},
                          {"tasks": ["sst2", "cola"], **FAST, "epochs": 1})
    assert sweep_main(["glue", str(path), "--tracking-uri", tracking_uri]) == 0
    out = capsys.readouterr().out
    assert "sg_glue: 2 rows x 1 seeds, each fine-tuned on sst2, cola (2 of 2 to run)" in out
    assert "'SG-OPT' seed 1 cola: matthews" in out
    assert sweep_main(["glue", str(path), "--tracking-uri", tracking_uri]) == 0  # finished rows are not run again
    assert "(0 of 2 to run)" in capsys.readouterr().out

    frame = collect(tracking_uri)
    assert sorted(frame["row"]) == ["BERT-base", "SG-OPT"] and set(frame["status"]) == {"FINISHED"}
    for column in (Glue.test("sst2", Glue.ACCURACY), Glue.test("cola", Glue.MATTHEWS), Glue.curve("sst2")):
        assert frame[column].notna().all(), column
    assert set(frame[Glue.param("learning_rate")]) == {0.001} and frame[Glue.param("epochs")].dtype == "Int64"
    assert_older_settings_refuse_the_command(path, tracking_uri, capsys)

    # A GLUE run carries every tag a sweep's trial run has when the tracker creates it (same spec, no glue key).
    sts_spec = load_spec(glue_spec_file(tmp_path, {"BERT-base": tiny_bert, "SG-OPT": str(exported)}, name="sg_glue"),
                         check_environment=False)
    tracker = MLflowTracker(sts_spec, f"sqlite:///{tmp_path}/sts.db")
    tracker.setup()
    tracker.on_trial_start(0, [], SimpleNamespace(config={POINT: 0}, trial_id="t_0"))
    sts_run = tracker.client.get_run(tracker.runs.run_of("t_0"))
    glue_run = MlflowClient(tracking_uri).get_run(frame["run_id"].iloc[0])
    assert set(sts_run.data.tags) - set(glue_run.data.tags) == set()
    assert recorded_identity(glue_run.data.tags, {}).knobs[Glue.param("learning_rate")] == 0.001
    real = load_table_specs()["sg-bert-table10"]
    paper = {"paper": "sg-bert", "table": "table10", "model": "bert-base", "rows": dict(real.paper.rows)}
    spec = parse_table_spec("t", {"title": "t", "kind": "rows", "spec": str(path), "columns": list(real.columns),
                                  "rows": list(real.rows), "paper": paper}, tmp_path)
    (table,) = build_tables(frame, ["t"], {"t": spec}, None)
    cells = {line.label: line.cells for line in table.lines}
    sst2 = frame.set_index("row")[Glue.test("sst2", Glue.ACCURACY)]
    assert cells["SG-OPT"]["GLUE SST2"].values == (float(sst2["SG-OPT"]),)
    assert cells["BERT-base"]["GLUE QNLI"].n == 0
    assert "GLUE QNLI" in to_markdown(table) and "90.97" in to_markdown(table)  # the paper's BERT row


def assert_older_settings_refuse_the_command(path: Path, tracking_uri: str, capsys) -> None:
    """A finished row whose run says it was fine-tuned with another learning rate (older code's default) refuses
    the command, naming the row and the knob; its record is left as it was."""
    client = MlflowClient(tracking_uri)
    run = next(run for run in client.search_runs([client.get_experiment_by_name("sg_glue").experiment_id])
               if run.data.tags.get("sweep.row") == "SG-OPT")
    identity = recorded_identity(run.data.tags, {})
    older = replace(identity, knobs={**identity.knobs, Glue.param("learning_rate"): 2e-5})
    for key, value in {**older.tags(), **trial_key(older.knobs).tags()}.items():
        client.set_tag(run.info.run_id, key, value)
    assert sweep_main(["glue", str(path), "--tracking-uri", tracking_uri]) == 2
    error = capsys.readouterr().err
    assert f"SG-OPT seed 1: {Glue.param('learning_rate')} 2e-05 -> 0.001" in error and "BERT-base" not in error
    assert client.get_run(run.info.run_id).info.status == "FINISHED"


def test_without_glue_data_offline_the_spec_is_refused_naming_glue_and_its_variable(tmp_path, tiny_bert,
                                                                                    use_tiny_sts, monkeypatch, capsys):
    monkeypatch.delenv("GLUE_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, {"tasks": ["rte"]})
    for command in ("glue", "plan"):
        assert sweep_main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{path.resolve()}: glue: GLUE needs the Hugging Face hub datasets ['nyu-mll/glue']" in err
        assert "set $GLUE_DATA_DIR" in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists()


def test_bad_glue_specs_exit_2_naming_the_file_and_key(tmp_path, tiny_bert, use_tiny_sts, monkeypatch, capsys):
    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=4, n_dev=20)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, {"tasks": ["qnli", "mnli"], "learning_rat": 1e-3,
                                                                "batch_size": 1})
    assert sweep_main(["glue", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: glue.tasks: expected a non-empty list of distinct tasks from" in err and "'mnli'" in err
    assert f"{path}: glue.learning_rat: unknown knob; did you mean 'learning_rate'?" in err
    assert f"{path}: glue.batch_size: expected a value >= 2, got 1" in err
    plain = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, name="plain")
    assert sweep_main(["glue", str(plain)]) == 2
    assert (f"{plain.resolve()}: glue: missing: `python -m sweep glue` runs a spec with a 'glue' key"
            in capsys.readouterr().err)
    glue = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, {"tasks": ["rte"]}, name="fine")
    assert sweep_main(["run", str(glue)]) == 2
    assert "glue: a GLUE fine-tuning spec: run it with `python -m sweep glue" in capsys.readouterr().err
    as_suite = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, name="suite")
    raw = yaml.safe_load(as_suite.read_text(encoding="utf-8"))
    as_suite.write_text(yaml.safe_dump({**raw, "evaluations": ["sts", "glue"]}), encoding="utf-8")
    assert sweep_main(["plan", str(as_suite)]) == 2
    assert f"{as_suite}: evaluations[1]: GLUE fine-tunes the encoder" in capsys.readouterr().err
    (tmp_path / "glue" / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n",
                                                       encoding="utf-8")
    assert sweep_main(["glue", str(glue)]) == 2
    assert "RTE/dev.tsv:2: label 'maybe': expected one of ['entailment', 'not_entailment']" in capsys.readouterr().err


def test_the_glue_knobs_are_the_loops_declarations_with_run_glues_defaults():
    from trainers.common_knobs import TRAINING_KNOBS

    knobs = GLUE_KNOBS
    assert knobs["learning_rate"].help == TRAINING_KNOBS["learning_rate"].help  # declared once
    assert (knobs["learning_rate"].default, knobs["batch_size"].default, knobs["epochs"].default,
            knobs["max_seq_length"].default, knobs["warmup_ratio"].default) == (2e-5, 32, 3, 128, 0.0)
    assert math.isclose(parse_glue({"learning_rate": 5e-5})[0]["learning_rate"], 5e-5)


def test_a_budget_caps_the_fine_tuning_and_the_tables_name_the_glue_command(tmp_path, tiny_bert, use_tiny_sts,
                                                                            monkeypatch, capsys):
    from reports.paper_tables import build_tables_for_cli
    from sweep.spec.budget import BUDGETS
    from sweep.spec.sweep_spec import load_spec

    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=4, n_dev=20)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, {"tasks": ["rte"], "eval_every": 50})
    smoke = load_spec(path, budget=BUDGETS["smoke"]).glue
    assert (smoke["max_steps"], smoke["eval_every"], smoke["tasks"]) == (30, 10, ["rte"])
    assert load_spec(path).glue["max_steps"] == 0
    build_tables_for_cli(collect_empty(), None)
    assert "sg-bert-table10 (python -m sweep glue search_spaces/sg_glue.yaml)" in capsys.readouterr().err


def collect_empty():
    import pandas as pd

    from results.schema import IDENTITY

    return pd.DataFrame(columns=list(IDENTITY))


def test_sweep_plan_of_a_glue_spec_prints_its_runs_without_torch_nor_ray(tmp_path, tiny_bert, use_tiny_sts,
                                                                         monkeypatch, capsys):
    from tests.test_light_imports import heavy_modules_after

    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=4, n_dev=20)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert, "SG-OPT": tiny_bert}, {"tasks": ["rte", "cola"]})
    assert sweep_main(["plan", str(path), "--seeds", "1,2,3"]) == 0
    out = capsys.readouterr().out
    assert "tasks: rte, cola; the first 10% of each validation set selects, the last 90% reports" in out
    assert "2 rows x 3 seeds = 6 runs (every seed runs" in out and "12 fine-tunings" in out
    assert heavy_modules_after(f"from sweep.commands.cli import main\nassert main(['plan', {str(path)!r}]) == 0") == []


def test_a_failing_row_is_marked_failed_and_the_others_finish(tmp_path, tracking_uri, tiny_bert, use_tiny_sts,
                                                               monkeypatch, capsys):
    import trainers.training.glue as glue

    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=4, n_dev=20)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert, "SG-OPT": tiny_bert}, {"tasks": ["rte"]})
    real = glue.fine_tune

    def fails_for_seed_2(config, task, data, options, seed):
        if seed == 2:
            raise RuntimeError("out of memory (a test)")
        return real(config, task, data, {**options, "max_steps": 1}, seed)

    monkeypatch.setattr(glue, "fine_tune", fails_for_seed_2)
    assert sweep_main(["glue", str(path), "--seeds", "1,2", "--tracking-uri", tracking_uri]) == 1
    assert "'SG-OPT' seed 2: failed: RuntimeError: out of memory (a test)" in capsys.readouterr().out
    frame = collect(tracking_uri).set_index(["row", "seed"])
    assert frame.loc[("SG-OPT", 2), "status"] == "FAILED"
    assert frame.loc[("SG-OPT", 2), "error"] == "RuntimeError: out of memory (a test)"
    assert list(frame.loc[[("BERT-base", 1), ("SG-OPT", 1)], "status"]) == ["FINISHED", "FINISHED"]


def test_ctrl_c_marks_the_runs_killed_and_the_same_command_finishes_them(tmp_path, tracking_uri, tiny_bert,
                                                                          use_tiny_sts, monkeypatch, capsys):
    import trainers.training.glue as glue

    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=4, n_dev=20)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, {"tasks": ["rte"], "max_steps": 1})
    real = glue.fine_tune

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(glue, "fine_tune", interrupted)
    assert sweep_main(["glue", str(path), "--tracking-uri", tracking_uri]) == 130
    assert f"to finish the rest:\n  python -m sweep glue {path}" in capsys.readouterr().out
    assert list(collect(tracking_uri)["status"]) == ["KILLED"]
    monkeypatch.setattr(glue, "fine_tune", real)
    assert sweep_main(["glue", str(path), "--tracking-uri", tracking_uri]) == 0
    assert "(1 of 1 to run)" in capsys.readouterr().out
    assert sorted(collect(tracking_uri)["status"]) == ["FINISHED", "KILLED"]  # the table counts only FINISHED runs


def test_a_tracking_outage_during_glue_is_ridden_through_and_its_metrics_arrive_once_the_store_is_back(
        tmp_path, tracking_uri, tiny_bert, use_tiny_sts, monkeypatch, capsys):
    """GLUE writes its runs as the tracker does (sweep.tracking.trial_run): the first task's metrics, reported
    while the store does not answer, wait in the journal and are written once it answers again."""
    from mlflow import MlflowClient as Client

    import trainers.training.glue as glue
    from sweep.tracking import journal

    monkeypatch.chdir(tmp_path)  # the journal goes beside the variant's (local) Ray folder
    monkeypatch.setenv("GLUE_DATA_DIR", str(glue_folder(tmp_path / "glue", n_train=4, n_dev=20)))
    path = glue_spec_file(tmp_path, {"BERT-base": tiny_bert}, {"tasks": ["sst2", "cola"], "max_steps": 1})
    up, journalled = [True], []
    real_fine_tune, real_log_batch, real_save = glue.fine_tune, Client.log_batch, journal.PendingWrites._save

    def store_down_during_sst2(config, task, data, options, seed):
        up[0] = task != "sst2"  # down while sst2 is fine-tuned and reported, back for cola
        return real_fine_tune(config, task, data, options, seed)

    def log_batch(self, run_id, *args, **kwargs):
        if not up[0]:
            raise ConnectionError("the tracking server does not answer (a test)")
        return real_log_batch(self, run_id, *args, **kwargs)

    def save(self):
        journalled.append(len(self.events))
        real_save(self)

    monkeypatch.setattr(glue, "fine_tune", store_down_during_sst2)
    monkeypatch.setattr(Client, "log_batch", log_batch)
    monkeypatch.setattr(journal, "answers", lambda uri: up[0])
    monkeypatch.setattr(journal, "PROBE_EVERY_S", 0.0)
    monkeypatch.setattr(journal.PendingWrites, "_save", save)
    assert sweep_main(["glue", str(path), "--tracking-uri", tracking_uri]) == 0
    out = capsys.readouterr().out
    assert "does not answer" in out and "answers again" in out and journalled == [1]
    (run,) = [run for _, run in collect(tracking_uri).iterrows()]
    assert run["status"] == "FINISHED"
    for column in (Glue.test("sst2", Glue.ACCURACY), Glue.curve("sst2"), Glue.test("cola", Glue.MATTHEWS)):
        assert not math.isnan(run[column]), column
    assert not list(tmp_path.glob("ray_results/*/tracking_journal.json"))  # written: nothing left waiting
