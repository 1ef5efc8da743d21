"""What ``sweep paper`` prints when every trial is in the store already: each reused trial as reused (not as
started and finished), counts that agree with the reuse line, and one clock that only moves forward across
the campaign's sweeps; run again, the kept trials are said to be kept, not reused.

A spec of the tiny BERT (an untuned row, SimCSE at seed 1) is trained first; the campaign's two specs are the
same trials under other names, so each of their trials is taken from the store.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import yaml

from sweep.commands.cli import main
from tests.conftest import fresh_ray, spec_file

pytestmark = pytest.mark.slow

STAMP = re.compile(r"^\[(\d+):(\d\d):(\d\d)\] ", re.MULTILINE)
REUSE = re.compile(r"^\[[\d:]+\] reuse: (\d+) of (\d+) trials finished before", re.MULTILINE)
COUNTS = re.compile(r"^(\S+): (\d+) trials finished \((\d+) reused, (\d+) trained by \1\), (\d+) failed(.*)$",
                    re.MULTILINE)
SPECS = ("paper-pair", "a", "b")


def printed(argv: list[str]) -> str:
    """What ``python -m sweep ARGV`` prints on stdout (its progress view writes there too, stdout having no
    descriptor of its own here), after it exits with 0."""
    out = io.StringIO()
    with fresh_ray():
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, tiny_bert, tiny_sts_dir) -> tuple[str, str]:
    """The console of the campaign whose every trial is in the store, and of the same campaign run again."""
    folder = tmp_path_factory.mktemp("console")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STS_DATA_DIR", str(tiny_sts_dir))
        trained = spec_file(folder, tiny_bert, "trained", seeds=[1])
        for name in ("a", "b"):
            spec_file(folder, tiny_bert, name, seeds=[1])
        campaign = folder / "pair.yaml"
        campaign.write_text(yaml.safe_dump({"description": "two specs", "specs": ["a.yaml", "b.yaml"]}))
        where = ["--tracking-uri", f"sqlite:///{folder}/mlflow.db", "--storage", str(folder / "ray")]
        printed(["run", str(trained), *where])
        first = printed(["paper", str(campaign), *where])
        again = printed(["paper", str(campaign), *where])
    return first, again


def stamps(text: str) -> list[int]:
    return [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in STAMP.findall(text)]


def test_reused_trials_are_listed_as_reused_not_as_started_and_finished(outputs):
    first, _ = outputs
    lines = [line for line in first.splitlines() if STAMP.match(line)]
    assert not [line for line in lines if re.search(r"\] (started|finished) ", line)], first
    reused = [line for line in lines if re.search(r"\] reused    ", line)]
    # Each spec's two trials (the untuned row, SimCSE seed 1), each once, with its score and who trained it.
    assert len(reused) == 2 * len(SPECS), first
    assert all(re.search(r"best dev -?\d+\.\d\d, trained by sweep trained$", line) for line in reused), reused


def test_the_counts_agree_with_the_reuse_lines(outputs):
    first, _ = outputs
    reuse = [(int(taken), int(of)) for taken, of in REUSE.findall(first)]
    counts = {name: (int(n), int(r), int(t)) for name, n, r, t, _, _ in COUNTS.findall(first)}
    assert list(counts) == list(SPECS) and len(reuse) == len(SPECS), first
    for (taken, of), (name, (finished, reused, trained)) in zip(reuse, counts.items()):
        assert (finished, reused, trained) == (of, taken, of - taken) == (2, 2, 0), (name, first)


def test_the_clock_only_moves_forward_across_the_whole_command(outputs):
    for text in outputs:
        seen = stamps(text)
        assert len(seen) >= len(SPECS), text
        assert seen == sorted(seen), text


def test_a_campaign_run_again_keeps_its_trials_and_claims_no_reuse(outputs):
    _, again = outputs
    assert not REUSE.findall(again), again  # nothing is taken from the store: every sweep keeps its own
    assert len(re.findall(r"\] resuming \S+ from .*: its 2 finished trials are kept$", again, re.MULTILINE)) == 3
    counts = {name: (int(n), int(r), rest) for name, n, r, _, _, rest in COUNTS.findall(again)}
    assert counts == {name: (2, 2, f"; all 2 from an earlier run of {name}, kept: nothing trained now")
                      for name in ("paper-pair", "a", "b")}, again
