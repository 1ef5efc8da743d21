"""A trial's encoder, exported and kept: from its checkpoint to a sentence-transformers folder with a model card.

A trial's last checkpoint (its MLflow tag ``sweep.checkpoint``, a path or URI
of Ray's storage, :func:`open_checkpoint`) holds its best-dev encoder and its
final record; a trial stopped by a scheduler before its end holds its training state instead, from
which the best encoder is read (:meth:`~trainers.training.checkpoint.TrainingState.best_encoder_state`).
An untuned (``none``) trial keeps no weights: its encoder is loaded again from
its config. A trial whose pooling leaves frequent tokens out
(``pooling_skip_frequent``) is refused (:func:`export_refusal`):
sentence-transformers' Pooling cannot leave tokens out, so no folder would give
its vectors.

:func:`export_trial` writes a sentence-transformers folder (which
``transformers.AutoModel`` also loads), with the trial's evaluation pooling
and layer, a model card, and the record for
:meth:`trainers.models.encoder.SentenceEncoder.from_exported`. Training-only parts
(projection heads, SCT's projector) are never part of it. ``sweep export`` and ``sweep evaluate``
(:mod:`sweep.commands`) and the end of a sweep (:mod:`sweep.run.retention`) read trials through here.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from results.names import UsageError
from results.ranking import best_first
from results.reader import choose_parent, existing_store_uri, run_identity, trial_tags, variant_runs
from results.record import ModelState, TrialIdentity, axes_text
from results.schema import FINISHED
from sweep.tracking.store import open_client
from trainers.data.sources import TEST_SETS
from trainers.metrics import Metric
from trainers.registry import get_method
from trainers.training.checkpoint import (
    ENCODER_DIR,
    FinalRecord,
    UnreadableCheckpoint,
    checkpoint_location,
    read_checkpoint,
)

if TYPE_CHECKING:  # torch is imported where an encoder is read or written: choosing a trial needs none
    import torch

    from trainers.models.encoder import SentenceEncoder

MODEL_CARD = "README.md"


class ExportError(UsageError):
    """The asked-for trial or its encoder does not exist; the message names what does."""


def open_checkpoint(uri: str):
    """The Ray checkpoint at a path or URI the tracker recorded
    (:func:`~trainers.training.checkpoint.checkpoint_uri`)."""
    from ray.tune import Checkpoint

    filesystem, path = checkpoint_location(uri)
    return Checkpoint(path, filesystem)


def load_trial_encoder(directory: Path, source: str | None = None) -> tuple[SentenceEncoder, FinalRecord]:
    """The best encoder in a downloaded checkpoint, and the trial's record (config, metrics); an
    unreadable checkpoint is an :class:`ExportError` naming ``source`` (where it was downloaded from)."""
    from trainers.models.encoder import SentenceEncoder

    try:
        found = read_checkpoint(directory)
    except UnreadableCheckpoint as problem:
        raise ExportError(f"checkpoint {source or directory} is refused: {problem}") from problem
    if isinstance(found, FinalRecord):
        weights = str(Path(directory) / ENCODER_DIR) if found.trained else None
        return SentenceEncoder.from_config(found.config, weights), found
    # A trial stopped before its end (ASHA): its training state holds the best encoder.
    encoder = SentenceEncoder.from_config(found.config)
    encoder.load_state_dict(found.best_encoder_state())
    return encoder, FinalRecord(found.config, {Metric.BEST_DEV: found.selection.best_score}, trained=True)


def save_sentence_transformer(encoder: SentenceEncoder, folder: Path, max_length: int) -> None:
    """Write ``encoder`` as a sentence-transformers folder whose vectors are the project's pooling.

    cls/mean/max of the last layer map onto sentence-transformers' Pooling. A
    pooling of another layer, ``first_last_avg`` and ``last2avg`` first average
    the chosen hidden states with a WeightedLayerPooling (one-hot or two equal
    weights), then mean- or cls/max-pool them: the same vectors, since mean
    pooling is linear. ``pooler`` is cls then the model pooler's dense layer as
    sentence-transformers' Dense (tanh); so is a distilled SCT student's map into its
    teacher's space, as the SCT authors save it. WK pooling and
    BERT-flow's flow are modules of :mod:`trainers.models.sentence_modules`, whose
    files the folder carries (:func:`carry_project_modules`).
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer, WeightedLayerPooling

    from trainers.models.pooling import model_pooler
    from trainers.models.sentence_modules import LatentFlow, WKPooling
    from trainers.models.student_map import StudentMap

    layers, width = encoder.num_layers, encoder.model.config.hidden_size
    weights = torch.zeros(layers + 1)
    if encoder.pooling == "first_last_avg":
        weights[1] += 1
        weights[layers] += 1
    elif encoder.pooling == "last2avg":
        weights[layers - 1 :] = 1
    else:
        weights[encoder.layer % (layers + 1)] = 1
    wk = encoder.pooling == "wk"
    layered = wk or bool(weights[layers] == 0 or weights.sum() > 1)
    with tempfile.TemporaryDirectory() as staging:
        encoder.model.config.output_hidden_states = layered
        encoder.model.save_pretrained(staging)
        encoder.tokenizer.save_pretrained(staging)
        modules: list[torch.nn.Module] = [Transformer(staging, max_seq_length=max_length)]
        if wk:
            modules.append(WKPooling(width, *encoder.wk))
        else:
            if layered:
                modules.append(WeightedLayerPooling(width, layers, layer_start=0,
                                                    layer_weights=torch.nn.Parameter(weights)))
            mode = {"first_last_avg": "mean", "last2avg": "mean", "pooler": "cls"}.get(encoder.pooling, encoder.pooling)
            modules.append(Pooling(width, pooling_mode=mode))
        if encoder.pooling == "pooler":
            modules.append(dense_of(model_pooler(encoder.model).dense))
        student_map = isinstance(encoder.after_pooling, StudentMap)
        if student_map:
            modules.append(dense_of(encoder.after_pooling.linear))
        elif encoder.after_pooling is not None:
            flow = LatentFlow(**encoder.after_pooling.settings)
            flow.flow.load_state_dict(encoder.after_pooling.state_dict())
            modules.append(flow)
        SentenceTransformer(modules=modules, device="cpu").save(str(folder), create_model_card=False)
    if wk or (encoder.after_pooling is not None and not student_map):
        carry_project_modules(folder)
    encoder.save_after_pooling(folder)  # where SentenceEncoder.from_exported reads it (none: nothing written)


