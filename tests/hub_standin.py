"""A local stand-in of the Hugging Face Hub, for tests that must run without internet.

``HubStandin(root)`` serves the folders under ``root`` as model repositories over HTTP on
127.0.0.1, answering exactly the requests huggingface_hub 2.4's ``snapshot_download`` and
``hf_hub_download`` make (read from its source: ``_snapshot_download.py``, ``file_download.py``,
``utils/_http.py``):

* ``GET /api/models/{repo}[/revision/{rev}]`` -> JSON with ``id``, ``sha``, ``siblings[].rfilename``
  (``HfApi.model_info``; ``ModelInfo`` needs ``id``, ``snapshot_download`` asserts ``sha``).
* ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=true`` -> list of
  ``{type, oid, size, path[, lfs]}``; one page unless ``tree_page_size`` is set, then the
  GitHub-style ``Link: <...>; rel="next"`` header the client follows.
* ``HEAD`` / ``GET /{repo}/resolve/{rev}/{file}`` -> ``X-Repo-Commit``, ``ETag`` (git blob sha1,
  or sha256 for LFS files plus ``X-Linked-Etag``/``X-Linked-Size``), ``Content-Length``,
  ``Accept-Ranges: bytes``; ``Range: bytes=N-`` gives 206 + ``Content-Range``.
* Errors carry the ``X-Error-Code`` header the client maps to exceptions: ``RepoNotFound``,
  ``RevisionNotFound``, ``EntryNotFound`` (404; the real Hub answers an unknown repo with 401 to
  anonymous callers, the client reads the header either way) and ``GatedRepo`` (401 anonymous, 403 with a token;
  like the real Hub, a gated repo's metadata and file list stay public, only /resolve is refused).
* ``GET /api/agent-harnesses`` -> an empty registry (huggingface_hub 2.4 asks for it on its first
  request in a fresh ``HF_HOME``, to name AI agents in its User-Agent).
* Renamed repos (``aliases``, e.g. legacy ``bert-base-uncased``) answer 307 with a relative
  ``Location`` to the canonical id, as the real Hub does; the client follows it.
* ``lfs_redirect=True`` mimics the real Hub sending LFS files to a CDN: ``/resolve`` answers 302 to
  ``http://localhost:PORT/_cdn/...`` (another host for the client, so it stops there, takes the
  ``X-Linked-*`` headers from the 302 and GETs the CDN address directly).

``hub.lies`` makes it a lying server, the one a mirror behind ``HF_ENDPOINT`` could be (all keys optional):
``sha`` the revision the API names (and /resolve accepts); ``etag`` {file: the ETag (and X-Linked-Etag)
its HEAD sends}; ``size`` {file: the size its HEAD announces}, and its GET then streams ``stream`` bytes
(64 MiB unless set) with no length and no end until it is cut; ``body`` {file: other bytes of the same length
sent as its content}; ``range_from_zero`` {file}: a Range request answered 206 with the file's first bytes and
a Content-Range saying so; ``location`` {file: where its HEAD redirects, with valid X-Linked-* headers};
``drip`` bytes a second at which each API answer (a file list, an error) is sent, one byte at a time;
``head_size`` {file: the size its HEAD announces}, its GET sending the file as it is.
``HubRequest.sent`` counts the body bytes written for a request.

A repo is a folder ``root/{repo_id}`` holding files (``root/bert-base-uncased`` or
``root/google-bert/bert-base-uncased``); sizes, hashes and a fake commit sha are computed from the
files on each request, so repos may be written after the server started.
Note: huggingface_hub reads ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and ``HF_HUB_DISABLE_XET`` once, at
import: set them before importing it, pass ``endpoint=hub.endpoint``, or call
``hub.point_client_here(monkeypatch)``.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

# Files the Hub's default .gitattributes stores with git-lfs (plus TF checkpoint shards).
LFS_PATTERNS = ("*.bin", "*.safetensors", "*.parquet", "*.h5", "*.msgpack", "*.ot", "*.onnx", "*.ckpt",
                "*.mlmodel", "*.pt", "*.pth", "*.data-*", "*.tflite", "*.pb")


@dataclasses.dataclass
class HubRequest:
    """One request the stand-in received. ``filename``/``repo_id`` are set for file downloads."""
    method: str
    path: str
    query: str = ""
    range: str | None = None
    authorized: bool = False
    repo_id: str | None = None
    filename: str | None = None
    status: int | None = None
    sent: int = 0


@dataclasses.dataclass
class _File:
    path: Path
    size: int
    git_oid: str  # sha1 of the git blob (of the LFS pointer for LFS files), as the tree API reports
    sha256: str
    lfs: bool
    pointer_size: int = 0


class HubStandin:
    """The HTTP server; a context manager. ``hub.endpoint`` goes into ``HF_ENDPOINT``.

    ``gated``: repo ids answering GatedRepo on downloads. ``aliases``: old id -> canonical id.
    ``hub.requests``: every request, in order (see ``HubRequest``).
    """

    def __init__(self, root, *, gated=(), aliases=None, lfs_redirect=False, tree_page_size=None, datasets=None):
        self.root = Path(root)
        # data set repositories: <datasets>/<owner>/<name>/ (main) and <name>@refs-convert-parquet/ (that branch)
        self.datasets = Path(datasets) if datasets else None
        self.gated = set(gated)
        self.aliases = dict(aliases or {})
        self.lfs_redirect = lfs_redirect
        self.tree_page_size = tree_page_size
        self.requests: list[HubRequest] = []
        self.lies: dict = {}  # see the module's docstring: what a lying server says
        self._faults: dict[tuple, dict] = {}
        self._lock = threading.Lock()
        self._hash_cache: dict[tuple, _File] = {}
        self._server = None
        self._conns: set = set()  # open client sockets, closed by stop()

    # --- life cycle ---------------------------------------------------------------------------
    def start(self) -> "HubStandin":
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening and cut the keep-alive connections the client pools (else it reuses them)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def point_client_here(self, monkeypatch, cache_dir=None) -> None:
        """Aim huggingface_hub at this stand-in for one test (pytest's ``monkeypatch`` undoes it).

        huggingface_hub reads ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` (which tests/conftest.py sets to 1),
        ``HF_HUB_DISABLE_XET`` and the cache folder once, at import; so this sets the environment (for
        subprocesses and a later import) and patches the already-read constants too.
        """
        env = {"HF_ENDPOINT": self.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_XET": "1",
               "HF_HUB_DISABLE_PROGRESS_BARS": "1", **({"HF_HUB_CACHE": str(cache_dir)} if cache_dir else {})}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        for k in ("HF_HUB_ENABLE_HF_TRANSFER", "HF_TOKEN"):
            monkeypatch.delenv(k, raising=False)
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "ENDPOINT", self.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            self.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        if cache_dir:
            monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache_dir))

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- fault injection and request log ------------------------------------------------------
    def throttle(self, filename, bytes_per_second, repo_id=None) -> None:
        """Serve ``filename`` (of ``repo_id``, or of any repo) at about ``bytes_per_second``."""
        self._faults.setdefault((repo_id, filename), {})["rate"] = bytes_per_second

    def drop_after(self, filename, n_bytes, times=1, repo_id=None) -> None:
        """Close the connection when a response of ``filename`` reaches file offset ``n_bytes``.

        Headers announce the full length, so the client sees a truncated body. ``times``: how many
        responses to cut (``None`` = every one: a resumed ``Range: bytes=n_bytes-`` request is then cut
        at once, with no byte, which exhausts the client's retries). huggingface_hub 2.4 reads the body
        in 10 MiB chunks and resumes from the last whole chunk: a cut in the first 10 MiB is retried
        from 0 without a Range header; only a cut past 10 MiB shows ``Range: bytes=10485760-``.
        """
        self._faults.setdefault((repo_id, filename), {}).update(drop_at=n_bytes, times=times)

    def clear_faults(self) -> None:
        self._faults.clear()

    def fetched(self, repo_id=None) -> list[str]:
        """Filenames whose content was served (GET answered 200/206), in request order."""
        return [r.filename for r in self.requests
                if r.method == "GET" and r.filename and r.status in (200, 206)
                and (repo_id is None or r.repo_id == repo_id)]

    def range_requests(self) -> list[HubRequest]:
        return [r for r in self.requests if r.range]

    def _fault(self, repo_id, filename, start, end):
        """(rate, bytes to send before dropping or None) for one response covering start..end."""
        spec = self._faults.get((repo_id, filename)) or self._faults.get((None, filename)) or {}
        cut = None
        with self._lock:
            drop_at, times = spec.get("drop_at"), spec.get("times")
            if drop_at is not None and start <= drop_at <= end and (times is None or times > 0):
                cut = drop_at - start
                if times is not None:
                    spec["times"] = times - 1
        return spec.get("rate"), cut

    # --- repository contents ------------------------------------------------------------------
    def repo_dir(self, repo_id) -> Path | None:
        """The folder serving ``repo_id``, or None. A namespace folder (only sub-folders) is no repo."""
        parts = repo_id.split("/")
        folder = self.root.joinpath(*parts)
        if len(parts) > 2 or ".." in parts or not folder.is_dir():
            return None
        if not _has_files(folder) or (len(parts) == 2 and _has_files(folder.parent)):
            return None
        return folder

    def files(self, repo_id) -> dict[str, _File]:
        folder = self.repo_dir(repo_id)
        out = {}
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                out[p.relative_to(folder).as_posix()] = self._describe(p)
        return out

    def dataset_dir(self, repo_id, revision) -> Path | None:
        parts = repo_id.split("/")
        if self.datasets is None or len(parts) != 2 or ".." in parts:
            return None
        suffix = "" if revision == "main" else "@" + revision.replace("/", "-")
        folder = self.datasets / parts[0] / (parts[1] + suffix)
        return folder if folder.is_dir() else None

    def dataset_files(self, folder: Path) -> dict[str, _File]:
        return {p.relative_to(folder).as_posix(): self._describe(p) for p in sorted(folder.rglob("*")) if p.is_file()}

    def dataset_sha(self, folder: Path) -> str:
        h = hashlib.sha1(folder.name.encode())
        for name, f in self.dataset_files(folder).items():
            h.update(f"{name}\0{f.git_oid}\n".encode())
        return h.hexdigest()

    def commit_sha(self, repo_id) -> str:
        """A fake 40-hex commit id, stable for a given content of the repo."""
        h = hashlib.sha1()
        for name, f in self.files(repo_id).items():
            h.update(f"{name}\0{f.git_oid}\n".encode())
        return h.hexdigest()

    def _describe(self, p: Path) -> _File:
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
        if key not in self._hash_cache:
            data = p.read_bytes()
            sha256 = hashlib.sha256(data).hexdigest()
            lfs = any(fnmatch.fnmatch(p.name, pat) for pat in LFS_PATTERNS)
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n"
            blob = pointer.encode() if lfs else data
            git_oid = hashlib.sha1(b"blob %d\0" % len(blob) + blob).hexdigest()
            self._hash_cache[key] = _File(p, len(data), git_oid, sha256, lfs, len(pointer) if lfs else 0)
        return self._hash_cache[key]


def _has_files(folder: Path) -> bool:
    return any(p.is_file() for p in folder.iterdir())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real Hub; every response sets Content-Length
    hub: HubStandin

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        self.hub._conns.add(self.connection)

    def finish(self):
        self.hub._conns.discard(self.connection)
        super().finish()

    def do_GET(self):
        self._dispatch(head=False)

    def do_HEAD(self):
        self._dispatch(head=True)

    def send_response(self, code, message=None):
        self.record.status = code
        super().send_response(code, message)

    # --- routing ------------------------------------------------------------------------------
    def _dispatch(self, head):
        url = urlsplit(self.path)
        self.record = HubRequest(self.command, unquote(url.path), url.query, self.headers.get("Range"),
                                 self.headers.get("Authorization") is not None)
        self.hub.requests.append(self.record)
        segs = [unquote(s) for s in url.path.split("/") if s]
        try:
            if segs == ["api", "agent-harnesses"]:  # fetched once a day by huggingface_hub's user-agent code
                return self._json({"standardEnvVars": [], "harnesses": {}}, head)
            if segs[:2] == ["api", "datasets"] and len(segs) == 6 and segs[4] == "revision":
                return self._dataset_info("/".join(segs[2:4]), segs[5], head)
            if segs[:1] == ["datasets"] and len(segs) > 5 and segs[3] == "resolve":
                return self._dataset_file("/".join(segs[1:3]), segs[4], "/".join(segs[5:]), head)
            if segs[:2] == ["api", "models"] and len(segs) > 2:
                rest = segs[2:]  # {repo}[/revision/{rev} | /tree/{rev}/{path}], repo of 1 or 2 parts
                n = 1 if len(rest) == 1 or rest[1] in ("revision", "tree") else 2
                repo, tail = "/".join(rest[:n]), rest[n:]
                if self._redirect_alias(repo, head):
                    return
                return self._api(repo, tail, parse_qs(url.query), head)
            if segs[:1] == ["_cdn"]:
                n = 2 if self.hub.repo_dir("/".join(segs[1:3])) else 1
                repo, rev, name = "/".join(segs[1:1 + n]), segs[1 + n], "/".join(segs[2 + n:])
                return self._resolve(repo, rev, name, head, cdn=True)
            lie = self.hub.lies.get("sha")
            if lie and f"/resolve/{lie}/" in unquote(url.path):  # a revision that is no name of a folder
                head_part, name = unquote(url.path).split(f"/resolve/{lie}/", 1)
                return self._resolve(head_part.strip("/"), lie, name, head)
            n = 1 if len(segs) > 1 and segs[1] == "resolve" else 2
            if len(segs) < n + 3 or segs[n] != "resolve":
                return self._error(404, None, "Not found")
            repo = "/".join(segs[:n])
            if self._redirect_alias(repo, head):
                return
            self._resolve(repo, segs[n + 1], "/".join(segs[n + 2:]), head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- data sets: /api/datasets/{repo}/revision/{rev} and /datasets/{repo}/resolve/{sha}/{file} ---
    def _dataset_info(self, repo, revision, head):
        folder = self.hub.dataset_dir(repo, revision)
        if folder is None:
            if self.hub.dataset_dir(repo, "main") is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        sha = self.hub.dataset_sha(folder)
        self._json({"_id": sha[:24], "id": repo, "sha": sha, "private": False, "gated": False,
                    "siblings": [{"rfilename": n} for n in self.hub.dataset_files(folder)]}, head)

    def _dataset_file(self, repo, rev, name, head):
        self.record.repo_id, self.record.filename = repo, name
        for revision in ("main", "refs/convert/parquet"):
            folder = self.hub.dataset_dir(repo, revision)
            if folder is not None and rev in (revision, self.hub.dataset_sha(folder)):
                f = self.hub.dataset_files(folder).get(name)
                if f is None:
                    return self._error(404, "EntryNotFound", f"{name} does not exist on \"{rev}\"")
                sha = self.hub.dataset_sha(folder)
                headers = {"X-Repo-Commit": sha, "ETag": f'"{f.sha256 if f.lfs else f.git_oid}"',
                           "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
                if f.lfs:
                    headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
                if name in self.hub.lies.get("size", {}):
                    return self._send_endless(headers, head, self.hub.lies["size"][name], f.lfs)
                return self._send_file(repo, name, f, headers, head)
        return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")

    def _redirect_alias(self, repo, head):
        """A renamed repo: 307 to the same path under the canonical id (relative Location)."""
        if repo not in self.hub.aliases:
            return False
        target = self.path.replace(quote(repo), quote(self.hub.aliases[repo]), 1)
        self._reply(307, b"", {"Location": target}, head)
        return True

    def _check_repo(self, repo, rev):
        """Commit sha of ``repo`` at ``rev``, or None after answering the error."""
        if self.hub.repo_dir(repo) is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        sha = self.hub.commit_sha(repo)
        if "sha" in self.hub.lies:
            sha = self.hub.lies["sha"]
        if rev not in ("main", sha):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", sha)
            return None
        return sha

    # --- /api/models ---------------------------------------------------------------------------
    def _api(self, repo, tail, query, head):
        rev = tail[1] if len(tail) > 1 else "main"
        sha = self._check_repo(repo, rev)
        if sha is None:
            return
        files = self.hub.files(repo)
        if tail[:1] == ["tree"]:
            return self._tree(repo, sha, files, "/".join(tail[2:]), query, head)
        cfg_file = self.hub.repo_dir(repo) / "config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        info = {
            "_id": sha[:24], "id": repo, "modelId": repo, "author": repo.split("/")[0] if "/" in repo else None,
            "sha": sha, "lastModified": "2024-02-19T11:06:12.000Z", "private": False,
            "gated": "manual" if repo in self.hub.gated else False, "disabled": False,
            "library_name": "transformers", "pipeline_tag": "fill-mask", "tags": ["transformers", "bert"],
            "config": {k: cfg[k] for k in ("architectures", "model_type") if k in cfg},
            "siblings": [{"rfilename": name} for name in files],
        }
        self._json(info, head)

    def _tree(self, repo, sha, files, prefix, query, head):
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        base = prefix.rstrip("/") + "/" if prefix else ""
        entries, dirs = [], set()
        for name, f in files.items():
            if not name.startswith(base):
                continue
            rel = name[len(base):].split("/")
            for i in range(1, len(rel) if recursive else min(2, len(rel))):
                d = base + "/".join(rel[:i])
                if d not in dirs:
                    dirs.add(d)
                    entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(),
                                    "size": 0, "path": d})
            if recursive or len(rel) == 1:
                e = {"type": "file", "oid": f.git_oid, "size": f.size, "path": name}
                if f.lfs:
                    e["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
                entries.append(e)
        headers = {}
        size = self.hub.tree_page_size
        if size:
            cursor = int(query.get("cursor", ["0"])[0])
            if cursor + size < len(entries):
                path = urlsplit(self.path).path
                nxt = f"{self.hub.endpoint}{path}?recursive={str(recursive).lower()}&cursor={cursor + size}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            entries = entries[cursor:cursor + size]
        self._json(entries, head, headers)

    # --- /{repo}/resolve/{rev}/{file} ---------------------------------------------------------
    def _resolve(self, repo, rev, name, head, cdn=False):
        self.record.repo_id, self.record.filename = repo, name
        sha = self._check_repo(repo, rev)
        if sha is None:
            return
        if repo in self.hub.gated and not cdn:
            status = 403 if self.record.authorized else 401
            return self._error(status, "GatedRepo", f"Access to model {repo} is restricted. You must have "
                               "access to it and be authenticated to access it. Please log in.", sha)
        f = self.hub.files(repo).get(name)
        if f is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist on \"{rev}\"", sha)
        headers = {"X-Repo-Commit": sha, "ETag": f'"{f.sha256 if f.lfs else f.git_oid}"',
                   "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if f.lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        lies = self.hub.lies
        if name in lies.get("etag", {}):
            headers["ETag"] = lies["etag"][name]
            if f.lfs:
                headers["X-Linked-Etag"] = lies["etag"][name]
        if name in lies.get("location", {}) and not cdn:
            return self._reply(302, b"", {**headers, "Location": lies["location"][name], "X-Linked-Size": str(f.size),
                                          "X-Linked-Etag": headers.get("X-Linked-Etag", headers["ETag"])}, head)
        if name in lies.get("size", {}):
            return self._send_endless(headers, head, lies["size"][name], f.lfs)
        if f.lfs:
            if self.hub.lfs_redirect and not cdn:
                headers["Location"] = (f"http://localhost:{self.hub.port}/_cdn/{repo}/{sha}/{quote(name)}")
                return self._reply(302, b"", headers, head)
        self._send_file(repo, name, f, headers, head)

    def _send_file(self, repo, name, f, headers, head):
        start, end, status = 0, f.size - 1, 200
        m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", self.headers.get("Range") or "")
        if m and (m.group(1) or m.group(2)):
            if m.group(1):
                start, end = int(m.group(1)), int(m.group(2) or f.size - 1)
            else:
                start = max(f.size - int(m.group(2)), 0)
            if start >= f.size:
                return self._reply(416, b"", {**headers, "Content-Range": f"bytes */{f.size}"}, head)
            end, status = min(end, f.size - 1), 206
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        headers["Content-Length"] = str(end - start + 1)
        if head and name in self.hub.lies.get("head_size", {}):  # a HEAD that announces another size than the GET's
            headers["X-Linked-Size" if f.lfs else "Content-Length"] = str(self.hub.lies["head_size"][name])
        if start and name in self.hub.lies.get("range_from_zero", ()):  # the first bytes again, and says so
            start, end = 0, end - start
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        rate, cut = self.hub._fault(repo, name, start, end)
        todo = end - start + 1 if cut is None else cut
        chunk = max(1, int(rate / 10)) if rate else 1 << 16
        content = self.hub.lies.get("body", {}).get(name)
        with f.path.open("rb") as fh:
            fh.seek(start)
            while todo > 0:
                data = fh.read(min(chunk, todo))
                if content is not None:
                    data = content[start + self.record.sent:][:len(data)]
                self.wfile.write(data)
                self.record.sent += len(data)
                todo -= len(data)
                if rate:
                    time.sleep(len(data) / rate)
        if cut is not None:  # announced more than we sent: the client sees a truncated body
            self.wfile.flush()
            self.close_connection = True

    def _send_endless(self, headers, head, announced, lfs):
        """A HEAD that announces ``announced`` bytes, and a GET that streams without a length or an end."""
        headers = {**headers, ("X-Linked-Size" if lfs else "Content-Length"): str(announced)}
        if not head:
            headers.pop("Content-Length", None)
            headers["Connection"] = "close"
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        self.close_connection = True
        block = b"x" * (1 << 16)
        while self.record.sent < self.hub.lies.get("stream", 64 << 20):
            self.wfile.write(block)
            self.record.sent += len(block)

    # --- helpers ------------------------------------------------------------------------------
    def _reply(self, status, body, headers, head):
        self.send_response(status)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            if rate := self.hub.lies.get("drip"):  # every answer of the API, a byte at a time
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(1 / rate)
            else:
                self.wfile.write(body)

    def _json(self, obj, head, headers=None):
        self._reply(200, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})}, head)

    def _error(self, status, code, message, sha=None):
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if sha:
            headers["X-Repo-Commit"] = sha
        self._reply(status, json.dumps({"error": message}).encode(), headers, self.command == "HEAD")


# ----------------------------------------------------------------------------------------------
# Builders: tiny random BERTs in the real repositories' layouts.
# ----------------------------------------------------------------------------------------------
WORDS = ("the a an of to and in is was it he she they we you i on for with as at by from this that "
         "be are not but or his her their our my your have has had do did will would can could "
         "man woman child people city country world day year time house school book water food "
         "car road river money work home life family friend game war team music capital "
         "france paris london england germany berlin king queen good new old big small first last "
         "long great little young high right left one two three go went come came see saw make "
         "made say said know knew take took get got give gave").split()


def tiny_vocab() -> list[str]:
    """[PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), then ~130 lowercase words, punctuation, suffixes."""
    words = list(dict.fromkeys(WORDS))
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, ".", ",", "'", "##s", "##ed", "##ing"]


def _legacy_state_dict(config, seed, with_heads):
    """Random ``BertForPreTraining`` weights under the names of Google's converted checkpoints.

    LayerNorm ``weight``/``bias`` become ``gamma``/``beta``; ``cls.predictions.decoder.bias`` (a
    transformers alias of ``cls.predictions.bias``) is left out, as in the real files. LayerNorms
    and biases get noise, so a loader that failed to map gamma/beta (and kept 1/0) is caught.
    """
    import torch
    from transformers import BertForPreTraining

    torch.manual_seed(seed)
    model = BertForPreTraining(config)
    out = {}
    for k, v in model.state_dict().items():
        if k == "cls.predictions.decoder.bias" or (not with_heads and k.startswith("cls.")):
            continue
        v = v.detach().clone().contiguous()
        if "LayerNorm" in k or k.endswith("bias"):
            v += 0.1 * torch.randn_like(v)
        k = k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        out[k] = v
    if with_heads:  # the decoder is tied to the word embeddings: keep the stored copy equal
        out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"].clone()
    return out


def _bert_config_dict(hidden, layers, heads, intermediate, vocab_size):
    return {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": intermediate,
            "max_position_embeddings": 512, "num_attention_heads": heads, "num_hidden_layers": layers,
            "type_vocab_size": 2, "vocab_size": vocab_size}


def _junk(path: Path, size=4096):
    """A file that must never be downloaded: recognisable bytes, a plausible size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((b"JUNK " + path.name.encode() + b" must never be fetched\n") * (size // 40))


def _common(folder, vocab):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / ".gitattributes").write_text("".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n"
                                                   for p in LFS_PATTERNS))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\nTiny random stand-in.\n")
    return folder


def write_bert_base_layout(folder, *, hidden=32, layers=2, heads=2, intermediate=64, seed=0) -> Path:
    """Mimic ``google-bert/bert-base-uncased`` (alias ``bert-base-uncased``) with tiny random weights.

    ``config.json`` with ``model_type: bert`` and ``architectures: [BertForMaskedLM]`` (the real one
    names MaskedLM although both heads are stored); ``model.safetensors`` and ``pytorch_model.bin``
    with the same legacy-named tensors (``bert.`` prefix, ``LayerNorm.gamma/beta``, pooler,
    ``cls.predictions.*``, ``cls.seq_relationship.*``); ``vocab.txt``, ``tokenizer.json``,
    ``tokenizer_config.json``; and the TF/Flax/Rust/ONNX/CoreML files a download must skip (the
    CoreML package holds ``weights/weight.bin``, which a ``*.bin`` pattern would catch).
    """
    import torch
    from safetensors.torch import save_file
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig

    vocab = tiny_vocab()
    folder = _common(folder, vocab)
    cfg = {"architectures": ["BertForMaskedLM"], **_bert_config_dict(hidden, layers, heads, intermediate, len(vocab)),
           "gradient_checkpointing": False, "layer_norm_eps": 1e-12, "model_type": "bert", "pad_token_id": 0,
           "position_embedding_type": "absolute", "transformers_version": "4.6.0.dev0", "use_cache": True}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    sd = _legacy_state_dict(BertConfig(**cfg), seed, with_heads=True)
    save_file(sd, str(folder / "model.safetensors"), metadata={"format": "pt"})
    torch.save(sd, folder / "pytorch_model.bin")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512}))
    BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True).save(str(folder / "tokenizer.json"))
    for name in ("tf_model.h5", "flax_model.msgpack", "rust_model.ot", "onnx/model.onnx",
                 "coreml/fill-mask/float32_model.mlpackage/Manifest.json",
                 "coreml/fill-mask/float32_model.mlpackage/Data/com.apple.CoreML/model.mlmodel",
                 "coreml/fill-mask/float32_model.mlpackage/Data/com.apple.CoreML/weights/weight.bin"):
        _junk(folder / name)
    return folder


def write_miniature_layout(folder, *, legacy_format=False, with_heads=True, with_architectures=False,
                           hidden=32, layers=2, heads=2, intermediate=64, seed=0) -> Path:
    """Mimic ``google/bert_uncased_L-2_H-128_A-2`` (Google's 24 miniatures) with tiny random weights.

    Only ``pytorch_model.bin`` (no safetensors): torch's zip format, or the pre-1.6 legacy format
    when ``legacy_format``. ``config.json`` is Google's original ``bert_config.json`` keys: no
    ``model_type`` and (assumed, as Google's file has none) no ``architectures`` unless
    ``with_architectures``. Whether the real file stores the pre-training heads is unknown:
    ``with_heads`` chooses. Also ``vocab.txt``, TF checkpoint files and ``flax_model.msgpack``.
    """
    import torch
    from transformers import BertConfig

    vocab = tiny_vocab()
    folder = _common(folder, vocab)
    cfg = _bert_config_dict(hidden, layers, heads, intermediate, len(vocab))
    if with_architectures:
        cfg["architectures"] = ["BertForPreTraining"]
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    sd = _legacy_state_dict(BertConfig(**cfg), seed, with_heads=with_heads)
    torch.save(sd, folder / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy_format)
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.meta",
                 "flax_model.msgpack"):
        _junk(folder / name)
    return folder
