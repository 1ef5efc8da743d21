"""GLUE fine-tuning (SG-BERT Table 10, Appendix A.4): QNLI, SST-2, CoLA, MRPC and RTE.

The encoder a row names (a trial's exported folder, a Hugging Face id or a local folder; loaded as every
trial loads it, :meth:`trainers.encoder.SentenceEncoder.from_config`) gets a classification head, BERT's
own: dropout and a linear layer on the model's pooler output (its [CLS] vector where the model has no
pooler), as ``BertForSequenceClassification`` has it. Each task fine-tunes a fresh copy on its training
set with the training loop's optimiser, schedule, batches and best-state keeping
(:func:`trainers.loop.make_optimizer`, :func:`~trainers.loop.make_schedule`, :func:`~trainers.loop.batches`,
:class:`~trainers.loop.Selection`). As the appendix says, GLUE's test labels are not public, so the
*first 10%* of the validation set selects the state (scored every ``eval_every`` steps or at each epoch's
end) and the *last 90%* reports it.

Metrics (x 100), as GLUE reports them: accuracy (QNLI, SST-2, RTE), Matthews correlation (CoLA), F1 of
the paraphrase class and accuracy (MRPC); the first of a task's statistics selects
(:attr:`trainers.record.Glue.STATISTICS`).

Data: ``$GLUE_DATA_DIR`` in GLUE's download layout (``{QNLI,SST-2,CoLA,MRPC,RTE}/{train,dev}.tsv``,
tab-separated, no quoting; CoLA without a header), or the hub's ``nyu-mll/glue`` (its ``train`` and
``validation`` splits). Both give the labels the hub gives: 0 = entailment (QNLI, RTE), 1 = paraphrase
(MRPC), 1 = positive (SST-2), 1 = acceptable (CoLA).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from torch import Tensor, nn
from transformers import set_seed

from trainers.data import DataError
from trainers.encoder import SentenceEncoder, pick_device
from trainers.loop import Selection, batches, make_optimizer, make_schedule
from trainers.record import Glue
from trainers.steps import total_steps

SELECT_FRACTION = 0.1
"""The share of each validation set, from its start, that selects the fine-tuned state (SG-BERT A.4)."""
HUB_DATASET = "nyu-mll/glue"


@dataclass(frozen=True)
class TaskFormat:
    """Where a task's fields are in its GLUE TSV: the folder, the text columns and the label column (by
    header name, or by position in a file without a header), and each label's integer."""

    folder: str
    texts: tuple[str | int, ...]
    label: str | int
    labels: Mapping[str, int]
    header: bool = True


FORMATS = {
    "qnli": TaskFormat("QNLI", ("question", "sentence"), "label", {"entailment": 0, "not_entailment": 1}),
    "sst2": TaskFormat("SST-2", ("sentence",), "label", {"0": 0, "1": 1}),
    "cola": TaskFormat("CoLA", (3,), 1, {"0": 0, "1": 1}, header=False),  # source, label, author's mark, sentence
    "mrpc": TaskFormat("MRPC", ("#1 String", "#2 String"), "Quality", {"0": 0, "1": 1}),
    "rte": TaskFormat("RTE", ("sentence1", "sentence2"), "label", {"entailment": 0, "not_entailment": 1}),
}
HUB_TEXTS = {"qnli": ("question", "sentence"), "sst2": ("sentence",), "cola": ("sentence",),
             "mrpc": ("sentence1", "sentence2"), "rte": ("sentence1", "sentence2")}
"""The columns of each task's config of ``nyu-mll/glue``."""
N_LABELS = 2  # all five tasks are binary


@dataclass(frozen=True)
class Examples:
    """Texts (one tuple per side: (sentences,) or (first, second)) with integer labels, in file order."""

    texts: tuple[tuple[str, ...], ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.labels)

    def part(self, start: int, stop: int | None = None) -> Examples:
        return Examples(tuple(side[start:stop] for side in self.texts), self.labels[start:stop])


@dataclass(frozen=True)
class TaskData:
    train: Examples
    validation: Examples


