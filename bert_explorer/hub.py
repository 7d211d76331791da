"""The paper's own BERTs from the Hugging Face Hub: named, downloaded once, opened offline after.

Devlin et al. released BERT-Base and BERT-Large (uncased and cased, and a multilingual Base), and
Turc et al. (2019) 24 smaller BERTs, L in {2, 4, 6, 8, 10, 12} layers by H in {128, 256, 512, 768};
all are on the Hugging Face Hub under Apache-2.0 (:data:`CATALOGUE`). A user's explicit choice
(``hf:<id>``, a catalogue name, ``bert-explorer download NAME``) fetches one: only what loading needs
(config.json, the weights as model.safetensors or else pytorch_model.bin, vocab.txt and the tokenizer
files; never the TF, Flax, ONNX, CoreML or Rust copies beside them), into the standard Hugging Face
cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), in the layout
transformers reads too (``models--org--name/{blobs,snapshots/<commit>,refs/main}``), so a machine
keeps one copy for both. A model in the cache opens with no network at all: the cache is read first.

Downloads are plain HTTP(S) requests to the Hub's API (the routes huggingface_hub's own downloader
uses; ``$HF_ENDPOINT`` points them elsewhere, as the tests' stand-in does): a file is written to
``blobs/<etag>.incomplete`` and renamed when whole, and an interrupted download goes on from the bytes
already there with an HTTP ``Range`` request, within the same call and in the next one, never from
zero. huggingface_hub's own downloader restarts a file from byte 0 in a new call, which for BERT-Large
(1.34 GB) is the difference between a minute and a lost lesson.

What a server sends is input, as an upload is: ``$HF_ENDPOINT`` may name any mirror, over plain HTTP
too. So nothing it says names a path before it is checked: the revision must be a commit id (40 hex
digits) and an ETag a content hash (40 or 64 hex digits) before either becomes a folder or a file
name, every path written is checked to lie under the model's cache folder, every answer is read up
to a bound, a file is never read past the size its HEAD announced, and a blob takes its name only
once its bytes hash to it. A server that breaks a rule gets one sentence that names it, and nothing
of its answer is kept.

Nothing here runs unless a user asks for a hub model: no default and no test reaches the real Hub.
"""
from __future__ import annotations

import difflib
import filecmp
import hashlib
import http.client
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

from . import atomic, file_lock, full_disk
from .model.config import BertConfig

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
CHUNK = 1 << 20
RETRIES = 3  # a dropped connection is taken up again this many times, from where it stopped
# The most a server may announce for one file, checked before a byte is fetched: the weights of the
# largest BERT this app loads (BERT-Large is 1.34 GB; the same bound as an uploaded model), and for
# config.json and the tokenizer files far more than any real one (multilingual tokenizer.json: 2 MB).
MAX_WEIGHTS_BYTES = 2 * 1024**3
MAX_SMALL_FILE_BYTES = 32 * 1024**2
MAX_JSON_BYTES = 16 * 1024**2  # an API answer: a repository's file list, read up to this and no further
# An API answer, or a file's headers, whole within this however its bytes come: the 30-60 s timeout of each
# read does not end a server that sends a byte every 29 s (a file's own bytes show their progress, and a
# download can be cancelled: they have no deadline)
ANSWER_DEADLINE_S = 120.0
# huggingface_hub's own rule for an id (utils.validate_repo_id), ASCII only: "name" or "owner/name",
# letters, digits, "-", "_", "." inside, at most 96 characters a part, no "--" or "..", no ".git" end.
_ID_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"(?:{_ID_PART}/)?{_ID_PART}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_CONTENT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git's sha1 of a small file, sha256 of an LFS one


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


# ----- the cache ----------------------------------------------------------------------------------
def cache_root() -> Path:
    """The Hugging Face cache, by huggingface_hub's own rules, read now (not at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def repo_folder(repo_id: str) -> Path:
    return cache_root() / ("models--" + repo_id.replace("/", "--"))


def local_copy(name: str) -> Path | None:
    """The cached snapshot of a hub model that holds everything loading needs, or None."""
    try:
        folder = repo_folder(canonical(name))
    except HubError:  # not an id at all: nothing of it can be here
        return None
    try:
        commit = (folder / "refs" / "main").read_text().strip()
    except (OSError, ValueError):
        return None
    if not _COMMIT.fullmatch(commit):  # not written by this app nor by huggingface_hub: never a path
        return None
    snapshot = folder / "snapshots" / commit
    has = lambda f: (snapshot / f).is_file()  # noqa: E731 (a broken link to a missing blob is not a file)
    if has("config.json") and any(map(has, WEIGHTS)) and (has("vocab.txt") or has("tokenizer.json")):
        return snapshot
    return None


def bytes_here(name: str) -> int:
    """Bytes of a hub model's files on this machine, whole or in part (what a download goes on from)."""
    try:
        blobs = repo_folder(canonical(name)) / "blobs"
        return sum(p.stat().st_size for p in blobs.iterdir() if p.is_file()) if blobs.is_dir() else 0
    except (HubError, OSError):
        return 0


DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def host() -> str:
    """The server ``endpoint()`` names, as a person reads it: its host (and port), without the scheme, a
    user or password, or a path."""
    where = urlsplit(endpoint())
    try:
        port = where.port
    except ValueError:  # a port that is not a number: the host alone
        port = None
    return (where.hostname or "the address HF_ENDPOINT names") + (f":{port}" if port else "")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def not_here(name: str, why: str) -> str:
    """What to do when a hub model is not on this machine and cannot be fetched now."""
    return (f"{name} is not on this machine yet and {why}: run `bert-explorer download {name}` where there is "
            "internet (it goes to the Hugging Face cache, HF_HOME), or copy a downloaded model's folder here and "
            "give its path")


# ----- opening and downloading ---------------------------------------------------------------------------
Progress = Callable[[int, int, str], None]  # (bytes done, bytes in all, the file being fetched)


def open_model(name: str, progress: Progress | None = None, cancel: Callable[[], bool] | None = None) -> Path:
    """The folder of a hub model: the cached copy when there is one (no network asked), else downloaded."""
    repo_id = canonical(name)
    copy = local_copy(repo_id)
    return copy if copy is not None else download(repo_id, progress, cancel)


def download(name: str, progress: Progress | None = None, cancel: Callable[[], bool] | None = None) -> Path:
    """Fetch what loading needs of a hub model into the cache and return its snapshot folder. A file
    already whole is not fetched again; one cut short goes on from its last byte."""
    repo_id = canonical(name)
    if offline():
        raise HubError(not_here(repo_id, "this machine is set to work offline (HF_HUB_OFFLINE)"))
    info = _json(f"{endpoint()}/api/models/{_quoted(repo_id)}/revision/main", repo_id)
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(siblings, list) or not all(isinstance(x, dict) for x in siblings):
        raise HubError(f"the server at {endpoint()} sent no list of {repo_id}'s files; try again later, or "
                       "check HF_ENDPOINT")
    sha, names = info.get("sha"), {x.get("rfilename") for x in siblings}
    if not sha:
        raise HubError(f"the Hub's answer about {repo_id} names no revision; try again later")
    if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
        raise HubError(f"the server at {endpoint()} names {repo_id}'s revision {ascii(str(sha)[:60])}, not a "
                       "commit id (40 hex digits), so nothing was written; check HF_ENDPOINT")
    weights = next((w for w in WEIGHTS if w in names), None)
    if weights is None or "config.json" not in names:
        raise HubError(f"{repo_id} holds no BERT weights this app reads (config.json with model.safetensors or "
                       "pytorch_model.bin); choose a BERT repository such as google-bert/bert-base-uncased")
    if not names & {"vocab.txt", "tokenizer.json"}:
        raise HubError(f"{repo_id} has no WordPiece vocabulary (vocab.txt or tokenizer.json); choose a BERT "
                       "repository that ships its tokenizer")
    files = [f for f in ("config.json", weights, *TOKENIZER_FILES) if f in names]
    plan = [(f, *_describe(f"{endpoint()}/{_quoted(repo_id)}/resolve/{sha}/{quote(f)}", repo_id, f)) for f in files]
    return fetch_plan(repo_folder(repo_id), repo_id, repo_id, sha, "main", plan, progress, cancel,
                      check={"config.json": lambda path: _check_config(path, repo_id),
                             "model.safetensors": lambda path: _check_weights(path, repo_id)})


