"""The results layer: one renderer, seed-free and mirror lines in every output, layers that point down
(synthetic trials frames in reports.collect's schema; no Ray, no MLflow)."""

from __future__ import annotations

import ast
import io
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reports.paper_tables import build_tables
from reports.sweeps import sweep_tables
from reports.table_specs import parse_table_spec
from results.figures import grid_table, heatmap_texts, sweep_grid_plot
from results.reader import identity_columns
from results.record import TrialIdentity
from results.render import to_csv, to_latex, to_markdown
from results.table import COLUMNS, DELTA, Cell, Column, Line, Table
from sweep.commands.summary import next_steps, summary_markdown, summary_table
from sweep.spec.sweep_spec import load_spec
from tests.conftest import write_spec

ROOT = Path(__file__).resolve().parent.parent


def fixed_table() -> Table:
    """Every kind of cell: seed-free, mean ± std, mirror, missing; the paper's lines; LaTeX's special
    characters in a title and labels; bold; a p column with its reference."""
    formats = {"Avg": COLUMNS["Avg"], DELTA: Column(DELTA), "Steps": COLUMNS["Steps"]}
    lines = [
        Line("No tuning (CLS)", {"Avg": Cell((60.0,), seed_free=True), DELTA: Cell((0.0,), seed_free=True),
                                 "Steps": Cell((0.0,), seed_free=True)}),
        Line("f_ref -> 50% & #1", {"Avg": Cell((70.0, 72.5)), DELTA: Cell((10.0, 12.5)), "Steps": Cell((30.0, 30.0))},
             {"Avg": 71.0, DELTA: 11.0}),
        Line("{x} ~ ^ \\ $", {"Avg": Cell((65.0,), mirror=True), DELTA: Cell((5.0,), mirror=True), "Steps": Cell(())},
             {"Steps": 930.0}),
    ]
    return Table("t_1", "Title_with 50% – x", "row", ["Avg", DELTA, "Steps"], formats, lines,
                 notes=["ours: m; budget none", "p: note"], missing=["row 'z': 3 of 3 seeds missing"],
                 p_values={"f_ref -> 50% & #1": 0.0123, "{x} ~ ^ \\ $": math.nan}, p_reference="No tuning (CLS)")


# What the hand-written emitters (reports/tables.py before results.render) wrote for fixed_table().
HAND_WRITTEN_LATEX = (r"""% needs \usepackage{booktabs} (and \usepackage{pdflscape} to turn wide tables)
\begin{table}[ht]
\centering
\footnotesize
\caption{Title\_with 50\% -- x}
\label{tab:t_1}
\begin{tabular}{lrrrr}
\toprule
row & Avg & Delta & Steps & p \\
\midrule
No tuning (CLS) & 60.00\textdagger{} & +0.00\textdagger{} & 0\textdagger{} & ref \\
f\_ref $\rightarrow$ 50\% \& \#1 & \textbf{71.25 $\pm$ 1.77 (2)} & """
    r"""\textbf{+11.25 $\pm$ 1.77 (2)} & 30 $\pm$ 0 (2) & 0.012 * \\
\textit{paper (ours $-$ paper)} & \textit{71.00 (+0.25)} & \textit{+11.00 (+0.25)} & \textit{--} & \textit{} \\
\{x\} \textasciitilde{} \textasciicircum{} \textbackslash{} \$ & 65.00\textdaggerdbl{} (1) & """
    r"""+5.00\textdaggerdbl{} (1) & -- & n/a \\
\textit{paper (ours $-$ paper)} & \textit{--} & \textit{--} & \textit{930} & \textit{} \\
\bottomrule
\end{tabular}
\end{table}
\begin{itemize}\footnotesize\setlength{\itemsep}{0pt}\item missing: row 'z': 3 of 3 seeds missing\item ours: m; """
    r"""budget none\item p: note\item cells: each cell of ours is the mean $\pm$ sample std over the (n) seeds it """
    r"""shows\item \textdagger{} seed-free: one run stands for every seed (a configuration that cannot depend on """
    r"""it: no training)\item \textdaggerdbl{} mirror: filled from the mirror point of the """
    r"""symmetric grid axes, which ran instead\item bold: the best of our lines in each column (the lowest for """
    r"""times)\item paper (ours $-$ paper): the paper's figure, in italics, and our difference from it\item ref: the """
    r"""reference line the p column tests the others against\item --: no result\end{itemize}
""")
LEGEND = """- cells: each cell of ours is the mean ± sample std over the (n) seeds it shows
- † seed-free: one run stands for every seed (a configuration that cannot depend on it: no training)
- ‡ mirror: filled from the mirror point of the symmetric grid axes, which ran instead
- bold: the best of our lines in each column (the lowest for times)
- paper (ours − paper): the paper's figure, in italics, and our difference from it
- ref: the reference line the p column tests the others against
- –: no result
"""
HAND_WRITTEN_MARKDOWN = """### Title_with 50% – x

| row | Avg | Delta | Steps | p |
|---|---|---|---|---|
| No tuning (CLS) | 60.00† | +0.00† | 0† | ref |
| f_ref -> 50% & #1 | **71.25 ± 1.77 (2)** | **+11.25 ± 1.77 (2)** | 30 ± 0 (2) | 0.012 * |
| paper (ours − paper) | 71.00 (+0.25) | +11.00 (+0.25) | – |  |
| {x} ~ ^ \\ $ | 65.00‡ (1) | +5.00‡ (1) | – | n/a |
| paper (ours − paper) | – | – | 930 |  |

- missing: row 'z': 3 of 3 seeds missing
- ours: m; budget none
- p: note
""" + LEGEND
HAND_WRITTEN_SUMMARY = """| row [grid point] | seeds finished | failed | best dev | test avg | p (Avg) vs a |
|---|---|---|---|---|---|
| a | 2 | 0 | 80.50 ± 0.71 | 70.75 ± 1.06 | ref |
| b | 2 | 0 | 82.25 ± 0.35 | 73.50 ± 0.71 | 0.110 |
| c | 0 | 1 | – | – | n/a |
- ours: m; budget none; 4 finished of 5 trials
- c: left out 1 FAILED trial(s)
- cells: each cell of ours is the mean ± sample std over 2 seeds
- ref: the reference line the p column tests the others against
- –: no result
"""


