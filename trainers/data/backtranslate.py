"""Write SCT's back-translation file: (sentence, bt1, bt2), one TSV row per sentence.

    python -m trainers.data.backtranslate --corpus nli_sentences --out bt.tsv \
        --pivot de --pivot fr --model-template "Helsinki-NLP/opus-mt-{source}-{target}"

bt1 and bt2 are English -> pivot -> English round trips through two pivots
(the SCT paper uses German and French), with any Hugging Face translation
models; it needs a machine that has (or can download) them.
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
    parser.add_argument("--limit", type=int, default=0, help="Only the first N distinct sentences.")
    args = parser.parse_args(argv)
    pivots = args.pivots or ["de", "fr"]
    if len(pivots) != 2:
        parser.error("give exactly two --pivot languages (bt1 and bt2)")
    sentences = list(dict.fromkeys(load_corpus(args.corpus)))
    sentences = sentences[: args.limit] if args.limit else sentences
    path = write_file(back_translations(sentences, pivots, hf_translator(args.model_template)), args.out)
    print(f"{len(sentences)} sentences -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
