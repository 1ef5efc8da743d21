"""The one training loop every method runs through.

``run_trial(config, reporter)`` takes a resolved trial config (or resolves
knob overrides), loads encoder, data and evaluator, trains the method's stages (if it
has any) with evaluation on STS-B dev every ``eval_every`` steps, early
stopping and best-state keeping, and finally evaluates the *best* state on the
seven test sets. Every evaluation and the final figures go to the trial's
:class:`~trainers.training.checkpoint.TrialSession`: ``ray.tune.report`` inside a
sweep, a plain function in tests and scripts. Every ``checkpoint_every``
evaluations the session also gets a checkpoint from which
:func:`run_trial` continues exactly where it stopped: same batches, same
random draws, same losses.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import torch
from transformers import set_seed

from trainers.common_knobs import eval_batch_size, precision_settings
from trainers.method import Config, Method, TrialConfig
from trainers.metrics import Metric, ReportKey
from trainers.models.encoder import SentenceEncoder, pick_device
from trainers.objectives.base import Objective
from trainers.registry import get_method
from trainers.suites import evaluate_suite, evaluate_suites, trial_suites
from trainers.suites.sts import SELECTION_PARTS, STSEvaluator
from trainers.training import precision
from trainers.training.checkpoint import (
    FinalRecord,
    FinishedCheckpoint,
    Reporter,
    TrainingState,
    TrialSession,
    newest_checkpoint,
    remove,
    write_final_checkpoint,
    write_training_state,
)
from trainers.training.encoding import dev_encode_fn, encode_fn, inference_seconds
from trainers.training.graphs import GraphedStep, eager_step
from trainers.training.optimization import Selection, batches, make_optimizer, make_schedule
from trainers.training.rng import rng_states, set_rng_states
from trainers.training.shared_stages import SharedStages, prefix_key
from trainers.training.steps import evaluations_after, load_examples, total_steps


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the trial cannot continue."""


@dataclass
class _Timer:
    training_seconds: float = 0.0
    examples: int = 0


READ_LOSSES_EVERY = 32
"""Steps whose losses stay on the device before the loop reads them (and at each evaluation): reading a loss
waits for its step to finish, which every step would leave the device idle while the host launches the next."""


class UnreadLosses:
    """The losses of the steps since the last read, as device tensors: read at once, and checked there."""

    def __init__(self) -> None:
        self._losses: list[torch.Tensor] = []
        self._first_step = 0

    def __len__(self) -> int:
        return len(self._losses)

    def append(self, loss: torch.Tensor, step: int) -> None:
        if not self._losses:
            self._first_step = step
        self._losses.append(loss.detach())

    def read(self) -> list[float]:
        """The unread losses as floats (each what ``loss.item()`` gives), or NonFiniteLossError at the first
        that is NaN or infinite: the steps after it are lost with the trial, and no evaluation or checkpoint
        saw their weights."""
        values = torch.stack(self._losses).tolist()
        self._losses = []
        for offset, value in enumerate(values):
            if not math.isfinite(value):
                raise NonFiniteLossError(f"training loss is {value} at step {self._first_step + offset}; "
                                         "the trial stops here")
        return values


@dataclass
class _Position:
    """Where training stands: what a checkpoint needs besides the modules, optimizer and RNGs."""

    stage: int = 0
    step: int = 0  # over all stages: the x axis of the metric history
    stage_step: int = 0
    evaluations: int = 0
    epoch_batches: list[list[int]] = field(default_factory=list)
    batch_in_epoch: int = 0

    def next_batch(self, n_examples: int, batch_size: int, generator: torch.Generator, last_batch: str) -> list[int]:
        if self.batch_in_epoch >= len(self.epoch_batches):
            self.epoch_batches, self.batch_in_epoch = batches(n_examples, batch_size, generator, last_batch), 0
        self.batch_in_epoch += 1
        return self.epoch_batches[self.batch_in_epoch - 1]


