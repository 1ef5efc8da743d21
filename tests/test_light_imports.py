"""Method declarations import neither torch nor transformers nor Ray.

Validating a spec, listing knobs (``sweep knobs``) and reading a spec for a report only need what
each method declares (knobs, defaults, checks, stages); its Objective, which needs torch, is
imported when a stage is built. Each probe runs in a fresh interpreter, so what earlier tests
imported does not count.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

from trainers.objectives.base import Objective
from trainers.registry import METHODS

HEAVY = ("torch", "transformers", "ray")
SPECS = Path(__file__).resolve().parents[1] / "search_spaces"


def heavy_modules_after(code: str, cwd: Path | None = None) -> list[str]:
    """The heavy packages in ``sys.modules`` once ``code`` has run in a fresh interpreter (in ``cwd``)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=cwd)
    return json.loads(result.stdout.splitlines()[-1])


def test_registry_and_spec_validation_import_no_torch():
    code = ("import trainers.registry, sweep.spec.sweep_spec\nfrom trainers.registry import get_method\n"
            "get_method('sct').all_knobs")
    assert heavy_modules_after(code) == []


def test_every_method_resolves_and_declares_its_stages_without_torch():
    code = ("from trainers.registry import METHODS\n"
            "for method in METHODS.values():\n"
            "    config = method.resolve({})\n"
            "    method.stages(config) if method.trains else None\n")
    assert heavy_modules_after(code) == []


def test_a_spec_read_without_environment_checks_imports_no_torch():
    code = (f"from sweep.spec.sweep_spec import load_spec\n"
            f"load_spec({str(SPECS / 'sct_main.yaml')!r}, check_environment=False)")
    assert heavy_modules_after(code) == []


def test_every_module_among_the_methods_is_a_registered_method():
    """``trainers/methods`` holds one declaration per method of the registry and nothing else: what belongs
    to one method (SCT's distillation knobs, its views) is in that method's module."""
    import trainers.methods

    modules = [m.name for m in pkgutil.iter_modules(trainers.methods.__path__)]
    declared = [importlib.import_module(f"trainers.methods.{name}").METHOD.name for name in modules]
    assert sorted(declared) == sorted(METHODS)


def test_every_declared_stage_names_an_objective():
    """A stage names its Objective as "module:Class": each one must import and be an Objective."""
    consert = METHODS["consert"]
    configs = [method.resolve({}) for method in METHODS.values() if method.trains]
    configs += [consert.resolve({"supervision": s}) for s in consert.knobs["supervision"].choices]
    for config in configs:
        for stage in METHODS[config["method"]].stages(config):
            assert issubclass(stage.objective_class(), Objective), (config["method"], stage.name)


def test_the_commands_a_person_waits_for_import_no_torch_nor_ray():
    """`sweep --help`, `sweep knobs`, `sweep status`, `reports.tables` (benchmarks/cli_latency.py times them)."""
    code = ("import sweep.commands.cli, sweep.commands.status, reports.tables\n"
            "sweep.commands.cli.build_parser()\n"
            "sweep.commands.cli.print_knobs('sg')")
    assert heavy_modules_after(code) == []


def test_sweep_plan_of_every_shipped_spec_imports_no_torch_nor_ray(tmp_path):
    """`sweep plan` reads models' configs and weights' shapes as JSON (trainers.models.pretrained, sweep.commands.plan):
    the whole plan, environment checks and regime warnings included, answers without torch. Specs whose
    data this machine lacks (a hub corpus, a BT file, an evaluation suite's folder) stop at their check."""
    code = ("import contextlib, io, glob\n"
            "from sweep.commands.cli import main\n"
            f"for path in sorted(glob.glob({str(SPECS / '*.yaml')!r})):\n"
            "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "        main(['plan', path])\n")
    assert heavy_modules_after(code, cwd=tmp_path) == []  # no store there (the default sqlite:///mlflow.db)


def test_a_trial_worker_imports_neither_mlflow_nor_the_drivers_view():
    """A Ray worker unpickles the trainable, :func:`sweep.run.trial.run_sweep_trial`, and imports its module:
    the trainers and Ray Tune, not the driver's MLflow tracker, progress view or reports (MLflow alone
    takes seconds to import)."""
    probe = ("import sys, sweep.run.trial\n"
             "print(sorted(m for m in ('mlflow', 'sweep.run.engine', 'sweep.tracking.tracker', 'reports') "
             "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]"


def test_the_record_the_metric_names_and_the_checkpoint_layout_import_no_torch():
    """The sweep's driver, exports and reports read names and checkpoint layouts without torch."""
    code = ("from results.record import Tag\nfrom trainers.metrics import Metric\n"
            "from trainers.training.checkpoint import FinalRecord, checkpoint_folder, checkpoint_index")
    assert heavy_modules_after(code) == []
