import os
import shutil
import sys
import tempfile
from pathlib import Path

if os.environ.get("BERT_EXPLORER_HIDE_FCNTL") == "1":
    # No fcntl, as on Windows, here and in every Python the tests start (tests/nofcntl/sitecustomize.py):
    # the run system takes its portable path everywhere at once. Before anything imports the package.
    sys.modules["fcntl"] = None
    NOFCNTL = str(Path(__file__).parent / "nofcntl")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [NOFCNTL, os.environ.get("PYTHONPATH")]))

import pytest  # noqa: E402
import torch  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Analyses cache layer features and indexes on disk: never in the user's own cache during tests.
CACHE = tempfile.mkdtemp(prefix="be-cache-")
os.environ["BERT_EXPLORER_CACHE"] = CACHE
# Every CPU training here runs with every CPU lever on (the strictest check that none changes what a run
# learns), and no test pays for measuring them; tests/test_cpu_levers.py measures them for real.
os.environ.setdefault("BERT_EXPLORER_CPU_LEVERS", "all")

import shared  # noqa: E402  (after the settings above: it imports the package)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # The README's command runs the suite in two worker processes on a 2-core machine: one thread each.
    # Two workers of two OpenMP threads each on two cores spin and wait on each other.
    torch.set_num_threads(1)


def pytest_unconfigure(config):
    shutil.rmtree(CACHE, ignore_errors=True)  # (megabytes a session: a machine that runs the suite daily fills up)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def runs_root(tmp_path, monkeypatch):
    """A runs folder of the test's own: the app and the runs it starts never touch ./runs."""
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setenv("BERT_EXPLORER_RUNS", str(root))
    monkeypatch.delenv("BERT_EXPLORER_GPU_QUEUE", raising=False)
    return root


@pytest.fixture(scope="session")
def minilm_dir():
    from bert_explorer.checkpoint import resolve

    return resolve("minilm")


# ----- tiny models several files train from (the builders and the shipped-model mark: shared.py) -----
@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory):
    """One WordPiece vocabulary (300 pieces, the generated corpus) for every pre-training of the
    session that must be compared with another: learnt once, quicker than once per run."""
    return shared.save_tiny_corpus_vocab(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models, many small calls: one thread each avoids OpenMP spinning on a busy 2-core machine
    (a module asks for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def base_model(tmp_path_factory):
    """A small random BERT (2 layers, H=64) with a vocabulary learnt on every tiny task, saved:
    what the fine-tuning tests start from (pre-training is not needed for the toy tasks)."""
    return shared.save_tiny_base(tmp_path_factory.mktemp("base"))


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# ----- what is drawn is tested: every chart any page test makes a page draw --------------------------
CHARTS_CHECKED = {"renders": 0, "charts": set()}


@pytest.fixture(autouse=True)
def _every_chart_drawn_is_checked(monkeypatch):
    """Each AppTest run in any test reads the charts the page sent and checks them as a person
    would (tests/figcheck.py): a page test that draws a chart tests what is drawn too."""
    try:
        import figcheck
        from streamlit.testing.v1 import AppTest
    except ImportError:  # the GPU machine has no app packages: no page can be drawn there either
        return

    original = AppTest.run

    def run(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        for fig in figcheck.figures(self):
            figcheck.check(fig)
            named = figcheck.names_read_as_numbers(fig, types=("bar", "heatmap", "image"))
            assert not named, "\n".join(named)
            CHARTS_CHECKED["renders"] += 1
            CHARTS_CHECKED["charts"].add(fig.title)
        return out

    monkeypatch.setattr(AppTest, "run", run)


def pytest_terminal_summary(terminalreporter):
    if CHARTS_CHECKED["renders"]:
        terminalreporter.write_line(f"figure checker: {CHARTS_CHECKED['renders']} drawn charts checked "
                                    f"({len(CHARTS_CHECKED['charts'])} distinct chart titles)")
