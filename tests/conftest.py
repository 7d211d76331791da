import os
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Analyses cache layer features and indexes on disk: never in the user's own cache during tests.
os.environ["BERT_EXPLORER_CACHE"] = tempfile.mkdtemp(prefix="be-cache-")


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


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
