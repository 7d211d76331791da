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


# ----- a wheel installed apart from the checkout -----------------------------------------------------
PAGES_UNDER_APPTEST = """
from streamlit.testing.v1 import AppTest
from bert_explorer import shipped
from bert_explorer.app.widgets import MENU
failed = []
for path, label, _ in MENU:
    at = AppTest.from_file(str(shipped.app().parent / path), default_timeout=300).run()
    if at.exception:
        failed.append((path, [e.message for e in at.exception]))
print("pages:", len(MENU), "failed:", failed)
"""


def test_the_wheel_installed_apart_from_the_checkout_finds_what_it_reads(tmp_path):
    """Built as `python -m build` builds it, from a source distribution of the repository (built from the
    checkout, a wheel had all it needed; built from the sdist, which carried none of the shipped files, it had
    no model, no page and no app), and installed with --no-deps --target (the suite's own packages give its
    dependencies: no resolution, which would fetch a CUDA torch), then run from a folder outside the checkout:
    the shipped default model, the check set, the app's home page, its pages and its settings all come from
    the installed package."""
    import os
    import re
    import subprocess
    import sys

    def run(*args, cwd=None, env=None):
        done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
        return done

    import shutil
    import tarfile

    # from the repository's files alone, as a clean clone has them: a checkout's own egg-info (SOURCES.txt,
    # written by an earlier build) would fill the sdist whatever MANIFEST.in says
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    clean = tmp_path / "clean"
    for name in listed:
        if (ROOT / name).is_file() and not name.startswith("tests/"):
            (clean / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, clean / name)
    sdist = run("-c", f"import setuptools.build_meta as b; print(b.build_sdist({str(tmp_path / 'sdist')!r}))",
                cwd=clean).stdout.split()[-1]
    with tarfile.open(tmp_path / "sdist" / sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (source,) = (tmp_path / "unpacked").iterdir()
    run("-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "wheel"))
    (wheel,) = (tmp_path / "wheel").glob("bert_explorer-*.whl")
    run("-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"), str(wheel))
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "BERT_EXPLORER_CACHE": str(tmp_path / "cache"),
           "BERT_EXPLORER_RUNS": str(tmp_path / "runs")}
    where = run("-c", "import bert_explorer.shipped as s; print(s.__file__); print(s.root())", cwd=away, env=env)
    module, root = where.stdout.split()
    assert module.startswith(str(tmp_path / "site")) and root == str(tmp_path / "site" / "bert_explorer" / "_shipped")

    probe = run("-m", "bert_explorer.cli", "probe", "mlm", "--model", "minilm-mlm-nsp", "--text",
                "the capital of france is [MASK] .", "--top-k", "3", cwd=away, env=env)
    assert "paris" in probe.stdout or "france" in probe.stdout, probe.stdout
    measured = run("-m", "bert_explorer.cli", "evaluate-pretraining", "--model", "minilm-mlm-nsp", "--sequences", "20",
                   cwd=away, env=env)
    assert re.search(r"check set: \d+/32 clozes, \d+/30 pairs", measured.stderr), measured.stderr  # the check set read
    helped = run("-m", "bert_explorer.app.serve", "--help", cwd=away, env=env)
    assert "Usage" in helped.stdout + helped.stderr
    pages = run("-c", PAGES_UNDER_APPTEST, cwd=away, env=env)
    assert "pages: 17 failed: []" in pages.stdout, pages.stdout[-3000:]
