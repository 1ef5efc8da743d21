"""``python -m sweep plan``: the trial matrix of a spec, what runs once or is shared, the disk its kept
encoders take, and where its budget leaves a method outside its paper's regime. Runs nothing."""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweep.spec.contracts import describe
from sweep.spec.sweep_spec import SweepSpec, row_method
from trainers.registry import get_method


def warn(spec: SweepSpec) -> None:
    """Plan-time warnings: a budget that leaves a method outside its paper's regime (not a refusal)."""
    from sweep.spec.regime import regime_warnings

    for warning in regime_warnings(spec):
        print(f"warning: {warning}", file=sys.stderr)


def print_plan(spec: SweepSpec) -> None:
    """The trial matrix, what runs once or is shared, and the disk the kept encoders take."""
    warn(spec)
    varied = list(spec.grid) + list(spec.sample)
    print(f"{spec.name}: {spec.description}".rstrip(": "))
    print(f"method {spec.method}; budget {spec.budget.name if spec.budget else 'none'}; spec hash {spec.spec_hash}")
    width = max([len(row.name) for row in spec.rows] + [3]) + 2
    header = f"{'row':<{width}}{'method':<9}{'seeds':<24}" + "".join(f"{k:<16}" for k in varied)
    print(header)
    for row in spec.rows:
        seeds = ",".join(map(str, spec.seeds))
        seeds = f"{spec.seeds[0]} (runs once)" if spec.seed_free(row) and len(spec.seeds) > 1 else seeds
        method = row_method(spec, row).name
        for axes in spec.grid_points():
            cells = [str(axes[k]) for k in spec.grid] + [str(spec.sample[k]) for k in spec.sample]
            mirror = (f"  mirror of ({', '.join(str(axes[k]) for k in reversed(spec.symmetric))}): not run"
                      if spec.is_mirror(axes) else "")
            print(f"{row.name:<{width}}{method:<9}{seeds:<24}" + "".join(f"{c:<16}" for c in cells) + mirror)
    for line in meaning_lines(spec):
        print(line)
    print(disk_estimate(spec))
    for line in gpu_size_lines(spec):
        print(line)
    samples = (f"{spec.num_samples} points suggested by {spec.search.algorithm}" if spec.search
               else f"{spec.num_samples} samples")
    print(
        f"grid: {len(spec.rows)} rows x {len(spec.seeds)} seeds x {len(list(spec.grid_points()))} grid points"
        f" x {samples} = {spec.trial_count} trials"
    )
    for line in _savings(spec):
        print(line)
    print(f"{spec.trial_count} trials in the grid, {spec.trials_to_run} trials to run")
    if spec.seed_rounds is not None:
        rounds = spec.seed_rounds
        print(f"adaptive seeds: {spec.trials_to_run} trials with the first seeds {list(rounds.first)}, at most "
              f"{len(spec.trials)} when every row is undecided until seeds {list(rounds.more)} are all run "
              f"(a row stops when Welch's p against {spec.reference.row!r} is < {rounds.p:g} or > "
              f"{rounds.or_above:g})")


def _savings(spec) -> list[str]:
    """What runs once and what is shared, in words."""
    lines = []
    once = [row.name for row in spec.rows if spec.seed_free(row)]
    if once and len(spec.seeds) > 1:
        lines.append(f"runs once: {', '.join(repr(n) for n in once)} train nothing, so every seed gives the same "
                     f"numbers: one MLflow run each, tagged sweep.seeds={','.join(map(str, spec.seeds))}")
    if spec.symmetric:
        first, second = spec.symmetric
        mirrors = sum(spec.is_mirror(axes) for axes in spec.grid_points())
        reasons = {p.reason for row in spec.rows for p in row_method(spec, row).exchangeable
                   if set(p.knobs) == {first, second}}
        lines.append(f"symmetric: {first} <-> {second}: {mirrors} mirror grid points per row and seed do not run; "
                     f"tables fill them from their pair, marked as such ({'; '.join(sorted(reasons))})")
    return lines + frozen_table_lines(spec) + shared_stage_lines(spec)


