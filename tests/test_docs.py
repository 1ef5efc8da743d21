"""Generated docs pages are what their generators write, and say what the code does."""

from __future__ import annotations

from pathlib import Path

from sweep.spec import reference_doc as spec_reference
from sweep.spec.validation import DEFAULTS, TOP_LEVEL_KEYS

ROOT = Path(__file__).resolve().parents[1]


def test_every_top_level_key_has_its_default():
    assert list(DEFAULTS) and set(DEFAULTS) == set(TOP_LEVEL_KEYS)


def test_the_spec_reference_page_is_what_the_validation_describes():
    page = (ROOT / "docs/spec_reference.md").read_text(encoding="utf-8")
    assert page == spec_reference.markdown()
    assert "| `max_concurrent_trials` | trials run at once | `2` |" in page
