"""trainers/ has no import circle, and imports inside functions only to keep heavy packages out of light imports.

Every import statement of a module of trainers/ counts: at module level, under ``if TYPE_CHECKING:`` (a circle of
type names is a circle of knowledge all the same) and inside functions. The graph of trainers' modules they draw
has no circle. An import of a trainers module inside a function (a late import) is listed below with why it is
late; a late import added to break a circle (as ``SentenceEncoder.from_config`` once imported the method registry)
fails here twice: it closes a circle, and it is not listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

TRAINERS = Path(__file__).resolve().parents[1] / "trainers"

LATE_IMPORTS = {
    ("trainers.suites.senteval", "trainers.suites.classifier"): "torch and scikit-learn, when a suite computes",
    ("trainers.suites.nli", "trainers.suites.classifier"): "torch and scikit-learn, when a suite computes",
}
"""(importer, imported) -> why the import waits for the function that needs it."""


def module_name(path: Path) -> str:
    parts = path.relative_to(TRAINERS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in TRAINERS.rglob("*.py")}


def imported(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The trainers modules an import statement of ``importer`` names (``from P import M`` names P.M when it is a
    module, else P)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = importer.split(".")
            if MODULES[importer].name != "__init__.py":
                package = package[:-1]
            base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    return [name for name in names if name in MODULES]


def imports() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """Every module's imported trainers modules (all its import statements), and the late (importer, imported)."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    late: set[tuple[str, str]] = set()
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_functions = {id(node) for function in ast.walk(tree)
                        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for node in ast.walk(function)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(node, name):
                    graph[name].add(target)
                    if id(node) in in_functions:
                        late.add((name, target))
    return graph, late


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself): Tarjan's."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(component) > 1 or module in graph[module]:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_trainers_has_no_import_circle():
    graph, _ = imports()
    assert len(graph) > 50  # the walk found trainers' modules
    assert circles(graph) == []


def test_the_only_late_imports_are_those_that_keep_heavy_packages_out():
    _, late = imports()
    assert late == set(LATE_IMPORTS)