def shared_stage_lines(spec: SweepSpec) -> list[str]:
    """How many trials begin with stages before their last, and how many distinct trainings of those stages one
    node runs when they are shared (``share_stages``, :mod:`trainers.training.shared_stages`)."""
    if not spec.trials_known:
        return []
    from sweep.spec.regime import shared_prefix

    shared: Counter[str] = Counter()  # trials per key of their stages before the last
    names, unshared = set(), 0
    for trial in spec.trials:
        method = get_method(trial.config["method"])
        prefix = method.stages(trial.config)[:-1] if method.trains else ()
        names |= {stage.name for stage in prefix}
        if (key := shared_prefix(method, trial.config)) is not None:
            shared[key] += 1
        elif prefix:
            unshared += 1
    lines = []
    if shared:
        trials = sum(shared.values())
        lines.append(f"shared stages: {trials} trials begin with stages before their last "
                     f"({', '.join(sorted(names))}): on one node {len(shared)} train those stages and "
                     f"{trials - len(shared)} read them (share_stages; a trial on another node trains its own)")
    if unshared:
        lines.append(f"unshared stages: {unshared} trials train their stages before the last themselves "
                     "(share_stages false)")
    return lines


def meaning_lines(spec: SweepSpec) -> list[str]:
    """What the rows mean, printed also for a spec this machine cannot run: each row's difference from the
    reference, the paper's settings they deviate from, what they make of a back-translation file, and the tuned
    settings a ``--set model=`` brought."""
    return reference_lines(spec) + ledger_lines(spec) + bt_file_lines(spec) + model_settings_lines(spec)


def reference_lines(spec: SweepSpec) -> list[str]:
    """The reference row, and each other row's difference from it (knob: reference -> row): what its contract's
    changes name, then, one a line with its source, what follows the method it switches to
    (:mod:`sweep.spec.contracts`)."""
    if spec.reference is None or not spec.reference_differences:  # a header with nothing under it says nothing
        return []
    width = max([len(row) for row in spec.reference_differences] + [3]) + 2
    lines = [f"against the reference row {spec.reference.describe()} (knob: reference -> row):"]
    for row, found in spec.reference_differences.items():
        follows = spec.row(row).follows_method
        changed = [name for name in found if name not in follows]
        lines.append(f"  {row:<{width}}{describe(found, changed) if changed else 'the same trial'}")
        method = spec.method_of(row)
        for name in (name for name in follows if name in found):  # a knob tuned per model may be the reference's
            lines.append(f"  {'':<{width}}follows {method.name}: {describe(found, [name])} ({method.sources[name]})")
    return lines


def _tuned_for_model(spec: SweepSpec, row: str) -> tuple[str, ...]:
    """The knobs a ``--set model=`` set on ``row`` from its paper's settings for that model (SCT Table 1), by the
    rule the trial's config took them by (:func:`sweep.spec.sweep_spec.set_knobs`)."""
    from sweep.spec.sweep_spec import set_knobs

    if "model" not in spec.set_by_option or row not in [r.name for r in spec.rows]:
        return ()
    method = spec.method_of(row)
    if method.settings_by_model is None:
        return ()
    settings, _, _ = method.settings_by_model(spec.row_config(row))
    return tuple(knob for knob in settings or () if knob not in set_knobs(spec, spec.row(row)))


def setting_text(value: Any) -> str:
    """A setting as a plan line writes it: a number short (1e-05, 256), anything else as Python writes it."""
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)


