"""What a sweep trained: which trials keep their encoder, exporting one, and logging it to MLflow.

A trial's last checkpoint (its MLflow tag ``sweep.checkpoint``, a path or URI
of Ray's storage) holds its best-dev encoder and ``trial.json``; a trial
stopped by a scheduler before its end holds its resume state instead, from
which the best encoder is read the same way. An untuned (``none``) trial
keeps no weights: its encoder is loaded again from its config.

:func:`export_trial` writes a sentence-transformers folder (which
``transformers.AutoModel`` also loads), with the trial's evaluation pooling
and layer, a model card, and ``trial.json`` for
:meth:`trainers.encoder.SentenceEncoder.from_exported`. Training-only parts
(projection heads, SCT's projector) are never part of it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from trainers.checkpoint import ENCODER_DIR, TRAINING_STATE, TRIAL_RECORD
from trainers.data import TEST_SETS
from trainers.encoder import SentenceEncoder

TAG = "sweep."
MODEL_ARTIFACT = "model"


class ExportError(ValueError):
    """The asked-for trial or its encoder does not exist; the message names what does."""


def open_checkpoint(uri: str):
    """A Ray checkpoint from the path or URI the tracker recorded."""
    import pyarrow.fs
    from ray.tune import Checkpoint

    filesystem, path = pyarrow.fs.FileSystem.from_uri(uri if "://" in uri else str(Path(uri).resolve()))
    return Checkpoint(path, filesystem)


def load_trial_encoder(directory: Path) -> tuple[SentenceEncoder, dict[str, Any]]:
    """The best encoder in a downloaded checkpoint, and the trial's record (config, metrics)."""
    record_path = directory / TRIAL_RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        config = record["config"]
        if not record["trained"]:
            return SentenceEncoder.from_config(config), record
        encoder = SentenceEncoder.from_pretrained(str(directory / ENCODER_DIR), config["pooling"], config["pooling_layer"])
        return encoder, record
    # A trial stopped before its end (ASHA): its resume state holds the best encoder.
    state = torch.load(directory / TRAINING_STATE, map_location="cpu", weights_only=False)
    config = state["config"]
    encoder = SentenceEncoder.from_config(config)
    best = state["selection"]["best_state"]
    if best is None:
        prefix = "encoder."
        best = {k[len(prefix):]: v for k, v in state["objective"].items() if k.startswith(prefix)}
    encoder.load_state_dict(best)
    return encoder, {"config": config, "metrics": {"best_dev_spearman": state["selection"]["best_score"]}}


def save_sentence_transformer(encoder: SentenceEncoder, folder: Path, max_length: int) -> None:
    """Write ``encoder`` as a sentence-transformers folder whose vectors are the project's pooling.

    cls/mean/max of the last layer map onto sentence-transformers' Pooling. A
    pooling of another layer, ``first_last_avg`` and ``last2avg`` first average
    the chosen hidden states with a WeightedLayerPooling (one-hot or two equal
    weights), then mean- or cls/max-pool them: the same vectors, since mean
    pooling is linear.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer, WeightedLayerPooling

    layers, width = encoder.num_layers, encoder.model.config.hidden_size
    weights = torch.zeros(layers + 1)
    if encoder.pooling == "first_last_avg":
        weights[1] += 1
        weights[layers] += 1
    elif encoder.pooling == "last2avg":
        weights[layers - 1 :] = 1
    else:
        weights[encoder.layer % (layers + 1)] = 1
    layered = bool(weights[layers] == 0 or weights.sum() > 1)
    with tempfile.TemporaryDirectory() as staging:
        encoder.model.config.output_hidden_states = layered
        encoder.model.save_pretrained(staging)
        encoder.tokenizer.save_pretrained(staging)
        modules: list[torch.nn.Module] = [Transformer(staging, max_seq_length=max_length)]
        if layered:
            modules.append(WeightedLayerPooling(width, layers, layer_start=0, layer_weights=torch.nn.Parameter(weights)))
        mode = "mean" if encoder.pooling in ("first_last_avg", "last2avg") else encoder.pooling
        modules.append(Pooling(width, pooling_mode=mode))
        SentenceTransformer(modules=modules, device="cpu").save(str(folder), create_model_card=False)


def model_card(record: Mapping[str, Any], identity: Mapping[str, str]) -> str:
    config, metrics = record["config"], record["metrics"]
    names = ("dev", *TEST_SETS, "avg")
    keys = ("best_dev_spearman", *(f"test_{n}_spearman" for n in TEST_SETS), "test_avg_spearman")
    scores = " | ".join(f"{metrics[k]:.2f}" if k in metrics else "–" for k in keys)
    layer = f", layer {config['pooling_layer']}" if config["pooling"] in ("cls", "mean", "max") else ""
    cut = f", cut to its first {config['model_layers']} layers" if config["model_layers"] else ""
    return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, sentence-similarity, {config['method']}]
---

# {identity['sweep']} · {identity['row'] or identity['axes'] or 'trial'} · seed {identity['seed']}

The best-dev (STS-B) encoder of one trial of the sweep `{identity['sweep']}`
(spec `{identity['spec_file']}`, spec hash `{identity['spec_hash']}`, git commit
`{identity['git_commit']}`, trial `{identity['trial_id']}`).

- method: `{config['method']}`; row: `{identity['row']}`; grid point: `{identity['axes']}`; seed: {identity['seed']}
- base model: `{config['model']}`{cut}
- sentence vector: `{config['pooling']}` pooling{layer} (what the scores below used)

## Scores (Spearman x 100 of cosine similarity; STS12-16 'all'; evaluation precision `{config.get('eval_precision', 'fp32')}`)

| {' | '.join(names)} |
|{'---|' * len(names)}
| {scores} |

## Loading

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("THIS_FOLDER")          # the pooling above, exactly
vectors = model.encode(["A sentence.", "Another one."])
```

`transformers.AutoModel.from_pretrained("THIS_FOLDER")` loads the bare encoder
(training-only heads were never saved); pool its hidden states as above. With
this project: `SentenceEncoder.from_exported("THIS_FOLDER")`.

## Config

```json
{json.dumps(config, indent=2, sort_keys=True)}
```
"""


