"""Hides ``fcntl`` from every Python started with this folder on PYTHONPATH and
BERT_EXPLORER_HIDE_FCNTL=1 (tests/conftest.py sets both): ``import fcntl`` fails as it does on
Windows, so the run system takes its portable path in the test process and in every process it
starts (holders, CLI runs, background launchers) alike."""
import os
import sys

if os.environ.get("BERT_EXPLORER_HIDE_FCNTL") == "1":
    sys.modules["fcntl"] = None  # an import of a module set to None raises ImportError
