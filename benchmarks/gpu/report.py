"""The device check's figures (:mod:`benchmarks.gpu`) as text: a short summary for the call's output, and its
section of ``benchmarks/results.md`` with the targets of issue 39 marked met or not met."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from benchmarks.results_file import RESULTS, write_section

HEADING = "GPU: training steps, evaluation and trials per GPU (`python -m benchmarks.gpu`)"
STEP_TARGET_MS = 15.0
"""SimCSE's step at BERT-base's shape, at the fastest precision (from 48.9 ms fp32 when issue 39 was filed)."""
EVALUATION_TARGET = 5.0
"""Our STS test evaluation against sentence-transformers' encode of the same sentences, at each one's best."""
SHARING_TARGET = (4, 3.0)
"""4 trials on one GPU give at least 3x the steps per second of one."""


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def warmup(results: dict[str, Any]) -> int:
    """The untimed steps before the timed ones (5 in figures measured before they were recorded)."""
    return results.get("warmup_steps", 5)


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _apart(difference: dict[str, Any]) -> tuple[str, str]:
    """The largest loss and weight differences of :func:`benchmarks.gpu.graphs.apart`, or 'bit for bit'."""
    if difference["equal"]:
        return "bit for bit", "bit for bit"
    return f"{difference['loss_rel_diff']:.1e}", f"{difference['weight_diff']:.1e}"


def step_rows(results: dict[str, Any], key: str = "steps") -> dict[tuple[str, str], dict[str, dict]]:
    """{(method, model): {precision: row}} of one list of step figures."""
    grouped: dict[tuple[str, str], dict[str, dict]] = {}
    for row in results.get(key, []):
        grouped.setdefault((row["method"], row["model"]), {})[row["precision"]] = row
    return grouped


def fastest(rows: dict[str, dict]) -> tuple[str, dict]:
    return min(rows.items(), key=lambda item: item[1]["ms"])


def targets(results: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met) of issue 39's four targets; met is None where nothing was measured."""
    steps = step_rows(results)
    model = "tiny BERT" if results.get("tiny") else "BERT-base"
    checks: list[tuple[str, str, bool | None]] = []
    simcse = {**steps.get(("simcse", model), {}),
              **{f"{row['precision']}, compiled {row.get('torch_compile_mode', 'default')}": row
                 for row in results.get("compiled", []) if (row["method"], row["model"]) == ("simcse", model)},
              **{f"{row['precision']}, cuda_graph": row for row in results.get("loop_graphed", [])
                 if (row["method"], row["model"]) == ("simcse", model) and row["cuda_graph"] and row["ms"] is not None}}
    if simcse:
        precision, row = fastest(simcse)
        checks.append((f"SimCSE step at {model}'s shape <= {STEP_TARGET_MS:.0f} ms",
                       f"{row['ms']:.1f} ms ({precision})", row["ms"] <= STEP_TARGET_MS))
    else:
        checks.append((f"SimCSE step at {model}'s shape <= {STEP_TARGET_MS:.0f} ms", "not measured", None))
    slower = [f"{method} {name} {p} {row['ms']:.1f} vs fp32 {rows['fp32']['ms']:.1f}"
              for (method, name), rows in steps.items() for p, row in rows.items()
              if p != "fp32" and "fp32" in rows and row["ms"] > rows["fp32"]["ms"] * 1.05]
    reduced = [min(rows.get(p, {"ms": float("inf")})["ms"] for p in ("tf32", "bf16")) / rows["fp32"]["ms"]
               for rows in steps.values() if "fp32" in rows]
    if reduced:
        checks.append(("bf16 or TF32 no slower than fp32 (within 5%)",
                       f"the faster of the two no slower in {sum(r <= 1.05 for r in reduced)} of {len(reduced)} steps"
                       + (f"; slower than fp32: {'; '.join(slower)}" if slower else ""),
                       all(ratio <= 1.05 for ratio in reduced)))
    else:
        checks.append(("bf16 or TF32 no slower than fp32 (within 5%)", "not measured", None))
    evaluation = results.get("evaluation", [])
    ours = [row["seconds"] for row in evaluation if row["what"] == "ours"]
    peer = [row["seconds"] for row in evaluation if row["what"].startswith("sentence-transformers")]
    if ours and peer:
        ratio = min(peer) / min(ours)
        checks.append((f"evaluation >= {EVALUATION_TARGET:.0f}x sentence-transformers",
                       f"{ratio:.1f}x ({min(ours):.2f} s against {min(peer):.2f} s)", ratio >= EVALUATION_TARGET))
    else:
        checks.append((f"evaluation >= {EVALUATION_TARGET:.0f}x sentence-transformers", "not measured", None))
    trials, times = SHARING_TARGET
    by_model = sharing_by_model(results)
    for name, sharing in by_model.items():
        if 1 in sharing and trials in sharing:
            ratio = sharing[trials] / sharing[1]
            checks.append((f"{trials} trials on one GPU >= {times:.0f}x one ({name})", f"{ratio:.2f}x", ratio >= times))
    if not any(1 in sharing and trials in sharing for sharing in by_model.values()):
        checks.append((f"{trials} trials on one GPU >= {times:.0f}x one", "not measured", None))
    return checks