def export_trial(run, out: Path) -> Path:
    """Write ``run``'s best encoder to ``out`` (a new or empty folder) and return it."""
    uri = run.data.tags.get(f"{TAG}checkpoint")
    if not uri:
        raise ExportError(f"trial {run.data.tags.get(f'{TAG}trial_id')} has no checkpoint (it failed before its "
                          "first, or ran before checkpoints were kept)")
    if run.data.tags.get(f"{TAG}model") == "deleted":
        raise ExportError(f"trial {run.data.tags.get(f'{TAG}trial_id')}'s encoder was not kept (keep_models)")
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; give a new folder")
    with tempfile.TemporaryDirectory() as download:
        open_checkpoint(uri).to_directory(download)
        encoder, record = load_trial_encoder(Path(download))
    out.mkdir(parents=True, exist_ok=True)
    save_sentence_transformer(encoder, out, record["config"]["eval_max_length"])
    tags = run.data.tags
    identity = {key: tags.get(f"{TAG}{key}", "") for key in
                ("sweep", "row", "axes", "seed", "trial_id", "spec_file", "spec_hash", "git_commit")}
    identity["sweep"] = tags.get(f"{TAG}name", "")
    (out / "README.md").write_text(model_card(record, identity), encoding="utf-8")
    (out / TRIAL_RECORD).write_text(json.dumps({**record, "identity": identity}, indent=2, sort_keys=True),
                                    encoding="utf-8")
    return out


def select_run(runs: list, metric: str, mode: str, row: str | None = None, seed: int | None = None,
               trial_id: str | None = None):
    """The trial asked for, or the best of those that match by ``metric``; a one-line error names what exists."""
    def tag(run, key: str) -> str:
        return run.data.tags.get(f"{TAG}{key}", "")

    matching = [
        run for run in runs
        if (row is None or tag(run, "row") == row) and (seed is None or tag(run, "seed") == str(seed))
        and (trial_id is None or tag(run, "trial_id") == trial_id)
    ]
    if not matching:
        asked = ", ".join(f"{k} {v!r}" for k, v in (("row", row), ("seed", seed), ("trial", trial_id)) if v is not None)
        rows = sorted({tag(r, "row") for r in runs})
        seeds = sorted({tag(r, "seed") for r in runs}, key=lambda s: int(s) if s.isdigit() else 0)
        raise ExportError(f"no finished trial with {asked}; rows: {rows}, seeds: {seeds}, "
                          f"trials: {sorted(tag(r, 'trial_id') for r in runs)}")
    scored = [run for run in matching if metric in run.data.metrics]
    if not scored:
        return matching[0]
    pick = max if mode == "max" else min
    return pick(scored, key=lambda run: run.data.metrics[metric])


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
        rows.setdefault(run.data.tags.get(f"{TAG}row", ""), []).append(run)
    return {select_run(group, metric, mode).info.run_id for group in rows.values()}


def delete_encoder(uri: str) -> None:
    checkpoint = open_checkpoint(uri)
    checkpoint.filesystem.delete_dir_contents(checkpoint.path, missing_dir_ok=True)


def delete_resume_states(uri: str) -> None:
    """Delete the checkpoints a finished trial kept before its final one (optimizer, queues)."""
    import pyarrow.fs

    final = open_checkpoint(uri)
    trial_dir = final.path.rsplit("/", 1)[0]
    for info in final.filesystem.get_file_info(pyarrow.fs.FileSelector(trial_dir)):
        if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith("checkpoint_") \
                and info.path != final.path:
            final.filesystem.delete_dir(info.path)


