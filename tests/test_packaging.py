"""What an install ships: the package, never the repository's tools.

The GPU kit (``tools/gpu_kit``) serves only this project's own GPU runs and is run from the
repository. It imports the package; were the package to import it, an installed copy would reach
for a module it does not have."""
import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_s_packages_are_the_package_only():
    setuptools = pytest.importorskip("setuptools")  # what pyproject.toml's build backend finds them with
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    # pyproject's find looks for namespace packages too unless told otherwise (folders without __init__.py)
    finder = setuptools.find_namespace_packages if find.get("namespaces", True) else setuptools.find_packages
    packages = finder(str(ROOT / find.get("where", ["."])[0]), include=find.get("include", ["*"]),
                      exclude=find.get("exclude", []))
    assert {"bert_explorer", "bert_explorer.experiments", "bert_explorer.data"} <= set(packages)
    assert [p for p in packages if p.split(".")[0] != "bert_explorer"] == []
    assert (ROOT / "tools" / "gpu_kit" / "__main__.py").is_file()  # there, and left out


def test_no_module_of_the_package_imports_the_tools():
    importing = []
    for path in sorted((ROOT / "bert_explorer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            importing += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "tools"]
    assert importing == []
