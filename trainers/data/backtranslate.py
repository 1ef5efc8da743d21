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

from trainers.data.sources import BT_COLUMNS, load_corpus

Translate = Callable[[list[str], str, str], list[str]]


def hf_translator(model_template: str, batch_size: int = 32) -> Translate:
    from transformers import pipeline

    cache: dict[tuple[str, str], Callable] = {}

    def translate(sentences: list[str], source: str, target: str) -> list[str]:
        if (source, target) not in cache:
            cache[source, target] = pipeline("translation", model=model_template.format(source=source, target=target))
        outputs = cache[source, target](sentences, batch_size=batch_size)
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
    corpus = load_corpus(args.corpus)
    corpus = corpus[: args.limit] if args.limit else corpus
    path = write_file(corpus_rows(corpus, pivots, hf_translator(args.model_template)), args.out)
    print(f"{len(corpus)} sentences ({len(set(corpus))} distinct, each translated once) -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
