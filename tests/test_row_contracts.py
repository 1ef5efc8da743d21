"""Row contracts: every row of every shipped table differs from its table's reference row in exactly the knobs
its contract names, and a row that breaks its contract is refused, naming the table, the row and the knob."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from reports.table_specs import TableSpecError, load_table_specs
from sweep.commands.cli import main as sweep_main
from sweep.spec.contracts import differences, exempt
from sweep.spec.sweep_spec import SpecError, load_spec
from trainers.knobs import ConfigError
from trainers.metrics import SuiteName
from trainers.registry import METHODS, get_method

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "search_spaces").glob("*.yaml"))
TABLES = load_table_specs()


def test_every_spec_of_several_rows_names_its_reference_and_each_row_its_changes():
    for path in SPECS:
        spec = load_spec(path, check_environment=False)
        if len(spec.rows) > 1:
            assert spec.reference is not None, path.name
            assert set(spec.reference_differences) | {spec.reference.row} >= {row.name for row in spec.rows}, path.name


def own_differences(reference: dict, config: dict) -> set[str]:
    """This test's own comparison of two resolved configs, not sweep.spec.contracts': every key both hold (``method``
    included) whose values differ, but the evaluation suites (the table's, not a row's)."""
    return {key for key in set(reference) & set(config) if key != SuiteName.KEY and reference[key] != config[key]}


NEVER_A_CHANGE = {"seed", "max_steps", "eval_every", "eval_max_pairs"}
"""Written out here, not read from sweep.spec.contracts: the seed and the knobs a budget caps."""


@pytest.mark.parametrize("name", [name for name, table in TABLES.items() if table.kind == "rows"])
def test_each_row_of_a_table_names_every_difference_from_the_tables_reference(name):
    """Rows drawn from several search spaces are compared with the one reference row, resolved from its own
    search space, by this test's own comparison: every knob that differs (the bookkeeping and never-a-change
    knobs aside) is named in the row's changes or follows_method, and shown by sweep plan (the spec's
    reference_differences); a row that switches between two trained methods names its views too."""
    table = TABLES[name]
    if len(table.rows) < 2:
        return
    reference = table.reference
    assert reference is not None, f"{name}: a paper table of several rows names its reference row"
    source = load_spec(reference.spec, check_environment=False) if reference.spec else table.sweep
    reference_config, reference_method = source.row_config(reference.row), source.method_of(reference.row)
    for line in (row for shown in table.rows for row in table.sweep_rows(shown)):
        _, sweep = table.sweep_of(line)
        row = sweep.row(line)
        if row.changes is None:  # the reference row itself
            assert line == reference.row and reference.spec is None
            continue
        method = sweep.method_of(line)
        found = own_differences(reference_config, sweep.row_config(line))
        bookkeeping = method.all_knobs.bookkeeping | reference_method.all_knobs.bookkeeping
        named = set(row.changes) | set(row.follows_method)
        unnamed = found - named - NEVER_A_CHANGE - bookkeeping
        assert not unnamed, f"{name}: row {line!r} differs from {reference.row!r} in {sorted(unnamed)}, not named"
        assert found - {"seed"} <= set(sweep.reference_differences[line]), \
            f"{name}: row {line!r}: sweep plan shows {sorted(sweep.reference_differences[line])}, not all of {found}"
        switched_trained = method.name != reference_method.name and method.trains and reference_method.trains
        assert ("views" in named) == switched_trained, f"{name}: row {line!r}: views named {named}"
        # a knob its method tunes per model may meet the reference's value on this model (DCLR's batch, SCT's 128)
        per_model = set(method.settings_by_model(sweep.row_config(line))[1]) if method.settings_by_model else set()
        assert named - {"views"} - per_model <= found, \
            f"{name}: row {line!r} names {sorted(named)}, differs in {sorted(found)}"


def other_values(knob) -> list:
    """Valid values of ``knob`` other than its default (each of its other choices), empty where none is found."""
    if knob.choices:
        return [choice for choice in knob.choices if choice != knob.default]
    if knob.kind is bool:
        return [not knob.default]
    if knob.kind in (int, float):
        for value in (knob.default + 1, knob.default / 2, knob.low, knob.high):
            if value is not None and value != knob.default and knob.problem(knob.kind(value)) is None:
                return [knob.kind(value)]
        return []
    return [f"{knob.default}-other"]


COMPANIONS = [{}, {"patience": 0}, {"final_state": "best_dev"}, {"pooling": "mean"}, {"torch_compile": True},
              {"pad_to_max_length": True}, {"pooling": "cls"}, {"early_stopping_rule": "no_gain"},
              {"selection_metric": "stsb"}, {"pooling": "mean", "selection_pooling": "same"},
              {"adam_bias_correction": True}, {"adam_bias_correction": False},
              {"adam_implementation": "transformers"}]
"""Settings that let one knob's other value resolve: final_state 'last' refuses patience, eval_grid 'stage' the
rule 'epoch_ends', sts_source 'hub' the selection_metric 'avg_sts', pooling_skip_frequent a
non-averaging pooling (DCLR's selection_pooling 'pooler' too), torch_compile_mode an uncompiled transformer,
cuda_graph batches of many shapes, a flow's selection_pooling any but its pooling, adam_implementation 'torch'
Adam's bias correction and 'bert_tf' none (so a flow's correction needs another implementation)."""
KNOBS_OF_EVERY_METHOD = [(name, knob.name) for name, method in METHODS.items() for knob in method.all_knobs]


@pytest.mark.parametrize("method_name, knob_name", KNOBS_OF_EVERY_METHOD)
def test_differences_reports_each_knob_of_every_method(method_name, knob_name):
    """A differences() that skips any one knob (weight_decay, say) fails here: a config that differs from the
    method's defaults in that knob alone is reported as differing in it, and in nothing else."""
    method = get_method(method_name)
    knob = method.all_knobs[knob_name]
    values = other_values(knob)
    assert values, f"{method_name}.{knob_name}: this test finds no other value"
    # A value the whole config refuses alone needs its companion (pooling_skip_frequent); the first other value
    # that resolves beside one, whose reference resolves with the companion alone, is compared.
    tries = [(value, base) for value in values for base in COMPANIONS if knob_name not in base]
    row = None
    for value, base in tries:
        try:
            row, reference = method.resolve({knob_name: value, **base}), method.resolve(base)
            break
        except ConfigError:
            continue
    assert row is not None, f"{method_name}.{knob_name}: {values!r} are refused with every companion"
    assert differences(reference, method, row, method) == {knob_name: (reference[knob_name], value)}


