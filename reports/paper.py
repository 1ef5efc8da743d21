"""One report per paper (or campaign): every table and figure, ours beside the paper's numbers.

    python -m reports.paper sg-bert [--tracking-uri URI] [--out DIR]
    python -m reports.paper smoke-paper

Reads the trials of the campaign's specs straight from the tracking store (:mod:`sweep.spec.campaign` names the
specs). For a paper, each table and figure of its catalogue (``reports/paper_index.yaml``) in order: the
tables with the paper's numbers, the p-values against each table's reference row, and each caption's
substitutes; a table with no results yet says so with the command that fills it; analyses and the papers'
other items give their command or what carries them. For another campaign, each spec's sweep table with the
settings ledger's deviations of its spec. First comes how the numbers were made (evaluation subset, budget,
model, precision, as the trials recorded them); under each table, the legend of its marks
(:func:`results.render.legend`). Then each sweep's STS-B dev curves, the regime caveats (the budget's and the
evaluation subset's; "none" only where there are none), an environment card (commit, libraries, hardware,
precision, budget) and the MLflow links of the sweeps.

The PDF is set in Latin Modern (T1, vector fonts), its tables at 8 pt or more (:func:`results.render.to_latex`
turns or splits a wide one rather than shrinking it), its links clickable (hyperref), and a section of text
lines kept on one page.

Writes ``DIR/NAME.md``, ``DIR/NAME.html`` (self-contained: styles and figures inline), ``DIR/NAME.tex`` and,
where ``pdflatex`` exists, ``DIR/NAME.pdf``; all are logged as artifacts of the campaign's MLflow parent
run (``paper-NAME``) when it exists.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence

import pandas as pd

from reports.cli import run_command
from reports.collect import collect
from reports.index import PAPER_TITLES, load_index
from reports.paper_documents import (
    Command,
    Link,
    Report,
    Section,
    compile_pdf,
    to_html_document,
    to_latex_document,
    to_markdown_document,
)
from reports.paper_tables import build_table, how_made, subset_caveats
from reports.sweeps import sweep_tables
from reports.table_specs import PAPER_NUMBERS, load_yaml
from results.figures import dev_curves
from results.names import UsageError
from results.reader import read_client, trial_tags
from results.record import DEFAULT_TRACKING_URI, PARENT_FILTER, runs_view_url
from results.schema import FINISHED
from sweep.spec.budget import BUDGETS
from sweep.spec.campaign import CAMPAIGN_PREFIX, campaign_name, campaign_specs
from sweep.spec.ledger import LEDGER_NAME, declared, deviation_notes, lines_of, load_ledger
from sweep.spec.regime import regime_warnings
from sweep.spec.source import read_spec_yaml
from sweep.spec.sweep_spec import SpecError, SweepSpec, load_spec
from trainers.data.sources import DataError

LIBRARIES = ("torch", "transformers", "sentence-transformers", "ray", "mlflow")


def build_report(name: str, tracking_uri: str, figures: Path) -> Report:
    """The report of campaign ``name`` from the store at ``tracking_uri``; its figures are drawn into ``figures``."""
    _, description, paths = campaign_specs(name)
    name = campaign_name(name)
    every = collect(tracking_uri)
    # The campaign's sweeps only: a store may hold others (their commit, budget or precision are not this report's).
    names = {str(read_spec_yaml(path).get("name")) for path in paths} | {CAMPAIGN_PREFIX + name}
    results = every[every["experiment"].isin(names)] if not every.empty else every
    specs = [_spec(path, results) for path in paths]
    finished = results[results["status"] == FINISHED] if not results.empty else results
    precisions = used_precisions(tracking_uri, finished)
    paper = name in PAPER_TITLES
    made = how_made(finished, precisions) + [
        f"deviations from the paper (model substitutes included): each table's caption, from {LEDGER_NAME}" if paper
        else f"deviations from the papers: under each sweep's table, from {LEDGER_NAME}"]
    sections = [Section("How these numbers were made", made)]
    sections += paper_sections(name, results) if paper else sweep_sections(name, specs, results)
    curves = Section("STS-B dev during training")
    for spec in specs:
        if spec is not None and not finished.empty and (finished["experiment"] == spec.name).any():
            curves.blocks.append(dev_curves(finished, tracking_uri, spec.name, figures / f"dev-{spec.name}.png"))
    ran = [spec for spec in specs if spec is not None and not finished.empty
           and (finished["experiment"] == spec.name).any()]
    caveats = [line for spec in ran for line in caveat_lines(spec)] + subset_caveats(finished)
    sections += [curves] if curves.blocks else []
    sections += [Section("Regime caveats", caveats or ["none"]), environment_card(finished, precisions),
                 links(tracking_uri, [s.name for s in specs if s] + [CAMPAIGN_PREFIX + name])]
    return Report(name, PAPER_TITLES.get(name, f"Campaign {name}: {description}"), sections)


def caveat_lines(spec: SweepSpec) -> list[str]:
    """Where the budget the spec ran with leaves a method outside its paper's regime."""
    try:
        return [f"{spec.name}: {warning}" for warning in regime_warnings(spec)]
    except DataError as error:  # its data is not on this machine: the sweep ran elsewhere
        return [f"{spec.name}: not checked here ({error})"]


