"""Sweep-engine overhead: 8 short trials through ``sweep run`` against the same 8
run one after another in one plain Python process, in one command.

    python -m benchmarks.engine_overhead

The trial is fixed and short: the untuned bundled model evaluated on the first
200 pairs of each STS set (``none`` baseline), 8 poolings x layers. The sweep
side includes starting a local Ray, the MLflow tracking and the trial
processes; its fixed start-up cost (ray.init) is reported on its own.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import ray
import yaml

from benchmarks.results_file import write_section
from sweep.engine import SweepOptions, init_ray, run
from trainers.loop import run_trial

GRID = {"pooling_layer": [3, 4, 5, 6], "pooling": ["cls", "mean"]}
BASE = {"eval_max_pairs": 200}


def sequential_seconds() -> float:
    started = time.perf_counter()
    for layer in GRID["pooling_layer"]:
        for pooling in GRID["pooling"]:
            run_trial({"method": "none", **BASE, "pooling_layer": layer, "pooling": pooling})
    return time.perf_counter() - started


def sweep_seconds(folder: Path) -> tuple[float, float]:
    spec = {"name": "engine_overhead", "method": "none", "base": BASE, "grid": GRID, "max_concurrent_trials": 2}
    path = folder / "engine_overhead.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    ray.shutdown()
    started = time.perf_counter()
    init_ray(None)
    startup = time.perf_counter() - started
    run(SweepOptions(str(path), {}, tracking_uri=f"sqlite:///{folder}/mlflow.db", storage=str(folder / "ray")))
    total = time.perf_counter() - started
    ray.shutdown()
    return total, startup


def main() -> None:
    plain = sequential_seconds()
    with tempfile.TemporaryDirectory() as folder:
        total, startup = sweep_seconds(Path(folder))
    body = f"""Command: `python -m benchmarks.engine_overhead` (8 trials of the `none` baseline, bundled model,
first 200 pairs of each STS set; local Ray with 2 CPUs, 2 trials at a time; {time.strftime('%Y-%m-%d')}).

| run | seconds |
| --- | ---: |
| 8 trials one after another in one Python process | {plain:.1f} |
| the same 8 through `sweep run` (Ray + MLflow), total | {total:.1f} |
| of which fixed start-up (`ray.init`) | {startup:.1f} |
| **ratio sweep / plain** | **{total / plain:.2f}** (target <= 1.3) |
| ratio without the fixed start-up | {(total - startup) / plain:.2f} |
"""
    write_section("Engine overhead", body)
    print(body)


if __name__ == "__main__":
    main()
