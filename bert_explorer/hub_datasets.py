"""Data sets by their Hugging Face Hub name: ``hf:<owner>/<name>[/<config>][:<split>]``.

A data set repository on the Hub keeps its tables as Parquet files: in the repository itself
(``<config>/<split>-00000-of-00001.parquet``, or ``data/<split>-*.parquet`` for a set with one
configuration), or, for a set the Hub converted, on the branch ``refs/convert/parquet``
(``<config>/<split>/0000.parquet``). This module finds the files of one split and fetches them
with the project's own downloader (``hub.py``: every name, size, ETag and redirect the server
sends is checked before it touches the disk) into the standard Hugging Face cache, where
huggingface_hub would put them (``datasets--<owner>--<name>``); a split fetched once opens offline.
The ``datasets`` library is not used: the Parquet files are read by the upload reader
(``data/uploads``), bounded like any upload.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from . import full_disk
from .hub import cache_root, fetch_plan
from .hub_names import COMMIT, ID_PART, HubError
from .hub_server import describe, endpoint, offline, quoted, read_json

PREFIX = "hf:"
CONVERTED = "refs/convert/parquet"  # the branch where the Hub keeps its Parquet export of a data set
MAX_SHARDS = 64                     # Parquet files one split may have here
MAX_DATASET_BYTES = 200_000_000     # compressed bytes of one split: the size of an upload (uploads.core)
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
_SPEC = re.compile(rf"hf:(?P<repo>{ID_PART}/{ID_PART})(?:/(?P<config>{_NAME}))?(?::(?P<split>{_NAME}))?")
EXAMPLE = "hf:nyu-mll/glue/sst2:train"


@dataclass(frozen=True)
class DatasetSplit:
    """One split of a Hub data set, as a person names it."""

    repo_id: str
    config: str | None
    split: str

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.repo_id}" + (f"/{self.config}" if self.config else "") + f":{self.split}"


def is_dataset_spec(spec: str) -> bool:
    return str(spec).startswith(PREFIX)


def parse(spec: str) -> DatasetSplit:
    """``hf:<owner>/<name>[/<config>][:<split>]`` (the split ``train`` when none is named); anything
    else is one sentence with an example."""
    m = _SPEC.fullmatch(str(spec).strip())
    if not m:
        raise HubError(f"{spec!r} does not name a Hugging Face data set: write hf:<owner>/<name>[/<config>][:<split>], "
                       f"e.g. {EXAMPLE} (the owner is part of the name, as on the data set's Hub page)")
    return DatasetSplit(m["repo"], m["config"], m["split"] or "train")


def repo_folder(repo_id: str) -> Path:
    return cache_root() / ("datasets--" + repo_id.replace("/", "--"))


def _layout(path: str) -> tuple[str, str] | None:
    """(config, split) of a Parquet file by where it lies, or None: not a table of a split."""
    if not path.endswith(".parquet"):
        return None
    parts = path.split("/")
    if len(parts) == 1:
        config, rest = "default", parts
    else:
        config, rest = ("default" if parts[0] == "data" else parts[0]), parts[1:]
    if len(rest) == 1:  # <split>-00000-of-00001.parquet, <split>.parquet
        split = re.split(r"[-.]", rest[0], maxsplit=1)[0]
    elif len(rest) == 2:  # the converted branch: <split>/0000.parquet (a large split's first rows: partial-<split>)
        split = rest[0].removeprefix("partial-")
    else:
        return None
    return (config, split) if re.fullmatch(_NAME, config) and re.fullmatch(_NAME, split) else None


def split_files(names, asked: DatasetSplit) -> list[str]:
    """The Parquet files of the split ``asked`` among a revision's file names; refused in one sentence
    (naming the configurations or splits there are) when the name does not choose one."""
    tables: dict[str, dict[str, list[str]]] = {}
    for name in sorted(names):
        if (where := _layout(name)) is not None:
            tables.setdefault(where[0], {}).setdefault(where[1], []).append(name)
    if not tables:
        return []
    configs = sorted(tables)
    if asked.config is not None and asked.config not in tables:
        raise HubError(f"{asked.repo_id} has no configuration {asked.config!r}; it has {', '.join(configs[:20])}: "
                       f"name one, e.g. hf:{asked.repo_id}/{configs[0]}:{asked.split}")
    config = asked.config or ("default" if "default" in tables else configs[0] if len(configs) == 1 else None)
    if config is None:
        raise HubError(f"{asked.repo_id} has {len(configs)} configurations ({', '.join(configs[:20])}): name one, "
                       f"e.g. hf:{asked.repo_id}/{configs[0]}:{asked.split}")
    splits = tables[config]
    if asked.split not in splits:
        raise HubError(f"{asked.repo_id} ({config}) has no split {asked.split!r}; its splits are "
                       f"{', '.join(sorted(splits))}: name one, e.g. hf:{asked.repo_id}/{config}:{sorted(splits)[0]}")
    return splits[asked.split]


def open_split(spec: str, progress=None, cancel=None, max_bytes: int = MAX_DATASET_BYTES) -> tuple[list[Path], str]:
    """(the Parquet files of the split ``spec`` names, on this machine; where they came from, for the
    notes). The cached copy when there is one (no network asked), else downloaded."""
    asked = parse(spec)
    here = _cached(asked)
    if here is not None:
        return here, f"{asked.name} (the Hugging Face cache, {repo_folder(asked.repo_id)})"
    if offline():
        raise HubError(f"{asked.name} is not on this machine yet and this machine is set to work offline "
                       "(HF_HUB_OFFLINE): fine-tune on it once where there is internet (it goes to the Hugging Face "
                       "cache, HF_HOME), then it opens offline")
    return _download(asked, progress, cancel, max_bytes), f"{asked.name} (downloaded from {endpoint()})"


def _cached(asked: DatasetSplit) -> list[Path] | None:
    folder = repo_folder(asked.repo_id)
    for revision in ("main", CONVERTED):
        try:
            commit = (folder / "refs" / revision).read_text().strip()
        except (OSError, ValueError):
            continue
        snapshot = folder / "snapshots" / commit
        if not COMMIT.fullmatch(commit) or not snapshot.is_dir():  # never a path from a file this app did not write
            continue
        names = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.parquet") if p.is_file()]
        try:
            files = split_files(names, asked)
        except HubError:
            continue
        if files and _every_shard(files):
            return [snapshot / f for f in files]
    return None


_SHARD = re.compile(r"(.*)-(\d+)-of-(\d+)\.parquet")


def _every_shard(files: list[str]) -> bool:
    """Does a split's ``...-00001-of-00003.parquet`` set hold every shard it names? A download cut off after its
    first shard had linked it into the snapshot, and the split was then read from the cache as if whole."""
    shards: dict[tuple[str, int], set[int]] = {}
    for f in files:
        if m := _SHARD.fullmatch(f):
            shards.setdefault((m[1], int(m[3])), set()).add(int(m[2]))
    return all(found == set(range(n)) for (_, n), found in shards.items())


def _revision(repo_id: str, revision: str) -> tuple[str, list[str]]:
    info = read_json(f"{endpoint()}/api/datasets/{quoted(repo_id)}/revision/{quote(revision, safe='')}", repo_id,
                 "the data set")
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(siblings, list) or not all(isinstance(x, dict) for x in siblings):
        raise HubError(f"the server at {endpoint()} sent no list of {repo_id}'s files; try again later, or check "
                       "HF_ENDPOINT")
    sha = info.get("sha")
    if not isinstance(sha, str) or not COMMIT.fullmatch(sha):
        raise HubError(f"the server at {endpoint()} names {repo_id}'s revision {ascii(str(sha)[:60])}, not a commit "
                       "id (40 hex digits), so nothing was written; check HF_ENDPOINT")
    return sha, [x["rfilename"] for x in siblings if isinstance(x.get("rfilename"), str)]


def _download(asked: DatasetSplit, progress, cancel, max_bytes: int) -> list[Path]:
    repo_id = asked.repo_id
    sha, names = _revision(repo_id, "main")
    revision, files = "main", split_files(names, asked)
    if not files:  # a set kept in another form (a loading script, JSON): the Hub's own Parquet export
        try:
            sha, names = _revision(repo_id, CONVERTED)
        except HubError:  # no such branch
            names = []
        revision, files = CONVERTED, split_files(names, asked)
    if not files:
        raise HubError(f"{repo_id} holds no Parquet table (neither in the repository nor on its {CONVERTED} branch), "
                       "which is what this app reads of a Hub data set; download it yourself and upload a CSV, JSONL "
                       "or Parquet file")
    if len(files) > MAX_SHARDS:
        raise HubError(f"{asked.name} is split into {len(files)} Parquet files, more than the {MAX_SHARDS} one data "
                       "set may have here; choose a smaller configuration or split")
    folder = repo_folder(repo_id)
    base = f"{endpoint()}/datasets/{quoted(repo_id)}/resolve/{sha}/"
    plan = [(f, *describe(base + quote(f), repo_id, f, bound=max_bytes)) for f in files]
    total = sum(size for _, _, size, _ in plan)
    if total > max_bytes:
        raise HubError(f"{asked.name} is {full_disk.size_text(total)} of Parquet, more than the "
                       f"{full_disk.size_text(max_bytes)} a data set may be here (an upload's limit); choose a smaller "
                       "split, or download a sample of it and upload that")
    snapshot = fetch_plan(folder, repo_id, asked.name, sha, revision, plan, progress, cancel)
    return [snapshot / f for f in files]
