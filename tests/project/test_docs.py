"""The README stays a short front door, and the MkDocs site under docs/ builds without a warning."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

README = ROOT / "README.md"

INSTALL_AND_DEMO = 'pip install -e ".[dali,plot]" && autotune run --demo'
TEST_COMMAND = 'pip install -e ".[dali,test]" && python -m pytest -q'

# The members that docs/api.md documents; each must get its own entry on the built page.
API_MEMBERS = [
    "tune",
    "load_config",
    "build_loader",
    "Config",
    "LoaderConfig",
    "TorchOptions",
    "DaliOptions",
    "Backend",
    "Outcome",
    "UserError",
    "ConfigError",
    "DatasetError",
    "SpaceError",
    "StaleConfigError",
]

_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def test_readme_is_short_and_keeps_both_commands():
    size = README.stat().st_size
    assert size <= 10_240, f"README.md is {size} bytes; keep it at most 10,240 and move details to docs/"
    text = README.read_text(encoding="utf-8")
    assert INSTALL_AND_DEMO in text
    assert TEST_COMMAND in text


def test_readme_relative_links_point_at_files():
    text = README.read_text(encoding="utf-8")
    targets = [t for t in _LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]
    assert targets, "README.md has no relative links (it should link docs/ and benchmarks/RESULTS.md)"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


@pytest.mark.slow
def test_mkdocs_build_strict_has_no_warning(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    # Not -q: with -q, mkdocs drops warnings before --strict counts them, so the build would pass anyway.
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "WARNING" not in output, output
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    absent = [name for name in API_MEMBERS if f'id="autotune.{name}"' not in api]
    assert not absent, f"docs/api.md rendered without {absent} (a re-export mkdocstrings could not resolve?)"
