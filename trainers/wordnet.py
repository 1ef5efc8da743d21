"""WordNet synonyms through nltk (SCT's synonym view), and whether this machine has them.

Without torch, so that SCT's validation can ask before a sweep starts; nltk is imported when asked.
"""

from __future__ import annotations


def wordnet_problem() -> str | None:
    """Why WordNet synonyms are unavailable here (None when they are)."""
    try:
        from nltk.corpus import wordnet

        wordnet.synsets("good")
    except ImportError:
        return "needs nltk (pip install -e '.[synonyms]') and its WordNet data (python -m nltk.downloader wordnet)"
    except LookupError:
        return "needs WordNet data for nltk (python -m nltk.downloader wordnet), which is not installed here"
    return None


def wordnet_synonyms(word: str) -> list[str]:
    """WordNet synonyms of ``word`` (single words only, the word itself excluded)."""
    from nltk.corpus import wordnet

    names = {lemma.name() for synset in wordnet.synsets(word.lower()) for lemma in synset.lemmas()}
    return sorted(n for n in names if "_" not in n and n.lower() != word.lower())