def split_validation(validation: Examples) -> tuple[Examples, Examples]:
    """(the first 10% of ``validation``, which selects; the last 90%, which reports), in file order."""
    cut = int(len(validation) * SELECT_FRACTION)
    if cut < 1 or cut >= len(validation):
        raise DataError(f"a validation set of {len(validation)} examples has no first 10% to select on "
                        "and a rest to report")
    return validation.part(0, cut), validation.part(cut)


# ---------------------------------------------------------------- data


def read_task_tsv(path: Path, task: str) -> Examples:
    """One GLUE TSV as GLUE's own loaders read it (tab-separated, no quoting)."""
    form = FORMATS[task]
    wanted = [*form.texts, form.label]
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected GLUE's {form.folder} TSV with columns {wanted})")
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    first_line = 1
    if form.header:
        if not rows:
            raise DataError(f"{path}: empty file (expected a header with columns {wanted})")
        header, rows, first_line = rows[0], rows[1:], 2
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DataError(f"{path}: header {header} lacks the columns {missing}")
        positions = [header.index(c) for c in wanted]
    else:
        positions = list(wanted)
    width = max(positions) + 1
    texts: list[list[str]] = [[] for _ in form.texts]
    labels = []
    for number, row in enumerate(rows, start=first_line):
        if not row:
            continue
        if len(row) < width:
            raise DataError(f"{path}:{number}: expected at least {width} tab-separated fields, got {len(row)}")
        *fields, label = (row[p] for p in positions)
        if label not in form.labels:
            raise DataError(f"{path}:{number}: label {label!r}: expected one of {sorted(form.labels)}")
        for side, text in zip(texts, fields):
            side.append(text)
        labels.append(form.labels[label])
    if not labels:
        raise DataError(f"{path}: no examples")
    return Examples(tuple(tuple(side) for side in texts), tuple(labels))