def test_a_switched_method_reports_its_defaults_and_its_views():
    """SCT -> SimCSE: every shared knob whose defaults differ (this test's own comparison), and the views."""
    sct, simcse = get_method("sct"), get_method("simcse")
    reference, row = sct.resolve({}), simcse.resolve({})
    found = differences(reference, sct, row, simcse)
    assert set(found) == own_differences(reference, row) | {"views"}
    assert {"train_corpus", "epochs", "max_seq_length", "batch_size", "learning_rate", "pooling"} <= set(found)
    assert found["views"] == ("shuffle + feature_cutoff", "the sentence twice, two dropout masks")


def test_a_row_that_also_sets_adam_beta1_is_refused(tmp_path):
    project = project_copy(tmp_path)
    edit_row(project / "search_spaces/sct_main.yaml", "SimCSE",
             set={"method": "simcse", "train_corpus": "sts_all_sentences", "adam_beta1": 0.5})
    with pytest.raises(SpecError, match=r"row 'SimCSE' differs from the reference row 'SCT' in "
                                        r"adam_beta1: 0.9 -> 0.5,"):
        load_spec(project / "search_spaces/sct_main.yaml", check_environment=False)


def test_a_default_that_follows_the_method_must_be_named_with_its_source(tmp_path):
    """SimCSE's one epoch is listed in follows_method; dropped from it, the row is refused naming epochs."""
    project = project_copy(tmp_path)
    own_defaults = ["adam_epsilon", "adam_bias_correction", "fp16_schedule", "weight_decay", "eval_grid", "patience",
                    "early_stopping_rule", "eval_max_length"]
    edit_row(project / "search_spaces/sct_main.yaml", "SimCSE", follows_method=[
        "pooling", "max_seq_length", "batch_size", "learning_rate", *own_defaults, "warmup_ratio", "views"])
    with pytest.raises(SpecError, match=r"row 'SimCSE' differs from the reference row 'SCT' in epochs: 10 -> 1, which"):
        load_spec(project / "search_spaces/sct_main.yaml", check_environment=False)
    edit_row(project / "search_spaces/sct_main.yaml", "SimCSE", follows_method=[
        "pooling", "max_seq_length", "batch_size", "epochs", "learning_rate", *own_defaults, "warmup_ratio", "views"],
        set={"method": "simcse", "train_corpus": "sts_all_sentences", "epochs": 2})
    with pytest.raises(SpecError, match=r"lists epochs in follows_method, but sets it \(2, simcse's own for its "
                       r"model: 1\)"):
        load_spec(project / "search_spaces/sct_main.yaml", check_environment=False)


