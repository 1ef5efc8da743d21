"""The names of what a trial measures: the metrics the loop reports, the evaluation suites' names, GLUE's
tasks and statistics, and a trial's final report.

The trainers report under these names; the MLflow record of a sweep (:mod:`results.record`) stores and reads
them. Plain Python: importing it imports neither torch nor MLflow.
"""

from __future__ import annotations

from typing import Any, Mapping


class Metric:
    """Metric names a trial reports: at each evaluation (progress), then once at its end (final)."""

    @staticmethod
    def sts(dataset: str, statistic: str = "spearman") -> str:
        """An STS figure as the STS suite's scorer names it (:mod:`trainers.suites.sts`): ``<set>_<statistic>``
        (``stsb_pearson``, ``sts12_mean_spearman``, ``dev_spearman``, ``avg_spearman``). Every STS name, the
        progress's and the final test's (:meth:`test_set`), is made here."""
        return f"{dataset}_{statistic}"

    STS_DEV = "dev"  # STS-B dev, the set that selects, in the STS figures' names
    DEV_STSB = "dev_stsb"  # with selection_metric avg_sts, the two dev sets it averages: STS-B dev,
    DEV_SICKR = "dev_sickr"  # and SICK-R dev
    STS_AVG = "avg"  # the seven test sets' average

    # Progress, at every evaluation of STS-B dev (MLflow step = training step).
    STEP = "step"
    LOSS = "loss"
    LR = "lr"
    DEV = sts(STS_DEV)  # dev_spearman
    BEST_DEV = f"best_{DEV}"  # best_dev_spearman; also final: the one metric every report carries
    STAGE = "stage"  # methods with several training stages
    # Final.
    BEST_STEP = "best_step"
    STEPS = "steps"
    EARLY_STOPPED = "early_stopped"
    TRAIN_SECONDS = "train_seconds"  # the training steps (evaluations and the frozen-outputs pass excluded)
    TRAIN_SECONDS_WITH_FROZEN_OUTPUTS = "train_seconds_with_frozen_outputs"
    """The steps plus the frozen model's pass over the training texts (FROZEN_OUTPUTS_SECONDS, 0 without one):
    what the method computes to train, SG-BERT Table 6's training time (BERT_F's forwards included)."""
    TEST_SECONDS = "test_seconds"  # the final test: the seven test sets encoded and scored
    STSB_TEST_SECONDS_B16 = "stsb_test_seconds_b16"
    """SG-BERT Table 6's inference time ("when tested on STS-B ... using batch size 16"): STS-B test alone,
    tokenised, encoded at batch 16 and scored, on the trial's final (best) state."""
    WALL_SECONDS = "wall_seconds"
    SENTENCES_PER_SECOND = "sentences_per_second"
    RESUMED_FROM_STEP = "resumed_from_step"
    GRAPHED_STEPS = "graphed_steps"
    """``cuda_graph``: the steps this run of the trial replayed from a CUDA graph (0 on a device without them)."""
    TEST_PREFIX = "test_"
    TEST_AVG = TEST_PREFIX + sts(STS_AVG)  # test_avg_spearman
    FROZEN_OUTPUTS = "frozen_outputs"  # prefix of <name>_computed, <name>_reused and <name>_seconds
    FROZEN_OUTPUTS_COMPUTED = "frozen_outputs_computed"
    FROZEN_OUTPUTS_REUSED = "frozen_outputs_reused"
    FROZEN_OUTPUTS_SECONDS = "frozen_outputs_seconds"  # the table pass: this trial's, or recorded with the table
    STAGES_REUSED = "stages_reused"
    """``share_stages``: the stages before the last that this trial read from another trial's training of them
    (:mod:`trainers.training.shared_stages`), 0 when it trained them itself."""
    TIMINGS = (TRAIN_SECONDS, TRAIN_SECONDS_WITH_FROZEN_OUTPUTS, TEST_SECONDS, STSB_TEST_SECONDS_B16, WALL_SECONDS,
               SENTENCES_PER_SECOND, FROZEN_OUTPUTS_SECONDS)
    """How long parts of a trial took: the machine's, not the experiment's (exactness tests leave them out)."""

    @staticmethod
    def test(name: str) -> str:
        """A final test metric from the evaluator's own name (``stsb_spearman`` -> ``test_stsb_spearman``)."""
        return f"{Metric.TEST_PREFIX}{name}"

    @staticmethod
    def test_set(dataset: str, statistic: str = "spearman") -> str:
        """A final STS metric (``stsb``, ``pearson`` -> ``test_stsb_pearson``; ``avg`` -> :attr:`TEST_AVG`)."""
        return Metric.test(Metric.sts(dataset, statistic))

    @staticmethod
    def suite(suite: str, dataset: str, statistic: str) -> str:
        """A final metric of an evaluation suite beyond STS (``senteval``, ``mr``, ``accuracy`` ->
        ``test_senteval_mr_accuracy``); ``dataset`` ``avg`` is the suite's average."""
        return f"test_{suite}_{dataset}_{statistic}"

    @staticmethod
    def is_final(metrics: Mapping[str, Any]) -> bool:
        """Whether a report is a trial's final one (its test metrics), not an evaluation."""
        return Metric.TEST_AVG in metrics


