"""``python -m sweep plan``: the trial matrix of a spec, what runs once or is shared, the disk its kept
encoders take, and where its budget leaves a method outside its paper's regime. Runs nothing."""

from __future__ import annotations

import sys

from sweep.spec import SweepSpec, row_method


def warn(spec: SweepSpec) -> None:
    """Plan-time warnings: a budget that leaves a method outside its paper's regime (not a refusal)."""
    from sweep.regime import regime_warnings

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
            mirror = f"  mirror of ({', '.join(str(axes[k]) for k in reversed(spec.symmetric))}): not run" if spec.is_mirror(axes) else ""
            print(f"{row.name:<{width}}{method:<9}{seeds:<24}" + "".join(f"{c:<16}" for c in cells) + mirror)
    print(disk_estimate(spec))
    print(
        f"grid: {len(spec.rows)} rows x {len(spec.seeds)} seeds x {len(list(spec.grid_points()))} grid points"
        f" x {spec.num_samples} samples = {spec.trial_count} trials"
    )
    for line in _savings(spec):
        print(line)
    print(f"{spec.trial_count} trials in the grid, {spec.trials_to_run} trials to run")


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
        reasons = {p.reason for row in spec.rows for p in row_method(spec, row).exchangeable if set(p.knobs) == {first, second}}
        lines.append(f"symmetric: {first} <-> {second}: {mirrors} mirror grid points per row and seed do not run; "
                     f"tables fill them from their pair, marked as such ({'; '.join(sorted(reasons))})")
    shared: dict[str, list[str]] = {}
    for trial in spec.trials:
        what = spec.method_of(trial.point.row).shared_outputs(trial.config)
        if what and trial.point.row not in shared.get(what, []):
            shared.setdefault(what, []).append(trial.point.row)
    for what, rows in shared.items():
        names = "every row" if len(rows) == len(spec.rows) else ", ".join(repr(n) for n in rows)
        lines.append(f"shared: {what} ({names}) are computed once per input text on each node and shared by its "
                     "trials (share_frozen_outputs; the same numbers as computing them every step)")
    return lines


def encoder_bytes(model: str, layers: int) -> int:
    """Bytes of an encoder's float32 weights (what a kept trial stores), counted on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModel

    from trainers.pretrained import resolve_model_path

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
