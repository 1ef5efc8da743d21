import json

import pytest

from trainers.data.sources import TEST_SETS
from trainers.evaluate_model import main


def test_command_prints_the_seven_set_table(tiny_bert, use_tiny_sts, capsys):
    assert main(["--model", tiny_bert, "--pooling", "mean"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:9]] == list(TEST_SETS)
    assert lines[9].startswith("avg")


def test_command_json_and_layer_knob(tiny_bert, use_tiny_sts, capsys):
    main(["--model", tiny_bert, "--pooling", "max", "--pooling-layer", "0", "--json"])
    embeddings_layer = json.loads(capsys.readouterr().out)
    main(["--model", tiny_bert, "--pooling", "max", "--json"])
    last_layer = json.loads(capsys.readouterr().out)
    assert embeddings_layer["test_avg_spearman"] != last_layer["test_avg_spearman"]


def test_command_rejects_bad_knob_values(tiny_bert, capsys):
    assert main(["--model", tiny_bert, "--eval-batch-size", "-1"]) == 2
    assert "eval_batch_size: expected a value >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--pooling-layer", "two"])