def _check_weights(path: Path, repo_id: str) -> None:
    """A model.safetensors whose header reads whole: names, shapes and offsets that fit the file (a header
    that lied was refused only when the model was opened, with a remedy for a file the user wrote, and the
    copy counted as downloaded). Raises :class:`DamagedFile`; the download removes the file where it fetched
    it (kept, every later try would read it back whole), never one that was in the cache before."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as f:
            for k in f.keys():
                f.get_slice(k).get_shape()
    except (SafetensorError, ValueError) as e:  # the header does not hold (not an OSError reading it)
        raise DamagedFile(f"the server at {endpoint()} sent {repo_id}'s model.safetensors damaged "
                          f"({str(e).splitlines()[0][:120]}), so it was not kept; try again later, or check "
                          "HF_ENDPOINT") from None


def _check_config(path: Path, repo_id: str) -> None:
    """A repository's config.json, fetched first, before its weights: a JSON object of a BERT's settings (a
    GPT-2's weights, up to 2 GiB, were fetched before "only BERT checkpoints are supported" was said), whose
    sizes BertConfig takes (hidden_size 10^9 was refused only once the weights were here, and the model then
    counted as downloaded). The sizes are checked against the weights when the model is opened."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8")) if path.stat().st_size <= 1_000_000 else None
    except (ValueError, RecursionError):
        raw = None
    if not isinstance(raw, dict):
        raise HubError(f"the config.json of {repo_id} is not a JSON object of a model's settings, so its weights "
                       "were not fetched; choose a BERT repository such as google-bert/bert-base-uncased")
    if raw.get("model_type", "bert") != "bert":
        raise HubError(f"{repo_id} is a {ascii(str(raw.get('model_type'))[:40])} model, not a BERT, so its weights "
                       "were not fetched; choose a BERT repository such as google-bert/bert-base-uncased")
    try:
        BertConfig.from_hf_dict(raw)
    except (ValueError, TypeError) as e:
        raise HubError(f"the config.json of {repo_id} is not a BERT this app can build ({str(e)[:200]}), so its "
                       "weights were not fetched; choose another repository") from None


# what a download's progress names as its file while another download of the same repository runs
WAITING = "waiting for another download of it to end"


