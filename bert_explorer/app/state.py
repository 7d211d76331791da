"""The sidebar every page shares: which model, what it is, where it runs.

Models are held once per server, not per browser tab (``_load``), and what they computed is kept in
``shared_work.RESULTS`` (``by_weights``): both live in this process, where no browser message reaches.
Session-state keys carry the ``be_`` prefix so they never collide with a page's own.
"""
from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import shutil
import threading
import time
import warnings
from collections import OrderedDict
from contextlib import contextmanager, nullcontext
from pathlib import Path

import streamlit as st
import torch
from streamlit import config as st_config
from streamlit.runtime.scriptrunner import get_script_run_ctx

from .. import checkpoint, hub, hub_names, shared_work
from ..fingerprint import fingerprint, frozen
from ..checkpoint import CheckpointError, Loaded
from ..data.uploads.names import slug
from ..full_disk import CacheNotKept
from ..runs.finder import finetuned_models, run_checkpoints, run_label
from ..runs.run import RUNS_DIR, runs_root
from ..runs.run import UPLOADS_DIR, Run
from ..train.device import app_threads
from . import gallery, guard, roles
from .roles import is_private, mode_sentence, server_address, writes_allowed
from .keep import kept_widget, remembered, setting

UPLOADS = UPLOADS_DIR  # checkpoints uploaded as .zip, under the runs folder
GALLERY = "the paper's BERTs (Hugging Face Hub)…"
ABLATION_ENTRY = "ablation:"  # the sidebar's entry for one ablation's checkpoints
MODEL_SWITCHED = "be_model_switched"  # the model a button of a page chose for every page (said once, in the sidebar)


# ----- who can reach the app: private or classroom ------------------------------------------
def show_mode() -> None:
    """The sidebar line that says which mode the app is in (every page shows it)."""
    _cache_warnings_on_the_page()  # (again: a test harness may have put its own warning recorder in place)
    if not is_private():
        roles.announce(f"http://{server_address() or '<this machine>'}:{st_config.get_option('server.port')}")
    if is_private():
        st.sidebar.caption(":material/lock: " + mode_sentence())  # (Material Symbols draw offline; emoji need a font)
    else:
        st.sidebar.info(mode_sentence(), icon=":material/edit:" if writes_allowed() else ":material/school:")


# ----- what a page may say about the host's folders ------------------------------------------
# An absolute POSIX path of two or more parts, not inside a word, a URL or a relative path.
_HOST_PATH = re.compile(r"(?<![\w/:.~-])/(?:[^\s/'\"`()\[\]{},;|<>]+/)+[^\s/'\"`()\[\]{},;|<>]*")


def shown_path(path: str | Path) -> str:
    """How a page names a file or folder of the host. On a private server, as it is: the person at
    this machine may want to open, copy or archive it. In classroom mode (shared, with writing
    off) never the host's absolute path: a path inside the runs folder becomes the runs folder's
    name and the rest ("runs/my-run/checkpoints/step-200"), any other path only its last part."""
    if writes_allowed():
        return str(path)
    root = runs_root().resolve()
    name = root.name or RUNS_DIR.name
    p = Path(path)
    try:
        rel = p.resolve().relative_to(root)
    except (ValueError, OSError):
        return p.name or str(path) if p.is_absolute() else str(path)
    return f"{name}/{rel.as_posix()}" if rel.parts else name


def without_host_paths(value):
    """``value`` (a sentence, a log, a run's settings: strings, lists and dicts of them) with every
    absolute path in it shown as :func:`shown_path` shows it: unchanged unless in classroom mode."""
    if writes_allowed():
        return value
    if isinstance(value, str):
        return _HOST_PATH.sub(lambda m: shown_path(m.group(0)), value)
    if isinstance(value, dict):
        return {k: without_host_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(without_host_paths(v) for v in value)
    return value


# ----- a result the disk cache could not keep: said on the page ------------------------------
def _cache_warnings_on_the_page() -> None:
    """A result computed but not kept in the disk cache (a full disk: ``full_disk.CacheNotKept``,
    warned by ``disk_cache.writing``) is shown all the same, with its one sentence as an
    ``st.warning`` on the page that computed it, each time it happens; every other warning goes
    where it always went (the server's log)."""
    shown_before = warnings.showwarning
    if getattr(shown_before, "on_the_page", False):
        return  # installed already (this module was imported again)

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CacheNotKept) and get_script_run_ctx() is not None:
            text = str(message)
            st.warning(text[:1].upper() + text[1:] + ".")
        else:
            shown_before(message, category, filename, lineno, file, line)

    show.on_the_page = True
    warnings.showwarning = show
    warnings.simplefilter("always", CacheNotKept)  # every time: each time it is computed again