def test_pandas_latex_and_the_markdown_writer_give_the_hand_written_output():
    assert to_latex(fixed_table()) == HAND_WRITTEN_LATEX
    assert to_markdown(fixed_table()) == HAND_WRITTEN_MARKDOWN


def trials(path: Path, points: list[tuple[str, dict, int, str, float | None]], seeds: tuple[int, ...] = ()
           ) -> pd.DataFrame:
    """Collected trials of the spec at ``path``, in plan order: (row, axes, seed, status, test avg) each;
    a ``none`` row's run stands for ``seeds``."""
    records = []
    for i, (row, axes, seed, status, avg) in enumerate(points):
        records.append({
            "experiment": load_spec(path, check_environment=False).name, "spec_hash": "h", "spec_file": str(path),
            **identity_columns(TrialIdentity("consert", row, seed, seeds if row == "untuned" else (), axes)),
            "trial_id": f"t_{i:05d}", "run_id": f"r{i}", "status": status, "budget": "none", "model": "m",
            "start_time": pd.Timestamp(i, unit="s", tz="UTC"), **axes,
            "best_dev_spearman": None if avg is None else avg + 10, "test_avg_spearman": avg,
        })
    return pd.DataFrame.from_records(records)


def test_the_summary_lays_out_its_lines_as_the_hand_written_summary(tmp_path):
    path = write_spec(tmp_path, {"name": "s", "method": "simcse", "rows": [{"name": r} for r in "abc"],
                                 "seeds": [1, 2]})
    frame = trials(path, [("a", {}, 1, "FINISHED", 70.0), ("a", {}, 2, "FINISHED", 71.5),
                          ("b", {}, 1, "FINISHED", 73.0), ("b", {}, 2, "FINISHED", 74.0),
                          ("c", {}, 1, "FAILED", None)])
    frame["best_dev_spearman"] = [80.0, 81.0, 82.0, 82.5, None]
    spec = load_spec(path, check_environment=False)
    text = summary_markdown(summary_table(frame, spec), sampled=False)
    title, body = text.split("\n\n", 1)
    assert title == f"s (spec hash {spec.spec_hash})"
    assert "\n".join(line for line in body.splitlines() if not line.startswith("- p: ")) + "\n" == HAND_WRITTEN_SUMMARY
    assert "\n- p: Welch's two-sided t-test of Avg against 'a' over seeds" in body


SYMMETRIC = {"aug1": ["none", "shuffle"], "aug2": ["none", "shuffle"]}


