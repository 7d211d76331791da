"""What many test files share (their fixtures are in conftest.py): a mark for a test that needs a
shipped model, a page's fragments rerun as the browser reruns them, and tiny random BERTs, in memory
or saved as a checkpoint folder.

A tiny random model is what a test needs where its claim must hold for any weights (the parts of
an embedding add up, a saved model loads, a run trains): it is built in milliseconds, and a seed
makes it the same model every time."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bert_explorer import checkpoint
from bert_explorer.checkpoint import SHORT_NAMES, Loaded, LoadReport
from bert_explorer.data.corpora import tiny_corpus
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.model import BertConfig
from bert_explorer.tasks.registry import TASKS
from bert_explorer.tokenizer import WordPieceTokenizer


def rerun_fragments(at):
    """What the browser does while a run is active: rerun only the page's fragments (the
    auto-rerun of run_every) of an AppTest ``at`` already run once; a fragment that calls
    st.rerun() redraws the whole page."""
    from unittest import mock

    import streamlit.testing.v1.local_script_runner as local_runner

    ids = list(at._fragment_storage._fragments)
    assert ids, "the page has no fragment that reruns by itself"
    real = local_runner.RerunData

    def fragment_rerun(**kwargs):
        return real(**kwargs, fragment_id_queue=ids, is_auto_rerun=True)

    with mock.patch.object(local_runner, "RerunData", fragment_rerun):
        return at.run()


def needs_model(*names: str):
    """Skip the test where one of these shipped models (``checkpoint.SHORT_NAMES``) is not
    installed (a model folder missing from assets/, or its package not installed)."""
    missing = [n for n in names if SHORT_NAMES[n][0]() is None]
    return pytest.mark.skipif(bool(missing), reason=f"the shipped model {' and '.join(missing or names)} is not installed")


# ----- a random BERT over a vocabulary of given words --------------------------------------------
def tiny_bert(words: list[str], *, architecture: str = "BertForPreTraining", hidden: int = 32, layers: int = 2,
              heads: int = 2, positions: int = 64, seed: int = 0, **config):
    """(model, tokenizer): a random ``architecture`` of ``layers`` x ``hidden`` (feed-forward 2 x
    hidden) whose vocabulary is ``words``, in order (the special tokens among them), drawn from
    ``seed``; ``config`` sets other BertConfig fields (``initializer_range``, ``id2label``)."""
    tok = WordPieceTokenizer({w: i for i, w in enumerate(words)})
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_layers=layers, num_heads=heads,
                     intermediate_size=2 * hidden, max_position_embeddings=positions, **config)
    torch.manual_seed(seed)
    return checkpoint.new_model(architecture, cfg).eval(), tok


def tiny_loaded(words: list[str], **settings) -> Loaded:
    """:func:`tiny_bert` as a loaded model (what ``checkpoint.load`` returns), never saved."""
    model, tok = tiny_bert(words, **settings)
    return Loaded(model, tok, model.config, path=None, report=LoadReport())


def save_tiny_bert(folder: str | Path, words: list[str], **settings) -> Path:
    """:func:`tiny_bert` saved as a checkpoint folder; returns the folder."""
    model, tok = tiny_bert(words, **settings)
    return checkpoint.save(model, tok, folder)


def tiny_uncased(folder: str | Path, minilm_dir: Path, layers: int = 2) -> Loaded:
    """A small random BertModel (H = 32, ``layers`` layers) with the real uncased vocabulary, saved in
    ``folder`` and loaded from it: for work over the built-in corpora (their text in real WordPieces)."""
    tok = WordPieceTokenizer(Path(minilm_dir) / "vocab.txt")
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_layers=layers, num_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    return checkpoint.load(checkpoint.save(checkpoint.new_model("BertModel", config), tok, folder), "BertModel")


def sharp_uncased(folder: str | Path, minilm_dir: Path, layers: int = 2, heads: int = 4, hidden: int = 32,
                  edit=None) -> Loaded:
    """A random BertModel with the real uncased vocabulary whose queries and keys are scaled up so that
    its heads attend sharply (random small weights attend almost evenly): for measuring heads.
    ``edit(model)`` changes it further before it is saved in ``folder`` and loaded from there."""
    tok = WordPieceTokenizer(Path(minilm_dir) / "vocab.txt")
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_layers=layers, num_heads=heads,
                        intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    model = checkpoint.new_model("BertModel", config)
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.self.query.weight.mul_(40)
            layer.attention.self.key.weight.mul_(40)
        if edit is not None:
            edit(model)
    return checkpoint.load(checkpoint.save(model, tok, folder), "BertModel")


# ----- a random BERT with a vocabulary learnt on the tiny tasks ----------------------------------
def tiny_task_texts(data):
    """Every text of a tiny task's examples, whatever its task type."""
    for ex in data.examples:
        for k in ("text", "text_pair", "question", "context"):
            if ex.get(k):
                yield ex[k]
        if "tokens" in ex:
            yield " ".join(ex["tokens"])
        yield from ex.get("choices", [])