_cache_warnings_on_the_page()


_threads_set: list[int] = []


def _app_threads() -> None:
    """The app's own model calls are small (one sentence): half the cores is plenty and leaves the
    rest to background runs, which take all cores but one (runs/background.py, background_env). Set
    once per server, when the first model is loaded (not when this module is imported), and
    never over a user's own OMP_NUM_THREADS."""
    if _threads_set:
        return
    torch.set_num_threads(app_threads())
    _threads_set.append(torch.get_num_threads())


# Models held in memory for every session, the least recently used dropped first: eight BERT-Large-sized
# models would need about 11 GB. $BERT_EXPLORER_MODEL_MEMORY_GB sets the budget (a model larger than the
# budget is still held, alone). The same store as the class's results, measured in the models' bytes.
MEMORY_ENV, MEMORY_GB = "BERT_EXPLORER_MODEL_MEMORY_GB", 3.0


def memory_budget() -> float:
    """Bytes of model weights the app keeps loaded at once."""
    try:
        return float(os.environ.get(MEMORY_ENV) or MEMORY_GB) * 1e9
    except ValueError:
        return MEMORY_GB * 1e9


MODELS = shared_work.Results(memory_budget)
LOADING = "loading a model"  # the group a model's load is timed under (shared_work.WATCHERS)


def model_bytes(loaded: Loaded) -> int:
    model = loaded.model
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


def _load(name: str, architecture: str | None, version: tuple) -> Loaded:
    """A loaded model shared by every session, loaded once (two sessions asking at once share the load);
    held until the budget needs its room (a session still using it keeps its own reference)."""
    def load_now():
        _app_threads()
        with st.spinner("Loading the model…"):
            return checkpoint.load(name, architecture)

    return MODELS.get_or_compute((name, architecture, version), load_now, shared=True, size=model_bytes,
                                group=LOADING)


def weights_version(name: str) -> tuple:
    """What identifies the weights behind a name (``fingerprint.fingerprint``, as a dict key): a run
    re-created under the same path must not be served from the cache."""
    if hub_names.is_hub_name(name) and hub.local_copy(name) is None:
        return ()  # resolving it would download it: the load itself does, once
    try:
        folder = checkpoint.resolve(name)
    except CheckpointError:
        folder = Path(name)  # a fine-tuning run's folder: its model and, for feature-based transfer, its head
    return frozen(fingerprint(folder))


# Models that failed to load, by name, with the version of their weights then: listed to nobody else
# until their files change (a broken checkpoint is tried by one session, not by the whole class).
_failed: "OrderedDict[str, tuple]" = OrderedDict()
_failed_lock = threading.Lock()
FAILED_KEPT = 1000


def _failure_stamp(name: str) -> tuple | None:
    """What a failure to load ``name`` is remembered under: its files as they are now (``_files_stamp``:
    any rewritten, it is tried again). None for a hub name not downloaded yet: not a broken file."""
    if hub_names.is_hub_name(name) and hub.local_copy(name) is None:
        return None
    try:
        return _files_stamp(str(checkpoint.resolve(name)))
    except CheckpointError:
        return _files_stamp(name)


def failed_to_load(name: str) -> bool:
    """Did ``name``, as its files are now, fail to load on this server?"""
    with _failed_lock:
        stamp = _failed.get(name)
    return stamp is not None and stamp == _failure_stamp(name)


def load(name: str, architecture: str | None = None) -> tuple[Loaded | None, str | None]:
    """(model, None) or (None, one-sentence reason) — pages show the reason, never a traceback."""
    try:
        return _load(name, architecture, weights_version(name)), None
    except CheckpointError as e:
        stamp = _failure_stamp(name)
        if stamp is not None:
            with _failed_lock:
                _failed[name] = stamp
                while len(_failed) > FAILED_KEPT:
                    _failed.popitem(last=False)
        return None, without_host_paths(str(e))


