"""The CPU-only install note is steps a newcomer can follow, the same in the README and on the docs' home page."""

from __future__ import annotations

import re

from tests.helpers import ROOT

CPU_INDEX = "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu"


def test_the_readme_shows_the_cpu_only_install_as_numbered_steps_with_the_dali_size():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    steps = re.findall(r"^\d\. .*(?:\n   .*)*", text, flags=re.MULTILINE)
    assert any(CPU_INDEX in s and "from that one index" in s and "mismatched" in s for s in steps), "the CPU-only torch step"
    assert any('pip install -e ".[plot]"' in s and "950 MB" in s for s in steps), "what the dali extra brings, and how to leave it out"


def test_the_docs_home_page_says_to_install_both_from_that_index():
    text = " ".join((ROOT / "docs" / "index.md").read_text(encoding="utf-8").split())
    assert CPU_INDEX in text and "both from that index" in text and "950 MB" in text
