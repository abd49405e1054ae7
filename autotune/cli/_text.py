"""Text from a study or a file, made safe for the terminal: no Rich markup, no control characters."""

from __future__ import annotations

from rich.text import Text

from autotune.dataset.paths import display


def cell(value: object) -> Text:
    """``value`` as a table cell or title: printed as it is (``[/]`` is not markup), control characters as ``\\xNN``."""
    return Text(display(value))