def _hashable(args: tuple, kwargs: dict):
    """The arguments as part of a dict key: as they are when hashable, else their pickle; the bytes of
    an upload by their digest (a key is kept as long as its result)."""
    args = tuple(hashlib.sha256(a).hexdigest() if isinstance(a, (bytes, bytearray)) and len(a) > 4096 else a
                 for a in args)
    key = (args, tuple(sorted(kwargs.items())))
    try:
        hash(key)
        return key
    except TypeError:
        return pickle.dumps(key, protocol=pickle.HIGHEST_PROTOCOL)


@contextmanager
def heavy_turn():
    """Run the ``with`` block when this request's turn in ``shared_work.HEAVY`` has come (heavy work
    runs one request at a time per server by default); meanwhile the page shows its place in the
    queue (only in a page's own thread), cleared when the turn comes."""
    if get_script_run_ctx() is None:
        with shared_work.HEAVY.turn():
            yield
        return
    place, since = st.empty(), time.monotonic()
    try:
        with shared_work.HEAVY.turn(lambda ahead: place.info("⏳ " + shared_work.wait_sentence(ahead, since))):
            place.empty()
            yield
    finally:
        place.empty()


def by_weights(models: int = 1, *, shared: bool = False, heavy: bool = False, max_entries: int | None = None,
               show_spinner: bool | str = False):
    """The one way a page caches what a model computed: decorate a function whose first
    ``models`` arguments are model names (what ``load`` takes).

    A call is kept under those names, the version of the weights behind each (``weights_version``)
    and its other arguments, once for every browser session of this server, in ``shared_work.RESULTS``
    (the app's own store: no message a browser sends can empty it). A class asking the page's example at
    the same moment shares one computation (bench/classroom_load.py); a checkpoint rewritten under the
    same name is computed anew. Results are plain data, copied for each session; ``shared=True`` keeps
    one object for all sessions instead, for things nobody changes in place (a built figure).
    ``heavy=True`` work waits for its turn in ``shared_work.HEAVY`` (one at a time per server by
    default), its place shown on the page. ``max_entries`` bounds the results kept of this function;
    ``show_spinner`` (a text) is shown while it computes. The decorated function's ``ready(...)``
    (same arguments) says whether a call would find its result kept."""
    def decorate(fn):
        group = f"{fn.__code__.co_filename}:{fn.__qualname__}{':heavy' if heavy else ''}"

        def key_of(args, kwargs):
            return group, tuple(weights_version(name) for name in args[:models]), _hashable(args, kwargs)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            key = key_of(args, kwargs)

            def compute():
                with (st.spinner(show_spinner) if isinstance(show_spinner, str) and get_script_run_ctx()
                      else nullcontext()):
                    if not heavy:
                        return fn(*args, **kwargs)
                    with heavy_turn():
                        return fn(*args, **kwargs)

            return shared_work.RESULTS.get_or_compute(key, compute, shared=shared, max_entries=max_entries,
                                                      group=group)

        # ``f.ready(...)``: would ``f(...)`` answer at once, computed before (for any session)? A page
        # that computes only when asked shows a result someone asked for without asking again.
        call.ready = lambda *args, **kwargs: shared_work.RESULTS.holds(key_of(args, kwargs))
        return call

    return decorate


def by_inputs(**options):
    """The one way a page caches what needs no model (a file's rows, a corpus, a run's frames): kept
    for every session under its arguments, as ``by_weights`` keeps a model's results (the same
    ``options``)."""
    return by_weights(0, **options)


def device_name() -> str:
    if torch.cuda.is_available():
        return f"CUDA ({torch.cuda.get_device_name(0)})"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "Apple MPS"
    return "CPU"


def uploaded_checkpoints(every: bool = False) -> list[str]:
    """The uploads every session may choose: those that load (a broken one is offered to nobody);
    ``every``: all of them, broken ones included (to delete them)."""
    d = runs_root() / UPLOADS
    found = sorted(str(p.parent) for p in d.glob("*/config.json")) if d.is_dir() else []
    return found if every else [u for u in found if _usable(u, _files_stamp(u))]


def _files_stamp(folder: str) -> tuple:
    """A checkpoint's files as they are now: its weights' fingerprint, and the size and time of writing of
    the files beside them that decide whether it loads (what an upload's usability is cached under)."""
    out = []
    for name in ("config.json", "vocab.txt", "tokenizer.json", checkpoint.UPLOAD_MARK):
        try:
            s = (Path(folder) / name).stat()
            out.append((name, s.st_size, s.st_mtime_ns))
        except OSError:
            pass
    return frozen(fingerprint(folder)), tuple(out)


