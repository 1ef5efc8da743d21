"""Offline analyses of an encoder: SG-BERT's t-SNE (Figures 5/6), ConSERT's gold score against
cosine (Figure 1) and SCT's augmentation statistics (Table 5).

    python -m reports.analyses tsne [--encoder ENC] [--pairs 20] [--seed 0]
    python -m reports.analyses gold-cosine --encoder ENC --encoder ENC [--set stsb-test]
    python -m reports.analyses augmentations [--encoder ENC] --view synonym [--view mlm --mlm-model M]
                                             [--view bt --bt-file F] [--corpus stsb_sentences] [--limit 1000]

Every command takes ``--out`` (default reports/out) and writes a PNG (the figures) and Markdown and
LaTeX tables there. ENC (default the bundled model) is one of:

- a folder written by ``python -m sweep export`` (the trial's own pooling and layer);
- ``sweep:NAME[:ROW[:SEED]]``: the best-dev finished trial of sweep NAME (of its row ROW, seed SEED),
  exported on the fly from ``--tracking-uri``;
- any model the ``model`` knob takes (``bundled:all-MiniLM-L6-v2``, a folder, a hub id), pooled by
  ``--pooling`` (default mean, as all-MiniLM-L6-v2 was trained; repeat it to pool each ``--encoder`` its own way).

Nothing here needs the network except a hub id as ENC or as ``--mlm-model``; the synonym view needs
WordNet (:mod:`trainers.data.wordnet`). A refused command prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from reports.cli import run_command  # noqa: E402
from reports.table_specs import PAPER_NUMBERS, load_yaml  # noqa: E402
from results.figures import save  # noqa: E402
from results.names import UsageError  # noqa: E402
from results.record import DEFAULT_TRACKING_URI  # noqa: E402  # noqa: E402
from results.render import write_table  # noqa: E402
from trainers.common_knobs import POOLINGS  # noqa: E402
from trainers.data.sources import DEV_SET, DataError, STSSet, load_corpus, load_sts_local, read_backtranslations  # noqa: E402
from trainers.data.wordnet import wordnet_problem  # noqa: E402
from trainers.models.encoder import SentenceEncoder  # noqa: E402
from trainers.models.pretrained import BUNDLED_MODEL, mlm_problem, model_problem  # noqa: E402
from trainers.suites.sts import correlations, cosine_scores  # noqa: E402
from trainers.training.checkpoint import FinalRecord  # noqa: E402

SWEEP_PREFIX = "sweep:"
POSITIVE_SCORE, NEGATIVE_SCORE = 5.0, 0.0
"""SG-BERT Section 5.4: positive pairs score 5, negative pairs score 0 (STS-B dev)."""
VIEWS = ("synonym", "mlm", "bt")
DEFAULT_POOLING = "mean"
"""all-MiniLM-L6-v2, the bundled model, was trained with mean pooling."""
POSITIVE_COLOUR, NEGATIVE_COLOUR = "tab:red", "tab:blue"


@dataclass
class Encoder:
    """A loaded encoder and the words that name it in titles and file names."""

    model: SentenceEncoder
    label: str

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.=-]+", "_", self.label).strip("_")


def load_encoder(spec: str, pooling: str, tracking_uri: str) -> Encoder:
    """The encoder ``spec`` names (see the module's docstring), or a refusal naming what is there."""
    if spec.startswith(SWEEP_PREFIX):
        return exported_trial(spec[len(SWEEP_PREFIX):], tracking_uri)
    folder = Path(spec)
    if FinalRecord.exists(folder):
        label = trial_label(FinalRecord.read(folder).identity, folder.name)
        return Encoder(SentenceEncoder.from_exported(folder), label)
    problem = model_problem(spec)
    if problem:
        raise UsageError(f"--encoder: {problem}")
    name = spec.split(":")[-1] if spec == BUNDLED_MODEL else folder.name or spec
    return Encoder(SentenceEncoder.from_pretrained(spec, pooling), f"{name} ({pooling}, untuned)")


def exported_trial(selector: str, tracking_uri: str) -> Encoder:
    """``NAME[:ROW[:SEED]]``: that sweep's best-dev finished trial, exported to a temporary folder."""
    from sweep.run.models import chosen_trial, export_trial
    name, row, seed = (selector.split(":") + [None, None])[:3]
    if seed is not None and not seed.isdigit():
        raise UsageError(f"--encoder {SWEEP_PREFIX}{selector}: SEED must be a whole number, got {seed!r}")
    run = chosen_trial(name, tracking_uri, row or None, int(seed) if seed else None, None)
    with tempfile.TemporaryDirectory() as folder:
        exported = export_trial(run, Path(folder) / "export")
        return Encoder(SentenceEncoder.from_exported(exported), trial_label(FinalRecord.read(exported).identity, name))


def trial_label(identity: dict, fallback: str) -> str:
    """An exported trial's name in titles: its sweep, row (or grid point) and seed."""
    if not identity.get("sweep"):
        return fallback
    return f"{identity['sweep']} {identity.get('row') or identity.get('axes', '')} seed {identity.get('seed', '')}"


def poolings_of(args: argparse.Namespace) -> list[str]:
    """The pooling of each plain-model encoder: one ``--pooling`` for all, or one per ``--encoder``."""
    poolings = args.poolings or [DEFAULT_POOLING]
    if len(poolings) == 1:
        return poolings * len(args.encoders or [None])
    if len(poolings) != len(args.encoders or []):
        raise UsageError(f"--pooling: give one, or one per --encoder ({len(args.encoders or [])}); got {len(poolings)}")
    return poolings


def first_encoder(args: argparse.Namespace) -> Encoder:
    """The one encoder of ``tsne`` and ``augmentations`` (default: the bundled model)."""
    if len(args.encoders or []) > 1:
        raise UsageError(f"{args.command}: give one --encoder (gold-cosine compares two)")
    return load_encoder(args.encoders[0] if args.encoders else BUNDLED_MODEL, poolings_of(args)[0], args.tracking_uri)


# --- SG-BERT Figures 5 and 6: t-SNE of positive and negative pairs ---------------------------------------


def sample_pairs(sts: STSSet, count: int, seed: int) -> dict[str, np.ndarray]:
    """Row indices of ``count`` positive (score 5) and ``count`` negative (score 0) pairs, drawn
    without replacement by ``seed``, in file order."""
    rng = np.random.default_rng(seed)
    chosen = {}
    for kind, score in (("positive", POSITIVE_SCORE), ("negative", NEGATIVE_SCORE)):
        rows = np.flatnonzero(sts.scores == score)
        if len(rows) < count:
            raise UsageError(f"--pairs {count}: {sts.name} has only {len(rows)} pairs scored {score:g}")
        chosen[kind] = np.sort(rng.choice(rows, size=count, replace=False))
    return chosen


def tsne_points(encoder: SentenceEncoder, sts: STSSet, count: int, seed: int) -> pd.DataFrame:
    """One row per sentence of the sampled pairs: its pair, kind, side (1 or 2), text, the cosine of its
    pair under the encoder, and its t-SNE coordinates (scikit-learn, ``random_state=seed``)."""
    from sklearn.manifold import TSNE

    records = []
    for kind, rows in sample_pairs(sts, count, seed).items():
        for row in rows:
            for side, sentence in ((1, sts.sentence1[row]), (2, sts.sentence2[row])):
                records.append({"pair": int(row), "kind": kind, "side": side, "sentence": sentence})
    frame = pd.DataFrame.from_records(records)
    vectors = encoder.encode(list(frame["sentence"]))
    frame["pair_cosine"] = np.repeat(cosine_scores(vectors[0::2], vectors[1::2]), 2)
    # Perplexity below the number of points, as scikit-learn requires (30, its default, for 20 + 20 pairs).
    tsne = TSNE(n_components=2, perplexity=min(30.0, len(frame) - 1.0), init="pca", random_state=seed)
    frame[["x", "y"]] = tsne.fit_transform(vectors.double().numpy())
    return frame


def draw_tsne(frame: pd.DataFrame, label: str, path: Path) -> Path:
    """Each sentence a dot, each pair joined by a line; red positive (score 5), blue negative (score 0)."""
    figure, axes = plt.subplots(figsize=(5.5, 5))
    for kind, colour in (("positive", POSITIVE_COLOUR), ("negative", NEGATIVE_COLOUR)):
        points = frame[frame["kind"] == kind]
        for _, pair in points.groupby("pair"):
            axes.plot(pair["x"], pair["y"], color=colour, alpha=0.35, linewidth=0.8)
        score = POSITIVE_SCORE if kind == "positive" else NEGATIVE_SCORE
        axes.scatter(points["x"], points["y"], s=16, color=colour, label=f"{kind} pairs (score {score:g})")
    axes.set_xticks([])
    axes.set_yticks([])
    axes.legend(fontsize=7)
    axes.set_title(f"t-SNE of {frame['pair'].nunique() // 2} + {frame['pair'].nunique() // 2} STS-B dev pairs\n"
                   f"{label}", fontsize=8)
    return save(figure, path)


def tsne_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per kind of pair: how many, the mean cosine of a pair under the encoder, and the mean distance
    between a pair's two points in the t-SNE plane (smaller: the pair is drawn closer together)."""
    pairs = frame.groupby(["kind", "pair"])
    distance = pairs.apply(lambda p: float(np.hypot(*(p[["x", "y"]].iloc[0] - p[["x", "y"]].iloc[1]))),
                           include_groups=False)
    table = pd.DataFrame({"pairs": pairs.size() // 2, "cosine": pairs["pair_cosine"].first(), "distance": distance})
    out = table.groupby(level="kind").agg(pairs=("pairs", "size"), cosine=("cosine", "mean"),
                                          distance=("distance", "mean")).loc[["positive", "negative"]]
    return pd.DataFrame({"pairs": out.index, "n": out["pairs"].values,
                         "mean cosine": [f"{v:.3f}" for v in out["cosine"]],
                         "mean t-SNE distance": [f"{v:.2f}" for v in out["distance"]]})


def run_tsne(args: argparse.Namespace) -> list[Path]:
    encoder = first_encoder(args)
    frame = tsne_points(encoder.model, load_sts_local([DEV_SET])[DEV_SET], args.pairs, args.seed)
    stem = args.out / f"tsne-{encoder.slug}"
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    caption = (f"SG-BERT Figures 5/6 analogue: {args.pairs} positive and {args.pairs} negative STS-B dev pairs, "
               f"seed {args.seed}, encoder {encoder.label}")
    return [draw_tsne(frame, encoder.label, stem.with_suffix(".png")), stem.with_suffix(".csv"),
            *write_table(tsne_summary(frame), caption, stem)]


# --- ConSERT Figure 1: gold score against cosine ------------------------------------------------------


def gold_and_cosine(encoder: SentenceEncoder, sts: STSSet) -> tuple[np.ndarray, np.ndarray, float]:
    """Gold scores, the encoder's cosine of each pair, and their Spearman x 100 (as the evaluation's)."""
    cosine = cosine_scores(encoder.encode(list(sts.sentence1)), encoder.encode(list(sts.sentence2)))
    return sts.scores, cosine, correlations(cosine, sts.scores)[0]


def panel_title(label: str, spearman: float) -> str:
    return f"{label}\nSpearman x 100 = {spearman:.2f}"


def draw_gold_cosine(panels: Sequence[tuple[str, np.ndarray, np.ndarray, float]], set_name: str, path: Path) -> Path:
    """One scatter per encoder: gold score (x) against predicted cosine (y), its Spearman in the title."""
    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (label, gold, cosine, spearman) in zip(axes[0], panels):
        ax.scatter(gold, cosine, s=4, alpha=0.4)
        ax.set_xlabel(f"gold score ({set_name})")
        ax.set_title(panel_title(label, spearman), fontsize=8)
    axes[0][0].set_ylabel("predicted cosine similarity")
    return save(figure, path)


def run_gold_cosine(args: argparse.Namespace) -> list[Path]:
    if not args.encoders or len(args.encoders) > 2:
        raise UsageError("gold-cosine: give one or two --encoder (ConSERT's Figure 1 sets untuned BERT beside ConSERT)")
    sts = load_sts_local([args.set])[args.set]
    poolings = poolings_of(args)
    encoders = [load_encoder(spec, pooling, args.tracking_uri) for spec, pooling in zip(args.encoders, poolings)]
    panels = [(e.label, *gold_and_cosine(e.model, sts)) for e in encoders]
    stem = args.out / ("gold-cosine-" + "-vs-".join(e.slug for e in encoders))
    table = pd.DataFrame({"encoder": [p[0] for p in panels], "pairs": [len(p[1]) for p in panels],
                          "Spearman x 100": [f"{p[3]:.2f}" for p in panels],
                          "cosine range": [f"{p[2].min():.2f} .. {p[2].max():.2f}" for p in panels]})
    caption = f"ConSERT Figure 1 analogue: gold score against cosine on {args.set}"
    return [draw_gold_cosine(panels, args.set, stem.with_suffix(".png")), *write_table(table, caption, stem)]


# --- SCT Table 5: augmentation statistics -----------------------------------------------------------------


def edit_distances(originals: Sequence[str], augmented: Sequence[str]) -> np.ndarray:
    """Character Levenshtein distance of each augmentation from its original (SCT's string dissimilarity)."""
    from rapidfuzz.distance import Levenshtein

    return np.array([Levenshtein.distance(a, b) for a, b in zip(originals, augmented)], dtype=np.float64)


def augmentation_row(encoder: SentenceEncoder, view: str, originals: Sequence[str], augmented: Sequence[str]) -> dict:
    """SCT Table 5's cells for one view: edit distance mean ± std, and the mean cosine of each original
    and its augmentation under ``encoder``."""
    distances = edit_distances(originals, augmented)
    cosine = cosine_scores(encoder.encode(list(originals)), encoder.encode(list(augmented)))
    return {"view": view, "pairs": len(distances), "unchanged": int((distances == 0).sum()),
            "dissim_mean": float(distances.mean()), "dissim_std": float(distances.std(ddof=1)),
            "cosine": float(cosine.mean())}


def view_pairs(view: str, sentences: Sequence[str], args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(originals, augmentations) of one view, made as SCT's training makes them (trainers.views.text);
    the BT view pairs each sentence of ``--bt-file`` with both of its round trips."""
    generator = torch.Generator().manual_seed(args.seed)
    if view == "synonym":
        from trainers.data.wordnet import wordnet_synonyms
        from trainers.views.text import replace_one_synonym

        return list(sentences), [replace_one_synonym(s, wordnet_synonyms, generator) for s in sentences]
    if view == "mlm":
        from trainers.views.text import MaskedLMRewriter

        rewriter = MaskedLMRewriter(args.mlm_model)
        rewritten = [t for start in range(0, len(sentences), 64)
                     for t in rewriter(sentences[start:start + 64], generator)]
        return list(sentences), rewritten
    rows = read_backtranslations(args.bt_file)[: args.limit or None]
    return [r[0] for r in rows] * 2, [r[1] for r in rows] + [r[2] for r in rows]


def view_problem(view: str, args: argparse.Namespace) -> str | None:
    """Why ``view`` cannot be made here (checked for all views before any is made)."""
    if view == "synonym":
        problem = wordnet_problem()
    elif view == "mlm":
        problem = mlm_problem(args.mlm_model or "")
        problem = problem and f"--mlm-model: {problem}"
    else:
        problem = None if args.bt_file and Path(args.bt_file).is_file() else (
            f"--bt-file: {args.bt_file!r} is not a file (the bt view needs a TSV sentence, bt1, bt2 that "
            "`python -m trainers.data.backtranslate` writes)")
    return problem and f"view {view}: {problem}"


def paper_table5() -> dict[str, dict[str, float]]:
    """SCT Table 5 as paper_numbers.yaml holds it: view -> column -> number."""
    rows = load_yaml(PAPER_NUMBERS)["sct"]["table5"]["rows"]
    return {row["row"].lower(): row["values"] for row in rows}


def augmentation_table(rows: Sequence[dict], encoder_label: str) -> pd.DataFrame:
    """Ours, then the paper's line for each view (BERT-Tiny SCT and DiffCSE encoders)."""
    paper = paper_table5()
    lines = []
    for row in rows:
        lines.append({"view": row["view"], "source": f"ours ({encoder_label})", "pairs": str(row["pairs"]),
                      "unchanged": str(row["unchanged"]),
                      "string dissim.": f"{row['dissim_mean']:.2f} ± {row['dissim_std']:.2f}",
                      "embedding sim.": f"{row['cosine']:.3f}"})
        values = paper.get(row["view"])
        if values:
            lines.append({"view": "", "source": "paper (BERT-Tiny SCT / DiffCSE)", "pairs": "", "unchanged": "",
                          "string dissim.": f"{values['String Dissim.']:.2f} ± {values['String Dissim. std']:.2f}",
                          "embedding sim.": f"{values['Embedding Sim. (SCT)']:.2f} / "
                                            f"{values['Embedding Sim. (DiffCSE)']:.2f}"})
    return pd.DataFrame.from_records(lines)


def run_augmentations(args: argparse.Namespace) -> list[Path]:
    views = list(dict.fromkeys(args.views or ["synonym"]))
    problems = [p for p in (view_problem(v, args) for v in views) if p]
    if problems:
        raise UsageError("; ".join(problems))
    encoder = first_encoder(args)
    sentences = list(dict.fromkeys(load_corpus(args.corpus)))[: args.limit or None]
    rows = [augmentation_row(encoder.model, view, *view_pairs(view, sentences, args)) for view in views]
    stem = args.out / f"sct-table5-{encoder.slug}"
    pd.DataFrame.from_records(rows).to_csv(stem.with_suffix(".csv"), index=False)
    caption = (f"SCT Table 5 analogue: edit distance (characters, mean ± std) and mean cosine of each augmentation "
               f"against its original; corpus {args.corpus} (first {len(sentences)} distinct sentences; bt: the "
               f"file's rows, both round trips), seed {args.seed}, cosine under {encoder.label}; the paper's "
               "cosines are under trained BERT-Tiny SCT and DiffCSE encoders")
    return [stem.with_suffix(".csv"), *write_table(augmentation_table(rows, encoder.label), caption, stem)]


# --- the command ---------------------------------------------------------------------------------------------


COMMANDS = {"tsne": run_tsne, "gold-cosine": run_gold_cosine, "augmentations": run_augmentations}


def analyse(args: argparse.Namespace) -> int:
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        written = COMMANDS[args.command](args)
    except DataError as error:
        raise UsageError(str(error)) from None
    print("\n".join(str(p) for p in written))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.analyses", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("tsne", "SG-BERT Figures 5/6: t-SNE of positive and negative STS-B dev pairs."),
                            ("gold-cosine", "ConSERT Figure 1: gold score against cosine, one panel per encoder."),
                            ("augmentations", "SCT Table 5: edit distance and cosine of each text augmentation.")):
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("--encoder", action="append", dest="encoders",
                             help="An exported folder, sweep:NAME[:ROW[:SEED]], or a model (repeat for gold-cosine).")
        command.add_argument("--pooling", action="append", dest="poolings", choices=POOLINGS,
                             help=f"Pooling of a plain model, not of an export (default {DEFAULT_POOLING}); "
                                  "repeat to give each --encoder its own.")
        command.add_argument("--seed", type=int, default=0)
        command.add_argument("--out", default="reports/out")
        command.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help="For sweep:NAME encoders.")
        if name == "tsne":
            command.add_argument("--pairs", type=int, default=20, help="Positive pairs, and as many negative.")
        if name == "gold-cosine":
            command.add_argument("--set", default="stsb-test", help="A shipped STS file (default stsb-test).")
        if name == "augmentations":
            command.add_argument("--view", action="append", dest="views", choices=VIEWS)
            command.add_argument("--corpus", default="stsb_sentences", help="A train_corpus name or text file.")
            command.add_argument("--limit", type=int, default=1000, help="First N distinct sentences (0: all).")
            command.add_argument("--mlm-model", help="A masked-LM (folder or hub id) for the mlm view.")
            command.add_argument("--bt-file", help="A back-translation TSV (sentence, bt1, bt2) for the bt view.")
    return run_command(parser, argv, analyse)


if __name__ == "__main__":
    sys.exit(main())
