"""The Hub's names: the paper's BERTs (:data:`CATALOGUE`), the ids a person types for a model, the files loading
a BERT reads, the forms a server's names must have before any of them names a path, and the errors said of them.

Devlin et al. released BERT-Base and BERT-Large (uncased and cased, and a multilingual Base), and Turc et al.
(2019) 24 smaller BERTs, L in {2, 4, 6, 8, 10, 12} layers by H in {128, 256, 512, 768}; all are on the Hugging
Face Hub under Apache-2.0. Nothing here asks a server anything (``hub_server.py`` does; ``hub.py`` keeps what it
fetches).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

HF_PREFIX = "hf:"
LICENCE = "Apache-2.0"


@dataclass(frozen=True)
class HubModel:
    """One model of the catalogue: its Hub id, what the paper calls it, its shape and its size."""

    repo_id: str
    title: str
    layers: int
    hidden: int
    vocab_size: int = 30522

    @property
    def heads(self) -> int:
        return self.hidden // 64  # A = H/64 for all of them (Devlin et al. Section 3; Turc et al.)

    @property
    def parameters(self) -> int:
        """Encoder, pooler and both pre-training heads (the MLM decoder tied to the word embeddings):
        BERT-Base counts 110 M, as the paper says."""
        V, H, L = self.vocab_size, self.hidden, self.layers
        embeddings = (V + 512 + 2) * H + 2 * H
        encoder = L * (12 * H * H + 13 * H)
        return embeddings + encoder + (H * H + H) + (H * H + 3 * H + V) + (2 * H + 2)

    @property
    def download_bytes(self) -> int:
        """About what a download fetches: 4 bytes a parameter (float32 weights; the vocabulary and config
        add well under a megabyte). BERT-Base: about 440 MB, as its model.safetensors."""
        return 4 * self.parameters


def _miniature(layers: int, hidden: int) -> HubModel:
    names = {(2, 128): "BERT-Tiny", (4, 256): "BERT-Mini", (4, 512): "BERT-Small", (8, 512): "BERT-Medium",
             (12, 768): "BERT-Base size"}
    title = f"{names.get((layers, hidden), 'miniature')} (L={layers}, H={hidden}), uncased"
    return HubModel(f"google/bert_uncased_L-{layers}_H-{hidden}_A-{hidden // 64}", title, layers, hidden)


CATALOGUE: dict[str, HubModel] = {m.repo_id: m for m in [
    HubModel("google-bert/bert-base-uncased", "BERT-Base, uncased", 12, 768),
    HubModel("google-bert/bert-large-uncased", "BERT-Large, uncased", 24, 1024),
    HubModel("google-bert/bert-base-cased", "BERT-Base, cased", 12, 768, vocab_size=28996),
    HubModel("google-bert/bert-large-cased", "BERT-Large, cased", 24, 1024, vocab_size=28996),
    HubModel("google-bert/bert-base-multilingual-cased", "BERT-Base, multilingual cased (104 languages)", 12, 768,
             vocab_size=119547),
    *[_miniature(L, H) for L in (2, 4, 6, 8, 10, 12) for H in (128, 256, 512, 768)],
]}
# The names the models were first published under; the Hub redirects them to the ids above, and
# mapping them here keeps one copy in the cache whichever name is typed.
LEGACY = {m.repo_id.split("/", 1)[1]: m.repo_id for m in CATALOGUE.values() if m.repo_id.startswith("google-bert/")}

# What loading a BERT reads (checkpoint.load), in the order they are fetched; the weights are one of two.
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json")

# huggingface_hub's own rule for an id (utils.validate_repo_id), ASCII only: "name" or "owner/name",
# letters, digits, "-", "_", "." inside, at most 96 characters a part, no "--" or "..", no ".git" end.
ID_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"(?:{ID_PART}/)?{ID_PART}")
COMMIT = re.compile(r"[0-9a-f]{40}")
CONTENT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's sha1 of a small file, sha256 of an LFS one


class HubError(Exception):
    """A hub model cannot be had: one sentence that says what to do."""


class DamagedFile(HubError):
    """A file the server sent that does not hold what its name promises (a weights header that lies)."""


class DownloadCancelled(HubError):
    """The user cancelled; what was fetched stays and the next download goes on from it."""


# ----- names ------------------------------------------------------------------------------------
def canonical(name: str) -> str:
    """The Hub id a name stands for: ``hf:`` dropped, a legacy name mapped (``bert-base-uncased`` ->
    ``google-bert/bert-base-uncased``); any other id is kept as typed."""
    s = str(name).strip()
    s = s[len(HF_PREFIX):] if s.startswith(HF_PREFIX) else s
    s = LEGACY.get(s, s)
    if len(s) > 200 or not _REPO_ID.fullmatch(s) or "--" in s or ".." in s or s.endswith(".git"):
        raise HubError(f"{ascii(str(name)[:80])} is not a Hugging Face model id; write it as owner/name in "
                       "letters, digits, '-', '_' and '.', e.g. google-bert/bert-base-uncased")
    return s


def suggestion(name: str, others: tuple[str, ...] = ()) -> str:
    """"; did you mean bert-base-uncased?" for a name one typo from one of the paper's (or of ``others``),
    else ""."""
    close = difflib.get_close_matches(name, [n for n in (*LEGACY, *CATALOGUE, *others) if n != name], n=1, cutoff=0.85)
    return f"; did you mean {close[0]}?" if close else ""


def model_name(repo_id: str) -> str:
    """The name that opens the downloaded ``repo_id`` as a model (what the pages load): the paper's own by
    its id, any other as ``hf:<id>`` (a bare owner/name is read as a folder)."""
    return repo_id if is_hub_name(repo_id) else HF_PREFIX + repo_id


def is_hub_name(name: str) -> bool:
    """Does ``name`` ask for a hub model (``hf:<id>``, or a catalogue or legacy name)?"""
    s = str(name)
    return s.startswith(HF_PREFIX) or s in CATALOGUE or s in LEGACY

def not_here(name: str, why: str) -> str:
    """What to do when a hub model is not on this machine and cannot be fetched now."""
    return (f"{name} is not on this machine yet and {why}: run `bert-explorer download {name}` where there is "
            "internet (it goes to the Hugging Face cache, HF_HOME), or copy a downloaded model's folder here and "
            "give its path")