class SuiteName:
    """Names of the evaluation suites a spec chooses with its ``evaluations`` key (each declared and
    registered in :mod:`trainers.suites`), run on each trial's best state after training, and of their
    statistics. STS's metrics are named by :meth:`Metric.test_set`, every other suite's by
    :meth:`Metric.suite` (through its declaration, ``Suite.metric``); a new suite needs no name here."""

    KEY = "evaluations"  # the spec key, and the key of a trial's config that carries the choice
    STS = "sts"
    SENTEVAL = "senteval"
    NLI = "nli"
    RERANKING = "reranking"
    MULTILINGUAL_STS = "multilingual_sts"
    DEFAULT = (STS,)
    SENTEVAL_TASKS = ("mr", "cr", "subj", "mpqa", "sst2", "trec", "mrpc")  # SG-BERT Table 4's columns, its order
    ACCURACY = "accuracy"
    MAP = "map"
    SPEARMAN = "spearman"
    PEARSON = "pearson"
    AVG = "avg"


class Glue:
    """GLUE fine-tuning (SG-BERT Table 10; ``python -m sweep glue``, :mod:`trainers.training.glue`): a
    spec's ``glue`` key, the names of its runs' params and metrics. Each task selects its fine-tuned state
    on the first 10% of the validation set and reports the last 90% (``test_glue_<task>_<statistic>``)."""

    KEY = "glue"  # the spec key, and the suite name of its metrics (Metric.suite)
    TASKS_KEY = "tasks"  # the key of the spec's glue mapping that lists the tasks
    TASKS = ("qnli", "sst2", "cola", "mrpc", "rte")  # SG-BERT Table 10's columns, its order
    ACCURACY = "accuracy"
    MATTHEWS = "matthews"
    F1 = "f1"
    STATISTICS = {"qnli": (ACCURACY,), "sst2": (ACCURACY,), "cola": (MATTHEWS,), "mrpc": (F1, ACCURACY),
                  "rte": (ACCURACY,)}
    """Each task's statistics as GLUE reports them, the first the one its state is selected on."""

    @staticmethod
    def test(task: str, statistic: str) -> str:
        """Reported on the last 90% of validation (``test_glue_cola_matthews``)."""
        return Metric.suite(Glue.KEY, task, statistic)

    @staticmethod
    def selection(task: str, statistic: str) -> str:
        """The selected state's score on the first 10% of validation (``select_glue_cola_matthews``)."""
        return f"select_{Glue.KEY}_{task}_{statistic}"

    @staticmethod
    def curve(task: str) -> str:
        """The selection part's score at each scoring step (MLflow step = training step), the curve the
        selected state is the best of (``glue_cola_selection_matthews``)."""
        return f"{Glue.KEY}_{task}_selection_{Glue.STATISTICS[task][0]}"

    @staticmethod
    def best_step(task: str) -> str:
        """The training step of the selected state (``glue_cola_best_step``)."""
        return f"{Glue.KEY}_{task}_best_step"

    @staticmethod
    def param(knob: str) -> str:
        """A fine-tuning knob as a run's param (``glue.learning_rate``), apart from the encoder's knobs."""
        return f"{Glue.KEY}.{knob}"


SELECTABLE_METRICS = (Metric.BEST_DEV, Metric.DEV, Metric.TEST_AVG, Metric.LOSS)
"""A spec's ``metric`` is one of these or a ``test_*`` metric."""


class ReportKey:
    """Keys a trial sends with its reports that are not metrics: where it ran and what it ran with."""

    NODE_ID = "node_id"
    WORKER_PID = "worker_pid"
    RESTORED_FROM = "restored_from"
    EVAL_PRECISION = "eval_precision"
    TRAIN_PRECISION = "train_precision"
    """The precisions a trial resolved its precision knobs to, under the knobs' names
    (:func:`trainers.common_knobs.precision_settings`)."""
    EVAL_BATCH_SIZE = "eval_batch_size"
    """The sentences per evaluation forward its ``eval_batch_size`` came to on its device."""
    REUSED_TAGS = "reused_tags"
    """The tags of a reused trial (a mapping), sent by a trial that waited for another sweep to train it."""
