"""GLUE fine-tuning (SG-BERT Table 10, Appendix A.4): QNLI, SST-2, CoLA, MRPC and RTE.

The encoder a row names (a trial's exported folder, a Hugging Face id or a local folder; loaded as every
trial loads it, :meth:`trainers.models.encoder.SentenceEncoder.from_config`) gets a classification head, BERT's
own: dropout and a linear layer on the model's pooler output (its [CLS] vector where the model has no
pooler), as ``BertForSequenceClassification`` has it. Each task fine-tunes a fresh copy on its training
set with the training loop's optimiser, schedule, batches, optimisation step and best-state keeping
(:mod:`trainers.training.optimization`). As the appendix says, GLUE's test labels are not public, so the *first
10%* of the validation set selects the state (scored every ``eval_every`` steps or at each epoch's end) and
the *last 90%* reports it.

Metrics (x 100), as GLUE reports them: accuracy (QNLI, SST-2, RTE), Matthews correlation (CoLA), F1 of
the paraphrase class and accuracy (MRPC); the first of a task's statistics selects
(:attr:`results.record.Glue.STATISTICS`).

Data, the validation split and the knobs: :mod:`trainers.data.glue_tasks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from torch import Tensor, nn
from transformers import set_seed

from trainers.common_knobs import eval_batch_size
from trainers.data.glue_tasks import N_LABELS, Examples, TaskData, split_validation
from trainers.metrics import Glue
from trainers.models.batches import TokenBatch, transformer_inputs
from trainers.models.encoder import SentenceEncoder, pick_device
from trainers.training.optimization import Selection, batches, make_optimizer, make_schedule, optimization_step
from trainers.training.steps import epoch_steps, total_steps

# ---------------------------------------------------------------- metrics


def scores(task: str, labels: Sequence[int], predictions: Sequence[int]) -> dict[str, float]:
    """The task's statistics x 100 (:attr:`Glue.STATISTICS`), by scikit-learn: MRPC's F1 is of class 1
    (paraphrase), as GLUE computes it."""
    functions = {Glue.ACCURACY: accuracy_score, Glue.MATTHEWS: matthews_corrcoef, Glue.F1: f1_score}
    return {statistic: 100.0 * float(functions[statistic](labels, predictions)) for statistic in Glue.STATISTICS[task]}


# ---------------------------------------------------------------- fine-tuning


class SequenceClassifier(nn.Module):
    """An encoder with BERT's classification head: dropout, then a linear layer on the pooler output."""

    def __init__(self, encoder: SentenceEncoder, n_labels: int = N_LABELS):
        super().__init__()
        config = encoder.model.config
        self.encoder = encoder
        self.dropout = nn.Dropout(getattr(config, "classifier_dropout", None)
                                  or getattr(config, "hidden_dropout_prob", 0.1))
        self.head = encoder.new_linear(config.hidden_size, n_labels)

    def features(self, texts: Sequence[Sequence[str]], max_length: int) -> TokenBatch:
        """Token ids of single sentences or sentence pairs (the tokenizer's [SEP]-joined pair input)."""
        tokenizer = self.encoder.tokenizer
        found = tokenizer(*(list(side) for side in texts), padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt")
        return TokenBatch.sent(found, self.encoder.device)

    def forward(self, features: TokenBatch) -> Tensor:
        output = self.encoder.model(**transformer_inputs(self.encoder.model, features), return_dict=True)
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
    classifier: SequenceClassifier


def fine_tune(encoder_config: Mapping[str, Any], task: str, data: TaskData, options: Mapping[str, Any],
              seed: int) -> FineTuned:
    """Fine-tune the encoder ``encoder_config`` names (knobs model, model_layers, device) on ``task``; keep
    the state best on the first 10% of validation (the first of equal scores); report its scores on the
    last 90% (``test_glue_*``), its selection scores and its step. ``options`` are the GLUE knobs
    (:data:`trainers.data.glue_tasks.GLUE_KNOBS`)."""
    set_seed(seed)
    encoder = SentenceEncoder.from_config(encoder_config).to(pick_device(encoder_config["device"]))
    model = SequenceClassifier(encoder).to(encoder.device)
    train = data.train.part(0, options["train_limit"] or None)
    select, report = split_validation(data.validation)
    optimizer = make_optimizer(options, model)
    steps = total_steps(options, len(train))
    steps_per_epoch = epoch_steps(options["batch_size"], len(train), options["last_batch"])
    schedule = make_schedule(options, optimizer, steps)
    generator = torch.Generator().manual_seed(seed)
    selection = Selection(patience=0)
    primary = Glue.STATISTICS[task][0]
    labels = torch.tensor(train.labels)
    batch = eval_batch_size(options["eval_batch_size"], encoder.device.type)
    predict = lambda examples: model.predict(examples, batch, options["max_seq_length"])  # noqa: E731
    curve, step = [], 0
    model.train()
    while step < steps:
        for indices in batches(len(train), options["batch_size"], generator, options["last_batch"]):
            texts = [[side[i] for i in indices] for side in train.texts]
            logits = model(model.features(texts, options["max_seq_length"]))
            loss = nn.functional.cross_entropy(logits, labels[indices].to(logits.device))
            optimization_step(loss, optimizer, schedule, options["max_grad_norm"])
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
