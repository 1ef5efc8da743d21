"""What a sweep keeps when it ends: which trials keep their encoder (``keep_models``), the best trial's
encoder logged to MLflow (every kept trial's with ``log_models``; registered with ``--register``), and
the resume states before each trial's final checkpoint deleted."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable

from results.reader import run_identity, trial_tags
from results.record import ModelState, Tag
from sweep.run.models import MODEL_CARD, export_refusal, export_trial, open_checkpoint, select_run
from trainers.training.checkpoint import FINAL_RECORD, sibling_checkpoints

MODEL_ARTIFACT = "model"


def kept_run_ids(runs: Iterable, policy: str, metric: str, mode: str) -> set[str]:
    """The finished trials whose encoder ``keep_models`` keeps."""
    runs = [run for run in runs if metric in run.data.metrics]
    if policy == "all":
        return {run.info.run_id for run in runs}
    if policy == "none" or not runs:
        return set()
    if policy == "best":
        return {select_run(runs, metric, mode).info.run_id}
    rows: dict[str, list] = {}
    for run in runs:
        rows.setdefault(run_identity(run).row, []).append(run)
    return {select_run(group, metric, mode).info.run_id for group in rows.values()}


def delete_encoder(uri: str) -> None:
    checkpoint = open_checkpoint(uri)
    checkpoint.filesystem.delete_dir_contents(checkpoint.path, missing_dir_ok=True)


def delete_resume_states(uri: str) -> None:
    """Delete the checkpoints a finished trial kept before its final one (optimizer, queues)."""
    final = open_checkpoint(uri)
    for _, path in sibling_checkpoints(final):
        final.filesystem.delete_dir(path)


def log_model(tracking_uri: str, run, register: str | None = None) -> str:
    """Export ``run``'s encoder and log it to that run (MLflow's sentence-transformers flavour); return the
    model URI. With ``register``, also register it under that name in the Model Registry."""
    import mlflow
    import mlflow.sentence_transformers
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    from trainers.models.sentence_modules import EXPORTED_FILES

    with tempfile.TemporaryDirectory() as staging:
        folder = export_trial(run, Path(staging) / MODEL_ARTIFACT)
        # Our own export: WK pooling and a flow are modules it carries as code
        # (sweep.run.models.carry_project_modules).
        model = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
        requirements = [f"sentence-transformers=={sentence_transformers.__version__}",
                        f"transformers=={transformers.__version__}", f"torch=={torch.__version__.split('+')[0]}"]
        mlflow.set_tracking_uri(tracking_uri)
        client = mlflow.MlflowClient(tracking_uri)
        status = client.get_run(run.info.run_id).info.status
        with mlflow.start_run(run_id=run.info.run_id):
            # WK pooling and a flow: the module files the export carries go with the logged model, on its sys.path.
            code = [str(folder / name) for name in EXPORTED_FILES if (folder / name).is_file()]
            info = mlflow.sentence_transformers.log_model(model, name=MODEL_ARTIFACT, pip_requirements=requirements,
                                                          code_paths=code or None)
            for card in (MODEL_CARD, FINAL_RECORD):
                mlflow.log_artifact(str(folder / card), "model_card")
        client.set_terminated(run.info.run_id, status)
        client.set_tag(run.info.run_id, Tag.MODEL_URI, info.model_uri)
    if register:
        mlflow.register_model(info.model_uri, register)
    return info.model_uri


def finish_models(spec, tracker, register: str | None = None) -> None:
    """When a sweep ends: log its best trial's encoder to that trial's MLflow run (every kept trial's with
    ``log_models``), register it if asked, then delete the encoders ``keep_models`` does not keep (never a
    reused trial's: it is its source's)."""
    from trainers.registry import get_method

    runs = [run for run in tracker.child_runs() if run.info.status == "FINISHED" and trial_tags(run).checkpoint]
    if not runs:
        return
    kept = kept_run_ids(runs, spec.keep_models, spec.metric, spec.mode)
    best = select_run(runs, spec.metric, spec.mode)
    logged = [best] + [run for run in runs if spec.log_models and run.info.run_id in kept and run is not best]
    for run in logged:
        tags = trial_tags(run)
        if refusal := export_refusal(run_identity(run).knobs):  # no folder would give its vectors: say so, log nothing
            print(f"trial {tags.trial_id}: no model logged to MLflow: {refusal}")
            continue
        if not tags.model_uri:
            log_model(tracker.tracking_uri, run, register if run is best else None)
    for run in runs:
        tags = trial_tags(run)
        if tags.reused_from is not None:  # its checkpoint is its source's, which that sweep keeps or not
            continue
        delete_resume_states(tags.checkpoint)
        if not get_method(run_identity(run).method or "none").trains:
            state = ModelState.UNTRAINED  # nothing stored: the model is loaded again from the config
        elif run.info.run_id in kept:
            state = ModelState.KEPT
        else:
            if tags.model_state != ModelState.DELETED:
                delete_encoder(tags.checkpoint)
            state = ModelState.DELETED
        tracker.runs.model_state(run.info.run_id, state)
