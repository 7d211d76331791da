"""The wheel carries what the package reads at run time (``bert_explorer/shipped.py``).

Everything else is in pyproject.toml. The models, the check set, the app's pages and its Streamlit settings
stay at the top of the repository, where the project's layout puts them; building the package copies them
into its ``_shipped/`` folder, in the same layout, so an install made apart from the checkout finds them. An
editable install reads the checkout's own and copies nothing."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (the same list as bert_explorer/shipped.py's FILES, read without importing the package and its torch)
FILES = ["run_app.py", "bench/check_set.json", ".streamlit/config.toml", "pages/*.py", "assets/*.json",
         "assets/ablation-*.md", "assets/minilm-mlm-nsp/*", "assets/bert-explorer-mini/*"]


class BuildWithShipped(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "bert_explorer" / "_shipped"
        shutil.rmtree(target, ignore_errors=True)  # (a file removed from the repository leaves no copy behind)
        for pattern in FILES:
            found = [source for source in sorted(ROOT.glob(pattern)) if source.is_file()]
            if not found:  # (a wheel without them installs, then fails at its first model or page)
                raise SystemExit(f"building BERT Explorer: nothing matches {pattern} in {ROOT}; build from the "
                                 "repository or from a source distribution made with its MANIFEST.in")
            for source in found:
                dest = target / source.relative_to(ROOT)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)


setup(cmdclass={"build_py": BuildWithShipped})