def model_settings_lines(spec: SweepSpec) -> list[str]:
    """The settings rows (and grid points) took from what their method tunes for their model (SCT Table 1, its
    authors' distillation table, SimCSE Table A.1, DCLR's run.sh): after ``--set model=``, or where a row's model
    has them and nothing sets those knobs."""
    from sweep.spec.sweep_spec import set_knobs

    taken: dict[str, list[str]] = {}
    for trial in spec.distinct_trials():
        row, method, config = spec.row(trial.point.row), spec.method_of(trial.point.row), trial.config
        if method.settings_by_model is None:
            continue
        settings, _, _ = method.settings_by_model(config)
        knobs = [knob for knob in settings or () if knob not in set_knobs(spec, row)]
        if knobs:
            values = ", ".join(f"{knob} {setting_text(config[knob])}" for knob in knobs)
            rows = taken.setdefault(f"{method.name}'s settings for {config['model']}: {values}", [])
            if row.name not in rows:
                rows.append(row.name)
    where = "--set model" if "model" in spec.set_by_option else "tuned per model"
    return [f"{where}: rows {', '.join(repr(r) for r in rows)} take {what} (those --set, a row or an axis sets "
            "stay theirs)" for what, rows in taken.items()]


def bt_file_lines(spec: SweepSpec) -> list[str]:
    """What each row makes of a back-translation file it is given (a table's ``--set bt_file`` reaches every row):
    its views, its sentences alone (an SCT row whose views are others), or nothing (ignored)."""
    from sweep.spec.contracts import training_data

    given: dict[str, list[str]] = {}
    for row in spec.rows:
        method, config = spec.method_of(row.name), spec.row_config(row.name)
        if not config.get("bt_file"):
            continue
        if not method.reads_bt_file(config):
            use = f"ignored: nothing of theirs reads it; they train on {training_data(config, method)!r}" \
                if method.trains else "ignored: they train nothing"
        elif method.views(config) and not any(view in method.views(config) for view in ("bt1", "bt2")):
            use = "its sentences are their corpus; their views are their own"
        else:
            use = f"its back-translations make their views ({method.views(config)})"
        given.setdefault(use, []).append(row.name)
    return [f"bt_file: rows {', '.join(repr(r) for r in rows)}: {use}" for use, rows in given.items()]


def ledger_lines(spec: SweepSpec) -> list[str]:
    """Where the spec's rows, as resolved here (with ``--set`` and the budget), differ from the paper's settings
    in the ledger (:mod:`sweep.spec.ledger`): the declared deviations, the budget's caps, and anything else, which
    the ledger does not declare (a ``--set`` of one's own)."""
    from sweep.spec.budget import CAPPED_KNOBS
    from sweep.spec.ledger import LEDGER_NAME, deviation_notes, ledger_mismatches, lines_of, load_ledger, rows_on_model

    ledger = load_ledger()
    record = ledger.get(spec.path.name)
    if record is None:
        return []
    found, _ = ledger_mismatches(spec, record)
    capped = [m for m in found if m.deviation is None and spec.budget is not None and m.knob in CAPPED_KNOBS]
    tuned = [m for m in found if m.deviation is None and m.knob in _tuned_for_model(spec, m.row)]
    other = [m for m in found if m.deviation is None and m not in capped and m not in tuned]
    notes = deviation_notes([m for m in found if m.deviation is not None], lines_of(spec))
    lines = [f"against the paper ({LEDGER_NAME}; knob: ours, the paper's (kind: reason)):"]
    lines += [f"  {note}" for note in notes]
    lines += [f"  {m.knob} [{m.row!r}]: ours {m.ours!r}, paper {m.paper.value!r} (budget: --budget {spec.budget.name})"
              for m in capped]
    lines += [f"  {m.knob} [{m.row!r}]: ours {m.ours!r}, the ledger's {m.paper.value!r} is its model's: --set model "
              "took the paper's for ours" for m in tuned]
    lines += [f"  {'--set' if m.knob in spec.set_by_option else 'not declared'}: {m.describe()}"
              f"{rows_on_model(m, record, ledger)}" for m in other]
    return lines if len(lines) > 1 else [f"against the paper ({LEDGER_NAME}): every row at the paper's settings"]


