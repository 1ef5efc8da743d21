"""`sweep plan`'s disk estimate counts an encoder's weights from its safetensors header (no torch): the
same count as building the model on the meta device, whole and cut to fewer layers."""

from pathlib import Path

import pytest

from sweep.commands.plan import _meta_bytes, encoder_bytes
from tests.conftest import build_tiny_bert


@pytest.mark.parametrize("layers", [0, 1, 3])
def test_the_header_count_equals_the_models_parameters(tmp_path: Path, layers: int):
    model = str(build_tiny_bert(tmp_path / "bert", layers=4))
    assert (Path(model) / "model.safetensors").is_file()  # the header path is the one taken
    assert encoder_bytes(model, layers) == _meta_bytes(model, layers)
