"""`python -m sweep` refuses a usage error in one line with exit code 2, and lets a bug show its traceback.

A KeyError is no refusal: only :class:`~trainers.errors.UnknownName` (a method's name that no registry entry has),
:class:`~results.names.UsageError` and :class:`~sweep.spec.sweep_spec.SpecError` are. A KeyError raised by a bug
(a missing key in a config) must end the command with its traceback (exit 1), not as a usage line.
"""

from __future__ import annotations

import subprocess
import sys

from sweep.commands.cli import main


def test_an_unknown_method_is_refused_in_one_line(capsys):
    assert main(["knobs", "simcsee"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("unknown method 'simcsee' (known: ['consert', 'dclr', 'diffcse', 'flow', 'none', 'sct', "
                           "'sg', 'simcse']); did you mean 'simcse'?")


def test_a_key_error_from_a_bug_shows_its_traceback():
    code = ("import sys\nimport sweep.commands.cli as cli\n"
            "cli.print_knobs = lambda method: {}['row']  # a bug: a key that is not there\n"
            "sys.exit(cli.main(['knobs', 'sg']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert "Traceback" in result.stderr and result.stderr.strip().endswith("KeyError: 'row'")
