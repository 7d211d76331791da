"""Ready before the bell: what a class's pages need of one model, prepared before class.

Two kinds of work. **First visits**: what a page computes the first time it shows a model and keeps
on disk (the SAE step time behind Features' estimate, the corpus counts behind Nearest neighbours'),
each declared where it lives with ``first_visit.first_visit``, so there is no list here to forget to update.
**Long builds** a page offers with a button (:data:`BUILDS`): a model's quality measurement, an SAE of
one layer, the head map, Clark et al.'s measures, nearest-neighbour indexes. They run one after
another as the same background processes the pages start (low priority, resumable, kept), so while
they run a student's page that waits for something not prepared says what the server prepares; a
build stopped half-way goes on from its finished
part next time, and one already built is skipped.

``bert-explorer prepare-class --model NAME ...`` runs both; ``--status`` prints what is prepared.
"""
from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import atomic, file_lock
from ..checkpoint import Loaded
from ..processes import process_alive, process_start
from ..runs import neighbour_jobs as jobs
from .first_visit import FIRST_VISIT

# ----- first visits ----------------------------------------------------------------------------
# Measured on the team's 2-core CPU with one core busy: 15-20 s a model, for minilm-mlm-nsp and for a model
# of BERT-Base's size alike (docs/classroom.md); a class's walk at load 4 took 61 s, which the load's share
# (``speed.seconds_now``) says from this figure.
FIRST_VISITS_S = 20.0

def _declared() -> list[tuple[str, str, Callable[[Loaded], object]]]:
    """Every first-visit work of the package (``first_visit.py``): its analysis modules are imported,
    which declares them."""
    from .. import analysis

    for info in pkgutil.walk_packages(analysis.__path__, analysis.__name__ + "."):
        importlib.import_module(info.name)
    return FIRST_VISIT


def first_visits_left(loaded: Loaded) -> list[tuple[str, str]]:
    """(page, what) of each first-visit work not kept for ``loaded``: what a page would still compute on its
    first visit. Each work runs with nothing computed (``shared_work.only_kept``), so this costs what
    reading the kept results costs."""
    from .. import shared_work

    left = []
    for page, what, work in _declared():
        try:
            with shared_work.only_kept():
                work(loaded)
        except shared_work.NotKept:
            left.append((page, what))
    return left


def first_visits_total() -> int:
    """How many first-visit works the pages declare (a column of what is prepared counts them)."""
    return len(_declared())


def first_visits_seconds(left: int) -> float:
    """The idle time of ``left`` first-visit works (:data:`FIRST_VISITS_S` shared evenly between them)."""
    return FIRST_VISITS_S * left / max(1, first_visits_total())


# ----- long builds ---------------------------------------------------------------------------------
BUILDS = {"quality": "its measurement on held-out text (Masked word probe)",
          "sae": "an SAE of the middle layer (Features of a layer)",
          "head-map": "the head map (Attention)",
          "clark": "Clark et al.'s measures (Attention)",
          "index": "nearest-neighbour indexes of the embeddings (layer 0) and the last layer, which its page "
                   "compares (Nearest neighbours)",
          "probes": "every layer probed for the page's tasks (What each layer knows)"}


@dataclass(frozen=True)
class Build:
    """One long build for one model: where its result goes and how a page would start it."""

    key: str                 # a key of BUILDS
    lesson: str              # in a lesson's words, for what students are told while it runs
    path: Path               # the disk-cache entry it fills
    done: Callable[[], bool]
    command: tuple[str, ...]
    argv: list[str]
    seconds: float           # the page's own estimate
    room_bytes: float = 0
    part: str = ""           # which one, where a key has several ("layer 0")

    @property
    def name(self) -> str:
        """The build as a log line names it: "index (layer 0)", "quality"."""
        return f"{self.key} ({self.part})" if self.part else self.key

    def state(self) -> dict:
        return jobs.build_state(self.path, self.done())