def dense_of(linear: torch.nn.Linear) -> torch.nn.Module:
    """sentence-transformers' Dense with tanh and ``linear``'s weights: a BERT pooler's dense layer (pooling
    ``pooler``), a distilled SCT student's map (as the SCT authors save it)."""
    import torch
    from sentence_transformers.sentence_transformer.modules import Dense

    return Dense(linear.in_features, linear.out_features, activation_function=torch.nn.Tanh(),
                 init_weight=linear.weight.detach().cpu(), init_bias=linear.bias.detach().cpu())


def carry_project_modules(folder: Path) -> None:
    """Copy :mod:`trainers.models.sentence_modules` and the files it imports into ``folder`` and name its classes by
    those files in ``modules.json``: sentence-transformers loads them from the folder (``trust_remote_code``)."""
    import shutil

    import trainers.models.sentence_modules as project_modules

    source = Path(project_modules.__file__).parent
    for name in project_modules.EXPORTED_FILES:
        shutil.copyfile(source / name, Path(folder) / name)
    listing = Path(folder) / "modules.json"
    entries = json.loads(listing.read_text(encoding="utf-8"))
    for entry in entries:
        entry["type"] = entry["type"].replace(f"{project_modules.__name__}.", "sentence_modules.")
    listing.write_text(json.dumps(entries, indent=2), encoding="utf-8")


def model_card(record: FinalRecord, identity: Mapping[str, str]) -> str:
    config, metrics = record.config, record.metrics
    names = ("dev", *TEST_SETS, "avg")
    keys = (Metric.BEST_DEV, *(Metric.test_set(n) for n in TEST_SETS), Metric.TEST_AVG)
    scores = " | ".join(f"{metrics[k]:.2f}" if k in metrics else "–" for k in keys)
    layer = f", layer {config['pooling_layer']}" if config["pooling"] in ("cls", "mean", "max") else ""
    cut = f", cut to its first {config['model_layers']} layers" if config["model_layers"] else ""
    # WK pooling and a flow are modules the folder carries as code (sweep.run.models.carry_project_modules).
    custom = config["pooling"] == "wk" or get_method(config["method"]).after_pooling is not None
    remote = ", trust_remote_code=True" if custom else ""
    point = f"`{identity['axes']}`" if identity["axes"] else "none"
    return f"""---
library_name: sentence-transformers
pipeline_tag: sentence-similarity
tags: [sentence-transformers, sentence-similarity, {config['method']}]
---

# {identity['sweep']} · {identity['row'] or identity['axes'] or 'trial'} · seed {identity['seed']}

The best-dev (STS-B) encoder of one trial of the sweep `{identity['sweep']}`
(spec `{identity['spec_file']}`, spec hash `{identity['spec_hash']}`, git commit
`{identity['git_commit']}`, trial `{identity['trial_id']}`).

- method: `{config['method']}`; row: `{identity['row']}`; grid point: {point}; seed: {identity['seed']}
- base model: `{config['model']}`{cut}
- sentence vector: `{config['pooling']}` pooling{layer} (what the scores below used)

## Scores (Spearman x 100 of cosine similarity; STS12-16 'all'; evaluation precision \
`{config.get('eval_precision', 'fp32')}`)

| {' | '.join(names)} |
|{'---|' * len(names)}
| {scores} |

## Loading

```python
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("THIS_FOLDER"{remote})  # the pooling above, exactly
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


def export_refusal(config: Mapping[str, Any]) -> str | None:
    """Why ``sweep export`` refuses a trial of this config, None where it does not: an exported folder must
    give the trial's own vectors."""
    skipped = config.get("pooling_skip_frequent", 0)
    if skipped:
        return (f"pooling_skip_frequent={skipped}: its vectors leave the {skipped} most frequent tokens out of the "
                "average, which sentence-transformers' Pooling cannot do, so no exported folder would give them "
                "(`sweep evaluate` reads the trial as it ran)")
    return None