GPU_SIZE_PARAMETERS = 50_000_000
"""From this many parameters on, a model is GPU-size: BERT-base (110M), mBERT (178M) and BERT-large (335M)
are; the bundled MiniLM (23M) and SCT's BERT-Tiny ... BERT-Medium (4M ... 41M) are not."""
TRAINING_BYTES_PER_PARAMETER = 16
"""fp32 weights, their gradients and Adam's two moments."""


def gpu_size_lines(spec: SweepSpec) -> list[str]:
    """One line for each GPU-size model the spec's trials use: its size, the memory training it holds
    before activations, and how to time and place it."""
    from trainers.models.pretrained import model_config

    trains: dict[tuple[str, int], bool] = {}
    for trial in spec.distinct_trials():
        key = (trial.config["model"], trial.config["model_layers"])
        trains[key] = trains.get(key, False) or spec.method_of(trial.point.row).trains
    lines = []
    for (model, layers), trained in trains.items():
        parameters = model_config(model).parameters(layers)
        if parameters < GPU_SIZE_PARAMETERS:
            continue
        memory = (f"training holds {parameters * TRAINING_BYTES_PER_PARAMETER / 1e9:.1f} GB (fp32 weights, "
                  "gradients, Adam) before activations" if trained else
                  f"its untuned trials hold {parameters * 4 / 1e9:.1f} GB of fp32 weights")
        lines.append(f"GPU-size model: {model} has about {parameters / 1e6:.0f}M parameters; {memory}; time its "
                     f"trials here with `python -m sweep plan {spec.path} --estimate`, and give them a GPU "
                     "with resources: {cpu: 4, gpu: 1} (docs/gpu.md)")
    return lines


TABLE_BYTES_PER_NUMBER = 4
"""float32: the frozen models' outputs end in a LayerNorm, which autocast keeps in float32 (the table is
stored in the output's own precision, :mod:`trainers.models.frozen_outputs`)."""


@dataclass(frozen=True)
class TableSize:
    what: str
    texts: int | None  # None: the corpus needs the hub, not read at plan time
    numbers_per_text: int
    gb: float
    shared: bool

    @property
    def bytes(self) -> int:
        return (self.texts or 0) * self.numbers_per_text * TABLE_BYTES_PER_NUMBER

    @property
    def fits(self) -> bool:
        return self.bytes <= int(self.gb * 1e9)  # the trial's own rule (FrozenOutputs.prepare)


def table_sizes(spec: SweepSpec) -> dict[TableSize, list[str]]:
    """Each distinct table of frozen-model outputs the spec's trials compute, and the rows that use it."""
    from sweep.spec.regime import stage_needs_hub
    from trainers.training.steps import load_examples

    tables: dict[TableSize, list[str]] = {}
    widths: dict[tuple[str, ...], int] = {}
    for trial in spec.distinct_trials():
        method, config = spec.method_of(trial.point.row), trial.config
        table = method.frozen_table(config) if method.trains else None
        if table is None:
            continue
        for stage in method.stages(config):
            stage_config = {**config, **stage.overrides}
            texts = (None if stage_needs_hub(stage, stage_config)
                     else len(set(table.texts(load_examples(stage, stage_config)))))  # distinct: the table's rows
            model = (table.what, stage_config["model"], str(stage_config["model_layers"]),
                     str(stage_config.get("teacher")), str(stage_config.get("skip_first_layers")))
            if model not in widths:
                widths[model] = table.numbers_per_text()
            size = TableSize(table.what, texts, widths[model], stage_config["frozen_outputs_gb"],
                             stage_config["share_frozen_outputs"])
            if trial.point.row not in tables.setdefault(size, []):
                tables[size].append(trial.point.row)
    return tables