def _spec(path: Path, results: pd.DataFrame) -> SweepSpec | None:
    """The spec as its trials ran it (with the budget they carry), or None when it cannot be read."""
    if not results.empty:
        results = results[results["spec_file"].str.endswith(f"{path.parent.name}/{path.name}")]
    budget = next((b for b in results.get("budget", []) if b in BUDGETS), None)
    try:
        return load_spec(path, budget=BUDGETS[budget] if budget else None, check_environment=False)
    except SpecError:
        return None


def paper_sections(paper: str, results: pd.DataFrame) -> list[Section]:
    """Each table and figure of the paper's catalogue, in its order."""
    numbers = load_yaml(PAPER_NUMBERS)
    sections = []
    for item in (item for item in load_index() if item.paper == paper):
        section = Section(f"{item.label}: {item.what}")
        if item.kind == "results":
            for spec in item.tables:
                table = build_table(spec, results, numbers)
                section.blocks.append(table if table.has_results() else
                                      f"{spec.caption}: no results yet; " + "; ".join(spec.fill_commands().values()))
        else:
            section.blocks.append(f"{item.kind}: {item.note}" if item.note else f"{item.kind}: nothing to reproduce")
        sections.append(section)
    return sections


def sweep_sections(name: str, specs: Sequence[SweepSpec | None], results: pd.DataFrame) -> list[Section]:
    """Each spec's sweep table (one per variant), or the command that fills it."""
    sections = []
    for spec in specs:
        if spec is None:
            continue
        section = Section(f"{spec.name}: {spec.description}")
        ran = not results.empty and (results["experiment"] == spec.name).any()
        section.blocks += sweep_tables(results, spec.name) if ran else [
            f"no results yet: python -m sweep paper {name}"]
        section.blocks.append(ledger_line(spec))
        sections.append(section)
    return sections


def ledger_line(spec: SweepSpec) -> str:
    """The settings ledger's declared deviations of the spec from its paper, or why there are none."""
    record = load_ledger().get(spec.path.name)
    if record is None:
        return (f"deviations from the paper: none to declare ({LEDGER_NAME} has no record of {spec.path.name}: it "
                "fills no paper's table, so there is no paper setting, model included, to deviate from)")
    notes = deviation_notes(declared(spec, record), lines_of(spec))
    return f"deviations from the paper ({LEDGER_NAME}): " + ("; ".join(notes) or "none")


def used_precisions(tracking_uri: str, trials: pd.DataFrame) -> str:
    """The precisions the trials' runs record they used (``auto`` resolved on the trial's node)."""
    client = read_client(tracking_uri)
    used = {kind: set() for kind in ("train", "evaluation")}
    for run_id in trials.get("run_id", []):
        tags = trial_tags(client.get_run(run_id))
        for kind, precision in (("train", tags.train_precision), ("evaluation", tags.eval_precision)):
            used[kind].update([precision] if precision is not None else [])
    return "; ".join(f"{kind} {', '.join(sorted(values))}" for kind, values in used.items() if values) or "-"