def restore_learning_rate(config: Config, optimizer: torch.optim.Optimizer, schedule) -> None:
    """After loading optimizer and schedule states, take ``learning_rate`` from the config: equal to the
    saved rates on a plain resume, the mutated rate after a PBT exploit."""
    schedule.base_lrs = [config["learning_rate"]] * len(optimizer.param_groups)
    rates = [base * rate(schedule.last_epoch) for base, rate in zip(schedule.base_lrs, schedule.lr_lambdas)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["initial_lr"] = config["learning_rate"]
        # A rate kept in a tensor (for a CUDA graph) stays one, on the parameters' device.
        group["lr"] = (torch.tensor(rate, device=group["params"][0].device) if isinstance(group["lr"], torch.Tensor)
                       else rate)
    schedule._last_lr = rates


def train(
    objective: Objective,
    examples: Sequence[Any],
    config: Config,
    evaluator: STSEvaluator,
    session: TrialSession | Reporter,
    position: _Position | None = None,
    resume: TrainingState | None = None,
    stages: int = 1,
) -> dict[str, Any]:
    """Train ``objective`` on ``examples`` (one stage); leave its encoder in the state ``final_state`` asks for.

    ``position`` says where the stage starts (its index, the steps of earlier
    stages); ``resume`` is a checkpoint's training state of this stage to continue
    from. Returns the bookkeeping figures (best dev score and step, steps taken,
    training throughput) for the final report.
    """
    session = session if isinstance(session, TrialSession) else TrialSession(session)
    encoder = objective.encoder
    device = encoder.device
    encode_dev = dev_encode_fn(encoder, config)  # the evaluations that select
    graphed = config.get("cuda_graph", False)  # the methods with STEP_GRAPH_KNOBS
    optimizer = make_optimizer(config, objective, rate_tensor=graphed)
    steps = total_steps(config, len(examples))
    schedule = make_schedule(config, optimizer, steps)
    generator = torch.Generator().manual_seed(config["seed"])
    selection = Selection(config["patience"], keep_last=config["final_state"] == "last",
                          rule=config["early_stopping_rule"])
    timer = _Timer()
    position = position or _Position()
    if resume is not None:
        objective.load_trained_state(resume.objective)
        optimizer.load_state_dict(resume.optimizer)
        schedule.load_state_dict(resume.schedule)
        restore_learning_rate(config, optimizer, schedule)
        generator.set_state(resume.generator)
        selection.restore(resume.selection, encoder)
        timer = _Timer(**resume.timer)
        position = _Position(**resume.position)
        set_rng_states(resume.rng)
    if config["torch_compile"]:  # after the objective's copies of the encoder (its own, uncompiled)
        encoder.compile_transformer(config["torch_compile_mode"])
    used = precision.of_training(config, device)
    with precision.autocast(used, device):  # the frozen outputs' table, under the precision of the steps that read it
        objective.prepare(examples)
    scaler = precision.loss_scaler(used, device)
    if scaler is not None and resume is not None and resume.scaler is not None:
        scaler.load_state_dict(resume.scaler)
    scale = scaler.get_scale() if scaler is not None else None
    step = (GraphedStep(objective, optimizer, config["max_grad_norm"], used, device) if graphed
            else eager_step(objective, optimizer, config["max_grad_norm"], used, device, scaler))
    losses: list[float] = []
    unread = UnreadLosses()
    # Training mode is set here and after each evaluation, not every step: a step's host time is what a GPU
    # waits on, and train() walks every submodule.
    objective.train()

    while position.stage_step < steps and not selection.should_stop:
        batch_indices = position.next_batch(len(examples), config["batch_size"], generator, config["last_batch"])
        started = time.perf_counter()
        loss = step([examples[i] for i in batch_indices])
        # fp16_schedule 'hold', as fit(use_amp=True): a step whose loss scale changed (an overflow's skipped update,
        # or the scale's growth every 2,000 steps) does not advance the schedule. Without a scaler both are None.
        scale, before = (scaler.get_scale() if scaler is not None else None), scale
        if scale == before or config["fp16_schedule"] == "advance":
            schedule.step()
        objective.after_step()
        position.step += 1
        position.stage_step += 1
        unread.append(loss, position.step)
        counted = evaluations_after(position.stage_step, position.batch_in_epoch, len(position.epoch_batches), steps,
                                    config["eval_every"], config["eval_grid"])
        evaluates = bool(counted)
        if evaluates or len(unread) == READ_LOSSES_EVERY:  # the one wait for the device in these steps
            losses += unread.read()
        timer.training_seconds += time.perf_counter() - started
        timer.examples += len(batch_indices)

        if evaluates:
            scores = evaluator.dev(encode_dev)
            dev = scores[Metric.DEV]
            for epoch_end in counted:
                selection.update(dev, position.step, encoder, epoch_end)
            position.evaluations += 1
            metrics = {
                Metric.STEP: position.step,
                Metric.LOSS: sum(losses) / len(losses),
                Metric.LR: float(schedule.get_last_lr()[0]),  # a tensor's copy for a CUDA graph's rate
                Metric.DEV: dev,
                Metric.BEST_DEV: selection.best_score,
                **{name: scores[name] for name in SELECTION_PARTS if name in scores},
            }
            if stages > 1:
                metrics[Metric.STAGE] = position.stage
            losses = []
            checkpoint = None
            # The trial's last evaluation needs none, its final checkpoint follows, unless a scheduler may pause the
            # trial at this report: it would train the last steps again from the checkpoint before and report this
            # evaluation twice (under synchronous PBT, a second perturbation point that a finished trial never
            # reaches, where the other trial waits for ever).
            last = position.stage == stages - 1 and (position.stage_step >= steps or selection.should_stop)
            every = config["checkpoint_every"]
            if (session.keeps_checkpoints and (session.may_pause or not last) and every
                    and position.evaluations % every == 0):
                checkpoint = write_training_state(TrainingState(
                    objective=objective.trained_state(),
                    optimizer=optimizer.state_dict(),
                    schedule=schedule.state_dict(),
                    generator=generator.get_state(),
                    selection=selection.state(position.step),
                    timer=asdict(timer),
                    position=asdict(position),
                    rng=rng_states(),
                    config=dict(config),
                    scaler=None if scaler is None else scaler.state_dict(),
                ))
            try:
                session.report(metrics, checkpoint)
            finally:  # a temporary copy: the session keeps its own
                remove(checkpoint)
            objective.train()

    if selection.best_state is not None:
        encoder.load_state_dict(selection.best_state)
    statistics = objective.statistics()
    # A frozen model's pass over the training texts (SG's BERT_F) is part of what the method computes to train;
    # a trial that read a table another trial built counts the seconds recorded with it.
    table_seconds = statistics.get(Metric.FROZEN_OUTPUTS_SECONDS, 0.0)
    return {
        Metric.STEP: position.step,
        Metric.BEST_DEV: selection.best_score,
        Metric.BEST_STEP: selection.best_step,
        Metric.STEPS: position.step,
        Metric.EARLY_STOPPED: float(selection.should_stop),
        Metric.TRAIN_SECONDS: timer.training_seconds,
        Metric.TRAIN_SECONDS_WITH_FROZEN_OUTPUTS: timer.training_seconds + table_seconds,
        Metric.SENTENCES_PER_SECOND: timer.examples / timer.training_seconds if timer.training_seconds else 0.0,
        **({Metric.GRAPHED_STEPS: float(step.graphed_steps)} if graphed else {}),
        **statistics,
    }


def _settings_used(config: Config, device: torch.device) -> dict[str, str | int]:
    """The trial's precisions and evaluation batch size as resolved on this node (``auto`` and 0 depend on its
    hardware)."""
    used: dict[str, str | int] = {knob: precision.resolve(setting, device, graphed)
                                  for knob, (setting, graphed) in precision_settings(config).items()}
    return {**used, ReportKey.EVAL_BATCH_SIZE: eval_batch_size(config["eval_batch_size"], device.type)}


def train_stages(method: Method, config: Config, encoder: SentenceEncoder, evaluator: STSEvaluator,
                 session: TrialSession, resume: TrainingState | None) -> dict[str, Any]:
    """Run the method's stages in turn on ``encoder``, from ``resume`` (the session's newest training
    state) if there is one: earlier stages are then done, and its stage continues where it stopped. A trial
    that starts afresh reads its stages before the last where the node keeps them (``share_stages``,
    :mod:`~trainers.training.shared_stages`)."""
    stages = method.stages(config)
    configs = [{**config, **stage.overrides} for stage in stages]

    def run(index: int, position: _Position, session: TrialSession, examples: Sequence[Any] | None = None,
            resume: TrainingState | None = None) -> dict[str, Any]:
        objective = stages[index].build(configs[index], encoder).to(encoder.device)
        examples = load_examples(stages[index], configs[index]) if examples is None else examples
        return train(objective, examples, configs[index], evaluator, session, position, resume, len(stages))

    position = _Position(stage=resume.stage if resume else 0)
    shared = SharedStages.of_trial(config, len(stages)) if resume is None else None
    reused: dict[str, float] = {}
    if shared is not None:
        prefix = stages[:-1]
        examples = [load_examples(stage, stage_config) for stage, stage_config in zip(prefix, configs)]

        def train_prefix(recording: TrialSession) -> int:
            at = _Position()
            for index, stage_examples in enumerate(examples):
                at = _Position(stage=index + 1, step=run(index, at, recording, stage_examples)[Metric.STEPS])
            return at.step

        key = prefix_key(config, prefix, examples, evaluator.sets, encoder.device, method.all_knobs)
        steps, read = shared.train_once(key, encoder, session, train_prefix)
        position = _Position(stage=len(prefix), step=steps)
        reused = {Metric.STAGES_REUSED: float(len(prefix) if read else 0)}
    first = position.stage
    final: dict[str, Any] = {}
    for index in range(first, len(stages)):
        final = run(index, position, session, resume=resume if index == first else None)
        position = _Position(stage=index + 1, step=final[Metric.STEPS])
    if resume is not None:
        final[Metric.RESUMED_FROM_STEP] = resume.step
    return {**final, **reused}


def run_trial(config: Mapping[str, Any], reporter: TrialSession | Reporter | None = None) -> dict[str, Any]:
    """Run one trial of ``config['method']`` and return its final figures.

    ``config`` is a :class:`~trainers.method.TrialConfig` (what the sweep resolved, run as it is) or
    knob overrides, resolved here. ``reporter`` is a :class:`~trainers.training.checkpoint.TrialSession` (which
    may keep checkpoints, and resume from them) or a plain function that receives every report. The
    final figures are also the last thing reported: test metrics prefixed ``test_`` (of the best dev
    state), ``best_dev_spearman``, ``steps``, ``test_seconds`` (the final test's encoding and scoring),
    ``stsb_test_seconds_b16`` (SG-BERT Table 6's inference), ``wall_seconds``, for a trained method
    ``train_seconds``, ``train_seconds_with_frozen_outputs`` and ``sentences_per_second``, and the metrics of
    the other evaluation suites the config chooses (``evaluations``, :mod:`trainers.suites`); with a
    checkpointing session, they come with the final checkpoint (the best encoder and its
    :class:`~trainers.training.checkpoint.FinalRecord`).
    """
    started = time.perf_counter()
    session = reporter if isinstance(reporter, TrialSession) else TrialSession(reporter)
    method = get_method(config.get("method", "none"))
    config = config if isinstance(config, TrialConfig) else TrialConfig(method.resolve(config))
    restored = newest_checkpoint(session)
    if isinstance(restored, FinishedCheckpoint):  # report the end it saved again, with the same product
        metrics = restored.record.metrics
        final = {**metrics, Metric.RESUMED_FROM_STEP: metrics.get(Metric.STEPS, 0)}
        try:
            session.report(final, restored.directory)
        finally:
            remove(restored.directory.parent)
        return final
    set_seed(config["seed"])
    device = pick_device(config["device"])
    encoder = SentenceEncoder.from_config(config).to(device)
    evaluator = STSEvaluator.of_trial(config)  # STS-B dev selects; its sets are the STS suite's

    if method.trains:
        final = train_stages(method, config, encoder, evaluator, session, restored)
    else:
        final = {Metric.STEP: 0, Metric.STEPS: 0, Metric.BEST_STEP: 0}
        final[Metric.BEST_DEV] = evaluator.dev(encode_fn(encoder, config))[Metric.DEV]
    sts, *others = trial_suites(config)  # STS first: SG-BERT Table 6 and SCT Figure 2 time its test
    testing_started = time.perf_counter()
    final.update(evaluate_suite(sts, encode_fn(encoder, config), config, data=evaluator.sets))
    final[Metric.TEST_SECONDS] = time.perf_counter() - testing_started
    final[Metric.STSB_TEST_SECONDS_B16] = inference_seconds(encoder, config, evaluator)
    final.update(evaluate_suites(others, encode_fn(encoder, config), config))
    final[Metric.WALL_SECONDS] = time.perf_counter() - started
    final.update(_settings_used(config, device))
    checkpoint = None
    if session.keeps_checkpoints:
        record = FinalRecord(dict(config), {k: v for k, v in final.items() if _is_scalar(v)}, method.trains)
        checkpoint = write_final_checkpoint(encoder, record)
    try:
        session.report(final, checkpoint)
    finally:
        remove(checkpoint)
    return final


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)