SHARING_PARTS = ("sharing", "sharing_mps", "sharing_graphed", "sharing_compiled")


def sharing_by_model(results: dict[str, Any]) -> dict[str, dict[int, float]]:
    """{model (", compiled", ", cuda_graph" or ", MPS" where the trials were): {trials at once: steps per second
    of all together}}."""
    grouped: dict[str, dict[int, float]] = {}
    for row in (row for part in SHARING_PARTS for row in results.get(part, [])):
        name = row.get("model", "BERT-base") + (", compiled" if row.get("torch_compile") else "") + (
            f", cuda_graph {row['precision']}" if row.get("cuda_graph") else "") + (", MPS" if row.get("mps") else "")
        grouped.setdefault(name, {})[row["trials"]] = row["steps_per_second"]
    return grouped


def mps_against_alone(by_model: dict[str, dict[int, float]]) -> list[str]:
    """A line for each count of trials run through one MPS server: their steps against one trial of the same
    model alone without MPS, where the call measured it (the target's reference)."""
    lines = []
    for name, sharing in by_model.items():
        alone = by_model.get(name.removesuffix(", MPS"), {}).get(1)
        if not name.endswith(", MPS") or alone is None:
            continue
        lines += [f"- {name}: {trials} at once {rate / alone:.2f}x one trial alone without MPS ({alone:.1f} steps/s)"
                  for trials, rate in sorted(sharing.items()) if trials > 1]
    return lines


