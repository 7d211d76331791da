"""The paper's own BERTs from the Hugging Face Hub: named, downloaded once, opened offline after.

The paper's BERTs and Turc et al.'s miniatures are named in ``hub_names.py`` (:data:`CATALOGUE`); the
server is asked through ``hub_server.py``; here is the cache and what is written into it. A user's explicit choice
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

import contextlib
import filecmp
import hashlib
import http.client
import json
import os
import re
import shutil
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from . import atomic, file_lock, full_disk
from .processes import process_alive, process_start
from .hub_names import (CATALOGUE, COMMIT, CONTENT_HASH, LICENCE, TOKENIZER_FILES, WEIGHTS, DamagedFile,
                        DownloadCancelled, HubError, canonical, not_here)
from .hub_server import OPENER, describe, endpoint, failed, offline, quoted, read_json, request, within
from .model.config import BertConfig

CHUNK = 1 << 20
RETRIES = 3  # a dropped connection is taken up again this many times, from where it stopped


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
    if not COMMIT.fullmatch(commit):  # not written by this app nor by huggingface_hub: never a path
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
    info = read_json(f"{endpoint()}/api/models/{quoted(repo_id)}/revision/main", repo_id)
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(siblings, list) or not all(isinstance(x, dict) for x in siblings):
        raise HubError(f"the server at {endpoint()} sent no list of {repo_id}'s files; try again later, or "
                       "check HF_ENDPOINT")
    sha, names = info.get("sha"), {x.get("rfilename") for x in siblings}
    if not sha:
        raise HubError(f"the Hub's answer about {repo_id} names no revision; try again later")
    if not isinstance(sha, str) or not COMMIT.fullmatch(sha):
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
    plan = [(f, *describe(f"{endpoint()}/{quoted(repo_id)}/resolve/{sha}/{quote(f)}", repo_id, f)) for f in files]
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


MAX_CONFIG_BYTES = 1_000_000  # BERT-Large's config.json is under 1 kB


def _check_config(path: Path, repo_id: str) -> None:
    """A repository's config.json, fetched first, before its weights: a JSON object of a BERT's settings (a
    GPT-2's weights, up to 2 GiB, were fetched before "only BERT checkpoints are supported" was said), whose
    sizes BertConfig takes (hidden_size 10^9 was refused only once the weights were here, and the model then
    counted as downloaded). The sizes are checked against the weights when the model is opened."""
    if (size := path.stat().st_size) > MAX_CONFIG_BYTES:  # (said as "not a JSON object" though it was one)
        raise HubError(f"the config.json of {repo_id} is {full_disk.size_text(size)}, more than the "
                       f"{full_disk.size_text(MAX_CONFIG_BYTES)} a model's settings take, so its weights were not "
                       "fetched; choose a BERT repository such as google-bert/bert-base-uncased")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
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
    """Fetch ``plan`` ((file, ETag, size, URL) each, as ``describe`` checked them) into the cache folder
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
    return {x for x in kept if isinstance(x, str) and CONTENT_HASH.fullmatch(x)} if isinstance(kept, list) else set()


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
    had = [_have(folder, etag) for _, etag, _, _ in plan]  # bytes already here, file by file
    snapshot = folder / "snapshots" / sha
    with _room_held(folder, what, plan), \
            full_disk.saving(cache_root(), f"download {what}", "free some space, then download it again (what "
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
                except HubError:  # damaged, or not what it should be (a config of another model, of 2 MB):
                    if had[i] < size:  # not kept where this download fetched it (one already here is another
                        blob.unlink(missing_ok=True)  # tool's to judge)
                    raise
            _link(_inside(folder, snapshot / f), blob)
        ref = _inside(folder, folder / "refs" / revision)
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(sha)
    return snapshot


DOWNLOADS = ".bert-explorer-downloads.json"  # in the cache: the downloads under way and what each still fetches


@contextlib.contextmanager
def _room_held(folder: Path, what: str, plan):
    """Room for ``plan``'s files and their cache entries, said before a byte is fetched, counting what the other
    downloads into this cache still fetch (two at once each found room for itself alone, and the second filled the
    disk): the check and the note of this one are made under one lock, the note taken back at the end."""
    record = cache_root() / DOWNLOADS
    mine = {"pid": os.getpid(), "created": process_start(os.getpid()), "folder": str(folder),
            "files": [[etag, int(size)] for _, etag, size, _ in plan]}
    with file_lock.holding(cache_root() / f"{DOWNLOADS}.lock"):
        others = [d for d in _downloads(record) if (d["pid"], d["folder"]) != (mine["pid"], mine["folder"])]
        left = sum(size - _have(folder, etag) for _, etag, size, _ in plan)
        theirs = sum(_left_of(d) for d in others)
        needed = left * 1.05 + (1 << 20)
        if needed + theirs > full_disk.free_bytes(cache_root()):
            raise full_disk.DiskFull(full_disk.sentence(
                cache_root(), f"download {what}", "free some space, or point HF_HOME at a disk with room, then "
                "download it again", needed=needed + theirs, basis="its files and a twentieth more"
                + (f", and {full_disk.size_text(theirs)} that {len([d for d in others if _left_of(d)])} other "
                   "download(s) into this cache still fetch" if theirs else "")))
        atomic.write_text(record, json.dumps(others + [mine]))
    try:
        yield
    finally:
        with file_lock.holding(cache_root() / f"{DOWNLOADS}.lock"):
            kept = [d for d in _downloads(record) if (d["pid"], d["folder"]) != (mine["pid"], mine["folder"])]
            try:
                atomic.write_text(record, json.dumps(kept))
            except OSError:  # the disk filled: the error on its way out says so (a failed write of the note
                pass  # replaced it with a traceback); the note left names a process that ends, and counts nothing


def _downloads(record: Path) -> list[dict]:
    """The downloads under way into this cache, as noted: a note of a process that has ended is none, and a note
    that names a folder outside the cache or files by other names than content hashes is not read."""
    try:
        noted = json.loads(record.read_text()) if record.stat().st_size < 1_000_000 else []
    except (OSError, ValueError, RecursionError):
        return []
    root = cache_root().resolve()
    out = []
    for d in noted if isinstance(noted, list) else []:
        try:
            if not (process_alive(d["pid"], d["created"]) and Path(d["folder"]).resolve().is_relative_to(root)
                    and all(CONTENT_HASH.fullmatch(e) and int(n) >= 0 for e, n in d["files"])):
                continue
        except (TypeError, KeyError, ValueError, OSError):
            continue
        out.append(d)
    return out


def _left_of(download: dict) -> int:
    """What a download noted in :data:`DOWNLOADS` still fetches (its parts so far are on the disk already)."""
    folder = Path(download["folder"])
    return sum(max(0, int(size) - _have(folder, etag)) for etag, size in download["files"])


def _inside(folder: Path, path: Path) -> Path:
    """``path``, refused unless it lies under the model's cache folder once ``..`` and the like are
    resolved: the last guard between a server's words and the user's files."""
    root = os.path.normpath(os.path.abspath(folder))
    where = os.path.normpath(os.path.abspath(path))
    if os.path.commonpath([root, where]) != root or where == root:
        raise HubError(f"the server at {endpoint()} asked to write {ascii(str(path))[:120]}, outside the model's "
                       f"cache folder {folder}, so nothing was written; check HF_ENDPOINT")
    return path


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
    # a blob is named by its content's hash only once it is whole: one shorter than a listing announced (kept by
    # _ends_short) is the file too, not fetched again on every download
    if blob.is_file() and (blob.stat().st_size == size or _is_content(blob, blob.name)):
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
            with within(lambda: OPENER.open(request(url, headers=headers), timeout=60),
                         f"a request for {name} of {repo_id}") as r:
                if have and r.status != 206:  # the server ignored the range: the whole file comes
                    have = 0
                elif have and not _continues(r.headers.get("Content-Range"), have, size):
                    raise HubError(f"the server at {endpoint()} answered a request for {name} of {repo_id} from "
                                   f"byte {have} with {ascii(str(r.headers.get('Content-Range'))[:60])}, another "
                                   "part, so nothing of it was written; try again later, or check HF_ENDPOINT")
                length = (r.headers.get("Content-Length") or "").strip()
                length = int(length) if length.isascii() and length.isdigit() else None
                if length is not None and length > size - have:
                    raise _too_long(part, repo_id, name, size)
                # a whole file (200) shorter than announced: it ends there, however often it is asked for again
                short = r.status == 200 and length is not None and length < size
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
                if short and have == length:
                    size = _ends_short(part, blob, size, repo_id, name)
                    break
        except urllib.error.HTTPError as e:
            if e.code == 416:  # nothing after byte `have`: the file ends there, before the size announced (it was
                # deleted and fetched again from 0 until the tries ran out, then "what was fetched is kept" was said)
                size = _ends_short(part, blob, size, repo_id, name)
                break
            raise failed(e, repo_id, f"the file {name}") from None
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


def _ends_short(part: Path, blob: Path, size: int, repo_id: str, name: str) -> int:
    """The file's real size where the server's file ends at the bytes fetched, before the ``size`` its HEAD
    announced: kept when they are the file its ETag names (the announced size was wrong, the bytes are right),
    else refused, and the part deleted (asked for again, it would end at the same place)."""
    have = part.stat().st_size if part.is_file() else 0
    if have and _is_content(part, blob.name):
        return have
    part.unlink(missing_ok=True)
    raise HubError(f"the server at {endpoint()} announced {full_disk.size_text(size)} for {name} of {repo_id}, but the "
                   f"file it sends ends at {full_disk.size_text(have)} and is not the file its ETag names, so nothing "
                   "of it was kept; try again later, or check HF_ENDPOINT")


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