def by_key(builds: list[Build]) -> dict[str, list[Build]]:
    """The builds of one model by their key: what a table of what is prepared has a column for (a key is
    prepared when all its builds are done), in the order of BUILDS (the panel's and --status's columns)."""
    out: dict[str, list[Build]] = {key: [] for key in BUILDS}
    for b in builds:
        out.setdefault(b.key, []).append(b)
    return {key: bs for key, bs in out.items() if bs}


def ships(key: str, loaded: Loaded) -> bool:
    """Did the model come with the result of the build ``key``? Its quality: the evaluation stored with it,
    which the Masked word probe shows every student without a build (a measurement would repeat it)."""
    from .probes.pretraining_tasks import stored_evaluation

    return key == "quality" and stored_evaluation(loaded) is not None


def builds(name: str, loaded: Loaded, which, estimate: bool = True, shipped_too: bool = True) -> list[Build]:
    """The long builds ``which`` (keys of BUILDS) of the model ``name``, as their pages would start them
    with their default settings; ``estimate=False`` skips their estimates (seconds 0: to say what is done).
    ``shipped_too=False`` leaves out a build whose result the model came with (:func:`ships`): what a
    preparation runs, where "every build" asked for minutes of work repeating a figure the model has."""
    which = {key for key in which if shipped_too or not ships(key, loaded)}
    from .attention import clark, head_map
    from .features import build as fb
    from .neighbours import index as nbb
    from .probes import quality
    from ..train.estimate import background_threads

    out = []
    config, corpus = loaded.config, clark.default_corpus()
    if "quality" in which:
        path = quality.entry_path(loaded)
        out.append(Build("quality", "the measurement of how well this model guesses", path,
                         lambda p=path: quality.stored(p) is not None, quality.BUILDER, ["--model", name],
                         quality.estimate_seconds(config, quality.held_out_sequences(loaded)) if estimate else 0.0))
    if "sae" in which:
        settings = fb.FeatureSettings(layer=fb.default_layer(loaded))
        path = fb.entry_path(loaded, settings)
        est = fb.estimate_seconds(loaded, settings, threads=background_threads()) if estimate else {"seconds": 0.0, "disk_bytes": 0}
        out.append(Build("sae", f"Features of layer {settings.layer}", path, lambda p=path: fb.is_complete(p),
                         fb.BUILDER, fb.build_argv(name, settings), est["seconds"], est["disk_bytes"]))
    # Attention's two builds over Wikipedia segments: (key, module, its entry's path, segments, in words)
    for key, module, where, segments, words in (
            ("head-map", head_map, head_map.map_path, head_map.SEGMENTS, "head map"),
            ("clark", clark, clark.measures_path, clark.MAX_SEGMENTS, "measurement")):
        if key in which:
            path = where(loaded, corpus, segments)
            out.append(Build(key, f"Attention's {words} over {segments:,} segments", path,
                             lambda p=path, f=module.FILE: (p / f).is_file(), module.BUILD_COMMAND,
                             ["--model", name, "--segments", str(segments), "--corpus", corpus],
                             module.estimate_seconds(config, segments) if estimate else 0.0))
    if "probes" in which:  # the page's tasks with the page's settings: what a student's visit finds
        from .layers import probing

        path = probing.page_entry(loaded)
        seconds = sum(probing.estimate_seconds(loaded, t, probing.PAGE_SETTINGS[t], threads=background_threads())
                      ["seconds"] for t in probing.PAGE_TASKS) if estimate else 0.0
        out.append(Build("probes", "the probes of What each layer knows", path,
                         lambda lo=loaded: probing.page_probed(lo), probing.BUILDER, ["--model", name], seconds))
    if "index" in which:  # the layer the page opens on and the embeddings, which its caption compares it with
        for layer in dict.fromkeys([0, nbb.opening_layer(loaded)]):
            path = nbb.index_path(loaded, "bbc", layer)
            est = nbb.estimate_build_seconds(loaded, "bbc", layer) if estimate else {"seconds": 0.0,
                                                                                     "build_disk_bytes": 0}
            out.append(Build("index", f"the nearest-neighbour index of layer {layer}", path,
                             lambda p=path: nbb.is_complete(p), jobs.BUILD_INDEX,
                             ["--model", name, "--layer", str(layer), "--corpus", "bbc", "--no-progress"],
                             est["seconds"], est["build_disk_bytes"], part=f"layer {layer}"))
    return out


