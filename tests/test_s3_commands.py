"""The commands after a sweep whose storage is a bucket (``--storage s3://BUCKET/sweeps``), against moto's S3
server on loopback (:mod:`tests.s3_endpoint`): ``sweep export`` and ``sweep evaluate`` read a trial's
checkpoint from the bucket, retention (``keep_models``) deletes the checkpoints it does not keep there, and a
sweep that reuses a finished trial points at that trial's checkpoint in the bucket, exports it and leaves it
alone.

One tiny sweep (an untuned row and a SimCSE row of two seeds, ``keep_models: best_per_row``) runs once for
the module; nothing of it is written to a local folder but MLflow's store, so whatever a command reads back
came from the bucket.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from results.record import ModelState, Tag
from sweep.commands.cli import main
from sweep.commands.status import trial_rows
from sweep.run.engine import SweepOptions, run
from tests.conftest import child_runs, fresh_ray, spec_file
from tests.s3_endpoint import s3_endpoint
from tests.test_sweep_evaluate import PEARSON, multilingual_fixture
from trainers.models.encoder import SentenceEncoder
from trainers.suites import multilingual_sts
from trainers.training.checkpoint import CHECKPOINT_SEAL, ENCODER_DIR, FINAL_RECORD, checkpoint_index

pytestmark = pytest.mark.slow

BUCKET, NAME = "sweeps", "s3cmds"
STORAGE = f"s3://{BUCKET}/sweeps"


@pytest.fixture(scope="module")
def s3_sweep(tmp_path_factory, tiny_bert, tiny_sts_dir):
    """The sweep, run once into the bucket: (endpoint, tracking URI, folder, {(row, seed): (export, trial)})."""
    folder = tmp_path_factory.mktemp("s3-commands")
    tracking_uri = f"sqlite:///{folder}/mlflow.db"
    with pytest.MonkeyPatch.context() as patch, s3_endpoint() as endpoint:
        patch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
        patch.chdir(folder)  # anything written to a relative local path would land here, and is looked for
        endpoint.create_bucket(BUCKET)
        path = spec_file(folder, tiny_bert, NAME, keep_models="best_per_row", max_concurrent_trials=1)
        with fresh_ray():
            run(SweepOptions(str(path), {"eval_precision": "fp32"}, tracking_uri=tracking_uri, storage=STORAGE))
        states = {(r["row"], r["seed"]): (r["export"], r["trial"]) for r in trial_rows(NAME, tracking_uri)}
        yield endpoint, tracking_uri, folder, states


def runs_by_trial(tracking_uri: str, name: str) -> dict[str, object]:
    return {r.data.tags[Tag.TRIAL_ID]: r for r in child_runs(tracking_uri, name)}


def checkpoint_key(uri: str) -> str:
    """The bucket key prefix of a checkpoint URI the tracker recorded (``s3://BUCKET/KEY``)."""
    assert uri.startswith(f"s3://{BUCKET}/"), uri
    return uri[len(f"s3://{BUCKET}/"):].split("?")[0].rstrip("/")


def kept_and_deleted(states) -> tuple[str, str]:
    simcse = {state: trial for (row, _), (state, trial) in states.items() if row == "simcse"}
    return simcse["yes"], simcse["deleted"]


def test_retention_deletes_in_the_bucket_what_keep_models_does_not_keep(s3_sweep):
    """Each trained trial keeps only its final checkpoint in the bucket (its resume states deleted); of the
    SimCSE row only the best trial keeps its encoder there; the untuned trial stores no weights."""
    endpoint, tracking_uri, folder, states = s3_sweep
    kept, deleted = kept_and_deleted(states)
    runs = runs_by_trial(tracking_uri, NAME)
    assert {trial: r.data.tags[Tag.MODEL] for trial, r in runs.items()} == {
        kept: ModelState.KEPT, deleted: ModelState.DELETED, states[("untuned", "1")][1]: ModelState.UNTRAINED}
    keys = endpoint.keys(BUCKET, "sweeps/")
    assert not list(folder.glob("**/checkpoint_*")), "a checkpoint was written to a local folder"
    for trial in (kept, deleted):
        final = checkpoint_key(runs[trial].data.tags[Tag.CHECKPOINT])
        trial_folder, _, final_name = final.rpartition("/")
        assert checkpoint_index(final_name) >= 1  # step 2's resume state was stored before it
        # The trial's checkpoints in the bucket: only the final one is left.
        left = {key[len(trial_folder) + 1:].split("/")[0] for key in keys if key.startswith(trial_folder + "/")}
        assert {name for name in left if checkpoint_index(name) is not None} == {final_name}, (trial, left)
        # (pyarrow leaves an emptied folder as its marker object, "FOLDER/": no file in it)
        inside = {key[len(final) + 1:] for key in keys if key.startswith(final + "/")} - {""}
        if trial == kept:
            assert {FINAL_RECORD, CHECKPOINT_SEAL, f"{ENCODER_DIR}/model.safetensors"} <= inside, inside
        else:
            assert inside == set(), inside  # its encoder deleted, with the rest of the checkpoint
    # The refusal of what was deleted comes from the tag, before the bucket is read.
    assert main(["export", NAME, "--trial", deleted, "--out", str(folder / "gone"),
                 "--tracking-uri", tracking_uri]) == 2


def test_export_reads_the_kept_trials_encoder_from_the_bucket(s3_sweep, tmp_path):
    from sentence_transformers import SentenceTransformer

    endpoint, tracking_uri, _, states = s3_sweep
    kept, _ = kept_and_deleted(states)
    out = tmp_path / "exported"
    assert main(["export", NAME, "--trial", kept, "--out", str(out), "--tracking-uri", tracking_uri]) == 0
    # The exported weights are the ones stored in the bucket's final checkpoint, tensor for tensor.
    final = checkpoint_key(runs_by_trial(tracking_uri, NAME)[kept].data.tags[Tag.CHECKPOINT])
    stored = tmp_path / "stored.safetensors"
    endpoint.client().download_file(BUCKET, f"{final}/{ENCODER_DIR}/model.safetensors", str(stored))
    exported, expected = load_file(out / "model.safetensors"), load_file(stored)
    assert expected and set(exported) == set(expected)
    assert all(torch.equal(exported[name], expected[name]) for name in expected)
    assert json.loads((out / FINAL_RECORD).read_text())["identity"]["trial_id"] == kept
    assert SentenceTransformer(str(out), device="cpu").encode(["A man plays a guitar."]).shape == (1, 32)


def test_evaluate_reads_the_kept_encoder_from_the_bucket(s3_sweep, tmp_path, tiny_sts_dir, monkeypatch, capsys):
    _, tracking_uri, _, states = s3_sweep
    kept, _ = kept_and_deleted(states)
    monkeypatch.setenv("MULTILINGUAL_STS_DATA_DIR", str(multilingual_fixture(tmp_path / "ml", tiny_sts_dir)))
    assert main(["evaluate", NAME, "--trial", kept, "--suite", "multilingual_sts",
                 "--tracking-uri", tracking_uri]) == 0
    assert f"trial {kept} (row 'simcse'" in capsys.readouterr().out
    logged = runs_by_trial(tracking_uri, NAME)[kept].data.metrics
    # What it logged is the suite on the encoder stored in the bucket: the same numbers as an independent
    # evaluation of that encoder, exported (itself read from the bucket, tensor for tensor: the test above).
    exported = SentenceEncoder.from_exported(main_export(tracking_uri, kept, tmp_path / "export"))
    independent = multilingual_sts.evaluate(lambda s: exported.encode(s), multilingual_sts.load_local(tmp_path / "ml"),
                                            {}, seed=0)
    assert set(PEARSON.values()) <= set(independent)
    for key, value in independent.items():
        assert logged[key] == pytest.approx(value, abs=1e-3), key


def test_a_reusing_sweep_points_at_the_checkpoint_in_the_bucket_and_leaves_it_there(s3_sweep, tmp_path, tiny_bert,
                                                                                      local_ray):
    """The same trials under another name, keeping no encoder: every trial is reused (nothing trains), each
    reused run's checkpoint is its source's in the bucket, the kept one exports from there, and the bucket
    is as it was (a reusing sweep's retention never deletes its sources' checkpoints)."""
    endpoint, tracking_uri, _, states = s3_sweep
    kept, _ = kept_and_deleted(states)
    before = sorted(endpoint.keys(BUCKET, f"sweeps/{NAME}"))
    path = spec_file(tmp_path, tiny_bert, "s3reuse", keep_models="none", max_concurrent_trials=1)
    run(SweepOptions(str(path), {"eval_precision": "fp32"}, tracking_uri=tracking_uri, storage=STORAGE))
    sources = runs_by_trial(tracking_uri, NAME)
    by_run = {r.info.run_id: r for r in sources.values()}
    reused = child_runs(tracking_uri, "s3reuse")
    assert len(reused) == 3 and all(Tag.REUSED_FROM in r.data.tags for r in reused)
    for r in reused:
        source = by_run[r.data.tags[Tag.REUSED_FROM]]
        assert r.data.tags.get(Tag.CHECKPOINT) == source.data.tags.get(Tag.CHECKPOINT)
    assert sorted(endpoint.keys(BUCKET, f"sweeps/{NAME}")) == before
    (again,) = [r for r in reused if r.data.tags[Tag.REUSED_FROM] == sources[kept].info.run_id]
    assert again.data.tags[Tag.CHECKPOINT].startswith(f"s3://{BUCKET}/")
    out = tmp_path / "reused-export"
    assert main(["export", "s3reuse", "--trial", again.data.tags[Tag.TRIAL_ID], "--out", str(out),
                 "--tracking-uri", tracking_uri]) == 0
    exported, stored = load_file(out / "model.safetensors"), load_file(
        Path(main_export(tracking_uri, kept, tmp_path / "source-export")) / "model.safetensors")
    assert all(torch.equal(exported[name], stored[name]) for name in stored)


def main_export(tracking_uri: str, trial: str, out: Path) -> Path:
    assert main(["export", NAME, "--trial", trial, "--out", str(out), "--tracking-uri", tracking_uri]) == 0
    return out