def environment_card(trials: pd.DataFrame, precisions: str) -> Section:
    """What the numbers were computed with: this checkout, its libraries and hardware, and the trials' own
    commit, precision and budget."""
    def seen(column: str) -> str:
        values = sorted({v[:7] if column == "git_commit" else v for v in trials.get(column, [])
                         if isinstance(v, str) and v})
        return ", ".join(values) or "-"

    lines = [f"report written at commit {_commit()}",
             "libraries: " + ", ".join(f"{name} {_version(name)}" for name in LIBRARIES),
             f"hardware: {_cpu()}, {os.cpu_count()} CPUs; {_gpu()}",
             f"trials: commit {seen('git_commit')}; budget {seen('budget')}; precision used: {precisions}"]
    return Section("Environment", lines)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _cpu() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    extras = [flag for flag in ("avx512_bf16", "amx_bf16", "avx2") if f" {flag}" in flags]
    return f"{model or platform.machine()} ({', '.join(extras) or 'no bf16 or AVX2 flags'})"


def _gpu() -> str:
    try:
        import torch
    except ImportError:
        return "no torch"
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"


def links(tracking_uri: str, experiments: Sequence[str]) -> Section:
    """Each sweep's runs in the MLflow UI (the UI's own address for a tracking server)."""
    client = read_client(tracking_uri)
    host = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    section = Section("MLflow runs", [] if host != "http://127.0.0.1:5000" else [
        "start the MLflow UI on the store, then open the links below:",
        Command(f"mlflow ui --backend-store-uri {tracking_uri}")])
    for name in experiments:
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            section.blocks.append(Link(name, runs_view_url(experiment.experiment_id, host)))
    return section


def write_report(name: str, tracking_uri: str, out: Path) -> list[Path]:
    """Write the report's files into ``out``, log them to the campaign's parent run, and return them."""
    out.mkdir(parents=True, exist_ok=True)
    report = build_report(name, tracking_uri, out)
    name = report.name
    files = []
    for suffix, render in ((".md", to_markdown_document), (".html", to_html_document), (".tex", to_latex_document)):
        path = out / f"{name}{suffix}"
        path.write_text(render(report), encoding="utf-8")
        files.append(path)
    pdf = compile_pdf(out / f"{name}.tex")
    files += [pdf] if pdf else []
    parent = campaign_parent(tracking_uri, name)
    if parent is not None:
        client = read_client(tracking_uri)
        for path in files:
            client.log_artifact(parent, str(path), "report")
    return files


def campaign_parent(tracking_uri: str, name: str) -> str | None:
    """The newest parent run of the campaign's own sweep, if the campaign ran on this store."""
    client = read_client(tracking_uri)
    experiment = client.get_experiment_by_name(CAMPAIGN_PREFIX + name)
    if experiment is None:
        return None
    runs = client.search_runs([experiment.experiment_id], PARENT_FILTER, order_by=["attributes.start_time DESC"],
                              max_results=1)
    return runs[0].info.run_id if runs else None


def report_command(args: argparse.Namespace) -> int:
    try:
        files = write_report(args.name, args.tracking_uri, Path(args.out or f"report-{campaign_name(args.name)}"))
    except SpecError as error:
        raise UsageError("; ".join(map(str, error.problems))) from None
    print("\n".join(str(path) for path in files))
    if not any(path.suffix == ".pdf" for path in files):
        print("no PDF: pdflatex is not installed (apt-get install texlive-latex-recommended lmodern)", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.paper", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="A paper (sg-bert, consert, sct) or a campaign (search_spaces/campaigns).")
    parser.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    parser.add_argument("--out", help="Folder for the report's files (default report-NAME).")
    return run_command(parser, argv, report_command)


if __name__ == "__main__":
    sys.exit(main())