@by_inputs(max_entries=256)
def _usable(folder: str, stamp: tuple) -> bool:
    # asked on every page run of every session (the sidebar's list): read each upload's header once
    return checkpoint.usable(folder)


def delete_upload(path: str | Path) -> None:
    """Remove one uploaded checkpoint: only a folder directly in the uploads folder, never through a link."""
    folder = Path(path)
    uploads = (runs_root() / UPLOADS).resolve()
    if folder.is_symlink() or folder.resolve().parent != uploads or not (folder / "config.json").is_file():
        raise ValueError(f"{folder.name} is not an uploaded checkpoint")
    shutil.rmtree(folder)


def _upload_checkpoint() -> str | None:
    """A .zip of a transformers-style BERT folder, unpacked under runs/uploaded-models/."""
    f = guard.uploader(st.sidebar, "Checkpoint (.zip of config.json, model.safetensors, vocab.txt)", type=["zip"],
                       key="be_model_zip")
    if f is None:
        return None
    base = slug(Path(f.name).stem)
    try:
        with st.spinner("Checking that the checkpoint loads…"):  # never in another's upload folder
            target = checkpoint.keep_upload(f.getvalue(), runs_root() / UPLOADS, base, f.name)
    except CheckpointError as e:
        st.sidebar.error(without_host_paths(str(e)))
        return None
    if target.name != base:
        st.sidebar.caption(f"Kept as {target.name}: an earlier upload named {base} holds another model, and it "
                           "stays as it was.")
    return str(target)


def _finetuned_run(path, root: Path):
    """The fine-tuning run under ``root`` whose saved model is the folder ``path``, else None."""
    if not isinstance(path, str) or not path:
        return None
    p = Path(path)
    try:
        inside = p.resolve().is_relative_to(root.resolve())
    except OSError:
        return None
    if not inside or p.name != "model" or not (p / "config.json").is_file() or \
            not (p.parent / "status.json").is_file():
        return None
    return Run(p.parent)