def frozen_table_lines(spec: SweepSpec) -> list[str]:
    """Where each table of frozen outputs is computed, its size (texts x width x bytes) against
    ``frozen_outputs_gb``; a warning for each that does not fit (its trials run the model every step)."""
    lines = []
    for size, rows in table_sizes(spec).items():
        names = "every row" if len(rows) == len(spec.rows) else ", ".join(repr(n) for n in rows)
        where = ("shared: {} ({}): one batched pass over the training texts per node, read by its trials "
                 "(share_frozen_outputs)" if size.shared else
                 "frozen outputs: {} ({}): one batched pass over the training texts inside each trial "
                 "(share_frozen_outputs false)").format(size.what, names)
        if size.texts is None:
            lines.append(f"{where}; table size unknown here (the corpus needs the hub)")
            continue
        verdict = "fits" if size.fits else "does not fit"
        lines.append(f"{where}; table {size.texts} texts x {size.numbers_per_text} x {TABLE_BYTES_PER_NUMBER} B = "
                     f"{size.bytes / 1e9:.3f} GB, {verdict} frozen_outputs_gb {size.gb:g}"
                     + ("" if size.fits else " (per-step forwards instead)"))
        if not size.fits:
            print(f"warning: frozen_outputs_gb: {size.what} ({names}) take {size.bytes / 1e9:.2f} GB, more than "
                  f"{size.gb:g}: those trials run the frozen model on every step's batch instead (batched, "
                  "slower; raise frozen_outputs_gb to table them)", file=sys.stderr)
    return lines


def encoder_bytes(model: str, layers: int) -> int:
    """Bytes of an encoder's float32 weights (what a kept trial stores): counted from the tensor shapes in
    its ``model.safetensors`` header where its folder has one (no torch, so ``sweep plan`` answers at
    once), else on the meta device."""
    from trainers.models.pretrained import resolve_model_path

    weights = Path(resolve_model_path(model)) / "model.safetensors"
    return _safetensors_bytes(weights, layers) if weights.is_file() else _meta_bytes(model, layers)


def _safetensors_bytes(weights: Path, layers: int) -> int:
    """4 bytes a number of every tensor in a safetensors file (an 8-byte length, then a JSON header of
    names and shapes), without the transformer layers from ``layers`` on when the model is cut."""
    with weights.open("rb") as file:
        header = json.loads(file.read(int.from_bytes(file.read(8), "little")))
    total = 0
    for name, tensor in header.items():
        layer = re.search(r"\.layers?\.(\d+)\.", name)
        if name == "__metadata__" or (layers and layer and int(layer.group(1)) >= layers):
            continue
        total += 4 * math.prod(tensor["shape"])
    return total


def _meta_bytes(model: str, layers: int) -> int:
    import torch
    from transformers import AutoConfig, AutoModel

    from trainers.models.pretrained import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(model))
    if layers:
        config.num_hidden_layers = layers
    with torch.device("meta"):
        skeleton = AutoModel.from_config(config)
    return sum(4 * parameter.numel() for parameter in skeleton.parameters())


def disk_estimate(spec) -> str:
    """The disk the sweep's kept encoders take in Ray's storage, under its ``keep_models``."""
    sizes: dict[tuple[str, int], int] = {}
    trained: list[tuple[str, int]] = []  # (row, bytes) of each trained trial
    for trial in spec.trials:
        if not spec.method_of(trial.point.row).trains:
            continue
        key = (trial.config["model"], trial.config["model_layers"])
        if key not in sizes:
            sizes[key] = encoder_bytes(*key)
        trained += [(trial.point.row, sizes[key])] * spec.num_samples
    if not trained:
        return "models: no trained trials, nothing kept (untuned encoders are loaded again from their config)"
    largest = max(size for _, size in trained)
    count = {"all": len(trained), "best": 1, "none": 0,
             "best_per_row": len({row for row, _ in trained})}[spec.keep_models]
    kept = sum(sorted((size for _, size in trained), reverse=True)[:count])
    return (f"models: keep_models {spec.keep_models}: {count} of {len(trained)} trained encoders kept, up to "
            f"{kept / 1e9:.2f} GB ({count} x {largest / 1e6:.0f} MB); while running, each running trial also "
            "keeps its resume checkpoints")