def _spread(values: list[float], digits: int = 2) -> str:
    """Mean, and the range over the seeds where there are several."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def trial_rows(trials: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per step mode of the trials part: its seeds' scores and seconds."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for row in trials:
        by_mode.setdefault(row["mode"], []).append(row)
    return [(mode, rows[0]["train_precision"], str(len(rows)),
             f"{sum(r['graphed_steps'] or 0 for r in rows):.0f} of {sum(r['steps'] for r in rows)}",
             _spread([r["test_avg_spearman"] for r in rows]), _spread([r["best_dev_spearman"] for r in rows]),
             _spread([r["train_seconds"] for r in rows], digits=1))
            for mode, rows in by_mode.items()]


def body(results: dict[str, Any]) -> str:
    lines = [
        f"Command: `{results.get('command', 'python -m benchmarks.gpu --json gpu.json')}`, then `--render gpu.json` "
        "(docs/gpu.md; the figures "
        f"are kept beside this file as `gpu_<card>.json`). Device: {results['device']}; torch {results['torch']}, "
        "transformers "
        f"{results['transformers']}; {results['steps_timed']} steps timed after {warmup(results)} warm-up steps, "
        "the device synchronised at both ends."
        + (" **Tiny version** (a 2-layer, 64-wide BERT): code paths only, no figure to quote." if results["tiny"]
           else ""),
        "",
        "### Targets (issue 39)",
        "",
        *_table(("target", "measured", "met"),
                [(name, measured, "–" if met is None else ("met" if met else "**not met**"))
                 for name, measured, met in targets(results)]),
    ]
    rates = results.get("rates")
    if rates:
        lines += ["", "### The card's matrix-product rate", "",
                  *_table(("precision", "TFLOP/s"), [(p, f"{v:.3g}") for p, v in rates.items()])]
    steps = step_rows(results)
    if steps:
        precisions = ("fp32", "tf32", "bf16")
        rows = []
        for (method, model), by_precision in steps.items():
            precision, best = fastest(by_precision)
            flops = by_precision.get("fp32", best)["tflop_per_step"]
            rate = flops / (best["ms"] / 1000)
            card = (rates or {}).get(precision)
            rows.append((method, model, *(_ms(by_precision.get(p, {}).get("ms")) for p in precisions),
                         f"{best['peak_gib']:.1f}", f"{flops:.3g}", f"{rate:.3g}",
                         f"{100 * rate / card:.1f}%" if card else "–"))
        lines += ["", "### Training steps through `trainers.training.loop.train` (ms per step)", "",
                  *_table(("method", "model", "fp32", "TF32", "bf16", "peak GiB", "TFLOP/step",
                           "TFLOP/s (fastest)", "share of the card's rate"), rows)]
    optimizer = results.get("optimizer", [])
    if optimizer:
        rows = [(row["implementation"], "a device tensor" if row["rate_tensor"] else "a float", _ms(row["ms"]),
                 f"{row['ratio']:.2f}x") for row in optimizer]
        lines += ["", f"### One Adam update of {optimizer[0]['parameters'] / 1e6:.1f}M weights "
                  "(`python -m benchmarks.optimizer_update`)", "",
                  *_table(("adam_implementation", "learning rate in", "ms per update", "against torch's"), rows)]
    compiled = results.get("compiled", [])
    if compiled:
        rows = []
        for row in compiled:
            eager = steps.get((row["method"], row["model"]), {}).get(row["precision"], {}).get("ms")
            rows.append((f"{row['method']} {row['model']}", row["precision"], row.get("torch_compile_mode", "default"),
                         _ms(eager), _ms(row["ms"]), f"{eager / row['ms']:.2f}x" if eager else "–",
                         f"{row['warmup_seconds']:.0f}", f"{row['peak_gib']:.1f}"))
        lines += ["", "### The SimCSE step compiled (`torch_compile: true`), beside the same step eager (compiled: "
                  "warmed up on one epoch over the timed steps' examples, where recorded)", "",
                  *_table(("step", "precision", "torch_compile_mode", "eager ms", "compiled ms", "speed-up",
                           "seconds of the warm-up (compiling, recording)", "peak GiB"), rows)]
    bare = step_rows(results, "bare")
    if bare:
        rows = []
        for (method, model), by_precision in bare.items():
            ours = steps.get((method, model), {})
            for precision, row in by_precision.items():
                mine = ours.get(precision, {}).get("ms")
                rows.append((f"{method} {model}", precision, _ms(row["ms"]), _ms(mine),
                             f"{mine / row['ms']:.2f}" if mine else "–"))
        lines += ["", "### The same SimCSE step in a bare PyTorch loop (batches on the device beforehand)", "",
                  *_table(("step", "precision", "bare loop ms", "shared loop ms", "ratio"), rows)]
    graphed = results.get("graphed", [])
    if graphed:
        rows = []
        graphed_ms = {(row["model"], row["precision"], row["graphed"]): row.get("ms") for row in graphed}
        for model, precision in dict.fromkeys((row["model"], row["precision"]) for row in graphed):
            padded = bare.get(("simcse", model), {}).get(precision, {}).get("ms")  # absent where bare was skipped
            fixed, captured = (graphed_ms.get((model, precision, g)) for g in (False, True))
            rows.append((f"simcse {model}", precision, _ms(padded), _ms(fixed), _ms(captured),
                         f"{fixed / captured:.2f}x" if fixed and captured else "–"))
        lines += ["", "### The bare SimCSE step at a fixed shape (every batch padded to max_seq_length), eager and "
                  "captured as one CUDA graph", "",
                  *_table(("step", "precision", "bare loop ms (padded to the longest)", "fixed shape, eager ms",
                           "fixed shape, one CUDA graph ms", "the graph's speed-up"), rows)]
        lines += [f"- failed: {row['model']} {row['precision']}{', graphed' if row['graphed'] else ''}: "
                  f"{row['error']}" for row in graphed if row.get("error")]
    loop_graphed = results.get("loop_graphed", [])
    if loop_graphed:
        graphed_ms = {(row["method"], row["model"], row["precision"], row["cuda_graph"]): row for row in loop_graphed}
        rows = []
        for (method, model, precision, graph), row in graphed_ms.items():
            if graph:
                continue
            plain = steps.get((method, model), {}).get(precision, {}).get("ms")
            replayed = graphed_ms.get((method, model, precision, True), {})
            fixed, captured = row["ms"], replayed.get("ms")
            rows.append((f"{method} {model}", precision, _ms(plain), _ms(fixed), _ms(captured),
                         f"{fixed / captured:.2f}x" if fixed and captured else "–",
                         f"{replayed['peak_gib']:.1f}" if captured else "–"))
        lines += ["", "### The steps through the loop at a fixed shape (`pad_to_max_length`), eager and replayed from "
                  "one CUDA graph (`cuda_graph`)", "",
                  *_table(("step", "precision", "loop ms (padded to the longest)", "fixed shape, eager ms",
                           "cuda_graph ms", "the graph's speed-up", "peak GiB"), rows)]
        lines += [f"- failed: {row['method']} {row['model']} {row['precision']}"
                  f"{', cuda_graph' if row['cuda_graph'] else ''}: "
                  f"{row['error']}" for row in loop_graphed if row.get("error")]
    agreement = results.get("agreement", [])
    if agreement:
        rows = [(f"{row['method']} {row['model']}", row["precision"], f"{row['replayed']} of {row['steps']}",
                 *(cell for kind in ("unrecorded", "eager") for cell in _apart(row[f"against_{kind}"])),
                 *_apart(row["eager_against_itself"]))
                for row in agreement]
        lines += ["", "### The replayed step against the same step run eagerly, and against the loop's step without "
                  "`cuda_graph`: the same batches from the same weights, dropout off", "",
                  *_table(("step", "precision", "steps replayed", "against the step run eagerly: loss (relative)",
                           "weights", "against the loop without cuda_graph: loss (relative)", "weights",
                           "the loop without cuda_graph against itself: loss (relative)", "weights"), rows)]
    trials = results.get("trials", [])
    if trials:
        model = "tiny BERT" if results.get("tiny") else "bundled MiniLM"
        lines += ["", f"### Whole SimCSE trials, {model}, each step mode (mean, and the range over the seeds)",
                  "", *_table(("steps", "train precision", "seeds", "steps replayed", "test avg Spearman x 100",
                               "best dev Spearman x 100", "train seconds"), trial_rows(trials))]
    legacy = step_rows(results, "legacy")
    if legacy:
        rows = []
        for (method, model), by_precision in legacy.items():
            for precision, row in by_precision.items():
                now = steps.get((method, model), {}).get(precision, {}).get("ms")
                rows.append((f"{method} {model}", precision, _ms(row["ms"]), _ms(now),
                             f"{row['ms'] / now:.2f}x" if now else "–"))
        commit = next(iter(results["legacy"]))["commit"]
        lines += ["", f"### Before and after, same card, same call (the loop at `{commit}` against this commit's)", "",
                  *_table(("step", "precision", f"at {commit} ms", "now ms", "speed-up"), rows)]
    profiled = results.get("profile", [])
    if profiled:
        rows = [(row["method"], row["model"], row["precision"],
                 f"{row['ms']:.1f} ms a step" if "ms" in row else f"{row['seconds']:.2f} s",
                 "–" if row["device_busy"] is None else f"{100 * row['device_busy']:.0f}%") for row in profiled]
        lines += ["", "### Under the profilers (`--profile`: the ops and, for evaluation, the host's functions, in "
                  "its folder)", "", *_table(("what", "model", "precision", "time", "the device busy"), rows)]
    evaluation = results.get("evaluation", [])
    if evaluation:
        count = evaluation[0]["sentences"]
        rows = [(row["what"], row["precision"], f"{row['seconds']:.2f}",
                 "–" if row["test_avg"] is None else f"{row['test_avg']:.2f}") for row in evaluation]
        lines += ["", f"### The seven STS test sets, bundled MiniLM ({count:,} distinct sentences; median of the "
                  "repeats; ours includes the scoring)", "",
                  *_table(("encoder", "precision", "seconds", "test avg Spearman x 100"), rows)]
    by_model = sharing_by_model(results)
    if by_model:
        rows = [(name, trials, f"{1 / trials:g}", f"{rate:.1f}", f"{rate / sharing[min(sharing)]:.2f}x")
                for name, sharing in by_model.items() for trials, rate in sorted(sharing.items())]
        lines += ["", "### Trials per GPU: SimCSE, `train_precision: auto` (cuda_graph's: bf16), each trial its own "
                  "process", "",
                  *_table(("model", "trials at once", "resources.gpu", "steps/s, all together", "against one"),
                          rows)]
        lines += mps_against_alone(by_model)
    if results.get("errors"):
        lines += ["", "Parts that failed: " + "; ".join(results["errors"])]
    return "\n".join(lines)


def render(results: dict[str, Any], path: str | None = None) -> None:
    """Write ``results``' section; a call that measured a few parts only carries a ``label``, which makes its
    section its own instead of replacing the card's whole check."""
    label = f": {results['label']}" if results.get("label") else ""
    write_section(f"{HEADING}, {results['device']}{label}", body(results), Path(path) if path else RESULTS,
                  ran_on=results["device"], commit=results["commit"])
