"""Every command the README and the docs show in a shell block names a module that exists, spec files that
exist and options its parser accepts; the quick ones (`sweep plan` of a shipped spec, `sweep paper --plan`,
`sweep knobs`) run as written, ending with 0 and their output, or with a refusal (2) on stderr and no
traceback: one line, or a spec's problems (``invalid sweep spec:``, then one line per problem, each naming the
spec file)."""

from __future__ import annotations

import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from sweep.cli import build_parser
from sweep.cli import main as sweep_main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDERS = {"SPEC", "NAME", "ENC", "A", "B", "x"}
"""Words a command stands in with (a spec, a sweep, an encoder), as the pages explain."""
PARSE_ONLY = ("reports.tables", "reports.plots", "reports.collect", "reports.analyses", "reports.importance",
              "reports.paper")
"""Reports commands whose parser is checked without running them (they read results a sweep writes)."""


def shown_commands() -> list[tuple[str, list[str]]]:
    """(page, argv after `python -m`) of every command in the pages' bash blocks; `a && b` gives two."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                for command in line.split(" #")[0].split("&&"):
                    words = shlex.split(command.strip())
                    if words[:2] in (["python", "-m"], [".venv/bin/python", "-m"]):
                        found.append((page.name, words[2:]))
    return found


COMMANDS = shown_commands()


def test_the_pages_show_commands():
    assert len(COMMANDS) > 40 and any(argv[:2] == ["sweep", "plan"] for _, argv in COMMANDS)


@pytest.mark.parametrize("page, argv", COMMANDS, ids=[f"{page}: {' '.join(argv)}" for page, argv in COMMANDS])
def test_a_shown_command_names_what_exists_and_options_its_parser_takes(page, argv, monkeypatch):
    module = argv[0]
    assert importlib.util.find_spec(module) is not None, f"{page}: no module {module}"
    for word in argv[1:]:
        if word.startswith("search_spaces/"):
            assert (ROOT / word).is_file(), f"{page}: {word} does not exist"
    if module == "sweep":
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit:
            pytest.fail(f"{page}: `python -m {' '.join(argv)}`: sweep's parser refuses its options")
    elif module in PARSE_ONLY:
        commands = importlib.import_module(module)
        monkeypatch.setattr(commands, "run_command", lambda parser, args, body: parser.parse_args(args) and 0)
        try:
            commands.main(argv[1:])
        except SystemExit:
            pytest.fail(f"{page}: `python -m {' '.join(argv)}`: its parser refuses its options")


QUICK = [(page, argv) for page, argv in COMMANDS
         if (argv[:2] == ["sweep", "plan"] and "--estimate" not in argv and not PLACEHOLDERS & set(argv))
         or argv[:2] == ["sweep", "knobs"]
         or (argv[:2] == ["sweep", "paper"] and "--plan" in argv and "--estimate" not in argv)]


@pytest.mark.parametrize("page, argv", QUICK, ids=[f"{page}: {' '.join(argv)}" for page, argv in QUICK])
def test_a_quick_command_runs_as_written(page, argv, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = sweep_main(argv[1:])
    out, err = capsys.readouterr()
    shown = f"{page}: `python -m {' '.join(argv)}` exited {code}:\n{out[-2000:]}{err[-2000:]}"
    assert "Traceback" not in out + err, shown
    if code == 0:
        assert out.strip(), shown
    else:
        assert code == 2 and err.strip(), shown
        first, *problems = err.strip().splitlines()
        if problems:  # a spec the machine cannot run here (a model or data set out of reach): its problems
            spec = str((ROOT / next(word for word in argv if word.endswith(".yaml"))).resolve())
            assert first == "invalid sweep spec:" and all(p.startswith(f"  {spec}: ") for p in problems), shown
