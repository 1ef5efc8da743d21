"""The house's floors and rooms (docs/developers.md): every import, late ones inside functions included,
points down.

- Floors: ``trainers`` <- ``results`` <- ``sweep`` <- ``reports``.
- Rooms of ``sweep``: ``spec`` <- ``tracking`` <- ``run`` <- ``commands``. A room imports only rooms below
  it: the spec knows nothing of MLflow or Ray, the tracker nothing of how trials run, and the engine nothing
  of the commands that call it.
- ``reports`` read MLflow through ``results``; of ``sweep`` they use only the spec room (a table's design is
  its search spaces and their row contracts), never the engine or the tracker.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("trainers", "results", "sweep", "reports")
SWEEP_ROOMS = ("sweep.spec", "sweep.tracking", "sweep.run", "sweep.commands")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function, relative imports resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # `from sweep.run import engine`
    return found


def import_edges(package: str) -> list[tuple[str, str]]:
    """(importer, imported) for every module of ``package``, its subfolders included."""
    return [(module_name(path), imported) for path in sorted((ROOT / package).rglob("*.py"))
            for imported in imported_modules(path)]


def place(module: str, places: tuple[str, ...]) -> int | None:
    """The index of the floor or room ``module`` belongs to, or None for a module outside them all."""
    return next((index for index, prefix in enumerate(places)
                 if module == prefix or module.startswith(prefix + ".")), None)


def upward(edges: list[tuple[str, str]], places: tuple[str, ...]) -> list[str]:
    """The imports in ``edges`` from a floor or room to one above it."""
    return [f"{importer} imports {imported}" for importer, imported in edges
            if (here := place(importer, places)) is not None
            and (there := place(imported, places)) is not None and there > here]


@pytest.mark.parametrize("package", FLOORS)
def test_no_package_imports_a_floor_above_it(package):
    assert upward(import_edges(package), FLOORS) == []


def test_no_room_of_sweep_imports_a_room_above_it():
    assert upward(import_edges("sweep"), SWEEP_ROOMS) == []


def test_every_module_of_sweep_lives_in_a_room():
    """A new module goes into one of the four rooms, not beside them (``sweep/__main__.py`` only starts the CLI)."""
    loose = {module_name(path) for path in (ROOT / "sweep").glob("*.py")}
    assert loose == {"sweep", "sweep.__main__"}
    main = imported_modules(ROOT / "sweep" / "__main__.py")
    project = {module for module in main if place(module, FLOORS) is not None}
    assert project == {"sweep.commands.cli", "sweep.commands.cli.main"}


def test_reports_use_only_the_spec_room_of_sweep_and_a_trials_encoder():
    """Reports read trials through results (MLflow), never through the engine, the tracker or a command; of
    sweep they use the spec room (a table's design is its search spaces) and, for the offline analyses of a
    trial's encoder, :mod:`sweep.run.models`."""
    used = {imported for _, imported in import_edges("reports") if place(imported, FLOORS) == FLOORS.index("sweep")}
    allowed = {module for module in used if place(module, SWEEP_ROOMS) == 0 or module.startswith("sweep.run.models")}
    assert used and used == allowed, sorted(used - allowed)


def test_the_rules_see_an_import_that_points_up(tmp_path, monkeypatch):
    """The checks above read late imports and relative imports too: a function-level import of the engine
    from the spec room is found."""
    room = tmp_path / "sweep" / "spec"
    room.mkdir(parents=True)
    (room / "probe.py").write_text("def late():\n    from ..run import engine\n    import sweep.commands.cli\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert sorted(upward(import_edges("sweep"), SWEEP_ROOMS)) == [
        "sweep.spec.probe imports sweep.commands.cli", "sweep.spec.probe imports sweep.run",
        "sweep.spec.probe imports sweep.run.engine"]


@pytest.mark.parametrize("package", FLOORS)
def test_no_module_is_over_400_lines(package):
    long = {str(path.relative_to(ROOT)): n for path in (ROOT / package).rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}


def test_the_trainers_import_neither_ray_nor_mlflow():
    """The bottom floor trains and evaluates; Ray Tune and MLflow are the sweep's (late imports included)."""
    outside = [f"{importer} imports {imported}" for importer, imported in import_edges("trainers")
               if imported.split(".")[0] in ("ray", "mlflow")]
    assert outside == []
