"""WordNet synonyms through nltk (SCT's synonym view), and whether this machine has them.

WordNet 3.0 is read from the first of: the folder ``$WORDNET_DIR``, Debian's ``wordnet-base`` package
(``/usr/share/wordnet``, ``apt-get install wordnet-base``; nothing to download from nltk), or nltk's
own downloaded data (``python -m nltk.downloader wordnet``). The Debian and nltk copies are the same
WordNet 3.0 database; Debian's lacks only the ``lexnames`` file (the 45 fixed lexicographer file
names, which synonyms never use), given here.

Without torch, so that SCT's validation can ask before a sweep starts; nltk is imported when asked.
"""

from __future__ import annotations

import functools
import io
import os
import warnings
from pathlib import Path
from typing import Any

from trainers.errors import first_line

WORDNET_DIR_ENV = "WORDNET_DIR"
DEBIAN_WORDNET = Path("/usr/share/wordnet")
NEEDS = ("needs WordNet 3.0: `apt-get install wordnet-base` (Debian/Ubuntu), a folder of its dict files in "
         f"${WORDNET_DIR_ENV}, or nltk's data (python -m nltk.downloader wordnet)")

LEXNAMES = ("adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
            "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
            "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
            "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
            "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
            "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather "
            "adj.ppl").split()
"""WordNet 3.0's lexicographer files in number order (lexnames(5WN)); the syntactic category of each
is its number in the ``lexnames`` file format: adj 3, adv 4, noun 1, verb 2."""
LEXNAME_CATEGORY = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}


def wordnet_folder() -> Path | None:
    """The WordNet dict folder to read (``$WORDNET_DIR``, else Debian's), None for nltk's own data."""
    if os.environ.get(WORDNET_DIR_ENV):
        return Path(os.environ[WORDNET_DIR_ENV])
    return DEBIAN_WORDNET if (DEBIAN_WORDNET / "data.noun").is_file() else None


@functools.cache
def wordnet_reader() -> Any:
    """nltk's WordNet reader over :func:`wordnet_folder` (or nltk's downloaded data); raises ImportError
    without nltk, LookupError without the data."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    folder = wordnet_folder()
    if folder is None:
        from nltk.corpus import wordnet

        wordnet.ensure_loaded()
        return wordnet
    if not (folder / "data.noun").is_file():
        raise LookupError(f"{WORDNET_DIR_ENV}={folder}: no WordNet data.noun there")

    class FolderReader(WordNetCorpusReader):
        def open(self, fileid: str):
            if fileid == "lexnames" and not (folder / fileid).is_file():
                lines = (f"{i:02d}\t{name}\t{LEXNAME_CATEGORY[name.split('.')[0]]}" for i, name in enumerate(LEXNAMES))
                return io.StringIO("\n".join(lines) + "\n")
            return super().open(fileid)

        def map_wn(self, version: str = "wordnet") -> None:
            return None  # the map to nltk's WordNet 3.0 serves only the multilingual (OMW) data, never used here

    # nltk reads only below the folders of its data path.
    if str(folder) not in nltk.data.path:
        nltk.data.path.append(str(folder))
    with warnings.catch_warnings():  # "multilingual functions are not available": not used here
        warnings.simplefilter("ignore", UserWarning)
        return FolderReader(str(folder), None)


def wordnet_problem() -> str | None:
    """Why WordNet synonyms are unavailable here (None when they are)."""
    try:
        wordnet_reader().synsets("good")
    except ImportError:
        return "needs nltk (pip install -e '.[synonyms]') and " + NEEDS[len("needs "):]
    except (LookupError, OSError) as error:  # OSError: a WORDNET_DIR that lacks one of the files
        return f"{NEEDS}; not found here ({first_line(error)})"
    return None


def wordnet_synonyms(word: str) -> list[str]:
    """WordNet synonyms of ``word`` (single words only, the word itself excluded)."""
    names = {lemma.name() for synset in wordnet_reader().synsets(word.lower()) for lemma in synset.lemmas()}
    return sorted(n for n in names if "_" not in n and n.lower() != word.lower())