def run(build: Build, report: Callable[[float, str], None], poll_s: float = 1.0) -> str:
    """Start one build (unless it is done or already running) and wait for it: "done", "already done",
    or the reason it did not finish, in one sentence."""
    if build.done():
        return "already done"
    started_here = False
    if build.state()["state"] != "building":
        from ..train.estimate import background_threads
        from ..train.speed import seconds_now

        try:
            why = jobs.start_build(build.path, build.argv, one_at_a_time=False, room_bytes=build.room_bytes,
                                   command=build.command, what=build.key, lesson=build.lesson,
                                   said_s=seconds_now(build.seconds, background_threads(), without_own=True)
                                   if build.seconds else None)  # (the preparer's own first visits are done)
        except KeyboardInterrupt:  # (while it was being started: the build running now is the one it started)
            if build.state()["state"] == "building":
                stop(build)
            raise
        if why:
            return why
        started_here = True
    try:
        while (s := build.state())["state"] == "building":
            report(float(s.get("fraction") or 0.0), s.get("message") or "starting…")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        # Ctrl-C stops the build this preparation started; one it found running (another teacher's, a page's)
        # is that one's to stop, and goes on
        if started_here:
            stop(build)
        raise
    if build.done():
        return "done"
    if s.get("error"):
        return f"it stopped ({s['error']}); run the same again to go on from there"
    # (its last progress line, "128 of 1,000 segments (about 12 s left)", read as if it were still going)
    fraction = s.get("fraction")
    at = f" at {float(fraction):.0%}" if isinstance(fraction, (int, float)) and fraction > 0 else ""
    return f"it stopped{at} ({s['state']}); run the same again to go on from there"


def stop(build: Build) -> None:
    """Stop a running build (Ctrl-C of prepare-class): its finished parts stay and the next run goes on."""
    import psutil

    pid = jobs.read_progress(build.path).get("pid")
    if pid:
        try:
            psutil.Process(int(pid)).terminate()
        except (psutil.Error, ValueError):
            pass


# ----- preparing in the background (the teacher's panel on Home) ------------------------------------
def _work() -> Path:
    from .. import disk_cache

    d = disk_cache.work_root() / ".prepare-class"
    d.mkdir(parents=True, exist_ok=True)
    return d


def preparation() -> dict:
    """The background ``prepare-class`` started from Home: ``running`` (its process is alive), ``models``
    and ``builds`` it was given, and the last lines of its log."""
    import json

    import psutil

    from ..runs.report import log_tail

    d = _work()
    try:
        started = json.loads((d / "started.json").read_text())
    except (OSError, ValueError):
        return {"running": False, "log": ""}
    try:  # (the pid as it was when it started: after a reboot the pid is another process's, which was stopped)
        alive = process_alive(int(started["pid"]), started.get("created")) and \
            psutil.Process(int(started["pid"])).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, KeyError, ValueError, TypeError):
        alive = False
    return {**started, "running": alive, "log": log_tail(d / "log.txt", 12) or ""}


