"""Asking a Hub server: where it is (``$HF_ENDPOINT``, else the Hugging Face Hub), the requests (the user's token
to that host only, redirects followed only to web addresses and never with the token to another host), and every
answer bounded and checked before it is used: a JSON answer read up to a bound and within a deadline, a file's
ETag a content hash and its size a whole number within what such a file can be. A failure is one sentence that
names the server that refused and what helps (:func:`failed`). ``hub.py`` writes what is fetched into the cache.
"""
from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import quote, urljoin, urlsplit

from . import full_disk
from .hub_names import CATALOGUE, CONTENT_HASH, WEIGHTS, HubError, not_here, suggestion

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


def quoted(repo_id: str) -> str:
    return quote(repo_id, safe="/")


def request(url: str, method: str = "GET", headers: dict | None = None) -> urllib.request.Request:
    headers = {"User-Agent": "bert-explorer", **(headers or {})}
    token = user_token()
    if token and _same_host(url, endpoint()):  # the user's token goes to the Hub they named, never to a CDN
        headers["Authorization"] = f"Bearer {token}"  # or another host a redirect names (huggingface_hub's rule)
    return urllib.request.Request(url, method=method, headers=headers)


def user_token() -> str | None:
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


def server_named(url: str | None) -> str:
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


def failed(e: Exception, repo_id: str, what: str) -> HubError:
    """One sentence for an HTTP or network failure, by the Hub's own error code where it gives one."""
    if isinstance(e, urllib.error.HTTPError):
        server = server_named(getattr(e, "url", None) or getattr(e, "filename", None))
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
            if e.code == 401 and user_token():  # (public on the Hub: a token it does not accept is why)
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


def within(fn: Callable[[], object], about: str):
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


def read_json(url: str, repo_id: str, what: str = "the model") -> dict:
    def read() -> bytes:
        with OPENER.open(request(url), timeout=30) as r:
            return r.read(MAX_JSON_BYTES + 1)
    try:
        body = within(read, f"about {repo_id}")
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise failed(e, repo_id, what) from None
    if len(body) > MAX_JSON_BYTES:
        raise HubError(f"the server at {endpoint()} sent more than {full_disk.size_text(MAX_JSON_BYTES)} about "
                       f"{repo_id}, far more than a model's file list, so it was not read; check HF_ENDPOINT")
    try:
        return json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # (nested past Python's parser: no Hub answer is)
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


OPENER = urllib.request.build_opener(_WebRedirect)


def describe(url: str, repo_id: str, name: str, bound: int | None = None) -> tuple[str, int, str]:
    """(the file's ETag, its size, where to GET it) from a HEAD request, each checked (``_etag``,
    ``_size``). The Hub answers a large (LFS) file with a redirect to its CDN that carries X-Linked-Etag
    and X-Linked-Size; a renamed repository answers with a redirect on the Hub itself, which is followed."""
    opener = urllib.request.build_opener(_NoRedirect)
    for _ in range(5):
        try:
            r = within(lambda url=url: opener.open(request(url, "HEAD"), timeout=30), f"about {name} of {repo_id}")
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
            raise failed(e, repo_id, f"the file {name}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            raise failed(e, repo_id, "the model") from None
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
    if not CONTENT_HASH.fullmatch(tag):
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
