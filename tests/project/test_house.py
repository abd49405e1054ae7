"""The house rules the package keeps: what differs between kinds of loader lives with the kinds, units stay small,
and every ignore says why."""

from __future__ import annotations

import ast
import re

from tests.helpers import ROOT

PACKAGE = ROOT / "autotune"
KINDS = {"torch", "dali"}
#: outside autotune/loaders/ and autotune/config/, at most this many lines may name a kind of loader
MAX_BACKEND_SITES = 8


def _sources():
    for p in sorted(PACKAGE.rglob("*.py")):
        yield p, p.read_text(encoding="utf-8")


def _names_a_kind(node: ast.AST) -> bool:
    """Whether a node names a kind of loader: ``Backend.DALI``, a comparison with "torch" or "dali", a ``.dali`` or
    ``.torch`` section, ``dali_device``, ``{"backend": "torch"}``, ``params.get("backend", ...)``."""
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "Backend":
            return True
        return node.attr in KINDS and not (isinstance(node.value, ast.Name) and node.value.id == "nvidia")
    if isinstance(node, ast.Compare):
        return any(isinstance(c, ast.Constant) and c.value in KINDS for c in [node.left, *node.comparators])
    if isinstance(node, ast.Constant):
        return node.value == "dali_device"
    if isinstance(node, ast.keyword):
        return node.arg == "dali_device"
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "backend" and isinstance(v, ast.Constant) and v.value in KINDS
                   for k, v in zip(node.keys, node.values, strict=True))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) == 2:
        return isinstance(node.args[0], ast.Constant) and node.args[0].value == "backend"
    return False


def backend_sites() -> dict[str, list[int]]:
    sites: dict[str, list[int]] = {}
    for p, src in _sources():
        if p.relative_to(PACKAGE).parts[0] in ("loaders", "config"):
            continue
        lines = sorted({getattr(n, "lineno", 0) or getattr(getattr(n, "value", None), "lineno", 0) for n in ast.walk(ast.parse(src)) if _names_a_kind(n)})
        if lines:
            sites[str(p.relative_to(ROOT))] = lines
    return sites


def test_what_differs_between_kinds_of_loader_lives_with_the_kinds():
    sites = backend_sites()
    assert sum(map(len, sites.values())) <= MAX_BACKEND_SITES, f"lines naming a kind of loader outside loaders/ and config/: {sites}"


def test_no_function_over_100_lines_and_no_module_over_600():
    long_functions, large_modules = [], []
    for p, src in _sources():
        name = p.relative_to(ROOT)
        if len(src.splitlines()) > 600:
            large_modules.append(f"{name}: {len(src.splitlines())} lines")
        for n in ast.walk(ast.parse(src)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno is not None and n.end_lineno - n.lineno + 1 > 100:
                long_functions.append(f"{name}:{n.lineno} {n.name}: {n.end_lineno - n.lineno + 1} lines")
    assert not long_functions and not large_modules, long_functions + large_modules


def test_every_ignore_says_why():
    """A ``# noqa: CODE`` or ``# type: ignore[code]`` is followed by its reason."""
    bare = []
    for folder in (PACKAGE, ROOT / "tests"):
        for p in sorted(folder.rglob("*.py")):
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                for m in re.finditer(r"#\s*(noqa(?::\s*[A-Z]+\d+(?:,\s*[A-Z]+\d+)*)?|type:\s*ignore(?:\[[\w\-, ]+\])?)(.*)$", line):
                    if not re.search(r"[A-Za-z]{3,}", m.group(2)):
                        bare.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bare, "\n".join(bare)