def start_preparing(models: list[str], which: list[str], said: str | None = None) -> str | None:
    """Start ``bert-explorer prepare-class`` in the background (low priority, like every build), or say in
    one sentence why not (one is running). ``said``: the builds' time as the teacher was told it, which
    the preparation's last line quotes beside the time they took."""
    import json
    import sys

    from ..runs.background import reap_when_done, spawn

    d = _work()
    with file_lock.holding(d / ".start.lock"):  # (two teachers' Prepare at once started two preparations)
        if preparation()["running"]:
            return "The class is being prepared already; its progress is below."
        argv = [sys.executable, "-m", "bert_explorer.cli", "prepare-class", "--model", *models, "--builds", *which,
                *(["--said", said] if said else []), "--started", f"{time.time():.3f}"]
        with (d / "log.txt").open("a") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} prepare-class {' '.join(models)} "
                      f"({', '.join(which)})\n")
        proc = spawn(argv, d / "log.txt")
        atomic.write_text(d / "started.json", json.dumps({"pid": proc.pid, "created": process_start(proc.pid),
                                                          "models": models, "builds": which, "started": time.time()}))
    reap_when_done(proc)
    return None


def stop_preparing() -> None:
    """Stop the background preparation as Ctrl-C would: the build at work stops, what is done stays."""
    import signal

    import psutil

    now = preparation()
    pid = now.get("pid") if now["running"] else None  # (a pid it no longer is is no preparation's)
    if pid:
        try:
            psutil.Process(int(pid)).send_signal(signal.SIGINT if hasattr(signal, "SIGINT") else signal.SIGTERM)
        except (psutil.Error, ValueError):
            pass


# ----- the preparation's plan: its builds in order, and the one at work --------------------------------
PLAN = "plan.json"


def write_plan(todo: list[tuple[str, Build]], at: int | None) -> None:
    """Keep the builds a preparation runs, in their order, with the index of the one at work (None before its
    first build, while the pages' first visits run; ``len(todo)`` after its last): what a student's page reads
    to say where its own build is in the queue."""
    import os

    atomic.write_json(_work() / PLAN, {
        "pid": os.getpid(), "at": at,
        "builds": [{"model": name, "key": b.key, "part": b.part, "lesson": b.lesson, "path": str(b.path),
                    "seconds": b.seconds} for name, b in todo]})


def place_in_queue(key: str, model: str, path: Path | None = None) -> dict | None:
    """Where the build ``key`` of ``model`` (the one that fills ``path``, where a key has several) stands in the
    plan of the preparation running now: ``place`` (from 1) of ``of`` builds; ``now_place``, ``now`` (in a lesson's
    words) and ``now_left_s`` (its own time left, from its progress) of the build at work, None while the first
    visits run; ``before``: the builds still ahead of it (the one at work included) and ``before_s`` their time,
    the one at work's time left and the others' estimates, None where one of them is not known. None without a
    plan of the running preparation; ``{}`` where the plan has that build no longer ahead (it ended without it)."""
    import json

    from ..runs.report import seconds_left

    now = preparation()
    try:
        plan = json.loads((_work() / PLAN).read_text())
    except (OSError, ValueError):
        return None
    if not now["running"] or plan.get("pid") != now.get("pid"):  # (an earlier preparation's plan)
        return None
    builds, at = plan.get("builds") or [], plan.get("at")
    working = isinstance(at, int) and at < len(builds)
    start = at if working else 0 if at is None else len(builds)
    mine = next((i for i in range(start, len(builds)) if builds[i]["key"] == key and builds[i]["model"] == model
                 and (path is None or Path(builds[i]["path"]) == Path(path))), None)
    if mine is None:
        return {}
    left = None
    if working:  # the build at work: its own time left, from its progress (as the busy line says it)
        s = jobs.read_progress(Path(builds[at]["path"]))
        left = seconds_left(s.get("started"), s.get("fraction") or 0.0, since=s.get("since"), said=s.get("said"))
    times = [left if i == at else builds[i].get("seconds") or None for i in range(start, mine)]
    return {"place": mine + 1, "of": len(builds), "now_place": at + 1 if working else None,
            "now": builds[at]["lesson"] if working else None, "now_left_s": left, "before": mine - start,
            "before_s": sum(times) if all(t is not None for t in times) else None}
