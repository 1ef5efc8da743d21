"""The progress view of a running sweep, a Ray Tune callback that draws with ``rich``.

On a terminal it is one live panel, redrawn in place: how many trials finished, run, are paused, wait and failed,
the elapsed time and an estimate of the time left, and a line per running trial (row, seed, step of
total, last and best dev score). Piped to a file it prints a line when a trial starts, resumes, ends or fails,
and a status line every :data:`PIPED_STATUS_S` seconds, so a log of the smoke sweep stays short.
Either way a failed trial's error is printed with the path of its full traceback, and a trial that
finished gets one line with its best dev score. A trial taken from the store (:mod:`sweep.run.reuse`) trains
nothing: it gets one line, ``reused``, with its score and the sweep that trained it, and no start. Every
line is stamped with the time since the command started (one clock for all the sweeps of a campaign), so
the stamps only move forward. Everything Ray prints itself goes to the sweep's log (:mod:`sweep.run.console`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow.fs
from ray.tune.experiment import Trial
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sweep.spec.sweep_spec import POINT, SweepSpec
from sweep.tracking.driver_local import DriverLocal
from trainers.metrics import Metric

LIVE_REFRESH_S = 1.0
PIPED_STATUS_S = 60.0
DASH = "–"


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def score(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else DASH


@dataclass(frozen=True)
class Counts:
    finished: int
    running: int
    pending: int
    failed: int
    paused: int = 0
    """Trials a scheduler paused (PBT, HyperBand) to resume later; shown only when there are some."""

    def __str__(self) -> str:
        paused = f" · {self.paused} paused" if self.paused else ""
        return (f"{self.finished} finished · {self.running} running{paused} · {self.pending} pending · "
                f"{self.failed} failed")


class SweepProgress(DriverLocal):
    """The console's view of the sweep; ``live`` redraws it in place (a terminal), else it prints lines.
    ``started``: when the command started (``time.monotonic()``), the zero of every line's stamp."""

    def __init__(self, spec: SweepSpec, console: Console, live: bool, log: Path | None,
                 started: float | None = None):
        super().__init__(f"progress:{spec.name}-{spec.spec_hash}")
        self.spec = spec
        self.console = console
        self.live = live
        self.log = log
        self.started = time.monotonic() if started is None else started
        self.reused: Mapping[int, str] = {}
        """Index of a trial in the spec -> the sweep that trained it, for the trials taken from the store."""
        self._trials: Sequence[Trial] = ()
        self._display: Live | None = None
        self._drawn = 0.0
        self._trial_started: dict[str, float] = {}

    # ------------------------------------------------------------------ what a trial is and where it is

    def trial_name(self, trial: Trial) -> str:
        """Row (and grid or sampled point) and seed, as the summary and ``sweep status`` name a trial."""
        params = self.spec.trial_params(trial.config)
        axes = ", ".join(f"{axis}={params[axis]}" for axis in [*self.spec.grid, *self.spec.sample] if axis in params)
        row = params.get("row") or ""
        label = f"{row} [{axes}]" if row and axes else row or axes or self.spec.name
        return f"{label} (seed {params.get('seed', DASH)})"

    def reused_from(self, trial: Trial) -> str | None:
        """The sweep that trained ``trial``, when it is taken from the store; None when it trains here (and
        always for a sampled sweep's trials: :attr:`SweepSpec.trials_known` is false)."""
        return self.reused.get(trial.config.get(POINT))

    def total_steps(self, trial: Trial) -> int | None:
        return self.spec.config_of(trial.config).get("max_steps") or None

    def step_text(self, trial: Trial) -> str:
        step, total = (trial.last_result or {}).get(Metric.STEP), self.total_steps(trial)
        if step is None:
            return DASH
        return f"{step}/{total}" if total and step <= total else str(step)

    def counts(self) -> Counts:
        statuses = [t.status for t in self._trials]
        finished, running, paused, failed = (statuses.count(s) for s in (Trial.TERMINATED, Trial.RUNNING,
                                                                          Trial.PAUSED, Trial.ERROR))
        waiting = max(0, self.spec.trials_to_run - finished - running - paused - failed)
        return Counts(finished, running, waiting, failed, paused)

    def running_for(self, trial: Trial) -> float:
        """Seconds since the trial started in this driver."""
        return time.monotonic() - self._trial_started.get(trial.trial_id, self.started)

    def time_left(self) -> float | None:
        """Seconds until the sweep ends, if the trials so far say: each running trial's time to its last
        step at its pace so far (without a step of a known total yet, the mean trial time less the time it
        has run), and each waiting or paused trial the mean trial time, spread over the trials that run at once.
        None until one trial has finished or reported a step of a known total, and while a trial without a step
        has run longer than the mean trial (the smoke sweep's SimCSE after its two untrained rows): its time left
        is unknown, not none."""
        durations, paced, unpaced = [], 0.0, []
        running = [t for t in self._trials if t.status == Trial.RUNNING]
        for trial in self._trials:
            result = trial.last_result or {}
            seconds = float(result.get("time_total_s", 0.0))
            step, total = result.get(Metric.STEP), self.total_steps(trial)
            if trial.status == Trial.TERMINATED and self.reused_from(trial) is None:
                durations.append(seconds)
            elif trial.status == Trial.RUNNING and step and total:
                durations.append(seconds * total / step)
                paced += max(0.0, seconds * (total - step) / step)
            elif trial.status == Trial.RUNNING:
                unpaced.append(self.running_for(trial))
        if not durations:
            return None
        mean = sum(durations) / len(durations)
        if any(seconds >= mean for seconds in unpaced):
            return None
        counts = self.counts()
        left = paced + sum(max(0.0, mean - seconds) for seconds in unpaced) + (counts.pending + counts.paused) * mean
        return left / max(1, len(running))

    def status_line(self) -> str:
        elapsed = time.monotonic() - self.started
        left = self.time_left()
        estimate = f" · about {clock(left)} left" if left is not None else ""
        return f"{self.counts()}   {clock(elapsed)} elapsed{estimate}"

    # ------------------------------------------------------------------ drawing

    def note(self, text: str) -> None:
        """A line above the view (a trial's end, a failure, the stop of the sweep)."""
        self.console.print(Text(f"[{clock(time.monotonic() - self.started)}] {text}"), soft_wrap=True)

    def _panel(self) -> Group:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for column, justify in (("trial", "left"), ("step", "right"), ("dev", "right"), ("best dev", "right"),
                                ("time", "right")):
            table.add_column(column, justify=justify)
        for trial in self._trials:
            if trial.status == Trial.RUNNING:
                result = trial.last_result or {}
                table.add_row(self.trial_name(trial), self.step_text(trial), score(result.get(Metric.DEV)),
                              score(result.get(Metric.BEST_DEV)), clock(self.running_for(trial)))
        return Group(Text(f"{self.spec.name}: {self.status_line()}", style="bold"), table)

    def _piped_status(self) -> str:
        running = [
            f"{self.trial_name(t)} step {self.step_text(t)}, dev {score((t.last_result or {}).get(Metric.DEV))}"
            for t in self._trials if t.status == Trial.RUNNING
        ]
        return "; ".join([self.status_line(), *running])

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.live and self._display is not None and (force or now - self._drawn >= LIVE_REFRESH_S):
            self._display.update(self._panel(), refresh=True)
            self._drawn = now
        elif not self.live and now - self._drawn >= PIPED_STATUS_S:
            self.note(self._piped_status())
            self._drawn = now

    def stop(self) -> None:
        """Take the live view off the console (the sweep ended, or the driver exits at once)."""
        if self._display is not None:
            self._display.stop()
            self._display = None

    # ------------------------------------------------------------------ Tune's callback hooks

    def setup(self, **info: Any) -> None:
        self._drawn = time.monotonic()
        if self.live:
            # Not rich's redirect of sys.stdout and sys.stderr into the view: they belong to the log.
            self._display = Live(self._panel(), console=self.console, auto_refresh=False, transient=True,
                                 redirect_stdout=False, redirect_stderr=False)
            self._display.start()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._trials = trials
        self._draw()

    def on_trial_start(self, iteration: int, trials: list, trial: Trial, **info: Any) -> None:
        self._trials = trials
        # A trial that starts again here was paused by the scheduler (PBT, HyperBand) or failed and is retried:
        # it resumes from a checkpoint.
        again = trial.trial_id in self._trial_started
        self._trial_started[trial.trial_id] = time.monotonic()
        if not self.live and self.reused_from(trial) is None:
            self.note(f"{'resumed' if again else 'started':<9} {self.trial_name(trial)}")
        self._draw(force=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Trial, **info: Any) -> None:
        result = trial.last_result or {}
        best = score(result.get(Metric.BEST_DEV))
        if (source := self.reused_from(trial)) is not None:
            self.note(f"reused    {self.trial_name(trial)}: best dev {best}, trained by sweep {source or '?'}")
        else:
            took = clock(result.get("time_total_s", 0.0))
            self.note(f"finished  {self.trial_name(trial)}: best dev {best} in {took}")
        self._draw(force=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Trial, **info: Any) -> None:
        self.note(f"retrying  {self.trial_name(trial)} after failure {trial.num_failures}: {error_line(trial)}")

    def on_trial_error(self, iteration: int, trials: list, trial: Trial, **info: Any) -> None:
        self.note(f"failed    {self.trial_name(trial)}: {error_line(trial)}")
        where = f"; all output: {self.log}" if self.log else ""
        self.note(f"          full error: {kept_error_file(trial) or 'not saved'}{where}")
        self._draw(force=True)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._trials = trials
        self.stop()


def kept_error_file(trial: Trial) -> str | None:
    """Where the trial's full error stays: Ray writes it to the Ray session's staging folder (deleted
    with the session) and copies it into the trial's folder in Ray's storage, a path on this machine when
    the storage is local."""
    if not trial.error_file:
        return None
    if isinstance(trial.storage.storage_filesystem, pyarrow.fs.LocalFileSystem):
        return f"{trial.path}/{Path(trial.error_file).name}"
    return trial.error_file


def error_line(trial: Trial) -> str:
    """The last line of the trial's traceback (the exception and its message)."""
    path = trial.error_file
    text = Path(path).read_text(encoding="utf-8", errors="replace") if path and Path(path).is_file() else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else str(getattr(trial, "error_msg", "") or "no message")