def save_tiny_base(folder: str | Path, tasks=TASKS, vocab_size: int = 400, hidden: int = 64, heads: int = 4,
                   positions: int = 128) -> str:
    """A small random BertForPreTraining (2 layers) with a WordPiece vocabulary learnt on the
    generated examples of ``tasks`` (``make_tiny(task, n=200, seed=1)``), saved in ``folder``:
    the model a fine-tuning test starts from (pre-training is not needed for the toy tasks)."""
    texts = [t for task in tasks for t in tiny_task_texts(make_tiny(task, n=200, seed=1))]
    tok = WordPieceTokenizer.train(texts, vocab_size=vocab_size)
    torch.manual_seed(0)
    model = checkpoint.new_model("BertForPreTraining", BertConfig(
        vocab_size=tok.vocab_size, hidden_size=hidden, num_layers=2, num_heads=heads, intermediate_size=2 * hidden,
        max_position_embeddings=positions))
    checkpoint.save(model, tok, folder)
    return str(folder)


def save_tiny_corpus_vocab(folder: str | Path) -> str:
    """A 300-piece WordPiece vocabulary learnt on the generated pre-training corpus, saved in
    ``folder``: runs that must compare read one (learnt once: quicker than learning one per run)."""
    WordPieceTokenizer.train((s for doc in tiny_corpus() for s in doc), 300).save(folder)
    return str(folder)


# ----- the Fine-tune page -------------------------------------------------------------------------------
def fine_tune_page_on_builtin(model_dir: str):
    """The Fine-tune page (AppTest) with ``model_dir`` picked in the sidebar and a built-in dataset as the source."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/11_Fine-tune.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = model_dir
    at.run()
    return at.radio(key="ft_source").set_value("Built-in dataset").run()


# ----- a command stopped by a signal --------------------------------------------------------------------
def signalled(argv: list[str], status_files: str, step: int, signum: int, timeout: float = 240):
    """Run ``python -m bert_explorer.cli ARGV``, send it ``signum`` once a run's status.json (the glob
    ``status_files``: a run inside an ablation, say) has reached ``step`` (0: is written), and return the finished
    process (``returncode``, ``stdout``, ``stderr``), as a person pressing Ctrl-C or a scheduler's SIGTERM
    would end it. The child's Ctrl-C is what a terminal gives: a shell script's ``cmd &`` would have
    started the test runner with SIGINT ignored, and the child would inherit that."""
    import glob
    import json
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "bert_explorer.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None:
            reached = -1  # (step 0: once a status is written, before the run's first step)
            for path in glob.glob(status_files):
                try:
                    reached = max(reached, json.loads(Path(path).read_text()).get("step") or 0)
                except (OSError, ValueError):  # not written yet, or being replaced
                    pass
            if reached >= step:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"it ended before step {step}: {proc.communicate()[1][-2000:]}"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.time()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def address_of(at) -> dict:
    """The page's address as the browser writes it for the boxes an AppTest ``at`` drew bound to it
    (``bind="query-params"``): each box whose value is not its own first value, by its key; a number as typed, an
    option by its label, several options as a list, a tick as true or false. A reload opens the page on it."""
    params = {}
    for kind in ("number_input", "selectbox", "radio", "multiselect", "checkbox", "toggle"):
        for box in getattr(at, kind):
            proto = box.proto
            if not getattr(proto, "query_param_key", ""):
                continue
            if kind == "number_input":
                value = box.value if box.value != proto.default else None
            elif kind in ("selectbox", "radio"):
                value = box.value if box.index != proto.default else None
                value = None if value is None else proto.options[box.index]
            elif kind == "multiselect":
                chosen = list(box.indices)
                value = [proto.options[i] for i in chosen] if chosen != list(proto.default) else None
            else:
                value = str(box.value).lower() if box.value != proto.default else None
            if value is not None:
                params[proto.query_param_key] = value if isinstance(value, list) else str(value)
    return params
