"""MLflow trial runs -> one Parquet file, one row per trial.

    python -m reports.collect [--tracking-uri URI] [--experiment NAME ...] [--out results.parquet]

Columns (see docs/results_schema.md): the trial's identity (its row, grid point, seed, method, run ...),
every knob it ran with its declared type, every final metric
(``best_dev_spearman``, ``best_step``, ``steps``, ``wall_seconds``,
``sentences_per_second``, ``test_*``), its sweep's layout as the sweep's parent run recorded it, and
its line's p-value in its sweep variant's table (:func:`results.lines.add_p_values`: the p of every table).
The file is rewritten whole and sorted, so collecting twice gives the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from reports.cli import run_command
from results.lines import add_p_values
from results.reader import parent_layouts, read_trials
from results.record import DEFAULT_TRACKING_URI
from results.schema import DEFAULT_RESULTS, LAYOUT, to_stored


def collect(tracking_uri: str = DEFAULT_TRACKING_URI, experiments: Sequence[str] | None = None) -> pd.DataFrame:
    """Every sweep trial in ``experiments`` (all experiments when None) as a frame, with its sweep's layout (as
    its parent run recorded it) and p-values."""
    frame = read_trials(tracking_uri, experiments)
    layouts = parent_layouts(tracking_uri, frame["parent_run_id"].dropna()) if not frame.empty else {}
    texts = frame["parent_run_id"].map(lambda run_id: layouts[run_id].to_json() if layouts.get(run_id) else pd.NA)
    return add_p_values(frame.assign(**{LAYOUT: texts.astype("string")}))


def write(frame: pd.DataFrame, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    to_stored(frame).to_parquet(out, index=False, engine="pyarrow")
    return out


def collect_command(args: argparse.Namespace) -> int:
    frame = collect(args.tracking_uri, args.experiments)
    path = write(frame, args.out)
    counts = frame.groupby("status").size().to_dict() if not frame.empty else {}
    print(f"{len(frame)} trials -> {path} ({', '.join(f'{n} {s.lower()}' for s, n in sorted(counts.items()))})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.collect", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--experiment", action="append", dest="experiments", help="Only these (repeatable).")
    parser.add_argument("--out", default=DEFAULT_RESULTS)
    return run_command(parser, argv, collect_command)


if __name__ == "__main__":
    sys.exit(main())
