"""Bad input a new user gives: a clear one-line error naming the file, key or line, exit code 2,
no traceback, and nothing created or changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sweep.commands.cli import main as sweep_main
from trainers.data.sources import ALL_FILES
from trainers.evaluate_model import main as evaluate_main
from trainers.registry import METHODS, get_method

ROOT = Path(__file__).resolve().parent.parent


def spec(tmp_path: Path, tiny_bert: str, **changes) -> Path:
    raw = {
        "name": "bad",
        "method": "simcse",
        "base": {"model": tiny_bert, "max_steps": 4},
        "rows": [{"name": "a", "set": {}}, {"name": "b", "set": {"temperature": 0.1}},
                 {"name": "c", "set": {"method": "none"}}],
        **changes,
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def sts_copy(tmp_path, tiny_sts_dir, monkeypatch) -> Path:
    """A writable copy of the tiny STS files, in STS_DATA_DIR."""
    folder = tmp_path / "sts"
    shutil.copytree(tiny_sts_dir, folder)
    monkeypatch.setenv("STS_DATA_DIR", str(folder))
    return folder


def break_line(path: Path, line: int, column: int, value: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    fields = lines[line - 1].split("\t")
    fields[column] = value
    lines[line - 1] = "\t".join(fields)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda f: break_line(f, 3, 2, "n/a"), ":3: column 'score': expected a number in [0.0, 5.0], got 'n/a'"),
        (lambda f: break_line(f, 5, 2, "7.5"), ":5: column 'score': expected a number in [0.0, 5.0], got 7.5"),
        (lambda f: f.write_text("sentence1\tsentence2\tsubset\na\tb\tc\n", encoding="utf-8"),
         ":1: header lacks column(s) ['score'] (expected sentence1, sentence2, score, subset, got "
         "['sentence1', 'sentence2', 'subset'])"),
        (lambda f: f.write_text("", encoding="utf-8"),
         ": empty file (expected a header line with columns sentence1, sentence2, score, subset)"),
    ],
)
def test_evaluate_and_plan_name_a_bad_sts_file_and_line(damage, message, sts_copy, tiny_bert, tmp_path, capsys):
    broken = sts_copy / "sts13-test.tsv"
    damage(broken)
    assert evaluate_main(["--model", tiny_bert]) == 2
    err = capsys.readouterr().err
    assert err == f"evaluation set: {broken}{message}\n"  # one line, no traceback
    # The sweep reads the evaluation sets before Ray starts; a problem of every row is said once.
    assert sweep_main(["plan", str(spec(tmp_path, tiny_bert))]) == 2
    err = capsys.readouterr().err
    assert err.count(str(broken)) == 1 and "every row: evaluation set:" in err and message in err


def test_evaluate_refuses_a_missing_model_folder_and_a_hub_id_without_the_hub(capsys, tmp_path):
    assert evaluate_main(["--model", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == (f"model: '{tmp_path / 'nowhere'}' is not a local folder, "
                                       "nor a Hugging Face model id\n")
    assert evaluate_main(["--model", "someone/not-cached"]) == 2  # tests run with HF_HUB_OFFLINE=1
    assert ("'someone/not-cached' is not a local folder, not in the Hugging Face cache, "
            "and the hub cannot be reached") in capsys.readouterr().err


def test_a_model_folder_whose_config_names_no_model_is_refused_at_plan_time(tmp_path, tiny_bert, capsys):
    folder = tmp_path / "no-model-type"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    assert sweep_main(["plan", str(spec(tmp_path, tiny_bert)), "--set", f"model={folder}"]) == 2
    err = capsys.readouterr().err
    assert f"--set model={folder}: '{folder}': its config.json cannot be read as a model's config" in err
    assert "Traceback" not in err


def test_a_file_corpus_is_read_at_plan_time(tmp_path, tiny_bert, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"a fine sentence\nanother one\nbad \xff byte\n")
    assert sweep_main(["plan", str(spec(tmp_path, tiny_bert)), "--set", f"train_corpus={corpus}"]) == 2
    assert f"--set train_corpus={corpus}: {corpus}:3: not UTF-8 text" in capsys.readouterr().err


def test_a_key_written_twice_is_refused_with_its_line(tmp_path, capsys):
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\nmethod: simcse\nbase:\n  batch_size: 8\n  batch_size: 64\n", encoding="utf-8")
    assert sweep_main(["plan", str(path)]) == 2
    assert f"{path}: line 5, column 3: not valid YAML: key 'batch_size' written twice (first on line 4)" in (
        capsys.readouterr().err)


def test_table_specs_may_still_override_merged_keys():
    from sweep.spec.source import read_yaml

    assert read_yaml("a: &x {k: 1, j: 2}\nb:\n  <<: *x\n  k: 3\n")["b"] == {"k": 3, "j": 2}


def test_status_of_an_unknown_name_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["status", "nonesuch"]) == 2
    assert "no MLflow store at sqlite:///mlflow.db" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_problem_of_every_row_from_set_is_said_once_against_set(capsys):
    assert sweep_main(["plan", str(ROOT / "search_spaces/sg_opt_ablation.yaml"), "--set", "model=/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.count("/nonexistent") == 2  # the --set and the message, once
    assert "--set model=/nonexistent: '/nonexistent' is not a local folder" in err and ".yaml" not in err


def test_a_mistyped_row_method_gets_a_did_you_mean(tmp_path, tiny_bert, capsys):
    path = spec(tmp_path, tiny_bert, rows=[{"name": "x", "set": {"method": "sgg"}}])
    assert sweep_main(["plan", str(path)]) == 2
    assert ("rows[0].set.method: unknown method 'sgg'" in (err := capsys.readouterr().err)
            and "did you mean 'sg'?" in err)


def test_a_missing_bt_file_is_said_not_to_exist(tmp_path, capsys):
    path = ROOT / "search_spaces/sct_augmentations.yaml"
    assert sweep_main(["plan", str(path), "--set", f"bt_file={tmp_path / 'bt.tsv'}"]) == 2
    err = capsys.readouterr().err
    assert f"--set bt_file={tmp_path / 'bt.tsv'}: '{tmp_path / 'bt.tsv'}' does not exist" in err
    assert "needs bt_file" not in err


def test_sct_queues_a_budget_cannot_fill_are_a_plan_time_warning(capsys):
    path = ROOT / "search_spaces/sct_ablation.yaml"
    assert sweep_main(["plan", str(path), "--set", "max_steps=100", "--set", "eval_every=25"]) == 0
    err = capsys.readouterr().err
    assert "queue of k = 131,072 takes 1,024 steps to fill at 128 vectors per step" in err
    assert "takes 512 steps to fill at 256 vectors per step" in err  # one shared queue gets both views
    assert "'No instance queue (in-batch)'" not in err and "'No queue update'" not in err
    assert sweep_main(["plan", str(path), "--set", "max_steps=1100", "--set", "eval_every=25"]) == 0
    assert "queue" not in capsys.readouterr().err


def test_a_trial_that_scores_one_dev_state_is_a_plan_time_warning(capsys):
    """eval_every 50 past the smoke SimCSE's 40 steps: Hugging Face's grid scores only the last state. On the epoch
    grid, four epochs of 10 steps are scored at each epoch's end, so there is a choice and no warning; with
    final_state 'last' nothing is chosen (BERT-flow's STS16 target: 112 steps at eval_every 125)."""
    path = ROOT / "search_spaces/smoke.yaml"
    assert sweep_main(["plan", str(path), "--set", "eval_every=50"]) == 0
    assert "rows['SimCSE']: eval_every: STS-B dev is evaluated once (eval_every" in capsys.readouterr().err
    epochs = ["--set", "eval_grid=epoch", "--set", "train_limit=320", "--set", "epochs=4"]
    assert sweep_main(["plan", str(path), "--set", "eval_every=50", *epochs]) == 0
    assert "evaluated once" not in capsys.readouterr().err
    assert sweep_main(["plan", str(path), "--set", "eval_every=50", "--set", "final_state=last"]) == 0
    assert "evaluated once" not in capsys.readouterr().err  # the last state is kept: nothing to select


def test_every_shipped_sts_file_passes_the_check():
    from trainers.data.sources import SHIPPED_STS_DIR, sts_problems

    assert sts_problems(ALL_FILES, SHIPPED_STS_DIR) == []


@pytest.mark.parametrize("table", ["NO_SUCH_TABLE", "sg-bert-table5"])
def test_plots_refuse_a_table_that_is_not_a_grid_table(table, tmp_path, capsys):
    """An unknown --table (or a row table, which has no figure) exits 2 with one line and draws nothing."""
    import pandas as pd

    from reports import plots
    from results.schema import IDENTITY, IDENTITY_DTYPES

    results = tmp_path / "results.parquet"
    pd.DataFrame({name: pd.Series(dtype=IDENTITY_DTYPES[name]) for name in IDENTITY}).to_parquet(results)
    assert plots.main(["--results", str(results), "--table", table, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"--table {table}: no such grid table; grid tables: ")
    assert "sg-bert-figure1" in err and not list((tmp_path / "out").glob("*.png"))


@pytest.mark.parametrize("name", [name for name in METHODS if get_method(name).trains])
def test_a_missing_corpus_is_said_once_by_every_method_that_reads_it(name, tiny_bert, tmp_path):
    """The corpus is checked in one place (Method.environment_problems, for each stage that reads it): a method
    that checked it again would say it twice, one that read it unchecked would fail mid-trial."""
    method = get_method(name)
    gone = str(tmp_path / "gone.txt")
    extra = {"flow_batch": "sentences"} if name == "flow" else {}
    problems = method.environment_problems(method.resolve({"model": tiny_bert, "train_corpus": gone, **extra}))
    assert [p.key for p in problems if gone in p.message] == ["train_corpus"]


@pytest.mark.parametrize("name, settings", [("consert", {"supervision": "joint"}), ("sct", {"bt_file": "bt.tsv"}),
                                            ("simcse", {"positive": "bt1", "bt_file": "bt.tsv"})])
def test_a_config_that_reads_no_corpus_is_not_refused_for_one(name, settings, tiny_bert, tmp_path):
    """An NLI-only stage and a back-translation file replace the corpus: a missing one is not their problem."""
    method = get_method(name)
    gone = str(tmp_path / "gone.txt")
    config = method.resolve({"model": tiny_bert, "train_corpus": gone, **settings})
    assert [p for p in method.environment_problems(config) if p.key == "train_corpus"] == []
