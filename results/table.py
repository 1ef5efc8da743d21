"""What every table, summary and figure is made of: cells of per-seed figures, lines of cells, tables.

A paper table, any sweep's table, the end-of-sweep summary, their CSV, the
heatmaps and the grid plot are all a :class:`Table` (or drawn from one), so a
seed-free cell and a mirror cell look the same wherever they are shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from trainers.metrics import Glue, Metric, SuiteName

DASH = "–"
"""A cell, figure or value that is missing."""
DELTA = "Delta"
"""A paper table's difference column: its ``delta.of`` column minus the reference line's."""
P_COLUMN = "p"


@dataclass(frozen=True)
class Column:
    """How one of the papers' column names is computed from our results."""

    metric: str
    best: str | None = "max"  # which end is bold: "max", "min", or None for no bold
    digits: int = 2


COLUMNS = {
    "Dev": Column(Metric.BEST_DEV),
    "STS-B": Column(Metric.test_set("stsb")),
    "SICK-R": Column(Metric.test_set("sickr")),
    "STS12": Column(Metric.test_set("sts12")),
    "STS13": Column(Metric.test_set("sts13")),
    "STS14": Column(Metric.test_set("sts14")),
    "STS15": Column(Metric.test_set("sts15")),
    "STS16": Column(Metric.test_set("sts16")),
    "Avg": Column(Metric.TEST_AVG),
    "Steps": Column(Metric.STEPS, best=None, digits=0),
    "Best step": Column(Metric.BEST_STEP, best=None, digits=0),
    # SG-BERT Table 6: the training steps plus BERT_F's forwards (its frozen-outputs table); STS-B test alone at
    # batch size 16, as the paper times them.
    "Training": Column(Metric.TRAIN_SECONDS_WITH_FROZEN_OUTPUTS, best="min"),
    "Inference": Column(Metric.STSB_TEST_SECONDS_B16, best="min"),
    # SCT Figure 2's inference time, which the paper does not define: our encoding of the seven STS test sets.
    "Inference (STS)": Column(Metric.TEST_SECONDS, best="min"),
    # Suites beyond STS (trainers/suites): SG-BERT Table 4, SCT Table 3.
    **{task.upper(): Column(Metric.suite(SuiteName.SENTEVAL, task, SuiteName.ACCURACY))
       for task in SuiteName.SENTEVAL_TASKS},
    "SentEval Avg": Column(Metric.suite(SuiteName.SENTEVAL, SuiteName.AVG, SuiteName.ACCURACY)),
    "AskU": Column(Metric.suite(SuiteName.RERANKING, "askubuntu", SuiteName.MAP)),
    "SciDocs": Column(Metric.suite(SuiteName.RERANKING, "scidocs", SuiteName.MAP)),
    "Re-ranking Avg": Column(Metric.suite(SuiteName.RERANKING, SuiteName.AVG, SuiteName.MAP)),
    "SICK-E": Column(Metric.suite(SuiteName.NLI, "sicke", SuiteName.ACCURACY)),
    "SNLI": Column(Metric.suite(SuiteName.NLI, "snli", SuiteName.ACCURACY)),
    "NLI Avg": Column(Metric.suite(SuiteName.NLI, SuiteName.AVG, SuiteName.ACCURACY)),
    # SG-BERT Tables 2 and 3 (multilingual STS) print Pearson.
    "STS14 es": Column(Metric.suite(SuiteName.MULTILINGUAL_STS, "sts14_es", SuiteName.PEARSON)),
    "STS17 ar-ar": Column(Metric.suite(SuiteName.MULTILINGUAL_STS, "sts17_ar_ar", SuiteName.PEARSON)),
    "STS17 es-es": Column(Metric.suite(SuiteName.MULTILINGUAL_STS, "sts17_es_es", SuiteName.PEARSON)),
    "STS17 en-en": Column(Metric.suite(SuiteName.MULTILINGUAL_STS, "sts17_en_en", SuiteName.PEARSON)),
    # GLUE fine-tuning (python -m sweep glue), SG-BERT Table 10: the last 90% of each validation set.
    "GLUE QNLI": Column(Glue.test("qnli", Glue.ACCURACY)),
    "GLUE SST2": Column(Glue.test("sst2", Glue.ACCURACY)),
    "GLUE CoLA": Column(Glue.test("cola", Glue.MATTHEWS)),
    "GLUE MRPC": Column(Glue.test("mrpc", Glue.F1)),
    "GLUE MRPC Acc": Column(Glue.test("mrpc", Glue.ACCURACY)),
    "GLUE RTE": Column(Glue.test("rte", Glue.ACCURACY)),
}
"""The papers' column names -> our metrics, in one place. STS12-16 are the
'all' aggregation (every subset's pairs together), as the papers report.
``Delta`` is not here: it is our ``delta.of`` column minus the reference line's."""
SWEEP_COLUMNS = ("Dev", "STS-B", "SICK-R", "STS12", "STS13", "STS14", "STS15", "STS16", "Avg")
"""Any sweep's table: dev, the seven test sets and their average."""


@dataclass(frozen=True)
class Cell:
    """Our figures for one cell, one per seed. ``seed_free``: one run of a configuration that cannot
    depend on the seed (it stands for every seed); ``mirror``: filled from the mirror cell of
    symmetric grid axes, which ran instead."""

    values: tuple[float, ...]
    seed_free: bool = False
    mirror: bool = False

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n if self.n else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation (nan below two seeds)."""
        if self.n < 2:
            return math.nan
        return math.sqrt(sum((v - self.mean) ** 2 for v in self.values) / (self.n - 1))

    @property
    def exact(self) -> bool:
        """One run that stands for every seed: a known constant, not a sample of one."""
        return self.seed_free and self.n == 1


@dataclass
class Line:
    """One line of a table. ``row`` and ``point`` (grid and sampled knob values) say where a sweep's
    line comes from (figures lay lines out by them); ``lead`` holds the text of the table's
    :attr:`Table.lead` columns."""

    label: str
    cells: dict[str, Cell]  # column label -> ours
    paper: dict[str, float] = field(default_factory=dict)  # column label -> the paper's figure
    row: str = ""
    point: Mapping[str, Any] = field(default_factory=dict)
    lead: dict[str, Any] = field(default_factory=dict)


@dataclass
class Table:
    name: str
    title: str
    corner: str  # what the lines are: "row", or the grid knob of the lines
    columns: list[str]  # column labels
    formats: dict[str, Column]  # column label -> its format and bold rule
    lines: list[Line]
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    paper_model: str | None = None
    across: str | None = None  # two-knob grids: the knob of the columns
    p_values: dict[str, float] = field(default_factory=dict)  # line label -> p against p_reference
    p_reference: str | None = None  # the line the others are tested against
    lead: list[str] = field(default_factory=list)  # text columns between the line label and the cells
    headers: dict[str, str] = field(default_factory=dict)  # column (or "p") -> its header, where not its label

    def best_line(self, column: str) -> int | None:
        """Index of the line whose mean is best in ``column`` (None: no bold)."""
        direction = self.formats[column].best
        scored = [(i, line.cells[column].mean) for i, line in enumerate(self.lines) if line.cells[column].n]
        if direction is None or not scored:
            return None
        pick = max if direction == "max" else min
        return pick(scored, key=lambda item: item[1])[0]

    def header(self, column: str) -> str:
        return self.headers.get(column, column)

    def has_results(self) -> bool:
        return any(cell.n for line in self.lines for cell in line.cells.values())
