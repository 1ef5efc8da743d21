"""Small things a reader of the plan and of an exported model card sees: no header without lines under it,
no empty grid point."""

from __future__ import annotations

from sweep.commands.plan import reference_lines
from sweep.run.models import model_card
from sweep.spec.sweep_spec import load_spec
from tests.conftest import write_spec
from trainers.training.checkpoint import FinalRecord

ROWS = {"name": "temp", "method": "simcse", "seeds": [1], "reference": "simcse",
        "rows": [{"name": "simcse"}, {"name": "simcse_t", "changes": ["temperature"], "set": {"temperature": 0.1}}]}


def test_the_reference_header_comes_only_with_rows_under_it(tmp_path):
    path = write_spec(tmp_path, ROWS)
    checked = reference_lines(load_spec(path, check_environment=False))
    assert checked[0].startswith("against the reference row 'simcse'") and "simcse_t" in checked[1]
    # Its reference row alone (as sct_transfer.yaml, refused where its transfer tasks are missing): no header.
    alone = write_spec(tmp_path, {**ROWS, "name": "alone", "rows": ROWS["rows"][:1]})
    assert reference_lines(load_spec(alone, check_environment=False)) == []


def card(axes: str) -> str:
    config = {"method": "simcse", "pooling": "cls", "pooling_layer": -1, "model_layers": 0, "model": "m"}
    identity = {"sweep": "s", "row": "SimCSE", "axes": axes, "seed": "42", "spec_file": "s.yaml", "spec_hash": "h",
                "git_commit": "c", "trial_id": "t"}
    return model_card(FinalRecord(config, {}, True), identity)


def test_the_model_card_says_none_where_a_trial_has_no_grid_point():
    assert "; grid point: none; seed: 42" in card("") and "grid point: ``" not in card("")
    assert "; grid point: `temperature=0.1`; seed: 42" in card("temperature=0.1")