def encoder_problem(run) -> str | None:
    """Why ``run``'s best encoder cannot be read back (None when it can): no checkpoint, or not kept."""
    tags = trial_tags(run)
    if not tags.checkpoint:
        return (f"trial {tags.trial_id} has no checkpoint (it failed before its first, or ran before checkpoints "
                "were kept)")
    if tags.model_state == ModelState.DELETED:
        return f"trial {tags.trial_id}'s encoder was not kept (keep_models)"
    return None


def trial_encoder(run) -> tuple[SentenceEncoder, FinalRecord]:
    """``run``'s best encoder and record, read from its checkpoint (raises ExportError when it is gone)."""
    problem = encoder_problem(run)
    if problem:
        raise ExportError(problem)
    checkpoint = trial_tags(run).checkpoint
    with tempfile.TemporaryDirectory() as download:
        open_checkpoint(checkpoint).to_directory(download)
        return load_trial_encoder(Path(download), checkpoint)


def export_trial(run, out: Path) -> Path:
    """Write ``run``'s best encoder to ``out`` (a new or empty folder) and return it."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; give a new folder")
    refusal = export_refusal(run_identity(run).knobs)
    if refusal:
        raise ExportError(f"trial {trial_tags(run).trial_id} is not exported: {refusal}")
    encoder, record = trial_encoder(run)
    out.mkdir(parents=True, exist_ok=True)
    save_sentence_transformer(encoder, out, record.config["eval_max_length"])
    tags, trial = trial_tags(run), run_identity(run)
    identity = {"row": trial.row, "axes": axes_text(trial.axes), "seed": trial.seed,
                "sweep": tags.sweep_name or "", "trial_id": tags.trial_id or "", "spec_file": tags.spec_file,
                "spec_hash": tags.spec_hash, "git_commit": tags.git_commit}
    (out / MODEL_CARD).write_text(model_card(record, identity), encoding="utf-8")
    FinalRecord(record.config, record.metrics, record.trained, identity).write(out)
    return out


def matching_runs(runs: list, row: str | None = None, seed: int | None = None, trial_id: str | None = None) -> list:
    """The runs of ``runs`` with this row, seed and trial id (None matches any); a one-line error names
    what exists when none does."""
    identities = {run.info.run_id: run_identity(run) for run in runs}
    trial_ids = {run.info.run_id: trial_tags(run).trial_id or "" for run in runs}
    matching = [
        run for run in runs
        if (row is None or identities[run.info.run_id].row == row)
        and (seed is None or identities[run.info.run_id].seed == seed)
        and (trial_id is None or trial_ids[run.info.run_id] == trial_id)
    ]
    if not matching:
        asked = ", ".join(f"{k} {v!r}" for k, v in (("row", row), ("seed", seed), ("trial", trial_id)) if v is not None)
        rows = sorted({identity.row for identity in identities.values()})
        seeds = sorted({identity.seed for identity in identities.values()})
        raise ExportError(f"no finished trial with {asked}; rows: {rows}, seeds: {seeds}, "
                          f"trials: {sorted(trial_ids.values())}")
    return matching


def select_run(runs: list, metric: str, mode: str, row: str | None = None, seed: int | None = None,
               trial_id: str | None = None):
    """The trial asked for, or the best of those that match by ``metric``; a one-line error names what exists."""
    matching = matching_runs(runs, row, seed, trial_id)
    return best_first(matching, lambda run: run.data.metrics.get(metric), mode)[0]


def trial_runs(name: str, tracking_uri: str) -> tuple[str, list]:
    """(experiment id, trial runs) of the sweep variant ``name`` names, in the plan's order."""
    client = open_client(existing_store_uri(tracking_uri))
    experiment, parent = choose_parent(client, name, tracking_uri)
    return experiment.experiment_id, variant_runs(client, experiment, parent)


def finished_runs(name: str, tracking_uri: str) -> list:
    """The finished trial runs of sweep ``name`` (a refusal naming what exists when the sweep is unknown)."""
    _, runs = trial_runs(name, tracking_uri)
    return [run for run in runs if run.info.status == FINISHED]


def chosen_trial(name: str, tracking_uri: str, row: str | None, seed: int | None, trial: str | None):
    """The finished trial of sweep ``name`` asked for, or the best of those that match by the sweep's metric."""
    finished = finished_runs(name, tracking_uri)
    identity = run_identity(finished[0]) if finished else TrialIdentity("", "", 0)  # the spec's metric and mode
    return select_run(finished, identity.metric, identity.mode, row, seed, trial)