def log_model(tracking_uri: str, run, register: str | None = None) -> str:
    """Export ``run``'s encoder and log it to that run (MLflow's sentence-transformers flavour); return the
    model URI. With ``register``, also register it under that name in the Model Registry."""
    import mlflow
    import mlflow.sentence_transformers
    import sentence_transformers
    import transformers
    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as staging:
        folder = export_trial(run, Path(staging) / MODEL_ARTIFACT)
        model = SentenceTransformer(str(folder), device="cpu")
        requirements = [f"sentence-transformers=={sentence_transformers.__version__}",
                        f"transformers=={transformers.__version__}", f"torch=={torch.__version__.split('+')[0]}"]
        mlflow.set_tracking_uri(tracking_uri)
        client = mlflow.MlflowClient(tracking_uri)
        status = client.get_run(run.info.run_id).info.status
        with mlflow.start_run(run_id=run.info.run_id):
            info = mlflow.sentence_transformers.log_model(model, name=MODEL_ARTIFACT, pip_requirements=requirements)
            for card in ("README.md", TRIAL_RECORD):
                mlflow.log_artifact(str(folder / card), "model_card")
        client.set_terminated(run.info.run_id, status)
        client.set_tag(run.info.run_id, f"{TAG}model_uri", info.model_uri)
    if register:
        mlflow.register_model(info.model_uri, register)
    return info.model_uri


def finish_models(spec, tracker, register: str | None = None) -> None:
    """When a sweep ends: log its best trial's encoder to that trial's MLflow run (every kept trial's with
    ``log_models``), register it if asked, then delete the encoders ``keep_models`` does not keep."""
    from trainers.registry import get_method

    runs = [run for run in tracker.child_runs()
            if run.info.status == "FINISHED" and run.data.tags.get(f"{TAG}checkpoint")]
    if not runs:
        return
    kept = kept_run_ids(runs, spec.keep_models, spec.metric, spec.mode)
    best = select_run(runs, spec.metric, spec.mode)
    logged = [best] + [run for run in runs if spec.log_models and run.info.run_id in kept and run is not best]
    for run in logged:
        if not run.data.tags.get(f"{TAG}model_uri"):
            log_model(tracker.tracking_uri, run, register if run is best else None)
    for run in runs:
        delete_resume_states(run.data.tags[f"{TAG}checkpoint"])
        if not get_method(run.data.tags.get(f"{TAG}method", "none")).trains:
            state = "untrained"  # nothing stored: the model is loaded again from the config
        elif run.info.run_id in kept:
            state = "kept"
        else:
            if run.data.tags.get(f"{TAG}model") != "deleted":
                delete_encoder(run.data.tags[f"{TAG}checkpoint"])
            state = "deleted"
        tracker.client.set_tag(run.info.run_id, f"{TAG}model", state)


def encoder_bytes(model: str, layers: int) -> int:
    """Bytes of an encoder's float32 weights (what a kept trial stores), counted on the meta device."""
    from transformers import AutoConfig, AutoModel

    from trainers.pretrained import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(model))
    if layers:
        config.num_hidden_layers = layers
    with torch.device("meta"):
        skeleton = AutoModel.from_config(config)
    return sum(4 * parameter.numel() for parameter in skeleton.parameters())


def disk_estimate(spec) -> str:
    """The disk the sweep's kept encoders take in Ray's storage, under its ``keep_models``."""
    from sweep.spec import row_method, trial_config

    sizes: dict[tuple[str, int], int] = {}
    trained: list[tuple[str, int]] = []  # (row, bytes) of each trained trial
    for row in spec.rows:
        if not row_method(spec, row).trains:
            continue
        for axes in spec.grid_points():
            if spec.is_mirror(axes):
                continue  # not run: filled from its pair
            config = trial_config(spec, row.name, spec.seeds[0], axes)
            key = (config["model"], config["model_layers"])
            if key not in sizes:
                sizes[key] = encoder_bytes(*key)
            trained += [(row.name, sizes[key])] * (len(spec.seeds) * spec.num_samples)
    if not trained:
        return "models: no trained trials, nothing kept (untuned encoders are loaded again from their config)"
    largest = max(size for _, size in trained)
    count = {"all": len(trained), "best": 1, "none": 0,
             "best_per_row": len({row for row, _ in trained})}[spec.keep_models]
    kept = sum(sorted((size for _, size in trained), reverse=True)[:count])
    return (f"models: keep_models {spec.keep_models}: {count} of {len(trained)} trained encoders kept, up to "
            f"{kept / 1e9:.2f} GB ({count} x {largest / 1e6:.0f} MB); while running, each running trial also "
            "keeps its resume checkpoints")