def project_copy(tmp_path: Path) -> Path:
    """The search spaces and table specs, to break one on purpose."""
    shutil.copytree(ROOT / "search_spaces", tmp_path / "search_spaces")
    (tmp_path / "reports").mkdir()
    shutil.copy(ROOT / "reports" / "table_specs.yaml", tmp_path / "reports" / "table_specs.yaml")
    return tmp_path


def edit_row(path: Path, row_name: str, **changes) -> None:
    raw = yaml.safe_load(path.read_text())
    row = next(row for row in raw["rows"] if row["name"] == row_name)
    row.update(changes)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_a_knob_added_to_one_row_fails_naming_the_table_the_row_and_the_knob(tmp_path):
    project = project_copy(tmp_path)
    edit_row(project / "search_spaces/sct_text_views.yaml", "Synonym replacement",
             set={"view1": "synonym", "view2": "synonym", "learning_rate": 3e-5})
    with pytest.raises(TableSpecError) as raised:
        load_table_specs(project / "reports/table_specs.yaml", project)
    message = str(raised.value)
    assert "table 'sct-table4'" in message and "row 'Synonym replacement'" in message
    assert "learning_rate: 0.0005 -> 3e-05" in message and "do not name" in message


def test_a_base_that_one_spec_of_a_table_drops_fails(tmp_path):
    """SCT Table 4's rows come from three specs: one that loses Table 1's settings differs in them."""
    project = project_copy(tmp_path)
    path = project / "search_spaces/sct_augmentations.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["base"] = {"model_layers": 2}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(TableSpecError, match=r"(?s)sct-table4.*queue_size: 131072 -> 65536.*tau_ref: 0.03 -> 0.02"):
        load_table_specs(project / "reports/table_specs.yaml", project)


def test_a_change_the_row_does_not_make_fails(tmp_path):
    project = project_copy(tmp_path)
    edit_row(project / "search_spaces/sg_opt_ablation.yaml", "tau = 0.1", changes=["temperature", "reg_lambda"])
    with pytest.raises(SpecError, match=r"row 'tau = 0.1' names \['reg_lambda'\] in its changes or follows_method, "
                                        r"but does not differ"):
        load_spec(project / "search_spaces/sg_opt_ablation.yaml", check_environment=False)


def test_rows_from_several_search_spaces_need_a_reference(tmp_path):
    project = project_copy(tmp_path)
    for name in ("sct_ablation.yaml", "sct_text_views.yaml", "sct_augmentations.yaml"):
        path = project / "search_spaces" / name
        raw = yaml.safe_load(path.read_text())
        raw.pop("reference")
        for row in raw["rows"]:
            row.pop("changes", None)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(TableSpecError, match="sct-table4.*names no reference row: the table's rows come from several"):
        load_table_specs(project / "reports/table_specs.yaml", project)


def test_tables_rows_must_share_one_reference(tmp_path):
    project = project_copy(tmp_path)
    path = project / "search_spaces/sct_text_views.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["reference"] = "Synonym replacement"
    raw["rows"][1].pop("changes")
    raw["rows"][0]["changes"] = ["view1", "view2", "mlm_model"]
    raw["rows"][3]["changes"] = ["rewrite_views"]  # its synonym views are the new reference's
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(TableSpecError, match="different reference rows"):
        load_table_specs(project / "reports/table_specs.yaml", project)


def test_references_of_other_names_are_one_where_they_are_the_same_trial(tmp_path):
    """SG-BERT Table 1 draws its BT row from Table 7's spec, whose 'Contrastive (SG-OPT)' is Table 1's 'SG-OPT'
    (the same config): one reference, the table's own. Trained at another temperature, it is another one."""
    table1 = load_table_specs()["sg-bert-table1"]
    assert (table1.reference.row, table1.reference.spec) == ("SG-OPT", None)
    assert table1.sweep_of("Contrastive (BT)")[1].name == "sg_bt"
    project = project_copy(tmp_path)
    path = project / "search_spaces/sg_bt.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["base"] = {"temperature": 0.02}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(TableSpecError, match="sg-bert-table1.*different reference rows .'SG-OPT' of sg_main.yaml, "
                                             "'Contrastive .SG-OPT.' of sg_bt.yaml"):
        load_table_specs(project / "reports/table_specs.yaml", project)


