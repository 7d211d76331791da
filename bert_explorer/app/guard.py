"""What the app guards in Streamlit's own server, for a class that shares it.

Streamlit accepts a file PUT to ``/_stcore/upload_file/<session>/<any id>`` from any open session,
whether or not its page shows an uploader, and keeps the bytes in memory until the session is gone
for good (a closed tab's session lingers, waiting for a reconnect). A student's script could so fill
the server's memory, 200 MB a request. And an uncaught exception shows its stack, with the host's
paths, to whoever caused it. Installed once per server process by the first page that runs
(``install``, from ``state.py``, which every page imports), whether the server was started by
``python -m bert_explorer.app.serve`` or by ``streamlit run run_app.py``:

* a session may upload only after one of its pages drew an uploader (``uploader_drawn``, called by
  the app's uploaders), only to the ids the server handed it for that (``get_upload_urls``), and at
  most ``server.maxUploadSize`` in all (200 MB, Streamlit's default, set in ``.streamlit/config.toml``);
  anything else is refused with 403 before it is stored, and in classroom mode no page draws an
  uploader, so no session may upload at all;
* a session's uploaded files are freed as soon as its browser disconnects, not when Streamlit
  finally forgets the session; so are the files the app keeps for it (``keep_upload``: the last file of
  each uploader, read again when its page comes back), which a session's state would have held for the
  120 s Streamlit waits for a reconnect, for each of up to 128 sessions;
* served beyond this machine, an uncaught error shows one sentence, never its stack; the details go
  to the server's log (``client.showErrorDetails = "none"``).
"""
from __future__ import annotations

import threading

from streamlit import config as st_config
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

_lock = threading.Lock()
_may_upload: dict[str, set[str]] = {}   # session id -> the file ids handed to it
_installed: list[int] = []               # id() of the runtime the guard is in
_kept: dict[str, dict[str, tuple[str, bytes]]] = {}  # session id -> {uploader: (name, bytes)}, oldest first


def uploader_drawn() -> None:
    """This session's page draws an uploader: from now on it may upload (to ids it is handed)."""
    ctx = get_script_run_ctx()
    if ctx is not None:
        with _lock:
            _may_upload.setdefault(ctx.session_id, set())


def uploader(container, label: str, **options):
    """``container.file_uploader(label, **options)``, the one way the app draws an uploader: the
    session may then upload (``uploader_drawn``)."""
    install()
    uploader_drawn()
    return container.file_uploader(label, **options)


def _session_id() -> str:
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else ""


def keep_upload(key: str, upload: tuple[str, bytes]) -> None:
    """Keep ``upload`` as the last file of this session's uploader ``key``. A session keeps at most what it
    may upload at once (``server.maxUploadSize``): the files kept longest go first. All go when its browser
    disconnects, with its uploads."""
    with _lock:
        kept = _kept.setdefault(_session_id(), {})
        kept.pop(key, None)
        kept[key] = upload
        while sum(len(data) for _, data in kept.values()) > _max_bytes() and len(kept) > 1:
            kept.pop(next(iter(kept)))


def kept_upload(key: str) -> tuple[str, bytes] | None:
    """The file this session keeps for its uploader ``key``, if any."""
    with _lock:
        return _kept.get(_session_id(), {}).get(key)


def forget_upload(key: str) -> None:
    with _lock:
        _kept.get(_session_id(), {}).pop(key, None)


def forget_session(session_id: str) -> None:
    """What the guard holds for a session that has gone: its leave to upload, the files kept for it."""
    with _lock:
        _may_upload.pop(session_id, None)
        _kept.pop(session_id, None)


def may_upload(session_id: str) -> bool:
    with _lock:
        return session_id in _may_upload


def _max_bytes() -> int:
    return int(st_config.get_option("server.maxUploadSize")) * 1024 * 1024


def _refuse(status: int, detail: str):
    from starlette.exceptions import HTTPException

    raise HTTPException(status_code=status, detail=detail)


def install() -> None:
    """Put the guard in place in the running server (once; nothing to do outside a server)."""
    if not Runtime.exists():
        return
    runtime = Runtime.instance()
    with _lock:
        if id(runtime) in _installed:
            return
        _installed.append(id(runtime))
    files = runtime.uploaded_file_mgr
    issue, store, forget = files.get_upload_urls, files.add_file, files.remove_session_files

    def get_upload_urls(session_id, file_names):
        if not may_upload(session_id):
            return []  # no uploader on its pages: no place to upload to
        infos = issue(session_id, file_names)
        with _lock:
            _may_upload.setdefault(session_id, set()).update(i.file_id for i in infos)
        return infos

    def add_file(session_id, file):
        with _lock:
            issued = file.file_id in _may_upload.get(session_id, ())
        if not issued:
            _refuse(403, "This session has no uploader for this file.")
        held = sum(len(f.data) for f in files.file_storage.get(session_id, {}).values()
                   if f.file_id != file.file_id)
        if held + len(file.data) > _max_bytes():
            _refuse(413, "This session's uploads would pass the server's upload size.")
        store(session_id, file)

    def remove_session_files(session_id):
        forget_session(session_id)
        forget(session_id)

    files.get_upload_urls, files.add_file, files.remove_session_files = get_upload_urls, add_file, remove_session_files

    disconnect = runtime.disconnect_session

    def disconnect_session(session_id, *, client=None):
        disconnect(session_id, client=client)
        if not runtime.is_active_session(session_id):  # its browser is gone: its uploads go too
            remove_session_files(session_id)

    runtime.disconnect_session = disconnect_session
    from .roles import is_private

    if not is_private():
        # errors are one sentence on the page (the pages catch what they expect); the stack of anything
        # else goes to the server's log, not to a student's screen with the host's paths in it
        st_config.set_option("client.showErrorDetails", "none")
