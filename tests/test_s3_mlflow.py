"""An MLflow tracking server whose artifact store is a bucket (``mlflow server --artifacts-destination
s3://BUCKET/mlflow --serve-artifacts``), against moto's S3 server on loopback (:mod:`tests.s3_endpoint`): the
encoder a sweep logs when it ends lands in the bucket, and loads back through
``mlflow.sentence_transformers.load_model`` giving the vectors of ``sweep export``'s folder.

Only the server reaches the bucket (its environment names the endpoint); the driver has no S3 settings at all
and sends the artifacts through the server, as drivers on other machines of a cluster would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import ray

from results.record import Tag
from sweep.commands.cli import main
from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, spec_file
from tests.s3_endpoint import free_port, s3_endpoint

pytestmark = pytest.mark.slow

BUCKET = "tracking"
SENTENCES = ["A man plays a guitar.", "Two dogs run on the beach.", "The stock market fell today."]


def start_server(folder, endpoint) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder}/server.db",
         "--artifacts-destination", f"s3://{BUCKET}/mlflow", "--serve-artifacts", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        cwd=folder, env={**os.environ, **endpoint.env}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    while server.poll() is None:  # until it answers, however long a loaded machine takes
        try:
            urllib.request.urlopen(f"{url}/health", timeout=60)
            return server, url
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server exited {server.returncode} before it answered")


def test_a_sweeps_logged_encoder_lands_in_the_bucket_and_loads_back(tmp_path, tiny_bert, local_ray, monkeypatch):
    import mlflow
    import mlflow.sentence_transformers
    from sentence_transformers import SentenceTransformer

    for name in ("AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)  # the driver: no way to the bucket but the server
    path = spec_file(tmp_path, tiny_bert, "logged-s3", seeds=[1], rows=[{"name": "simcse", "set": {}}])
    with s3_endpoint(set_environ=False) as endpoint:
        endpoint.create_bucket(BUCKET)
        server, url = start_server(tmp_path, endpoint)
        try:
            run(SweepOptions(str(path), {"eval_precision": "fp32"}, tracking_uri=url, storage=str(tmp_path / "ray")))
            ray.shutdown()
            (trial,) = child_runs(url, "logged-s3")
            model_uri = trial.data.tags[Tag.MODEL_URI]  # logged when the sweep ended: its best trial's encoder
            keys = endpoint.keys(BUCKET, "mlflow/")
            # The logged model's files are objects in the bucket: its MLmodel and the encoder's weights.
            model_id = model_uri.rsplit("/", 1)[-1]
            logged = [key for key in keys if model_id in key]
            assert any(key.endswith("/MLmodel") for key in logged), keys
            assert any(key.endswith(".safetensors") for key in logged), logged
            # The model card goes with the trial's run, in the bucket too.
            assert any(key.endswith("/model_card/README.md") for key in keys), keys

            mlflow.set_tracking_uri(url)
            loaded = mlflow.sentence_transformers.load_model(model_uri)
            # Read back from the bucket, it gives the vectors of the trial's own export (from its checkpoint).
            out = tmp_path / "exported"
            assert main(["export", "logged-s3", "--out", str(out), "--tracking-uri", url]) == 0
            exported = SentenceTransformer(str(out), device="cpu")
            np.testing.assert_allclose(loaded.encode(SENTENCES), exported.encode(SENTENCES), rtol=1e-5, atol=1e-6)
            # Nothing of the artifacts was kept on the server's disk: the bucket is their only store.
            assert not {"mlartifacts", "mlruns"} & {p.name for p in tmp_path.iterdir()}, list(tmp_path.iterdir())
        finally:
            server.terminate()
            server.wait(timeout=60)