def spec_with(tmp_path: Path, **keys) -> Path:
    raw = {"name": "contract", "method": "sg", "rows": [{"name": "SG-OPT", "set": {}},
                                                          {"name": "SG", "set": {"loss": "sg"}}], **keys}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize("keys, expected", [
    ({"reference": "SG-OPT"}, r"rows\[1\]: row 'SG' needs 'changes'"),
    ({"reference": "Nope"}, "reference: 'Nope' is not a row of this spec"),
    ({"reference": {"row": "SG-OPT", "spec": "missing.yaml"},
      "rows": [{"name": "SG", "changes": ["loss"], "set": {"loss": "sg"}}]},
     "reference: .*missing.yaml cannot be read"),
    ({"reference": ["SG-OPT"]}, "reference: expected a row name or"),
])
def test_bad_contracts_are_refused_with_exit_2(tmp_path, capsys, keys, expected):
    assert sweep_main(["plan", str(spec_with(tmp_path, **keys))]) == 2
    assert re.search(expected, capsys.readouterr().err)


def test_changes_without_a_reference_and_unknown_knobs_are_refused(tmp_path, capsys):
    path = spec_with(tmp_path, rows=[{"name": "SG", "changes": ["los"], "set": {"loss": "sg"}}])
    assert sweep_main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "rows[0].changes.los: unknown knob; did you mean 'loss'?" in err
    assert "reference: rows declare changes, but the spec names no reference row" in err


def test_exempt_knobs_are_the_seed_the_budgets_caps_and_bookkeeping():
    assert exempt(get_method("sg")) == {"seed", "max_steps", "eval_every", "eval_max_pairs", "checkpoint_every",
                                        "share_frozen_outputs", "frozen_outputs_dir", "frozen_outputs_gb"}


def test_plan_prints_each_rows_difference_even_where_the_spec_cannot_run_here(capsys):
    """sg_senteval needs SentEval's data and the hub; its plan still says what its rows mean."""
    sweep_main(["plan", str(ROOT / "search_spaces/sg_senteval.yaml")])
    out = capsys.readouterr().out
    assert "against the reference row 'SG-OPT' of sg_main.yaml" in out
    assert ("SG-OPT            train_corpus: 'stsb_sentences' -> 'nli_sentences'; view_pooling: 'max' -> 'mean'; "
            "skip_first_layers: 0 -> 4") in out
    assert "No tuning (Mean)  method: 'sg' -> 'none'; pooling: 'cls' -> 'mean'" in out


def test_a_substitute_reference_is_named_in_the_caption():
    assert "Reference row 'SCT (default)' stands in for the paper's SCT, whose views are two back-translations" \
        in TABLES["sct-table4"].caption


def test_only_the_row_without_bert_f_dropout_tables_bert_fs_views():
    """The reference row runs BERT_F with dropout on each step's batch (no table); the row without dropout
    computes its views once, into a table."""
    from trainers.registry import get_method

    spec = load_spec(ROOT / "search_spaces/sg_variants.yaml", check_environment=False)
    sg = get_method("sg")
    assert sg.frozen_table(spec.row_config("SG-OPT (paper: max-pooled views)")) is None
    assert sg.frozen_table(spec.row_config("BERT_F without dropout (views tabled once)")) is not None


def test_a_reference_of_another_spec_says_what_that_spec_says_it_stands_in_for():
    ablation = load_spec(ROOT / "search_spaces/sct_ablation.yaml", check_environment=False)
    augmentations = load_spec(ROOT / "search_spaces/sct_augmentations.yaml", check_environment=False)
    assert augmentations.reference.spec == ablation.path and augmentations.reference.row == ablation.reference.row
    assert (augmentations.reference.stands_in_for == ablation.reference.stands_in_for
            and ablation.reference.stands_in_for)


def test_dclr_variants_last_row_is_simcses_path_the_others_one_knob_each():
    """Each row but the reference and the last moves one knob of the authors' encoding path to SimCSE's; the
    last moves all of them, and to the same values."""
    spec = load_spec(ROOT / "search_spaces/dclr_variants.yaml", check_environment=False)
    single_rows = spec.rows[1:-1]
    moved = {knob: value for row in single_rows for knob, value in row.overrides.items()}
    assert all(len(row.overrides) == 1 for row in single_rows) and len(moved) == len(single_rows)
    assert dict(spec.rows[-1].overrides) == moved
    simcse = load_spec(ROOT / "search_spaces/smoke.yaml", check_environment=False).row_config("SimCSE")
    last = spec.row_config(spec.rows[-1].name)
    assert last["train_pooling"] == "same" and last["selection_pooling"] == "same"
    assert last["attend_to_padding"] is False and last["complementary_dropout"] is False
    assert last["selection_batches"] == "distinct"  # the dev sentences batched as SimCSE's evaluations batch them
    assert last["pooling"] == simcse["pooling"] == "cls"
