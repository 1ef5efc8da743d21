"""What a method is: its knobs, and (for trained methods) its training stages.

The shared loop (:mod:`trainers.loop`) owns everything common to all methods.
A method adds only an :class:`Objective`: the modules it trains (its views,
heads, frozen copies, queues) and its loss on a batch of training examples.
Most methods train in one stage; a method with several (ConSERT's NLI stage
followed by unsupervised transfer) lists them, and the loop runs, reports and
checkpoints each in turn on the same encoder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from torch import Tensor, nn

from trainers.common_knobs import COMMON_KNOBS, TRAINING_KNOBS
from trainers.data import corpus_problem, evaluation_names, hub_reachable, load_corpus, sts_problems
from trainers.encoder import SentenceEncoder, layers_problem, model_problem
from trainers.knobs import Exchangeable, KnobSet

Config = Mapping[str, Any]


class Objective(nn.Module):
    """A method's training objective around the encoder being tuned.

    ``encoder`` is the model that is evaluated, whose best state is kept and
    which is what a trial produces. Everything else the objective holds
    (projection heads, frozen copies, queues) is discarded after training.
    """

    def __init__(self, encoder: SentenceEncoder):
        super().__init__()
        self.encoder = encoder

    def loss(self, batch: Sequence[Any]) -> Tensor:
        """The scalar training loss of one batch of corpus examples."""
        raise NotImplementedError

    def after_step(self) -> None:
        """Called after each optimizer step (queue updates, momentum encoders)."""

    def rebuilt_modules(self) -> tuple[str, ...]:
        """Names of frozen submodules that the constructor rebuilds identically from the config
        (SG's BERT_F, a teacher): a checkpoint leaves them out."""
        return ()

    def trained_state(self) -> dict[str, Tensor]:
        """What a checkpoint keeps of the objective: its state dict (encoder, heads, projector,
        queues and their pointers, momentum encoders, extra state such as generators), less the
        rebuilt modules."""
        rebuilt = tuple(f"{name}." for name in self.rebuilt_modules())
        return {k: v for k, v in self.state_dict().items() if not k.startswith(rebuilt)} if rebuilt else self.state_dict()

    def load_trained_state(self, state: Mapping[str, Tensor]) -> None:
        rebuilt = tuple(f"{name}." for name in self.rebuilt_modules())
        missing, unexpected = self.load_state_dict(state, strict=False)
        absent = [k for k in missing if not k.startswith(rebuilt)] if rebuilt else missing
        if absent or unexpected:
            raise ValueError(f"checkpoint does not fit the objective: missing {absent[:5]}, unexpected {unexpected[:5]}")

    def statistics(self) -> dict[str, float]:
        """Figures for the trial's final report beside the loop's (e.g. what shared frozen outputs saved)."""
        return {}


def corpus_examples(config: Config) -> list[str]:
    """Default training examples: the sentences of the ``train_corpus`` knob."""
    return load_corpus(config["train_corpus"], config["sts_source"])


BuildObjective = Callable[[Config, SentenceEncoder], Objective]


@dataclass(frozen=True)
class Stage:
    """One training stage: the objective it trains, the examples its batches come from, and the
    knobs it sets for itself (a stage's own learning rate, epochs, patience)."""

    name: str
    build: BuildObjective
    examples: Callable[[Config], Sequence[Any]] = corpus_examples
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)


Stages = Callable[[Config], tuple[Stage, ...]]


def single_stage(build: BuildObjective, examples: Callable[[Config], Sequence[Any]] = corpus_examples) -> Stages:
    """The stages of a method that trains one objective on one set of examples."""
    stage = Stage("train", build, examples)
    return lambda config: (stage,)


@dataclass(frozen=True)
class Method:
    """A method's declaration.

    ``knobs`` are the method's own knobs; ``defaults`` changes the default of
    common knobs for this method (e.g. its paper's batch size). ``stages`` gives
    a config's training stages; it is None for methods that do not train (the
    ``none`` baseline). ``check`` finds problems that involve several knobs or
    the environment (a missing file, a hub that cannot be reached) before any
    trial starts. ``regime`` says, as warnings, where a config trained for
    ``steps`` steps leaves the paper's regime (SCT's instance queues that such a
    run cannot fill). ``exchangeable`` lists knob pairs whose values can swap without changing the
    experiment (what a spec's ``symmetric`` axes need). ``shared_outputs`` names
    the frozen-model outputs a config shares across trials (None: none).
    """

    name: str
    summary: str
    knobs: KnobSet = KnobSet()
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    stages: Stages | None = None
    check: Callable[[Config], list[str]] = lambda config: []
    regime: Callable[[Config, int], list[str]] = lambda config, steps: []
    exchangeable: tuple[Exchangeable, ...] = ()
    shared_outputs: Callable[[Config], str | None] = lambda config: None

    @property
    def trains(self) -> bool:
        return self.stages is not None

    @property
    def seed_free(self) -> bool:
        """A method that trains nothing evaluates a fixed model: every seed gives the same numbers."""
        return not self.trains

    @property
    def all_knobs(self) -> KnobSet:
        shared = COMMON_KNOBS + (TRAINING_KNOBS if self.trains else KnobSet())
        replaced = tuple(
            dataclasses.replace(knob, default=self.defaults[knob.name]) if knob.name in self.defaults else knob
            for knob in shared
        )
        unknown = set(self.defaults) - set(shared.names)
        if unknown:
            raise ValueError(f"method {self.name!r} changes defaults of unknown knobs {sorted(unknown)}")
        return KnobSet(replaced) + self.knobs

    def resolve(self, overrides: Config) -> dict[str, Any]:
        """The full config: defaults updated by ``overrides``, validated."""
        config = self.all_knobs.resolve({k: v for k, v in overrides.items() if k != "method"})
        config["method"] = self.name
        return config

    def environment_problems(self, config: Config) -> list[str]:
        """What a resolved config needs that this machine lacks (files, the hub)."""
        found = []
        if self.trains and any(stage.examples is corpus_examples for stage in self.stages(config)):
            problem = corpus_problem(config["train_corpus"], config["sts_source"])
            if problem:
                found.append(f"train_corpus: {problem}")
        problem = model_problem(config["model"])
        if problem:
            found.append(f"model: {problem}")
        elif problem := layers_problem(config["model"], config["model_layers"]):
            found.append(f"model_layers: {problem}")
        if config["sts_source"] == "hub" and not hub_reachable():
            found.append("sts_source: 'hub' needs the Hugging Face hub, which cannot be reached")
        elif config["sts_source"] == "local":
            found += [f"evaluation set: {problem}" for problem in sts_problems(evaluation_names())]
        return found + self.check(config)