def fetch_plan(folder: Path, repo_id: str, what: str, sha: str, revision: str, plan: list[tuple[str, str, int, str]],
               progress: Progress | None, cancel: Callable[[], bool] | None,
               check: dict[str, Callable[[Path], None]] | None = None) -> Path:
    """Fetch ``plan`` ((file, ETag, size, URL) each, as ``_describe`` checked them) into the cache folder
    ``folder`` of a repository: room for it said before a byte is fetched, each file resumed where it
    stopped, linked into ``snapshots/<sha>/`` and the revision's ref written last. Returns the snapshot.
    ``check``: {file: what refuses it (HubError)} once fetched, before the files after it in the plan."""
    try:  # (HF_HOME naming a file, or a folder this user cannot write: a traceback from the first mkdir)
        (folder / "blobs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if full_disk.is_disk_full(e):
            raise
        raise HubError(f"the Hugging Face cache {cache_root()} cannot hold {what} ({e.strerror or e}); point HF_HOME "
                       "(or HF_HUB_CACHE) at a folder you can write") from None
    # one download of a repository at a time (the panel's and a command's together fetched the weights twice
    # each): a second waits, then finds the files whole and fetches nothing again
    lock_path = _inside(folder, folder / ".download.lock")
    lock = file_lock.acquire_file(lock_path, wait=False)
    while lock is None:
        if cancel is not None and cancel():
            raise DownloadCancelled(f"the download of {what} was cancelled while another download of it ran")
        if progress is not None:
            progress(0, sum(size for _, _, size, _ in plan), WAITING)
        time.sleep(0.5)
        lock = file_lock.acquire_file(lock_path, wait=False)
    try:
        return _fetch_all(folder, repo_id, what, sha, revision, plan, progress, cancel, check)
    finally:
        file_lock.release(lock)


STALE_PART_S = 600.0  # a part untouched this long is no download running now (another tool's, into this cache)


OUR_PARTS = ".bert-explorer-parts.json"  # in a repository's cache folder: the parts this app started


def _our_parts(folder: Path) -> set[str]:
    """The content hashes of the parts this app started here (anything else in the record is not one: a
    record that names a path is never followed)."""
    try:
        kept = json.loads((folder / OUR_PARTS).read_text())
    except (OSError, ValueError):
        return set()
    return {x for x in kept if isinstance(x, str) and _CONTENT_HASH.fullmatch(x)} if isinstance(kept, list) else set()


def _note_part(folder: Path, etag: str, started: bool) -> None:
    """Record (or, once whole or gone, forget) a part this app started fetching."""
    parts = _our_parts(folder)
    parts = parts | {etag} if started else parts - {etag}
    try:
        atomic.write_text(folder / OUR_PARTS, json.dumps(sorted(parts)))
    except OSError:
        pass  # (no record: a stale part of ours then stays, as another tool's does)


def _drop_stale_parts(folder: Path, wanted: set[str]) -> None:
    """Remove the parts (``blobs/<etag>.incomplete``) this app started of files this download no longer asks
    for: a file whose ETag changed between two tries (a new commit, a mirror) left each try's part behind,
    never resumed, and counted as the model's bytes here (271 kB "partly here" of a 182 kB file). Another
    tool's parts (huggingface_hub names them alike: an interrupted download of a file this app does not
    fetch) are not this app's to remove, nor one written to in the last :data:`STALE_PART_S`."""
    now = time.time()
    for etag in _our_parts(folder) - wanted:
        part = folder / "blobs" / f"{etag}.incomplete"
        try:
            if now - part.stat().st_mtime > STALE_PART_S:
                part.unlink()
                _note_part(folder, etag, started=False)
        except FileNotFoundError:
            _note_part(folder, etag, started=False)
        except OSError:
            pass  # (not ours to remove after all: it stays, as it was)


def _fetch_all(folder: Path, repo_id: str, what: str, sha: str, revision: str, plan, progress, cancel, check) -> Path:
    """:func:`fetch_plan`'s work, its lock held."""
    _drop_stale_parts(folder, {etag for _, etag, _, _ in plan})
    total = sum(size for _, _, size, _ in plan)
    left = sum(size - _have(folder, etag) for _, etag, size, _ in plan)
    free = full_disk.free_bytes(cache_root())
    if left * 1.05 + (1 << 20) > free:  # room for the files and their cache entries, said before a byte is fetched
        raise full_disk.DiskFull(full_disk.sentence(
            cache_root(), f"download {what}", "free some space, or point HF_HOME at a disk with room, then "
            "download it again", needed=left * 1.05 + (1 << 20), basis="its files and a twentieth more"))
    had = [_have(folder, etag) for _, etag, _, _ in plan]  # bytes already here, file by file
    snapshot = folder / "snapshots" / sha
    with full_disk.saving(cache_root(), f"download {what}", "free some space, then download it again (what "
                                                           "was fetched is kept)"):
        for i, (f, etag, size, url) in enumerate(plan):
            before = sum(sz for _, _, sz, _ in plan[:i]) + sum(had[i + 1:])  # the other files' bytes

            def step(n, f=f, before=before):
                if progress is not None:
                    progress(before + n, total, f)
            blob = _fetch(url, _inside(folder, folder / "blobs" / etag), size, repo_id, f, step, cancel)
            if check and f in check:
                try:
                    check[f](blob)
                except DamagedFile:
                    if had[i] < size:  # fetched by this download (one already here is another tool's to judge)
                        blob.unlink(missing_ok=True)
                    raise
            _link(_inside(folder, snapshot / f), blob)
        ref = _inside(folder, folder / "refs" / revision)
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(sha)
    return snapshot


def _inside(folder: Path, path: Path) -> Path:
    """``path``, refused unless it lies under the model's cache folder once ``..`` and the like are
    resolved: the last guard between a server's words and the user's files."""
    root = os.path.normpath(os.path.abspath(folder))
    where = os.path.normpath(os.path.abspath(path))
    if os.path.commonpath([root, where]) != root or where == root:
        raise HubError(f"the server at {endpoint()} asked to write {ascii(str(path))[:120]}, outside the model's "
                       f"cache folder {folder}, so nothing was written; check HF_ENDPOINT")
    return path


def _quoted(repo_id: str) -> str:
    return quote(repo_id, safe="/")


def _request(url: str, method: str = "GET", headers: dict | None = None) -> urllib.request.Request:
    headers = {"User-Agent": "bert-explorer", **(headers or {})}
    token = _token()
    if token and _same_host(url, endpoint()):  # the user's token goes to the Hub they named, never to a CDN
        headers["Authorization"] = f"Bearer {token}"  # or another host a redirect names (huggingface_hub's rule)
    return urllib.request.Request(url, method=method, headers=headers)


def _token() -> str | None:
    """The user's Hugging Face token (for gated or private repositories), as huggingface_hub keeps it."""
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    try:
        from huggingface_hub import get_token
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    try:
        return get_token()
    except Exception:  # a token file that cannot be read is no token
        return None


def _server_named(url: str | None) -> str:
    """The server that answered ``url``, as a sentence names it: the Hub, the mirror HF_ENDPOINT names, or the
    host a redirect sent the request to (its host and port only: an address may carry a password)."""
    where = urlsplit(url) if isinstance(url, str) and url else None
    if where is None or not where.hostname or where.netloc.lower() == urlsplit(endpoint()).netloc.lower():
        return "the Hugging Face Hub" if endpoint() == DEFAULT_ENDPOINT else f"the server at {host()} (HF_ENDPOINT)"
    try:
        port = f":{where.port}" if where.port else ""
    except ValueError:
        port = ""
    return f"the server at {where.hostname}{port} (where {host()} sent the request)"


def _failed(e: Exception, repo_id: str, what: str) -> HubError:
    """One sentence for an HTTP or network failure, by the Hub's own error code where it gives one."""
    if isinstance(e, urllib.error.HTTPError):
        server = _server_named(getattr(e, "url", None) or getattr(e, "filename", None))
        code = e.headers.get("X-Error-Code", "") if e.headers else ""
        if code == "GatedRepo":
            return HubError(f"{repo_id} is gated on the Hugging Face Hub: accept its terms on its page there and log "
                            "in (`huggingface-cli login`, or set HF_TOKEN), then download it again")
        if what == "the data set" and (code == "RepoNotFound" or e.code in (401, 404)):
            # the server asked by its host alone (a mirror's address may carry a password), and no example
            # name: the one that failed may be the example itself, missing from a mirror
            mirror = endpoint() != DEFAULT_ENDPOINT
            return HubError(f"the server asked, {host()}{' (HF_ENDPOINT)' if mirror else ''}, has no data set "
                            f"{repo_id}, or it is private there: check the owner and name as the data set's Hub "
                            "page writes them, and set HF_TOKEN if it is private"
                            + (", or point HF_ENDPOINT at a server that keeps it" if mirror else ""))
        if code == "RevisionNotFound" and what == "the data set":
            return HubError(f"{repo_id} has no such revision on the Hugging Face Hub")
        if (code == "RepoNotFound" or (e.code in (401, 404) and what == "the model")) and repo_id in CATALOGUE:
            # one of the paper's, picked from the app's own list: no "did you mean" another of them
            if e.code == 401 and _token():  # (public on the Hub: a token it does not accept is why)
                return HubError(f"{server} refused {repo_id} (HTTP 401, not authorised): the token sent (HF_TOKEN, or "
                                "a saved login) is not accepted there; check it, or unset HF_TOKEN to download this "
                                "public model without one")
            if endpoint() != DEFAULT_ENDPOINT:
                return HubError(f"{server} keeps no model {repo_id}, one of the paper's BERTs on the Hugging Face "
                                "Hub; point HF_ENDPOINT at a server that keeps it, or unset it to ask the Hub")
            return HubError(f"the Hugging Face Hub did not give {repo_id}, one of the paper's BERTs and public "
                            f"there (HTTP {e.code}); try again later")
        if code == "RepoNotFound" or (e.code in (401, 404) and what == "the model"):
            close = suggestion(repo_id)
            return HubError(f"there is no model {repo_id} on the Hugging Face Hub (or it is private)" + (close or (
                "; check the name, e.g. google-bert/bert-base-uncased, or list the paper's BERTs with "
                "`bert-explorer models`")))
        if e.code == 429 or e.code >= 500:  # busy or failing, not a refusal: a mirror's own words, too
            wait = (e.headers.get("Retry-After") or "").strip() if e.headers else ""
            kind = "too many requests" if e.code == 429 else "a server error"
            when = f"in {wait} s" if wait.isdigit() and int(wait) < 86_400 else "later"
            # (of a file's bytes only: the first request, about the model, had fetched nothing to keep)
            kept = ": what was fetched is kept, and the next try goes on from there" if what.startswith("the file") \
                else ""
            return HubError(f"{server} answered HTTP {e.code} ({kind}) when {what} of {repo_id} was asked for; try "
                            f"again {when}{kept}")
        # a refusal: trying again only helps where the Hub itself said it (a mirror or a redirect's host keeps
        # refusing: "try again later" of a CDN's 404)
        remedy = "try again later" if server == "the Hugging Face Hub" else "check HF_ENDPOINT"
        return HubError(f"{server} refused {what} of {repo_id} (HTTP {e.code}); {remedy}")
    reason = getattr(e, "reason", None) or e
    if isinstance(e, (http.client.HTTPException, ConnectionResetError)):  # it answered, but not as a web server does
        return HubError(f"the server at {host()} answered the request for {what} of {repo_id} in a way that could not "
                        f"be read ({str(reason)[:120]}); try again later, or check HF_ENDPOINT: what was fetched is "
                        "kept")
    why = f"the Hugging Face Hub ({endpoint()}) cannot be reached ({reason})"
    if what == "the data set":  # `download` fetches models: a data set is fetched by the run that reads it
        return HubError(f"{repo_id} is not on this machine yet and {why}: fine-tune on it once where there is "
                        "internet (it goes to the Hugging Face cache, HF_HOME), then it opens offline")
    return HubError(not_here(repo_id, why))


def _within(fn: Callable[[], object], about: str):
    """``fn()`` (a request to the server), or HubError when it is not done within ``ANSWER_DEADLINE_S``;
    its exceptions are raised here as they came. A request given up ends on its own read timeout, in a
    thread nobody waits for."""
    box: dict = {}

    def go():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed over as it came, for the caller's handlers
            box["error"] = e
    worker = threading.Thread(target=go, daemon=True, name="hub request")
    worker.start()
    worker.join(ANSWER_DEADLINE_S)
    if worker.is_alive():
        raise HubError(f"the server at {endpoint()} did not finish answering {about} within "
                       f"{ANSWER_DEADLINE_S:.0f} s (its bytes come too slowly), so nothing more was asked of it; "
                       "try again later, or check HF_ENDPOINT")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _json(url: str, repo_id: str, what: str = "the model") -> dict:
    def read() -> bytes:
        with _OPENER.open(_request(url), timeout=30) as r:
            return r.read(MAX_JSON_BYTES + 1)
    try:
        body = _within(read, f"about {repo_id}")
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise _failed(e, repo_id, what) from None
    if len(body) > MAX_JSON_BYTES:
        raise HubError(f"the server at {endpoint()} sent more than {full_disk.size_text(MAX_JSON_BYTES)} about "
                       f"{repo_id}, far more than a model's file list, so it was not read; check HF_ENDPOINT")
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError:
        raise HubError(f"the Hub's answer about {repo_id} is not JSON; try again later") from None


def _web(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


class _WebRedirect(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to another web address: a server's ``Location: file:///...`` (or ftp:)
    would otherwise make this machine's own files the download."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not _web(newurl):
            raise HubError(f"the server at {endpoint()} redirected a download to {ascii(newurl[:80])}, not a web "
                           "address, so nothing was fetched; check HF_ENDPOINT")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not _same_host(newurl, req.full_url):  # (urllib copies every header along)
            new.remove_header("Authorization")
        return new


def _same_host(url: str, other: str) -> bool:
    """Do two addresses name the same host and port (and scheme)?"""
    a, b = urlsplit(url), urlsplit(other)
    return (a.scheme, a.netloc.lower()) == (b.scheme, b.netloc.lower())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the redirect's own headers are read: a CDN answers with other ETags


_OPENER = urllib.request.build_opener(_WebRedirect)


def _describe(url: str, repo_id: str, name: str, bound: int | None = None) -> tuple[str, int, str]:
    """(the file's ETag, its size, where to GET it) from a HEAD request, each checked (``_etag``,
    ``_size``). The Hub answers a large (LFS) file with a redirect to its CDN that carries X-Linked-Etag
    and X-Linked-Size; a renamed repository answers with a redirect on the Hub itself, which is followed."""
    opener = urllib.request.build_opener(_NoRedirect)
    for _ in range(5):
        try:
            r = _within(lambda url=url: opener.open(_request(url, "HEAD"), timeout=30), f"about {name} of {repo_id}")
        except urllib.error.HTTPError as e:
            if e.code in (301, 302, 303, 307, 308) and e.headers.get("Location"):
                target = urljoin(url, e.headers["Location"])
                if not _web(target):
                    raise HubError(f"the server at {endpoint()} sent {name} of {repo_id} to {ascii(target[:80])}, "
                                   "not a web address, so nothing was fetched; check HF_ENDPOINT") from None
                if e.headers.get("X-Linked-Etag"):  # an LFS file on the CDN
                    return (_etag(e.headers["X-Linked-Etag"], repo_id, name),
                            _size(e.headers.get("X-Linked-Size"), repo_id, name, bound), target)
                url = target
                continue
            raise _failed(e, repo_id, f"the file {name}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            raise _failed(e, repo_id, "the model") from None
        with r:
            etag = r.headers.get("X-Linked-Etag") or r.headers.get("ETag")
            size = r.headers.get("X-Linked-Size") or r.headers.get("Content-Length")
        if not etag or size is None:
            raise HubError(f"the Hub did not say the size of {name} in {repo_id}; try again later")
        return _etag(etag, repo_id, name), _size(size, repo_id, name, bound), url
    raise HubError(f"the Hub sent {repo_id} round too many redirects; try again later")


def _etag(value: str, repo_id: str, name: str) -> str:
    """The ETag as the cache's blob name: the content's hash, as the Hub sends it (git's sha1 for a small
    file, sha256 for an LFS one), quotes and ``W/`` dropped. Anything else is refused, not renamed: a
    mirror that answers with its own tags (``"5f3a-1b2c"``) cannot be told apart from one that lies, and
    a blob named by a tag would not be the blob transformers looks for in the same cache."""
    tag = value.strip().removeprefix("W/").strip('"')
    if not _CONTENT_HASH.fullmatch(tag):
        raise HubError(f"the server at {endpoint()} tags {name} of {repo_id} {ascii(tag[:60])}, not the file's "
                       "content hash (40 or 64 hex digits, as the Hugging Face Hub sends), so nothing was written; "
                       "download from the Hub itself or a mirror that keeps its ETags (HF_ENDPOINT)")
    return tag


def _size(value: str | None, repo_id: str, name: str, bound: int | None = None) -> int:
    """An announced size, a whole number of bytes no larger than such a file can be (``bound``; by
    default a BERT's: MAX_*_BYTES)."""
    of = "such a file can be here" if bound else "such a file of a BERT can be"
    bound = bound or (MAX_WEIGHTS_BYTES if name in WEIGHTS else MAX_SMALL_FILE_BYTES)
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit():
        raise HubError(f"the server at {endpoint()} gave {name} of {repo_id} the size {ascii(text[:40])}, not a "
                       "number of bytes, so nothing was written; try again later, or check HF_ENDPOINT")
    if int(text) > bound:
        raise HubError(f"the server at {endpoint()} says {name} of {repo_id} is {full_disk.size_text(int(text))}, "
                       f"more than the {full_disk.size_text(bound)} {of}, so it was not fetched; check the name "
                       "and HF_ENDPOINT")
    return int(text)


def _have(folder: Path, etag: str) -> int:
    """Bytes of a file already here: whole (its blob) or in part (its .incomplete)."""
    for p in (folder / "blobs" / etag, folder / "blobs" / f"{etag}.incomplete"):
        if p.is_file():
            return p.stat().st_size
    return 0


def _fetch(url: str, blob: Path, size: int, repo_id: str, name: str, step: Callable[[int], None],
           cancel: Callable[[], bool] | None) -> Path:
    """The blob, fetched into ``<blob>.incomplete`` from the bytes already there (HTTP Range) and
    renamed when whole; a dropped connection is taken up again RETRIES times. Never more than the
    ``size`` the HEAD announced is read: a server that sends more is refused and its part deleted."""
    if blob.is_file() and blob.stat().st_size == size:
        return blob
    blob.parent.mkdir(parents=True, exist_ok=True)
    part = blob.with_name(blob.name + ".incomplete")
    if size == 0:  # nothing to fetch (an empty tokenizer_config.json): an empty file, checked against its ETag
        part.write_bytes(b"")
    error = None
    for _ in range(RETRIES + 1):
        have = part.stat().st_size if part.is_file() else 0
        if cancel is not None and cancel():  # (a stalled line's retry waited up to two minutes more first)
            raise DownloadCancelled(f"the download of {repo_id} was cancelled at {name} ({full_disk.size_text(have)} "
                                    f"of {full_disk.size_text(size)}); downloading it again goes on from there")
        if have > size:  # not this file: start it again
            part.unlink()
            have = 0
        if have == size:
            break
        try:
            headers = {"Range": f"bytes={have}-"} if have else {}
            with _within(lambda: _OPENER.open(_request(url, headers=headers), timeout=60),
                         f"a request for {name} of {repo_id}") as r:
                if have and r.status != 206:  # the server ignored the range: the whole file comes
                    have = 0
                elif have and not _continues(r.headers.get("Content-Range"), have, size):
                    raise HubError(f"the server at {endpoint()} answered a request for {name} of {repo_id} from "
                                   f"byte {have} with {ascii(str(r.headers.get('Content-Range'))[:60])}, another "
                                   "part, so nothing of it was written; try again later, or check HF_ENDPOINT")
                length = (r.headers.get("Content-Length") or "").strip()
                if length.isascii() and length.isdigit() and int(length) > size - have:
                    raise _too_long(part, repo_id, name, size)
                if not have:  # a part this app starts (the only kind a later download may clear away)
                    _note_part(blob.parent.parent, blob.name, started=True)
                with open(part, "ab" if have else "wb") as out:
                    step(have)
                    # read1: what has arrived, up to a megabyte; a slow line still reports and cancels promptly.
                    # Never past the announced size: a server may stream without end behind a small HEAD.
                    while have < size and (chunk := r.read1(min(CHUNK, size - have))):
                        out.write(chunk)
                        have += len(chunk)
                        step(have)
                        if cancel is not None and cancel():
                            out.flush()
                            raise DownloadCancelled(f"the download of {repo_id} was cancelled at {name} "
                                                    f"({full_disk.size_text(have)} of {full_disk.size_text(size)}); "
                                                    "downloading it again goes on from there")
                if have == size and r.read1(1):  # one byte more than announced: not the file the HEAD described
                    raise _too_long(part, repo_id, name, size)
        except urllib.error.HTTPError as e:
            if e.code == 416:  # nothing left to send: what is here is the whole file, or not this file
                part.unlink(missing_ok=True)
                error = e
                continue
            raise _failed(e, repo_id, f"the file {name}") from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as e:
            error = e
            continue
        except OSError as e:
            if full_disk.is_disk_full(e):
                raise
            error = e
            continue
    have = part.stat().st_size if part.is_file() else 0
    if have != size:
        why = getattr(error, "reason", None) or error or "the connection ended early"  # (not "<urlopen error ...>")
        raise HubError(f"the download of {name} from {repo_id} stopped at {full_disk.size_text(have)} of "
                       f"{full_disk.size_text(size)} ({why}); run the same again "
                       "to go on from there: what was fetched is kept")
    if not _is_content(part, blob.name):
        part.unlink(missing_ok=True)
        raise HubError(f"the bytes of {name} of {repo_id} that the server at {endpoint()} sent are not the file its "
                       "ETag names (their hash differs), so nothing of it was kept; download it again, or check "
                       "HF_ENDPOINT")
    os.replace(part, blob)
    _note_part(blob.parent.parent, blob.name, started=False)
    return blob


def _is_content(path: Path, etag: str) -> bool:
    """Is ``path`` the file the ETag names? The Hub tags an LFS file with its sha256 and a small one with
    git's sha1 of it (``blob <size>\0`` + the bytes); the blob is renamed to that name only when true, so
    a resumed download that joined two versions, or a server's other bytes, never become a cache entry."""
    h = hashlib.sha256() if len(etag) == 64 else hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest() == etag


def _continues(content_range: str | None, have: int, size: int) -> bool:
    """Does a 206 answer carry the rest of the file from byte ``have`` (``bytes have-end/size``)?"""
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", content_range or "")
    return bool(m) and int(m.group(1)) == have and m.group(3) in ("*", str(size))


def _too_long(part: Path, repo_id: str, name: str, size: int) -> HubError:
    part.unlink(missing_ok=True)
    return HubError(f"the server at {endpoint()} sent more of {name} of {repo_id} than the "
                    f"{full_disk.size_text(size)} it announced, so it was stopped and nothing of it kept; try again "
                    "later, or check HF_ENDPOINT")


def _link(target: Path, blob: Path) -> None:
    """snapshots/<commit>/<file> -> ../../blobs/<etag>, as the Hugging Face cache keeps it (a copy where
    the file system has no symbolic links)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # (followed: a link to a blob that is gone is only replaced)
        if target.resolve() == blob.resolve() or filecmp.cmp(target, blob, shallow=False):
            return  # the same file: this revision was here already
        # one revision's file is one file: another one here was put by another download (transformers', another
        # server's) and is not this download's to replace
        raise HubError(f"the Hugging Face cache holds {target.name} of revision {target.parent.name[:12]} as another "
                       f"file than the server at {endpoint()} sends for it, so nothing of it was changed; check "
                       f"HF_ENDPOINT, or remove {target.parent} to download that revision again")
    if target.is_symlink():
        target.unlink()
    try:
        target.symlink_to(os.path.relpath(blob, target.parent))
    except OSError:
        shutil.copyfile(blob, target)


# ----- what there is -------------------------------------------------------------------------------------
def cached_berts() -> dict[str, Path]:
    """Every repository in the Hugging Face cache whose snapshot is a whole BERT (its config says
    ``model_type: bert``, or has BERT's keys and no other type, as Google's miniatures): downloaded here
    or by transformers, catalogue or not. {repo id: snapshot folder}."""
    found = {}
    root = cache_root()
    for folder in sorted(root.glob("models--*")) if root.is_dir() else []:
        repo_id = folder.name[len("models--"):].replace("--", "/")
        snapshot = local_copy(repo_id)
        if snapshot is None:
            continue
        try:
            config = json.loads((snapshot / "config.json").read_text())
        except (OSError, ValueError):
            continue
        kind = config.get("model_type") if isinstance(config, dict) else "?"
        if kind == "bert" or (kind is None and {"hidden_size", "num_hidden_layers", "vocab_size"} <= set(config)):
            found[repo_id] = snapshot
    return found


def catalogue_rows() -> list[dict]:
    """The catalogue as rows: id, name, L, H, A, parameters, download size (about 4 bytes a parameter),
    licence, whether it is on this machine, and the bytes of it here (a download cut short goes on from them)."""
    return [{"id": m.repo_id, "name": m.title, "L": m.layers, "H": m.hidden, "A": m.heads,
             "parameters": m.parameters, "download_bytes_about": m.download_bytes, "licence": LICENCE,
             "on_this_machine": local_copy(m.repo_id) is not None, "bytes_here": bytes_here(m.repo_id)}
            for m in CATALOGUE.values()]
