"""Exports of a 4-layer model (README, Keeping and using the trained encoders).

On a 2-layer model ``first_last_avg`` and ``last2avg`` average the same two layers, so a mix-up of
layers cannot show; here they differ. For each pooling of a real sweep's trials (cls of a middle layer,
max, first_last_avg, last2avg, a ``model_layers`` cut, and the pooler over a middle layer), the vectors of the
exported folder, loaded by sentence-transformers and by ``SentenceEncoder.from_exported``, equal those of the
trial's own encoder pooled as the README defines it; the model logged to the trial's MLflow run gives the
export's vectors.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import mlflow.sentence_transformers
import pytest
import torch
from transformers import AutoModel

from sweep.commands.cli import main
from sweep.run.engine import SweepOptions, run
from tests.conftest import build_tiny_bert, child_runs, fresh_ray, spec_file
from tests.reference_encoding import reference_vectors
from trainers.models.encoder import SentenceEncoder
from trainers.training.checkpoint import ENCODER_DIR, FINAL_RECORD

pytestmark = pytest.mark.slow
NAME = "layers"
LAYERS = 4
ROWS = [
    {"name": "cls of layer 2", "set": {"pooling": "cls", "pooling_layer": 2}},
    {"name": "max", "set": {"pooling": "max"}},
    {"name": "first_last_avg", "set": {"pooling": "first_last_avg"}},
    {"name": "last2avg", "set": {"pooling": "last2avg"}},
    {"name": "cut to 3 layers", "set": {"model_layers": 3, "pooling": "last2avg"}},
    {"name": "pooler of layer 2", "set": {"pooling": "pooler", "pooling_layer": 2}},
]
SENTENCES = ["A man is playing a guitar on the stage.", "Dogs run.", "The stock market fell sharply today, again.",
             "A woman slices an onion in the kitchen."]


@pytest.fixture(scope="module")
def exported_sweep(tmp_path_factory, tiny_sts_dir) -> tuple[str, Path]:
    """A finished sweep of one trained trial per row on a 4-layer tiny BERT, every encoder logged to MLflow."""
    folder = tmp_path_factory.mktemp("layers")
    model = build_tiny_bert(folder / "four-layer-bert", seed=2, layers=LAYERS)
    uri = f"sqlite:///{folder}/mlflow.db"
    path = spec_file(folder, str(model), NAME, rows=ROWS, seeds=[1], log_models=True,
                     base={"model": str(model), "batch_size": 8, "train_limit": 48, "max_steps": 2, "eval_every": 2,
                           "learning_rate": 1e-3, "eval_precision": "fp32"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
        with fresh_ray():
            run(SweepOptions(str(path), {}, tracking_uri=uri, storage=str(folder / "ray")))
    return uri, folder


def test_the_four_layer_model_tells_the_poolings_apart(exported_sweep):
    """What the other test compares would catch a mix-up: the poolings give other vectors on 4 layers."""
    uri, _ = exported_sweep
    (trial,) = [r for r in child_runs(uri, NAME) if r.data.tags["sweep.row"] == "first_last_avg"]
    encoder = Path(trial.data.tags["sweep.checkpoint"]) / ENCODER_DIR
    first_last, last_two = (reference_vectors(encoder, pooling, -1, SENTENCES)
                            for pooling in ("first_last_avg", "last2avg"))
    assert not torch.allclose(first_last, last_two, atol=1e-3)
    assert not torch.allclose(reference_vectors(encoder, "cls", 2, SENTENCES),
                              reference_vectors(encoder, "cls", -1, SENTENCES), atol=1e-3)


@pytest.mark.parametrize("row", [row["name"] for row in ROWS])
def test_exports_give_the_trials_own_vectors_everywhere(exported_sweep, row):
    from sentence_transformers import SentenceTransformer

    uri, folder = exported_sweep
    (trial,) = [r for r in child_runs(uri, NAME) if r.data.tags["sweep.row"] == row]
    checkpoint = Path(trial.data.tags["sweep.checkpoint"])
    config = json.loads((checkpoint / FINAL_RECORD).read_text())["config"]
    expected = reference_vectors(checkpoint / ENCODER_DIR, config["pooling"], config["pooling_layer"], SENTENCES)

    out = folder / "exports" / row.replace(" ", "-")
    assert main(["export", NAME, "--row", row, "--out", str(out), "--tracking-uri", uri]) == 0
    layers = config["model_layers"] or LAYERS
    assert AutoModel.from_pretrained(out).config.num_hidden_layers == layers  # a cut is saved cut

    exported = SentenceTransformer(str(out), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    torch.testing.assert_close(exported, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(SentenceEncoder.from_exported(out).encode(SENTENCES), expected, atol=1e-5, rtol=1e-4)

    mlflow.set_tracking_uri(uri)
    logged = mlflow.sentence_transformers.load_model(trial.data.tags["sweep.model_uri"])
    torch.testing.assert_close(logged.encode(SENTENCES, convert_to_tensor=True), exported, atol=0.0, rtol=0.0)