def test_seed_free_rows_and_mirror_cells_look_the_same_in_every_output(tmp_path):
    """A `none` row runs once for both seeds; the mirror point (shuffle, none) never runs. The summary,
    the --sweep table, its CSV, the grid plot's heatmap and the paper tables all show both for what they are."""
    path = write_spec(tmp_path, {"name": "sym", "method": "consert", "seeds": [1, 2], "grid": SYMMETRIC,
                                 "symmetric": ["aug1", "aug2"],
                                 "rows": [{"name": "untuned", "set": {"method": "none"}}, {"name": "consert"}]})
    ran = [{"aug1": "none", "aug2": "none"}, {"aug1": "none", "aug2": "shuffle"},
           {"aug1": "shuffle", "aug2": "shuffle"}]
    points = [("untuned", axes, 1, "FINISHED", 50.0 + i) for i, axes in enumerate(ran)]
    points += [("consert", axes, seed, "FINISHED", 60.0 + i + seed) for i, axes in enumerate(ran) for seed in (1, 2)]
    frame = trials(path, points, seeds=(1, 2))
    mirror = "[aug1=shuffle, aug2=none]"

    summary = summary_markdown(summary_table(frame, load_spec(path, check_environment=False)), sampled=False)
    (swept,) = sweep_tables(frame, "sym")
    markdown = to_markdown(swept)
    for text in (summary, markdown):
        lines = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
        assert "| 51.00† |" in lines["untuned [aug1=none, aug2=shuffle]"]
        assert "| 51.00†‡ |" in lines[f"untuned {mirror}"]
        assert "| 62.50 ± 0.71‡ |" in lines[f"consert {mirror}"]  # every cell of ours is over 2 seeds: no (2)
        assert "- † seed-free: " in text and "- ‡ mirror: " in text and "over 2 seeds" in text
        labels = [label for label in lines if label.startswith("consert")]
        assert labels == [f"consert [aug1={a}, aug2={b}]" for a in SYMMETRIC["aug1"] for b in SYMMETRIC["aug2"]]
    csv = pd.read_csv(io.StringIO(to_csv(swept)), keep_default_na=False).set_index("row [grid point]")
    assert csv.loc["untuned [aug1=none, aug2=none]", "Avg marks"] == "seed-free"
    assert csv.loc[f"untuned {mirror}", "Avg marks"] == "seed-free, mirror"
    assert csv.loc[f"consert {mirror}", "Avg marks"] == "mirror" and csv.loc[f"consert {mirror}", "Avg n"] == 2
    assert csv.loc["consert [aug1=none, aug2=none]", "Avg marks"] == ""

    # The grid plot: a heatmap of the first row (untuned), its mirror cell filled and marked.
    grid = grid_table(swept)
    assert [line.label for line in grid.lines] == grid.columns == ["none", "shuffle"]
    assert heatmap_texts(grid) == [["50.0\n(seed-free)", "51.0\n(seed-free)"],
                                   ["51.0\n(seed-free)\n(mirror)", "52.0\n(seed-free)"]]
    assert sweep_grid_plot(swept, tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"

    # Paper tables: a rows table of a sweep without a grid, a grid table of one without rows.
    rows_path = write_spec(tmp_path, {"name": "rows", "method": "simcse", "seeds": [1, 2],
                                      "rows": [{"name": "untuned", "set": {"method": "none"}}, {"name": "simcse"}]})
    grid_path = write_spec(tmp_path, {"name": "grid", "method": "consert", "seeds": [1], "grid": SYMMETRIC,
                                      "symmetric": ["aug1", "aug2"]})
    results = pd.concat([
        trials(rows_path, [("untuned", {}, 1, "FINISHED", 50.0), ("simcse", {}, 1, "FINISHED", 60.0),
                           ("simcse", {}, 2, "FINISHED", 61.0)], seeds=(1, 2)),
        trials(grid_path, [("", axes, 1, "FINISHED", 70.0 + i) for i, axes in enumerate(ran)]),
    ], ignore_index=True)
    specs = {"rows": parse_table_spec("rows", {"kind": "rows", "spec": str(rows_path), "columns": ["Avg"],
                                               "rows": ["untuned", "simcse"]}, tmp_path),
             "grid": parse_table_spec("grid", {"kind": "grid", "spec": str(grid_path), "index": "aug1",
                                               "across": "aug2", "metric": "Avg"}, tmp_path)}
    rows_table, grid_paper = build_tables(results, None, specs, {})
    assert "| untuned | 50.00† |" in to_markdown(rows_table)
    assert "| shuffle | **71.00‡** | **72.00** |" in to_markdown(grid_paper)  # one seed each: said once, under it
    assert "- cells: each cell of ours is one seed's score" in to_markdown(grid_paper)
    assert heatmap_texts(grid_paper)[1][0] == "71.0\n(mirror)"


def imported_by(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(done.stdout.split())


def test_rendering_a_table_imports_no_ray():
    modules = imported_by("reports.tables")
    assert "ray" not in modules and "mlflow" not in modules


def test_rendering_a_table_imports_no_torch():
    assert "torch" not in imported_by("reports.tables")


def imports(package: str) -> set[str]:
    """The modules that the modules of ``package`` import."""
    found = set()
    for path in (ROOT / package).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
    return found


def packages(modules: set[str]) -> set[str]:
    return {module.split(".")[0] for module in modules}


def test_layers_only_point_down():
    """trainers <- results <- sweep <- reports: no package imports one above it, and reports read
    MLflow through results.reader, never through the sweep engine or its tracker (Ray); of sweep they
    use the spec and what reads specs (their budget and its regime warnings, a paper's campaign of specs, the
    row contracts' training regimes and the settings ledger that captions name), and the exporter through which
    reports.analyses gets a trial's encoder (the command that chooses it, and the encoder exported)."""
    assert not packages(imports("trainers")) & {"results", "sweep", "reports"}
    assert not packages(imports("results")) & {"sweep", "reports"}
    assert "reports" not in packages(imports("sweep"))
    from_sweep = {module for module in imports("reports") if packages({module}) == {"sweep"}}
    allowed = ("sweep.spec", "sweep.commands.export", "sweep.run.models", "sweep.commands.campaign")
    assert from_sweep and all(module.startswith(allowed) for module in from_sweep), from_sweep


def test_the_suites_do_not_import_training():
    """Inside trainers, the evaluation suites sit below training: the loop runs them, they never import the
    loop, its optimisation or GLUE's fine-tuning (the loop and GLUE share trainers.training.optimization)."""
    training = {"trainers.training.loop", "trainers.training.optimization", "trainers.training.glue"}
    assert not imports("trainers/suites") & training
    glue = ast.parse((ROOT / "trainers/training/glue.py").read_text(encoding="utf-8"))
    assert "trainers.training.loop" not in {node.module for node in ast.walk(glue) if isinstance(node, ast.ImportFrom)}


def test_the_significance_line_says_what_was_tested_and_counts_the_seeds_of_each_line(tmp_path):
    path = write_spec(tmp_path, {"name": "s", "method": "simcse", "seeds": [1, 2],
                                 "rows": [{"name": "untuned", "set": {"method": "none"}}, {"name": "a"},
                                          {"name": "b"}]})
    seed_free_first = sweep_tables(trials(path, [("untuned", {}, 1, "FINISHED", 50.0), ("a", {}, 1, "FINISHED", 60.0),
                                                 ("a", {}, 2, "FINISHED", 61.0), ("b", {}, 1, "FINISHED", 55.0)],
                                          seeds=(1, 2)), "s")[0]
    # t = 10.5 / (0.71 / sqrt 2) = 21 with 1 degree of freedom (Cauchy): two-sided p = 2 / pi * atan(1 / 21).
    assert seed_free_first.p_values["a"] == pytest.approx(2 / math.pi * math.atan(1 / 21), rel=1e-9)
    assert math.isnan(seed_free_first.p_values["b"])
    assert ("'untuned' is seed-free (one run stands for every seed), so each line is tested against its exact value "
            "with a one-sample t-test; n/a where a line has fewer than 2 seeds ('b' 1)") in seed_free_first.notes[-1]
    one_seed_first = sweep_tables(trials(path, [("untuned", {}, 1, "FINISHED", 50.0), ("a", {}, 1, "FINISHED", 60.0),
                                                ("a", {}, 2, "FINISHED", 61.0)]), "s")[0]
    assert one_seed_first.p_values == {}
    assert one_seed_first.notes[-1] == ("significance: no test was possible: p needs >= 2 seeds on a line and on the "
                                        "reference 'untuned' (or a seed-free reference); seeds per line: 'untuned' 1, "
                                        "'a' 2")


def test_the_metric_tag_reads_back_what_it_wrote_and_old_runs_rank_by_best_dev():
    from results.record import metric_tag, parse_metric_tag
    from trainers.metrics import Metric

    for metric, mode in ((Metric.TEST_AVG, "max"), (Metric.LOSS, "min")):
        assert parse_metric_tag(metric_tag(metric, mode)) == (metric, mode)
    assert parse_metric_tag(None) == parse_metric_tag("") == (Metric.BEST_DEV, "max")
    assert parse_metric_tag(Metric.DEV) == (Metric.DEV, "max")


def test_the_next_commands_name_the_store_the_sweep_wrote(tmp_path):
    spec = load_spec(write_spec(tmp_path, {"name": "s", "method": "simcse", "seeds": [1]}), check_environment=False)
    default = next_steps(spec, "1", "sqlite:///mlflow.db", several_variants=False)
    assert "python -m sweep status s\n" in default and "--tracking-uri" not in default.split("mlflow ui")[0]
    other = next_steps(spec, "1", f"sqlite:///{tmp_path}/other.db", several_variants=True)
    for command in (f"python -m sweep status s-{spec.spec_hash} --tracking-uri sqlite:///{tmp_path}/other.db",
                    f"python -m reports.collect --tracking-uri sqlite:///{tmp_path}/other.db && ",
                    f"python -m reports.plots --sweep s --tracking-uri sqlite:///{tmp_path}/other.db"):
        assert command in other