def model_picker(default: str = checkpoint.DEFAULT_MODEL, say_error: bool = True) -> str:
    """Sidebar: choose a model by short name, from a run, or by path; show what it is, or (``say_error``) why
    it cannot be read (a page that says it itself passes False: one sentence, said once)."""
    show_mode()
    names = [n for n, (locate, _) in checkpoint.SHORT_NAMES.items() if locate() is not None]
    # the paper's BERTs (and any BERT) in the Hugging Face cache: they open with no network, for everyone
    downloaded = {hub_names.model_name(r): f"{hub.CATALOGUE[r].title if r in hub.CATALOGUE else r} (downloaded)"
                  for r in hub.cached_berts()}
    names += list(downloaded)
    root = runs_root()
    ckpts = run_checkpoints(root)
    labels = {c.path: c.label for c in ckpts}
    # an ablation's many pre-trainings are one entry here, opened in a second list below
    groups = {f"{ABLATION_ENTRY}{c.group}": [] for c in ckpts if c.group}
    for c in ckpts:
        if c.group:
            groups[f"{ABLATION_ENTRY}{c.group}"].append(c.path)
    labels.update({g: f"checkpoints of ablation {g[len(ABLATION_ENTRY):]} ({len(p)})…" for g, p in groups.items()})
    labels.update({u: f"uploaded: {Path(u).name}" for u in uploaded_checkpoints()})
    labels.update(downloaded)
    # a fine-tuned model's encoder, for its attention and layers (its task head is After fine-tuning's)
    tuned = finetuned_models(root)
    labels.update({c.path: c.label for c in tuned})
    options = (names + [c.path for c in ckpts if not c.group] + [c.path for c in tuned] + list(groups)
               + uploaded_checkpoints() + [GALLERY]
               # in classroom mode no one on the network reads the host's folders or writes to them
               + (["a local directory…", "upload a checkpoint (.zip)…"] if writes_allowed() else []))
    kept_choice = remembered("be_model_choice")
    if _failed:  # a model that failed to load stays listed only for the session that chose it (to read why)
        options = [o for o in options if o == kept_choice or not failed_to_load(o)]
    default = default if default in options else options[0]
    if kept_choice not in options and (run := _finetuned_run(kept_choice, root)) is not None:
        # a fine-tuned model opened from the After fine-tuning page ("Attention on this example") stays listed
        options.insert(len(names), kept_choice)
        labels[kept_choice] = f"fine-tuned: {run_label(run, root)}"
    if kept_choice in labels and kept_choice not in options:
        # a checkpoint inside an ablation, chosen earlier (or by another page): open its group
        group = next(g for g, paths in groups.items() if kept_choice in paths)
        st.session_state["be_model_choice"], st.session_state[f"be_model_in_{group}"] = group, kept_choice
    # kept: the model picked here holds on every page until the user picks another, and in the page's address
    # (by its label, checked against the options): a reload, a new session, keeps it too
    choice = kept_widget(st.sidebar.selectbox, "Model", "be_model_choice", default, valid=options.__contains__,
                  options=options, format_func=lambda o: labels.get(o, o), bind="query-params",
                  help=f"Short names need no download; runs are listed from {shown_path(root)}.")
    if (switched := st.session_state.pop(MODEL_SWITCHED, None)) and switched == choice:
        # chosen by a button of another page, not in this list: said once, where the choice is
        st.sidebar.info(f"The model of every page is now {labels.get(choice, choice)}, as the button asked; "
                        "choose another here to go back.")
    if choice in groups:
        inside = {p: labels[p].split(" ▸ ", 1)[-1] for p in groups[choice]}  # "pre-training tiny · MLM · step 9"
        # in the address too, as the group is: a reload opened the group's first pre-training
        choice = setting(st.sidebar.selectbox, f"Pre-training in {choice[len(ABLATION_ENTRY):]}",
                         f"be_model_in_{choice}", next(iter(inside)), valid=inside.__contains__,
                         options=list(inside), format_func=inside.get)
    st.session_state.pop(gallery.WAITING, None)
    if choice == GALLERY:  # the paper's BERTs: a downloaded one is chosen, another offers its download
        choice = gallery.choose(writes_allowed())
    if choice == "upload a checkpoint (.zip)…" and writes_allowed():
        choice = _upload_checkpoint()
    if choice == "a local directory…" and writes_allowed():
        choice = kept_widget(st.sidebar.text_input, "Checkpoint directory", "be_model_path", "", max_chars=4096,
                      placeholder="/path/to/a/bert (config.json, model.safetensors, vocab.txt), or "
                                  "bert-base-uncased (downloaded once)")
        if choice and hub_names.is_hub_name(choice) and not Path(choice).exists() and hub.local_copy(choice) is None:
            # a hub name typed here: downloaded in the background as the gallery does (it was fetched inside
            # the page's run: "Loading the model…" for minutes, no size, no progress, no Cancel)
            try:
                choice = gallery.offer(hub.canonical(choice), writes_allowed())
            except hub.HubError as e:
                st.sidebar.error(str(e))
                choice = None
    if choice:
        loaded, error = load(choice, "BertForPreTraining")
        if error:
            if say_error:
                st.sidebar.error(error)
        else:
            c = loaded.config
            heads = [h for h in ("masked-LM head", "next-sentence head") if h not in loaded.report.missing]
            st.sidebar.markdown(
                f"**L** = {c.num_layers} layers · **H** = {c.hidden_size} hidden units · "
                f"**A** = {c.num_heads} attention heads  \n"
                f"{loaded.parameters_text} · vocab {c.vocab_size:,}  \n"
                f"pre-training heads: {', '.join(heads) if heads else 'none (encoder only)'}  \n"
                f"device: {device_name()}")
            named = hub.CATALOGUE.get(choice)
            if named is not None and (c.num_layers, c.hidden_size) != (named.layers, named.hidden):
                # a mirror (HF_ENDPOINT) may serve other weights under a catalogue's name: say what is read
                st.sidebar.warning(f"The files downloaded as {named.title} hold L = {c.num_layers}, H = "
                                   f"{c.hidden_size}, A = {c.num_heads}, not the paper's L = {named.layers}, H = "
                                   f"{named.hidden}, A = {named.heads}: the server they came from keeps "
                                   "another model under that name (a mirror set by HF_ENDPOINT?), and every page reads "
                                   "the files as they are.")
    return choice


def picked_model(architecture: str = "BertForPreTraining", missing: str = "Choose a model in the sidebar.") -> tuple[str, Loaded]:
    """The sidebar's model picker and the loaded model; if it cannot be loaded the page says why
    in one sentence and stops there."""
    name = model_picker(say_error=False)
    loaded, error = load(name, architecture) if name else (None, st.session_state.get(gallery.WAITING) or missing)
    if error:
        st.info(error)
        st.stop()
    return name, loaded


guard.install()  # (every page imports this module: the guard is in place before any page draws)