def load_local(folder: Path, tasks: Sequence[str] = Glue.TASKS) -> dict[str, TaskData]:
    """``tasks`` from ``folder`` in GLUE's download layout (``QNLI/train.tsv``, ``QNLI/dev.tsv``, ...)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder")
    return {task: TaskData(read_task_tsv(folder / FORMATS[task].folder / "train.tsv", task),
                           read_task_tsv(folder / FORMATS[task].folder / "dev.tsv", task)) for task in tasks}


def examples_from_rows(rows: Sequence[Mapping[str, Any]], task: str, origin: str) -> Examples:
    columns = HUB_TEXTS[task]
    if not rows:
        raise DataError(f"{origin}: no examples")
    return Examples(tuple(tuple(row[c] for row in rows) for c in columns), tuple(int(row["label"]) for row in rows))


def load_hub(tasks: Sequence[str] = Glue.TASKS) -> dict[str, TaskData]:
    import datasets

    found = {}
    for task in tasks:
        splits = [list(datasets.load_dataset(HUB_DATASET, task, split=split)) for split in ("train", "validation")]
        found[task] = TaskData(*(examples_from_rows(rows, task, f"{HUB_DATASET}/{task}") for rows in splits))
    return found


# ---------------------------------------------------------------- metrics


def scores(task: str, labels: Sequence[int], predictions: Sequence[int]) -> dict[str, float]:
    """The task's statistics x 100 (:attr:`Glue.STATISTICS`), by scikit-learn: MRPC's F1 is of class 1
    (paraphrase), as GLUE computes it."""
    functions = {Glue.ACCURACY: accuracy_score, Glue.MATTHEWS: matthews_corrcoef, Glue.F1: f1_score}
    return {statistic: 100.0 * float(functions[statistic](labels, predictions)) for statistic in Glue.STATISTICS[task]}


# ---------------------------------------------------------------- fine-tuning


class Classifier(nn.Module):
    """An encoder with BERT's classification head: dropout, then a linear layer on the pooler output."""

    def __init__(self, encoder: SentenceEncoder, n_labels: int = N_LABELS):
        super().__init__()
        config = encoder.model.config
        self.encoder = encoder
        self.dropout = nn.Dropout(getattr(config, "classifier_dropout", None) or getattr(config, "hidden_dropout_prob", 0.1))
        self.head = nn.Linear(config.hidden_size, n_labels)
        nn.init.normal_(self.head.weight, std=getattr(config, "initializer_range", 0.02))  # as BERT initialises it
        nn.init.zeros_(self.head.bias)

    def features(self, texts: Sequence[Sequence[str]], max_length: int) -> dict[str, Tensor]:
        """Token ids of single sentences or sentence pairs (the tokenizer's [SEP]-joined pair input)."""
        tokenizer = self.encoder.tokenizer
        found = tokenizer(*(list(side) for side in texts), padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt")
        return {name: tensor.to(self.encoder.device) for name, tensor in found.items()}

    def forward(self, features: dict[str, Tensor]) -> Tensor:
        output = self.encoder.model(**features, return_dict=True)
        pooled = getattr(output, "pooler_output", None)
        pooled = output.last_hidden_state[:, 0] if pooled is None else pooled
        return self.head(self.dropout(pooled))

    @torch.inference_mode()
    def predict(self, examples: Examples, batch_size: int, max_length: int) -> list[int]:
        was_training = self.training
        self.eval()
        try:
            found = []
            for start in range(0, len(examples), batch_size):
                part = examples.part(start, start + batch_size)
                found.extend(self(self.features(part.texts, max_length)).argmax(-1).tolist())
        finally:
            self.train(was_training)
        return found


def _is_selection_step(step: int, steps: int, every: int, steps_per_epoch: int) -> bool:
    if step == steps:
        return True
    return step % every == 0 if every else step % steps_per_epoch == 0


@dataclass
class FineTuned:
    """A task's fine-tuning: the final metrics, the selection part's score at each scoring step (the
    primary statistic), and the classifier in its selected state."""

    metrics: dict[str, float]
    curve: list[tuple[int, float]]
    classifier: Classifier


def fine_tune(encoder_config: Mapping[str, Any], task: str, data: TaskData, options: Mapping[str, Any],
              seed: int) -> FineTuned:
    """Fine-tune the encoder ``encoder_config`` names (knobs model, model_layers, device) on ``task``; keep
    the state best on the first 10% of validation (the first of equal scores); report its scores on the
    last 90% (``test_glue_*``), its selection scores and its step. ``options`` are the GLUE knobs
    (:data:`trainers.evaluations.GLUE_KNOBS`)."""
    set_seed(seed)
    encoder = SentenceEncoder.from_config(encoder_config).to(pick_device(encoder_config["device"]))
    model = Classifier(encoder).to(encoder.device)
    train = data.train.part(0, options["train_limit"] or None)
    select, report = split_validation(data.validation)
    optimizer = make_optimizer(options, [p for p in model.parameters() if p.requires_grad])
    steps = total_steps(options, len(train))
    steps_per_epoch = total_steps({**options, "epochs": 1, "max_steps": 0}, len(train))
    schedule = make_schedule(options, optimizer, steps)
    generator = torch.Generator().manual_seed(seed)
    selection = Selection(patience=0)
    primary = Glue.STATISTICS[task][0]
    labels = torch.tensor(train.labels)
    predict = lambda examples: model.predict(examples, options["eval_batch_size"], options["max_seq_length"])  # noqa: E731
    curve, step = [], 0
    model.train()
    while step < steps:
        for indices in batches(len(train), options["batch_size"], generator):
            texts = [[side[i] for i in indices] for side in train.texts]
            logits = model(model.features(texts, options["max_seq_length"]))
            loss = nn.functional.cross_entropy(logits, labels[indices].to(logits.device))
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if _is_selection_step(step, steps, options["eval_every"], steps_per_epoch):
                curve.append((step, scores(task, select.labels, predict(select))[primary]))
                selection.update(curve[-1][1], step, model)
            if step == steps:
                break
    model.load_state_dict(selection.best_state)
    chosen, reported = scores(task, select.labels, predict(select)), scores(task, report.labels, predict(report))
    metrics = {
        **{Glue.test(task, statistic): value for statistic, value in reported.items()},
        **{Glue.selection(task, statistic): value for statistic, value in chosen.items()},
        Glue.best_step(task): float(selection.best_step),
    }
    return FineTuned(metrics, curve, model)
