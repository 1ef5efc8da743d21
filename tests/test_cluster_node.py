"""What a cluster node needs from the driver: every data folder's variable forwarded to the trials'
workers, and a summary that points a tracking server's users at that server's own UI."""

from __future__ import annotations

from types import SimpleNamespace

from sweep.commands.summary import next_steps
from sweep.run.engine import FORWARDED_ENV


def test_every_data_folder_a_trial_reads_is_forwarded_to_its_worker():
    assert {"STS_DATA_DIR", "SENTEVAL_DATA_DIR", "RERANKING_DATA_DIR", "MULTILINGUAL_STS_DATA_DIR", "WORDNET_DIR",
            "SWEEP_FROZEN_OUTPUTS_DIR", "SWEEP_SHARED_STAGES_DIR", "HF_HUB_OFFLINE", "HF_HOME"} <= set(FORWARDED_ENV)
    assert len(set(FORWARDED_ENV)) == len(FORWARDED_ENV)


def test_the_summary_opens_a_tracking_servers_own_ui():
    spec = SimpleNamespace(name="smoke", spec_hash="abc123")
    served = next_steps(spec, "7", "http://tracking.example:5000/", False).splitlines()[-1]
    assert served.startswith("  open http://tracking.example:5000/#/experiments/7/runs?") and "mlflow ui" not in served
    local = next_steps(spec, "7", "sqlite:///mlflow.db", False).splitlines()[-1]
    assert local.startswith("  mlflow ui --backend-store-uri sqlite:///mlflow.db    then open http://127.0.0.1:5000/")
