"""Write a back-translation file: (sentence, bt1, bt2), one TSV row per sentence of the corpus, duplicates included.

    python -m trainers.data.backtranslate --corpus nli_sentences --out bt.tsv \
        --pivot de --pivot fr --model-template "Helsinki-NLP/opus-mt-{source}-{target}"

bt1 and bt2 are English -> pivot -> English round trips through two pivots
(the SCT paper uses German and French), with any Hugging Face translation
models; it needs a machine that has (or can download) them. The default,
Marian's opus-mt with its own decoding, stands in for the papers' translators:
SG-BERT's Contrastive (BT) used fairseq's WMT'19 En-De model with beam search of
beam 100 (Appendix A.2), for more varied paraphrases.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Callable, Sequence

from trainers.data.sources import BT_COLUMNS, DataError, corpus_problem, load_corpus
from trainers.errors import first_line

Translate = Callable[[list[str], str, str], list[str]]


def model_unavailable(model_template: str, model: str, source: str, target: str, error: BaseException) -> str:
    """The refusal for a translation model that cannot be loaded: which one, why, and where it was looked for."""
    from huggingface_hub.constants import HF_HUB_CACHE

    looks_local = model.startswith(("/", ".", "~"))  # transformers' own words would be about a hub id's form
    reason = "no such local folder" if looks_local and not Path(model).is_dir() else first_line(error).rstrip(".")
    return (f"--model-template {model_template!r}: cannot load the {source} -> {target} translation model {model!r} "
            f"({reason}); expected a Hugging Face hub connection, the model in the Hugging Face cache "
            f"({HF_HUB_CACHE}, HF_HOME or HF_HUB_CACHE move it), or a local folder: download it once where the hub "
            "is reachable (HF_HUB_OFFLINE=1 then reads the cache alone), or point --model-template at local "
            "folders, e.g. --model-template '/models/opus-mt-{source}-{target}'; nothing was translated or written")


def hf_translator(model_template: str, pivots: Sequence[str] = (), batch_size: int = 32) -> Translate:
    """``translate`` with the Hugging Face translation models named by ``model_template``; those of the round
    trips through ``pivots`` are loaded now, before any sentence is translated, so that a model that cannot be
    loaded is refused (:class:`DataError`, naming it) before any work that would be lost."""
    from huggingface_hub.errors import EntryNotFoundError, HFValidationError
    from transformers import pipeline

    cache: dict[tuple[str, str], Callable] = {}

    def load(source: str, target: str) -> Callable:
        if (source, target) not in cache:
            model = model_template.format(source=source, target=target)
            try:
                cache[source, target] = pipeline("translation", model=model)
            except (OSError, HFValidationError, EntryNotFoundError) as error:  # not found: not here, nor on the hub
                raise DataError(model_unavailable(model_template, model, source, target, error)) from None
        return cache[source, target]

    for pivot in pivots:
        load("en", pivot)
        load(pivot, "en")

    def translate(sentences: list[str], source: str, target: str) -> list[str]:
        outputs = load(source, target)(sentences, batch_size=batch_size)
        return [o["translation_text"].replace("\t", " ").replace("\n", " ").strip() for o in outputs]

    return translate


def back_translations(sentences: list[str], pivots: Sequence[str], translate: Translate) -> list[tuple[str, ...]]:
    rounds = [translate(translate(sentences, "en", pivot), pivot, "en") for pivot in pivots]
    return [(sentence, *round_trips) for sentence, *round_trips in zip(sentences, *rounds)]


def corpus_rows(corpus: Sequence[str], pivots: Sequence[str], translate: Translate) -> list[tuple[str, ...]]:
    """One row per sentence of ``corpus``, in its order, duplicates included: a method that reads the file trains
    on its rows, which are then the corpus's examples, as a row of the same table without back-translations
    trains on (SG-BERT's Contrastive (BT) is "identical with" Contrastive (SG) but for its positives). Each
    distinct sentence is translated once."""
    distinct = list(dict.fromkeys(corpus))
    translated = {row[0]: row for row in back_translations(distinct, pivots, translate)}
    return [translated[sentence] for sentence in corpus]


def write_file(rows: list[tuple[str, ...]], out: str | Path) -> Path:
    out = Path(out)
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar=None, lineterminator="\n")
        writer.writerow(BT_COLUMNS)
        writer.writerows(rows)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.data.backtranslate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="sts_all_sentences", help="A train_corpus name or text file.")
    parser.add_argument("--out", required=True)
    parser.add_argument("--pivot", action="append", dest="pivots", help="Pivot language (twice: bt1, bt2).")
    parser.add_argument("--model-template", default="Helsinki-NLP/opus-mt-{source}-{target}")
    parser.add_argument("--limit", type=int, default=0, help="Only the corpus's first N sentences.")
    args = parser.parse_args(argv)
    pivots = args.pivots or ["de", "fr"]
    if len(pivots) != 2:
        parser.error("give exactly two --pivot languages (bt1 and bt2)")
    # Refusals (exit 2, one line on stderr, as python -m trainers.evaluate_model) come before any translation.
    try:
        problem = corpus_problem(args.corpus)
        if problem:
            raise DataError(f"--corpus: {problem}")
        if not Path(args.out).resolve().parent.is_dir():
            raise DataError(f"--out {args.out}: its folder {Path(args.out).resolve().parent} does not exist")
        corpus = load_corpus(args.corpus)
        translate = hf_translator(args.model_template, pivots)
    except DataError as error:
        print(error, file=sys.stderr)
        return 2
    corpus = corpus[: args.limit] if args.limit else corpus
    path = write_file(corpus_rows(corpus, pivots, translate), args.out)
    print(f"{len(corpus)} sentences ({len(set(corpus))} distinct, each translated once) -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
