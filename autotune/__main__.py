from autotune.cli import entry

entry()
