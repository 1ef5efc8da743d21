"""`sweep plan` says when a spec's model is GPU-size (mBERT, BERT-base, BERT-large), from the parameter
count of its config (trainers.models.pretrained.ModelShape), without torch."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from sweep.commands.cli import main
from sweep.commands.plan import GPU_SIZE_PARAMETERS
from trainers.models.pretrained import BUNDLED_MODEL, ModelShape, model_config

# Published parameter counts (Hugging Face model cards) and the config fields of each model.
PUBLISHED = {
    "bert-base-uncased": (110e6, ModelShape(12, 768, (), "bert", 30522, 3072)),
    "bert-base-multilingual-cased": (178e6, ModelShape(12, 768, (), "bert", 119547, 3072)),
    "bert-large-uncased": (336e6, ModelShape(24, 1024, (), "bert", 30522, 4096)),
    "prajjwal1/bert-small": (29e6, ModelShape(4, 512, (), "bert", 30522, 2048)),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_is_within_three_percent_of_the_published_one(name):
    published, shape = PUBLISHED[name]
    assert shape.parameters() == pytest.approx(published, rel=0.03)  # published counts are rounded
    assert (shape.parameters() >= GPU_SIZE_PARAMETERS) == (published > 100e6)


def test_bundled_model_count_and_cut_layers():
    shape = model_config(BUNDLED_MODEL)
    assert shape.parameters() == pytest.approx(22.7e6, rel=0.02)  # all-MiniLM-L6-v2's model card
    per_layer = (shape.parameters() - shape.parameters(2)) / 4
    assert shape.parameters(1) == pytest.approx(shape.parameters() - 5 * per_layer)


def plan(tmp_path, model: str, method: str, capsys) -> str:
    spec = {"name": "sized", "method": method, "base": {"model": model, "pooling": "mean"}}
    path = tmp_path / "sized.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert main(["plan", str(path)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("method,memory", [
    ("none", "its untuned trials hold 0.4 GB of fp32 weights"),
    ("simcse", "training holds 1.7 GB (fp32 weights, gradients, Adam) before activations"),
])
def test_plan_says_a_model_is_gpu_size(tmp_path, tiny_bert, use_tiny_sts, capsys, method, memory):
    assert "GPU-size" not in plan(tmp_path, tiny_bert, method, capsys)
    # The tiny model's folder with BERT-base's config: the plan reads only the config.
    base = tmp_path / "bert-base-shaped"
    shutil.copytree(tiny_bert, base)
    config = json.loads((base / "config.json").read_text())
    config.update(num_hidden_layers=12, hidden_size=768, intermediate_size=3072, vocab_size=30522)
    (base / "config.json").write_text(json.dumps(config))
    lines = [line for line in plan(tmp_path, str(base), method, capsys).splitlines() if "GPU-size" in line]
    assert lines == [f"GPU-size model: {base} has about 108M parameters; {memory}; time its trials here with "
                     f"`python -m sweep plan {tmp_path / 'sized.yaml'} --estimate`, and give them a GPU with "
                     "resources: {cpu: 4, gpu: 1} (docs/gpu.md)"]
