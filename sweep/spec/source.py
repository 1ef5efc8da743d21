"""Reading a spec's YAML: PyYAML's safe loader with YAML 1.2 floats, duplicate keys refused, and every
syntax error reported as ``FILE: line L, column C: ...``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sweep.spec.problems import SpecError


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, also reading YAML 1.2 floats such as ``1e-4`` as numbers (YAML 1.1 wants
    ``1.0e-4``): learning rates are written that way. A key written twice in one mapping is refused
    (PyYAML would keep the last one silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """A mapping's own keys must be unique (keys merged in with ``<<`` may be overridden, as YAML allows)."""
    first_line: dict[str, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        line = key_node.start_mark.line + 1
        if key_node.value in first_line:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key_node.value!r} written twice (first on line {first_line[key_node.value]})",
                key_node.start_mark,
            )
        first_line[key_node.value] = line


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)$"),
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)


def read_spec_yaml(path: Path) -> Any:
    """A spec file's YAML; a missing file or bad syntax is a :class:`SpecError` naming the line."""
    if not path.is_file():
        raise SpecError([f"{path}: file not found (expected a sweep spec in YAML)"])
    try:
        return read_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise SpecError([f"{path}: {where}: not valid YAML: {getattr(error, 'problem', error)}"]) from None


def parse_override(text: str) -> tuple[str, Any]:
    """``key=value`` from ``--set``; the value is read as YAML (numbers, bools, strings)."""
    if "=" not in text:
        raise SpecError([f"--set {text}: expected key=value"])
    key, value = text.split("=", 1)
    return key.strip(), read_yaml(value) if value.strip() else ""
