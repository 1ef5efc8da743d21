"""GLUE fine-tuning's data and knobs (SG-BERT Table 10): the five tasks read from GLUE's download layout or
the hub, the validation split the appendix uses, and a spec's ``glue`` mapping (:data:`GLUE_KNOBS`,
:func:`parse_glue`). No torch: ``sweep plan`` reads the data to check it; the fine-tuning itself is
:mod:`trainers.training.glue`.

``$GLUE_DATA_DIR`` in GLUE's download layout (``{QNLI,SST-2,CoLA,MRPC,RTE}/{train,dev}.tsv``,
tab-separated, no quoting; CoLA without a header), or the hub's ``nyu-mll/glue`` (its ``train`` and
``validation`` splits). Both give the labels the hub gives: 0 = entailment (QNLI, RTE), 1 = paraphrase
(MRPC), 1 = positive (SST-2), 1 = acceptable (CoLA).
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from trainers.common_knobs import COMMON_KNOBS, TRAINING_KNOBS, optimizer_problems
from trainers.data.sources import DataError, DataSource
from trainers.knobs import ConfigError, Knob, KnobSet
from trainers.metrics import Glue

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

GLUE = DataSource(
    module=__name__, env="GLUE_DATA_DIR",
    layout="{QNLI,SST-2,CoLA,MRPC,RTE}/{train,dev}.tsv (GLUE's download layout; docs/glue.md)",
    hub=(HUB_DATASET,),
)
"""Where GLUE's data is read (``GLUE.load(tasks)``, ``GLUE.data_problem(tasks)``): ``$GLUE_DATA_DIR``, else the
hub. GLUE is no evaluation suite (:mod:`trainers.suites`): it fine-tunes the encoder."""
GLUE_DEFAULTS = {"max_seq_length": 128, "batch_size": 32, "epochs": 3, "learning_rate": 2e-5,
                 "adam_implementation": "transformers"}
"""SG-BERT's appendix (A.4) states no fine-tuning hyperparameters: these are Hugging Face's run_glue
example's of its time (max length 128, batch 32, 3 epochs, its Trainer's transformers.AdamW at 2e-5, linear decay,
no warm-up or decay)."""
GLUE_KNOBS = KnobSet(
    tuple(dataclasses.replace(knob, default=GLUE_DEFAULTS.get(knob.name, knob.default))
          for knob in (*TRAINING_KNOBS, *COMMON_KNOBS)
          if knob.name in ("train_limit", "max_seq_length", "batch_size", "last_batch", "epochs", "max_steps",
                           "optimizer", "learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon",
                           "adam_implementation", "adam_bias_correction", "weight_decay", "weight_decay_exempt",
                           "max_grad_norm", "warmup_ratio", "lr_schedule", "eval_batch_size"))
    + (Knob("eval_every", int, 0, "Score the first 10% of each validation set (the selection part) every N "
            "training steps, and after the last; 0 = at the end of each epoch.", low=0),)
)
"""GLUE fine-tuning's knobs (the spec's ``glue`` mapping): the training loop's own declarations, with
:data:`GLUE_DEFAULTS`, and when to score the selection part."""


def parse_glue(value: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A spec's ``glue`` mapping -> (its knobs with defaults and ``tasks``, problems as (key, message))."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        return {}, [("", f"expected a mapping of fine-tuning knobs and '{Glue.TASKS_KEY}', got {value!r}")]
    options = dict(value)
    tasks = options.pop(Glue.TASKS_KEY, list(Glue.TASKS))
    problems = []
    if (not isinstance(tasks, list) or not tasks or any(t not in Glue.TASKS for t in tasks)
            or len(set(tasks)) < len(tasks)):
        problems.append((f".{Glue.TASKS_KEY}", f"expected a non-empty list of distinct tasks from {list(Glue.TASKS)}, "
                                               f"got {tasks!r}"))
    try:
        resolved = GLUE_KNOBS.resolve(options)
    except ConfigError as error:
        resolved = {}
        problems += [(f".{problem.key}", problem.message) for problem in error.problems]
    else:
        problems += [(f".{problem.key}", problem.message) for problem in optimizer_problems(resolved)]
    return {**resolved, Glue.TASKS_KEY: tasks}, problems


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
