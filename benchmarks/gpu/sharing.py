"""Several trials on one GPU, each its own process as Ray Tune runs them, plain and through NVIDIA's MPS."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

from benchmarks.gpu.common import ROOT, loop_steps

SHARING = (1, 2, 4, 8)
MPS_SHARING = (1, 4)
"""The trials at once the sharing_mps part measures: one alone, and issue 39's four."""
MPS_CONTROL = "nvidia-cuda-mps-control"
"""NVIDIA's Multi-Process Service's control program: with its daemon running, the CUDA contexts of processes
started after go through one server, whose kernels the card can run side by side instead of by turns."""
MPS_LOG_TAIL = 4000
"""How much of the MPS control daemon's log (its clients coming and going) the part keeps, in characters."""


@contextmanager
def mps_daemon(folder: Path) -> Iterator[dict[str, str]]:
    """An MPS control daemon of its own for the block, its pipes and log in ``folder``: yields the environment
    under which a process's CUDA context goes through it (processes started in the block; this one's context
    exists already, and stays its own). The daemon is told to quit at the end, the block's error or not."""
    control = shutil.which(MPS_CONTROL)
    if control is None:
        raise RuntimeError(f"{MPS_CONTROL} is not on PATH: no NVIDIA MPS on this machine")
    env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(folder / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "log")}
    for name in ("pipe", "log"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    subprocess.run([control, "-d"], env=env, check=True, timeout=30)
    try:
        yield env
    finally:
        subprocess.run([control], input="quit\n", text=True, env=env, timeout=30, check=False)


def mps_log(folder: Path) -> str:
    """The end of the MPS control daemon's log in ``folder`` (empty where it wrote none)."""
    log = folder / "log" / "control.log"
    return log.read_text(encoding="utf-8", errors="replace")[-MPS_LOG_TAIL:] if log.exists() else ""


def sharing(model: str, counts: tuple[int, ...], steps: int, precision: str, env: Mapping[str, str] | None = None,
            **knobs: Any) -> list[dict[str, Any]]:
    """Steps per second of ``n`` processes training SimCSE at once on the same device, for each ``n``, with
    ``knobs`` (``torch_compile``, ``cuda_graph``), started with ``env`` (:func:`mps_daemon`'s) where given: each
    warms up (compiling or recording its graph), waits for the others, then takes ``steps`` steps; all steps over
    the time from the start to the last one's end. A worker that finds no GPU where this process has one (a CUDA
    context refused under MPS) stops before its first step, and the part fails, naming why."""
    rows = []
    cores = os.cpu_count() or 1
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for n in counts:
        with tempfile.TemporaryDirectory() as folder:
            go = Path(folder) / "go"
            job = {"model": model, "steps": steps, "precision": precision, "go": str(go), "device": device,
                   "threads": max(1, cores // n), "knobs": knobs}
            workers = [subprocess.Popen([sys.executable, "-m", "benchmarks.gpu", "--worker",
                                         json.dumps({**job, "ready": f"{folder}/ready{i}", "out": f"{folder}/out{i}",
                                                     "error": f"{folder}/error{i}"})],
                                        cwd=ROOT, env=None if env is None else dict(env))
                       for i in range(n)]
            deadline = time.time() + 300
            while sum(Path(f"{folder}/ready{i}").exists() for i in range(n)) < n:
                if time.time() > deadline or any(w.poll() not in (None, 0) for w in workers):
                    for worker in workers:
                        worker.kill()
                    failed = [Path(f"{folder}/error{i}") for i in range(n)]
                    reasons = sorted({path.read_text() for path in failed if path.exists()})
                    raise RuntimeError(f"{n} sharing workers did not all start" + "".join(f"; {r}" for r in reasons))
                time.sleep(0.05)
            started = time.time()
            go.touch()
            for worker in workers:
                worker.wait(timeout=300)
            outs = [json.loads(Path(f"{folder}/out{i}").read_text()) for i in range(n)]
            rows.append({"trials": n, "steps_per_second": n * steps / (max(out["finished"] for out in outs) - started),
                         "mps": outs[0]["mps"], **{knob: outs[0][knob] for knob in knobs}})  # as the loop took them
    return rows


def shared_under_mps(models: Mapping[str, str], steps: int, logged: Callable[[str], None]) -> list[dict[str, Any]]:
    """The sharing part's SimCSE trials (``auto``) under an MPS daemon of the part's own, for each of ``models``
    and :data:`MPS_SHARING`; ``logged`` gets the daemon's log, which names the clients it served."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            with mps_daemon(Path(folder)) as env:
                return [{"model": name, **row} for name, path in models.items()
                        for row in sharing(path, MPS_SHARING, steps, "auto", env)]
        finally:
            logged(mps_log(Path(folder)))


def worker(job: dict[str, Any]) -> None:
    """One sharing process: warm up, say ready, wait for the go, take the steps, write when it finished. On
    another device than the part's (no GPU where it has one), it writes why and stops at once: a CPU's steps
    would take minutes and measure nothing the part asks."""
    torch.set_num_threads(job["threads"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != job["device"]:
        Path(job["error"]).write_text(f"a worker found {device.type}, not {job['device']} (under MPS: the daemon's "
                                      "server refused its CUDA context?)")
        raise SystemExit(1)

    def wait_for_go() -> None:
        Path(job["ready"]).touch()
        while not Path(job["go"]).exists():
            time.sleep(0.001)

    result = loop_steps("simcse", job["model"], job["precision"], job["steps"], device, at_warmup=wait_for_go,
                        count_flops=False, **job["knobs"])
    Path(job["out"]).write_text(json.dumps({**result, "mps": "CUDA_MPS_PIPE_DIRECTORY" in os.environ}))
