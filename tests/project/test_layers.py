"""The package's layers hold: lint-imports keeps every contract in pyproject.toml, and the contracts name
every module of every sub-package, so a new module cannot slip in outside them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import tomllib

from tests.helpers import ROOT


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_lint_imports_keeps_every_contract():
    pytest.importorskip("importlinter.cli")
    # in a child process: lint-imports sets up logging of its own
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_no_import_circle_anywhere():
    contracts = _contracts()
    assert any(c["type"] == "acyclic_siblings" and c["ancestors"] == ["autotune"] for c in contracts)


def test_the_layers_name_every_module_of_every_sub_package():
    named: set[str] = set()
    for c in contracts if (contracts := _contracts()) else ():
        for layer in c.get("layers", ()):
            named.update(m.strip() for m in re.split(r"[|:]", layer))
    missing = []
    for path in sorted((ROOT / "autotune").rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) < 3:  # top-level modules: the next test
            continue
        mod = ".".join(parts)
        # a module is covered when it or a package above it (below autotune) is named in a layer
        if not any(".".join(parts[:i]) in named for i in range(2, len(parts) + 1)):
            missing.append(mod)
    assert missing == [], f"modules outside every layers contract: {missing}"


def test_the_top_contract_lists_each_sub_package():
    top = next(c for c in _contracts() if c["name"] == "the data flow, top to bottom")
    layered = {m.strip() for layer in top["layers"] for m in re.split(r"[|:]", layer)}
    packages = {f"autotune.{p.parent.name}" for p in (ROOT / "autotune").glob("*/__init__.py")}
    modules = {f"autotune.{p.stem}" for p in (ROOT / "autotune").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert packages | modules <= layered, f"not in the top-level layers: {sorted((packages | modules) - layered)}"
