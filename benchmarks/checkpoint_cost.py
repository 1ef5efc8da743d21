"""What trial checkpoints cost and what they save, for SG-OPT, ConSERT and SCT at their defaults.

    python -m benchmarks.checkpoint_cost [--steps 3] [--repeats 2]

For each method, with the bundled model: the time of one checkpoint save (the
loop's ``write_training_state`` plus the copy Ray makes into local storage) as a
share of the training time between two evaluations (``eval_every`` x the
measured step time; target: at most 5%), the bytes of a checkpoint and of an
exported encoder, and the steps a resume re-runs after a kill at 80% of a
default-length trial against the restart from step 0 that came before
checkpoints. Save and step timings are interleaved, and the fastest repeat counts.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.results_file import write_section
from benchmarks.step_time import loop_step_seconds
from sweep.run.models import save_sentence_transformer
from trainers.data.sources import load_corpus
from trainers.models.encoder import SentenceEncoder
from trainers.registry import get_method
from trainers.training.checkpoint import SelectionState, TrainingState, write_training_state
from trainers.training.optimization import make_optimizer, make_schedule
from trainers.training.rng import rng_states
from trainers.training.steps import total_steps

METHODS = {"SG-OPT": "sg", "ConSERT": "consert", "SCT": "sct"}


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def trained_state(method: str) -> tuple[dict, dict]:
    """A method's default config and the state a checkpoint holds after one training step."""
    torch.manual_seed(0)
    config = get_method(method).resolve({})
    (stage,) = get_method(method).stages(config)
    objective = stage.build(config, SentenceEncoder.from_config(config))
    optimizer = make_optimizer(config, objective)
    schedule = make_schedule(config, optimizer, 100)
    objective.train()
    objective.loss(load_corpus(config["train_corpus"])[: config["batch_size"]]).backward()
    optimizer.step()
    schedule.step()
    objective.after_update()  # SCT: the queues take the step's vectors
    encoder_state = {k: v.detach().clone() for k, v in objective.encoder.state_dict().items()}
    state = TrainingState(
        objective=objective.trained_state(), optimizer=optimizer.state_dict(), schedule=schedule.state_dict(),
        generator=torch.Generator().get_state(), rng=rng_states(), config=dict(config),
        # The worst case: the best state is an earlier one, stored beside the current weights.
        selection=SelectionState(best_score=0.0, best_step=1, evaluations_without_gain=1, best_state=encoder_state),
        timer={"training_seconds": 0.0, "examples": 0}, position={"stage": 0, "step": 2},
    )
    return config, {"state": state, "encoder": objective.encoder}


def save_seconds(state: TrainingState, storage: Path) -> tuple[float, int]:
    started = time.perf_counter()
    directory = write_training_state(state)
    shutil.copytree(directory, storage)  # what Ray's tune.report does with it on local storage
    seconds = time.perf_counter() - started
    size = folder_bytes(storage)
    shutil.rmtree(directory)
    shutil.rmtree(storage)
    return seconds, size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_cost")
    parser.add_argument("--steps", type=int, default=3, help="Timed training steps per repeat.")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for label, method in METHODS.items():
            config, trained = trained_state(method)
            saves, steps = [], []
            for _ in range(args.repeats):  # interleaved: a save, then the steps, each repeat
                seconds, checkpoint_bytes = save_seconds(trained["state"], Path(scratch) / "storage")
                saves.append(seconds)
                steps.append(loop_step_seconds(method, args.steps))
            export = Path(scratch) / f"export-{method}"
            save_sentence_transformer(trained["encoder"], export, config["eval_max_length"])
            between = config["eval_every"] * min(steps)
            n_steps = total_steps(config, len(load_corpus(config["train_corpus"])))
            killed_at = int(0.8 * n_steps)
            every = config["eval_every"] * config["checkpoint_every"]
            rerun = killed_at - (killed_at // every) * every
            rows.append(
                f"| {label} | {min(steps):.2f} | {config['eval_every']} | {min(saves):.2f} | "
                f"{100 * min(saves) / between:.2f}% | {checkpoint_bytes / 1e6:.0f} MB | "
                f"{folder_bytes(export) / 1e6:.0f} MB | "
                f"{n_steps:,} | {rerun:,} of {killed_at:,} ({rerun * min(steps) / 60:.1f} min vs "
                f"{killed_at * min(steps) / 3600:.1f} h) |"
            )
            shutil.rmtree(export)
            print(rows[-1], flush=True)
    body = [
        "`python -m benchmarks.checkpoint_cost`: SG-OPT, ConSERT and SCT at their defaults with the bundled model, "
        f"fastest of {args.repeats} interleaved repeats ({args.steps} timed steps each). A save is the loop's "
        "`write_training_state` plus the copy Ray makes into local storage, in the worst case (the best encoder is "
        "an earlier state, stored beside the current one). Target: a save at most 5% of the training between two "
        "evaluations, at `checkpoint_every: 1`. The resume column is arithmetic on the measured step time: a kill at "
        "80% of a default-length trial re-runs the steps since the last checkpoint, where before checkpoints the "
        "trial restarted from step 0.",
        "",
        "| method | s/step | eval every | save (s) | save / training between evaluations | checkpoint | exported "
        "encoder | steps (default) | steps re-run after a kill at 80% |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    write_section("Checkpoint cost", "\n".join(body))


if __name__ == "__main__":
    main()
