"""Where the files the package reads at run time are: inside the installed package, or in the checkout.

The shipped models and the pre-training recipes (``assets/``), the check set (``bench/check_set.json``), the
app's pages (``run_app.py``, ``pages/``) and its Streamlit settings (``.streamlit/config.toml``) live at the top
of the repository, where the project's layout puts them. A wheel carries copies of them in the package's
``_shipped/`` folder, in the same layout (``setup.py`` puts them there), so that an install made apart from
the checkout (pip, pipx, uv tool, a Docker image) finds them; an editable install and a checkout read the
repository's own. This module imports nothing of the package: every module may use it.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
INSIDE = "_shipped"  # the folder of the package that holds them in a wheel


def root() -> Path:
    """The folder that holds ``assets/``, ``bench/check_set.json``, ``run_app.py`` and ``pages/``."""
    inside = PACKAGE / INSIDE
    return inside if inside.is_dir() else PACKAGE.parent


def assets() -> Path:
    return root() / "assets"


def check_set() -> Path:
    return root() / "bench" / "check_set.json"


def app() -> Path:
    """The app's home page; its pages are in ``pages/`` beside it."""
    return root() / "run_app.py"


def streamlit_config() -> Path:
    return root() / ".streamlit" / "config.toml"


# What a wheel carries, from the repository's root (setup.py copies these; tests/test_packaging.py checks them)
FILES = ["run_app.py", "bench/check_set.json", ".streamlit/config.toml", "pages/*.py", "assets/*.json",
         "assets/ablation-*.md", "assets/minilm-mlm-nsp/*", "assets/bert-explorer-mini/*"]
