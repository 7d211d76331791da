"""Run an ablation plan into a directory, one cell after another, resumable.

    ABL/
      config.json         the recipe ({"kind": "ablate", ...}: what `start_background` launches)
      plan.json           the expanded cells and the pre-trainings they need (grid.expand)
      status.json         state, the cell being run, how many are done / failed
      results.jsonl       one JSON object per finished (or failed) cell, appended as it ends
      log.txt             what happened, for people
      vocab/<hash>/       one WordPiece vocabulary shared by every pre-training ("vocab": "shared")
      data/               generated task files (pairs:<corpus>)
      pretrain/<hash>/    a pre-training run per distinct PretrainConfig (hash = grid.pretrain_key);
                          none for a recipe of downloaded miniatures: their weights stay in the
                          Hugging Face cache, fetched once (hub.open_model) and shared by every cell
      cells/<cell-id>/    a fine-tuning run per cell (metrics.json, metrics.jsonl, ...)
      STOP                present = stop after the current step / cell

Restarting with ``resume=True`` skips the cells that finished (results.jsonl says so), retries
the failed ones, and continues an interrupted pre-training from its last checkpoint. A cell
that raises is recorded as failed with its error, and the others go on.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .. import atomic, full_disk, hub, hub_names
from ..data.corpora import load_corpus, split_documents, tiny_corpus
from ..runs.lock import writes_run
from ..runs.run import ACTIVE_STATES, Run
from ..runs.signals import StoppedBySignal, said
from ..tasks.registry import task_type
from ..train.finetune import FinetuneConfig, read_data, run_finetuning
from ..train.pretrain import run_pretraining
from ..train.pretrain_config import PretrainConfig
from ..train.pretraining_data import build_tokenizer
from . import grid
from .grid import ROWS
from .ltr import SEQUENCE_TASKS, run_ltr_finetuning
from .pairs import write_pair_task

PAIR_DEFAULTS = {"n_train": 2000, "n_dev": 500}


class AblationStopped(BaseException):
    """The ablation was asked to stop (its STOP file: the app's Stop); resume it to continue. A
    BaseException, like KeyboardInterrupt (a signal's stop), so that no "a cell failed" handler swallows it."""


# ----- results.jsonl --------------------------------------------------------------------------
def read_results(abl: str | Path) -> dict[str, dict]:
    """The latest record of every cell that has one (a retried cell's newer record wins)."""
    p = Path(abl) / "results.jsonl"
    out: dict[str, dict] = {}
    if p.exists():
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            out[rec["cell_id"]] = rec
    return out


def _append_result(abl: Path, record: dict) -> None:
    # one write() of the whole line to a file opened for appending: cells fine-tuned side by side, in
    # several processes (the GPU kit), never interleave their lines
    fd = os.open(abl / "results.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, default=str) + "\n").encode())
    finally:
        os.close(fd)


def read_plan(abl: str | Path) -> dict | None:
    """An ablation's plan, None where it has none yet; one that is not the plan the ablation wrote (cut, edited) is
    one sentence (ValueError), not the JSON parser's traceback."""
    p = Path(abl) / "plan.json"
    if not p.exists():
        return None
    try:
        plan = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        plan = None
    if not isinstance(plan, dict) or not isinstance(plan.get("recipe"), dict) or not isinstance(plan.get("cells"), list):
        raise ValueError(f"{p} cannot be read as an ablation's plan (it is not what the ablation wrote: cut, or "
                         "edited); its runs are kept, and a new folder starts the grid again")
    return plan


# ----- pieces ---------------------------------------------------------------------------------
def _corpus_documents(corpus: str, max_docs: int | None) -> list:
    docs = []
    for part in corpus.split("+"):
        docs += tiny_corpus() if part == "tiny" else load_corpus(part)
    return docs[:max_docs] if max_docs else docs


def ensure_vocab(abl: Path, cfg: dict) -> Path:
    """One WordPiece vocabulary for all pre-trainings of the ablation, learned on the training
    documents (the held-out ones excluded, as each pre-training excludes them), so that every
    cell reads the same pieces and differences come from the setting being ablated."""
    ident = {k: cfg.get(k) for k in ("corpus", "max_docs", "held_out_fraction", "seed", "vocab_size", "lowercase")}
    d = abl / "vocab" / grid.pretrain_key(ident)
    if (d / "vocab.txt").exists():
        return d
    docs = _corpus_documents(cfg["corpus"], cfg.get("max_docs"))
    train_docs, _ = split_documents(docs, cfg["held_out_fraction"], seed=cfg["seed"])
    tok = build_tokenizer(PretrainConfig(vocab="train", vocab_size=cfg["vocab_size"], lowercase=cfg["lowercase"]),
                          train_docs)
    with atomic.folder(d, replace=False) as tmp:  # two cells may learn it at once: the first one stays
        tok.save(tmp)
    return d


def ensure_pretrained(abl: Path, key: str, cfg: dict, progress: bool = False) -> Path:
    """The final checkpoint of pre-training ``key``: reused when finished, resumed when cut off."""
    run = Run(abl / "pretrain" / key)
    cps = run.checkpoints()
    if run.status().get("state") == "finished" and cps:
        return cps[-1][1]
    cfg = dict(cfg)
    if cfg.get("vocab") == "shared":
        cfg["vocab"] = str(ensure_vocab(abl, cfg))
    if cps and run.latest_checkpoint() is None:  # weights without optimiser state cannot be continued: they are
        for _, ckpt in cps:                       # kept in set_aside/ (never deleted) and it starts again
            run.set_aside(ckpt)
    resume = run.latest_checkpoint() is not None
    # an attempt cut off before its first checkpoint left its folder: "resumed" from step 0, which keeps the
    # settings and sets its metric lines aside, so that the curve holds each step once
    again = not resume and run.is_run()

    def on_step(step, losses):
        if (abl / "STOP").exists():
            run.request_stop()  # run_pretraining stops at its next step and writes a checkpoint

    result = run_pretraining(PretrainConfig.from_dict(cfg, strict=not resume), run.path, resume=resume or again,
                             progress=progress, on_step=on_step)
    if result.get("state") != "finished":
        raise AblationStopped(f"pre-training {key} stopped at step {result.get('step')}")
    return run.checkpoints()[-1][1]


def ensure_downloaded(cfg: dict) -> str:
    """The name a cell of a downloaded miniature fine-tunes from (``hf:<Hub id>``), once its cached copy
    is whole: opened from the Hugging Face cache, or downloaded there first (``hub.HubError`` says why
    it cannot be)."""
    hub.open_model(cfg["hub"])
    return hub_names.HF_PREFIX + cfg["hub"]


def _task_type_of(cfg) -> str:
    return read_data(cfg)[0].task.name


def run_cell(abl: Path, plan: dict, cell: dict, model_dir: Path | str) -> dict:
    """Fine-tune one cell into ABL/cells/<id>/ and return its metrics.json. ``model_dir`` is the
    pre-trained checkpoint's folder, or ``hf:<Hub id>`` for a downloaded miniature."""
    spec = plan["recipe"]["tasks"][cell["task"]]
    out = abl / "cells" / cell["id"]
    if out.exists():
        shutil.rmtree(out)  # left by an interrupted attempt: start the cell again
    ft = {**cell["finetune"], "model": str(model_dir)}
    if ft["train"].startswith("pairs:"):
        train_p, dev_p = write_pair_task(ft["train"], abl / "data", spec.get("n_train", PAIR_DEFAULTS["n_train"]),
                                         spec.get("n_dev", PAIR_DEFAULTS["n_dev"]), ft.get("seed", 0))
        ft.update(train=str(train_p), dev=str(dev_p))
    cfg = FinetuneConfig.from_dict(ft, strict=False)  # a plan may come from an earlier version
    row = ROWS[cell["objective"]]
    ltr = row.bilstm or (row.objective.left_to_right and cell["transfer"] == "fine-tune"
                         and (spec.get("task_type") or _task_type_of(cfg)) in SEQUENCE_TASKS)
    with _stop_passed_on(abl, out):
        if row.bilstm:
            result = run_ltr_finetuning(cfg, out, head="bilstm")
        elif ltr:
            result = run_ltr_finetuning(cfg, out, head="last-token")  # [CLS] sees nothing under a causal mask
        else:
            result = run_finetuning(cfg, out)
    if Run(out).status().get("state") == "stopped":  # the ablation's Stop, taken inside the cell: not a result
        raise AblationStopped(f"fine-tuning {cell['id']} stopped at step {Run(out).status().get('step', '?')}; "
                              "it starts again on resume")
    if not ltr and (out / "model").exists() and not plan["recipe"].get("keep_cell_models"):
        shutil.rmtree(out / "model")  # the metrics are what the ablation needs; models are large
    # what always answering the dev set's most frequent label scores: a cell at that rate learnt nothing
    return {**result, "dev_majority": majority_rate(read_data(cfg)[1])}


@contextmanager
def _stop_passed_on(abl: Path, out: Path, every_s: float = 1.0):
    """The ablation's Stop passed on to the cell being fine-tuned: its own run's Stop, which its training reads at
    each step (the ablation's STOP file was read between cells only: a Stop clicked early in a cell waited for
    the whole of it, 95 s and more, while the page still said running)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(every_s):
            if (abl / "STOP").exists() and (out / "status.json").exists():
                Run(out).request_stop()
                return
    watcher = threading.Thread(target=watch, name="ablation stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def majority_rate(dev) -> float | None:
    """The accuracy of always answering the most frequent label of ``dev`` (a TaskData), for tasks
    with one label an example; for tags, the entity F1 of answering the most frequent tag (O, no
    entity) for every word: 0; None for values, spans and choices."""
    task = dev.task
    if not task.labelled or not dev.examples:
        return None
    if task.per_token:
        return 0.0
    counts: dict[str, int] = {}
    for ex in dev.examples:
        for label in task.gold_labels(ex):
            counts[str(label)] = counts.get(str(label), 0) + 1
    return max(counts.values()) / len(dev.examples)


def _record(cell: dict, status: str, **extra) -> dict:
    return {"cell_id": cell["id"], "status": status, "task": cell["task"], "size": cell["size"],
            "objective": cell["objective"], "transfer": cell["transfer"], "masking": cell["masking"],
            "axes": cell["axes"], "pretrain_key": cell["pretrain_key"], "seed": cell.get("seed"),
            "time": time.time(), **extra}


def fine_tune_cell(abl: Path, plan: dict, cell: dict, model_dir: Path | str, summary: dict) -> dict:
    """Fine-tune one cell and append its record to results.jsonl: finished with its dev score (percent,
    as the paper prints it) and its dev set's majority rate, or failed with the error. Returns the
    record. (The ablation's loop calls it cell after cell; the GPU kit runs several side by side.)"""
    t1 = time.time()
    try:
        res = run_cell(abl, plan, cell, model_dir)
    except Exception as e:
        if full_disk.is_disk_full(e):  # not this cell's failure: every cell after it would fail the same way
            raise
        rec = _record(cell, "failed", error=str(e) or type(e).__name__, seconds=round(time.time() - t1, 1))
        _append_result(abl, rec)
        return rec
    task = task_type(res["task"])
    metric = task.main_metric
    dev = {k: v for k, v in res["dev"].items() if isinstance(v, (int, float)) and v is not None}
    value = dev.get(metric)
    # the score as the paper prints it: percent (SQuAD F1 already is)
    score = None if value is None else round(value if task.percent else 100 * value, 2)
    majority = res.get("dev_majority")
    rec = _record(cell, "finished", task_type=res["task"], metric=metric, value=value, score=score,
                  dev=dev, pretrain=summary, seconds=round(time.time() - t1, 1),
                  ltr_head=res.get("ltr_head"), dev_examples=res.get("dev_examples"),
                  majority=None if majority is None else round(100 * majority, 2))
    _append_result(abl, rec)
    return rec


def pretrain_summary(abl: Path, key: str, cfg: dict) -> dict:
    if "hub" in cfg:  # pre-trained by Google: the model's name is what there is to say
        return {"hub": cfg["hub"]}
    st = Run(abl / "pretrain" / key).status()
    ev = st.get("eval_final") or {}
    out = {k: ev[k] for k in ("mlm_accuracy", "mlm_perplexity", "nsp_accuracy", "unigram_entropy", "plateau")
           if k in ev}
    if st.get("started") and st.get("finished"):
        out["seconds"] = round(st["finished"] - st["started"], 1)
    return out


def _stop_on_sigterm():
    """SIGTERM (runs.kill) ends the current cell at once, as Ctrl-C does; resume redoes it. (A pre-training or
    fine-tuning at work takes either signal as a Stop of its own, saving what it can: ``runs/signals.py``.)
    Returns a function that puts back the handler that was there. Nothing changes off the main thread, where
    signals cannot be set, nor where the process was started to ignore SIGTERM."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        return lambda: None

    def handler(*_):
        raise StoppedBySignal(signal.SIGTERM, "")
    before = signal.signal(signal.SIGTERM, handler)
    # (None: a handler set outside Python, which cannot be put back; the default is the nearest)
    return lambda: signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)


def create_plan(recipe: dict, out_dir: str | Path) -> dict:
    """Expand ``recipe`` and write its plan (and the recipe as the run's config) into a new ablation
    folder, without running anything: what ``run_ablation(..., resume=True)`` then runs, and what a
    caller that pre-trains the plan's models side by side reads first."""
    abl = Path(out_dir)
    plan = grid.expand(recipe)
    refusal = grid.offline_refusal(plan)
    if refusal:  # before anything is written
        raise ValueError(refusal)
    Run(abl).create(plan["recipe"], "ablate")
    atomic.write_json(abl / "plan.json", plan, indent=2)
    return plan


# ----- the loop -------------------------------------------------------------------------------
@writes_run("out_dir", "bert-explorer ablate")
def run_ablation(recipe: dict | None, out_dir: str | Path, resume: bool = False, progress: bool = False,
                 say=print) -> dict[str, dict]:
    """Run (or continue) the ablation of ``recipe`` in ``out_dir``; returns read_results()."""
    abl = Path(out_dir)
    run = Run(abl)
    plan = read_plan(abl)
    if plan is not None and not resume:
        raise ValueError(f"{abl} already holds an ablation; pass --resume to continue it or choose a new --output")
    st = run.status()
    # status() already calls a run whose process is gone (or whose pid was reused) "crashed"
    if st.get("state") in ACTIVE_STATES and st.get("pid") not in (None, os.getpid()):
        raise ValueError(f"{abl} is being run by process {st['pid']}; stop it first")
    if plan is None:
        if recipe is None:
            raise ValueError(f"{abl} holds no ablation plan; give a recipe")
        plan = create_plan(recipe, abl)
    run.clear_stop()
    cells = plan["cells"]
    done, total, failed = set(), len(cells), 0
    state, interrupted = "finished", None
    doing = ""  # what the ablation is at, for the sentence of a stop: " (pre-training ...)", " (fine-tuning ...)"
    put_back = _stop_on_sigterm()
    try:  # (from here on a signal, or an error in the first writes, leaves the status and the handler right)
        done = {k for k, r in read_results(abl).items() if r["status"] == "finished"}
        run.write_status(state="running", pid=os.getpid(), started=time.time(), cells_total=total,
                         pretrainings_total=len(plan["pretrainings"]), done=len(done), failed=0, current=None)
        run.log(f"{'resuming' if resume else 'starting'}: {total} cells, {len(plan['pretrainings'])} "
                f"pre-trainings, {len(done)} already finished")
        for key, pcfg in plan["pretrainings"].items():
            todo = [c for c in cells if c["pretrain_key"] == key and c["id"] not in done]
            if not todo:
                continue
            if (abl / "STOP").exists():
                raise AblationStopped("stop requested")
            label = grid.pretraining_label(pcfg)
            what = "download" if "hub" in pcfg else "pre-training"
            doing = f" ({'downloading' if 'hub' in pcfg else 'pre-training'} its model, {label})"
            run.write_status(current=None, phase="downloading" if "hub" in pcfg else "pre-training",
                             pretraining=key, pretraining_label=label)
            if "hub" in pcfg:
                m = hub.CATALOGUE[pcfg["hub"]]
                where = ("in the Hugging Face cache" if hub.local_copy(m.repo_id) is not None
                         else f"downloading about {m.download_bytes / 1e6:,.0f} MB")
                say(f"weights: {m.repo_id} ({where})")
            else:
                say(f"pre-training {label} ({key}), {pcfg['max_steps']} steps")
            t0 = time.time()
            try:
                model_dir = ensure_downloaded(pcfg) if "hub" in pcfg else ensure_pretrained(abl, key, pcfg, progress)
            except AblationStopped:
                raise
            except Exception as e:  # every cell of this model fails; the other models go on
                if full_disk.is_disk_full(e):  # (a full disk is not the model's: the ablation stops, saying so)
                    raise
                run.log(f"{what} {key} failed: {e}")
                say(f"  {what} failed: {e}")
                for c in todo:
                    _append_result(abl, _record(c, "failed", error=f"{what} failed: {e}"))
                    failed += 1
                run.write_status(failed=failed)
                continue
            run.log(f"{what} {key} ready in {time.time() - t0:.0f}s: {model_dir}")
            summary = pretrain_summary(abl, key, pcfg)
            for c in todo:
                if (abl / "STOP").exists():
                    raise AblationStopped("stop requested")
                n = len(done) + failed + 1
                doing = f" (fine-tuning {c['id']})"
                run.write_status(current=c["id"], phase="fine-tuning")
                rec = fine_tune_cell(abl, plan, c, model_dir, summary)
                if rec["status"] == "failed":
                    failed += 1
                    run.log(f"cell {c['id']} failed: {rec['error']}")
                    say(f"[{n}/{total}] {c['id']}: FAILED: {rec['error']}")
                    run.write_status(failed=failed)
                    continue
                done.add(c["id"])
                shown = f"{rec['metric']} {rec['score']:.1f}" if rec["score"] is not None else f"no {rec['metric']}"
                run.log(f"cell {c['id']}: {shown} ({rec['seconds']}s)")
                say(f"[{n}/{total}] {c['id']}: {shown} ({rec['seconds']:.0f}s)")
                run.write_status(done=len(done))
    except AblationStopped as e:  # the STOP file: the app's Stop, which ends the run as asked
        state = "stopped"
        sentence = f"stopped at cell {len(done) + failed + 1} of {total} ({e}); continue with --resume"
        run.log(sentence)
        say(sentence)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: stopped too, and the process ends as the signal asked
        state = "stopped"
        signum = getattr(e, "signum", signal.SIGINT)
        interrupted = StoppedBySignal(signum, f"{said(signum)} at cell {len(done) + failed + 1} of {total}{doing}; "
                                              f"continue with `bert-explorer ablate --output {abl} --resume`")
        run.log(str(interrupted))
    except BaseException as e:
        state = "failed"
        run.write_status(error=str(e) or type(e).__name__)
        raise
    finally:
        put_back()
        run.clear_stop()
        run.write_status(state=state, current=None, phase=None, finished=time.time(), done=len(done),
                         failed=failed)
        run.log(f"{state}: {len(done)} finished, {failed} failed of {total}")
    if interrupted is not None:  # (raised here, once the run's status says "stopped")
        raise interrupted from None
    return read_results(abl)
