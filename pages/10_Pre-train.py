from dataclasses import replace
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st
import torch

from bert_explorer import limits
from bert_explorer.analysis.attention.timelapse import (checkpoints_to_read, default_sentence, shipped_frames,
                                                        timelapse, timelapse_from_frames)
from bert_explorer.app import exports
from bert_explorer.app import data_view as dv
from bert_explorer.app import runs_view as rv
from bert_explorer.app.models import builtin_corpora
from bert_explorer.data.corpora import split_indices
from bert_explorer.data.corpus_upload import check_corpus_upload, held_out_fraction, learnable_vocab_size, \
    long_sentence_note
from bert_explorer.safe_text import markdown_text as md
from bert_explorer.data.objectives import OBJECTIVES, objective_type
from bert_explorer.app.state import by_inputs, device_name, show_mode, shown_path, weights_version, without_host_paths
from bert_explorer.app.roles import work_button, writes_allowed, writes_off
from bert_explorer.checkpoint import SHORT_NAMES, CheckpointError
from bert_explorer.train.device import PRECISIONS, autocast_dtype, precision_name
from bert_explorer.app.keep import (fit_kept, kept_widget, past_the_model, remembered, setting, settings_key,
                                   text_box)
from bert_explorer.app.widgets import intro, sentence_of
from bert_explorer.data.uploads.names import NAME_CHARS, slug
from bert_explorer.model.config import BertConfig
from bert_explorer.runs import finder
from bert_explorer.runs.run import runs_root
from bert_explorer.runs.report import duration_text
from bert_explorer.train.speed import said
from bert_explorer.train.estimate import ALIASES, LONG_RUN_ASK_S, background_threads, size_options
from bert_explorer.train.pretrain import check_fits as check_pretraining, estimate as run_estimate, text_changed
from bert_explorer.train.memory import NO_CUDA
from bert_explorer.train.pretraining_data import corpus_words as count_corpus_words, evaluates_held_out, \
    held_out_text, learnt_vocab_size
from bert_explorer.train.pretrain_config import (MAX_FRAMES, MAX_LR, SMALL_MODEL_LR, PretrainConfig, predicted_fraction,
                                                 warmup_steps_of)
from bert_explorer.train.resume import resume_settings
from bert_explorer.runs.run import Run, new_run_refusal
from bert_explorer.train.timelapse_frames import FILE as FRAMES_FILE, frames_file, read_frames

intro("Pre-train", """
Train a small BERT on real text, the way the paper's Section 3.1 and Appendices A.1-A.2 describe: masked-LM (15 % of
WordPieces, 80/10/10) plus next-sentence prediction, AdamW with a linear warm-up (10 % of the steps
here, 1 % in the paper) and decay (the paper's lr 1e-4 is BERT-Base's over a million steps; a small
model of a few thousand starts here at 5e-4), either **from zero** or **continuing** a checkpoint (a warm start keeps its weights and
vocabulary and adds the heads it lacks). Watch the loss fall and the held-out MLM and NSP accuracy
rise, then open the **time-lapse** to see one attention head and the masked-word guesses take shape
checkpoint by checkpoint (or frame by frame, where a run recorded frames; the shipped explorer-mini
comes with its own). The run goes on in the background if you close this tab.
""")



@by_inputs(max_entries=4, show_spinner="Reading the text…")
def checked_upload(name: str, data: bytes, objective: str) -> tuple[str | None, dict]:
    """``check_corpus_upload``, once per file and objective: a 60 MB file was decoded and split again at every
    click on the page (5 s each)."""
    return check_corpus_upload(name, data, objective)


def evaluated(est: dict) -> str:
    """What each held-out evaluation reads, where the run makes any."""
    if not est["held_out_evaluations"]:
        return ""
    return (f" of about {est['eval_sequences']:,} sequences each, forward only (a third of a training step's "
            "FLOPs)")


@by_inputs(max_entries=16)
def corpus_words(corpus: str, max_docs: int | None, fraction: float, seed: int, objective: str) -> tuple[int, int]:
    """(words in the corpus a run reads, words in its held-out documents it evaluates on), split as the run
    splits it."""
    return count_corpus_words(PretrainConfig(corpus=corpus, max_docs=max_docs, held_out_fraction=fraction, seed=seed,
                                             objective=objective))


@by_inputs(max_entries=16)
def builtin_pieces(corpus: str, max_docs: int | None, fraction: float, seed: int, vocab_size: int) -> int | None:
    """The WordPieces a run learns from a small built-in corpus (None: the size asked)."""
    return learnt_vocab_size(PretrainConfig(corpus=corpus, max_docs=max_docs, held_out_fraction=fraction, seed=seed,
                                            vocab_size=vocab_size))


show_mode()
root = runs_root()
on_gpu = device_name().startswith("CUDA")

if not writes_off("Pre-training"):  # classroom mode: watch runs and their time-lapse, start none
    # ----- 1. a new run -----------------------------------------------------------------------------
    st.subheader("1. Set up a run")
    c1, c2 = st.columns(2)
    # kept: the run's settings hold when the user leaves the page and comes back (app/keep.py)
    source = setting(c1.radio, "Corpus", "pt_corpus_source", "Built-in", options=["Built-in", "Upload a .txt file"],
                         horizontal=True)
    upload, corpus_error, corpus_facts = None, None, {}
    objective = setting(c2.radio, "Objective", "pt_objective", list(OBJECTIVES)[0], options=list(OBJECTIVES),
                            horizontal=True, format_func=lambda name: OBJECTIVES[name].label,
                            help="Table 5 of the paper compares these: removing NSP hurts QNLI, MNLI and SQuAD; "
                                 "a left-to-right model (like OpenAI GPT) is worse still.")
    if source == "Built-in":
        names = [c["name"] for c in builtin_corpora() if c["installed"]] + ["tiny"]
        describe = {c["name"]: c["description"] for c in builtin_corpora()}
        describe["tiny"] = "generated: 40 short templated documents, a run in seconds (for trying things out)"
        chosen = setting(c1.multiselect, "Built-in corpora (joined)", "pt_corpus", names[:1], options=names,
                             valid=lambda v: isinstance(v, list) and set(v) <= set(names))
        for n in chosen:
            c1.caption(f"**{n}**: {describe.get(n, '')}")
        corpus = "+".join(chosen)
        if not chosen:
            corpus_error = "Choose at least one corpus."
    else:
        upload = dv.uploaded_file("Text file (UTF-8): one sentence per line with a blank line between documents, "
                                  "or prose with two blank lines between documents", key="pt_upload", types=None,
                                  container=c1)  # (any file: a .gz is refused here in a sentence, not by the browser)
        corpus = upload[0] if upload else ""
        if upload is None:
            corpus_error = "Upload a .txt file."
        else:
            corpus_error, corpus_facts = checked_upload(upload[0], upload[1], objective)
            if corpus_error:
                c1.error(corpus_error)
            else:
                c1.success(f"{upload[0]}: {corpus_facts['documents']:,} documents, {corpus_facts['sentences']:,} "
                           f"sentences, {corpus_facts['words']:,} words.")
                for note in corpus_facts["notes"]:
                    c1.caption(f"• {md(note)}")  # UTF-16 or Latin-1: the run stores and reads it as UTF-8
                upload = upload[0], corpus_facts["utf8"]

    start = setting(c2.radio, "Start from", "pt_start_from", "zero (random weights)",
                        options=["zero (random weights)", "a checkpoint (warm start)"], horizontal=True)
    init, freeze = None, False
    if start.startswith("zero"):
        sizes = size_options()
        size = setting(c2.selectbox, "Size (L layers × H hidden units; A = H/64 attention heads)", "pt_size",
                           "L4-H256", options=sizes, valid=lambda v: v in sizes,
                           format_func=lambda n: f"{n} ({ALIASES[n]})" if n in ALIASES else
                           ("base: L12-H768, A12" if n == "base" else n),
                           help="The 24 miniatures of Turc et al. (2019) and BERT-base (Table 6 of the paper varies "
                                "L, H, A).")
    else:
        ckpt_labels = {c.path: c.label for c in finder.run_checkpoints(root)}  # "run · step 200"
        inits = [n for n, (locate, _) in SHORT_NAMES.items() if locate() is not None] + list(ckpt_labels)
        # the model chosen on the other pages (the sidebar's) first, where it can be continued: minilm-mlm-nsp was
        # offered while the user had explorer-mini chosen everywhere else
        chosen = remembered("be_model_choice")
        init = setting(c2.selectbox, "Checkpoint to continue", "pt_init",
                           chosen if chosen in inits else inits[0] if inits else None, options=inits,
                           valid=lambda v: v in inits, format_func=lambda o: ckpt_labels.get(o, o),
                           help="Its weights, size and WordPiece vocabulary are kept; a missing MLM or NSP head is "
                                "created fresh (the run's log says which).")
        freeze = setting(c2.checkbox, "Freeze the word embeddings", "pt_freeze", True,
                             help="They are tied to the MLM decoder and hold most of a small model's parameters; "
                                  "frozen, they keep the checkpoint's word vectors and the run trains faster.")
        size = init
        if objective_type(objective).left_to_right:
            c2.caption("A left-to-right warm start puts a causal mask on layers that learnt to read both ways: "
                       "the first steps mostly re-learn a left-to-right reading.")

    c3, c4, c5 = st.columns(3)
    steps = setting(c3.number_input, "Steps", "pt_steps", 1000, min_value=1, max_value=10_000_000, step=100,
                        help="The paper: 1,000,000 steps (about 40 epochs over 3.3 billion words).")
    batch = setting(c4.number_input, "Batch (sequences)", "pt_batch", 256 if on_gpu else 32, min_value=1,
                        max_value=4096,
                        help="The paper: 256 sequences of up to 512 tokens (128,000 tokens a batch).")
    lr = setting(c5.number_input, "Learning rate", "pt_lr", SMALL_MODEL_LR, min_value=1e-6, max_value=MAX_LR,
                     step=1e-5, format="%.0e",
                     help="The paper: Adam(W) with lr 1e-4, β1 0.9, β2 0.999, weight decay 0.01, for BERT-Base over "
                          "1,000,000 steps. A small model of a few thousand steps learns faster at 5e-4 (the shipped "
                          "explorer-mini's rate); at 1e-4 a short run stays on the word-frequency plateau.")
    with st.expander("Advanced settings"):
        a1, a2, a3 = st.columns(3)
        seq_len = setting(a1.number_input, "Max sequence length", "pt_seq", 128, min_value=16, max_value=512,
                              step=16,
                              help="The paper: 128 for 90 % of the steps, then 512 to learn the position embeddings.")
        if upload and not corpus_error and (cut := long_sentence_note(corpus_facts, int(seq_len))):
            # (said with the length that decides it, beside the upload)
            c1.warning(f"{md(upload[0])}: {cut}.")
        vocab_size = setting(a2.number_input, "WordPiece vocabulary (learnt on the corpus)", "pt_vocab", 8000,
                                 min_value=200, max_value=60_000, step=500, disabled=init is not None,
                                 help="A warm start keeps its checkpoint's vocabulary.")
        warmup_pct = setting(a3.number_input, "Warm-up (% of steps)", "pt_warmup", 10.0, min_value=0.0,
                                 max_value=50.0,
                                 help="The paper: 10,000 of 1M steps (1 %); the original scripts' example, 10,000 "
                                      "of 100,000 (10 %); linear decay afterwards.")
        snapshots = setting(a1.number_input, "Checkpoints to keep for the time-lapse", "pt_snapshots", 5,
                                min_value=1, max_value=50,
                                help="Evenly spaced over the run, plus the last step.")
        max_docs = setting(a2.number_input, "Use only the first N documents (0 = all)", "pt_max_docs", 0,
                               min_value=0, max_value=1_000_000)
        seed = setting(a3.number_input, "Seed", "pt_seed", 0, min_value=0, max_value=1_000_000)
        log_every = setting(a1.number_input, "Log every N steps", "pt_log_every", 10, min_value=1, max_value=10_000)
        evaluations = setting(a2.number_input, "Held-out evaluations during the run", "pt_evals", 10, min_value=1,
                                  max_value=1000,
                                  help="MLM and NSP accuracy on documents the run never trains on.")
        device = setting(a3.selectbox, "Device", "pt_device", "auto", options=["auto", "cpu", "cuda"],
                             help="auto = the local GPU when there is one.")
        on_cuda = on_gpu and device != "cpu"
        precisions = [p for p in PRECISIONS if on_cuda or p != "fp16"]
        precision = setting(a1.selectbox, "Precision", "pt_precision", precisions[0], options=precisions,
                                valid=lambda v: v in precisions,
                                help="auto = bf16 autocast where this device computes it natively and faster "
                                     "(a recent GPU, or a CPU with AVX512-BF16/AMX), else fp32.")
        auto_is = autocast_dtype(torch.device("cuda" if on_cuda else "cpu"), "auto")  # no CUDA context: no set_device
        a1.caption(f"auto here = **{precision_name(auto_is)}**"
                   + ("" if auto_is is not None or on_cuda else " (this CPU has no fast bf16)"))
        n_frames = setting(a2.number_input, "Time-lapse frames to record (0 = none)", "pt_frames", 0, min_value=0,
                               max_value=MAX_FRAMES,
                               help="At step 0, at the end and log-spaced between, the run records a few "
                                    "sentences' attention and masked-word guesses (and measures the held-out "
                                    "accuracy): a time-lapse that needs no checkpoint and starts from the random "
                                    "initialisation.")

    # The run's settings as the object the run reads, built now: a bad value is said here, before a run starts.
    # An upload's place in the run directory is known only once the run is made (below).
    try:
        config = PretrainConfig(
            corpus=corpus, objective=objective, max_steps=int(steps), batch_size=int(batch), lr=float(lr),
            max_seq_length=int(seq_len), vocab_size=int(vocab_size), warmup_steps=int(int(steps) * warmup_pct / 100),
            save_every=max(1, int(steps) // int(snapshots)), eval_every=max(1, int(steps) // int(evaluations)),
            log_every=int(log_every), max_docs=int(max_docs) or None, seed=int(seed), device=device,
            precision=precision, timelapse_frames=int(n_frames), **({"init": init, "freeze_word_embeddings": freeze} if init else {"size": size}),
            **({"held_out_fraction": held_out_fraction(corpus_facts.get("documents", 0))} if upload else {}))
        if device == "cuda" and not on_gpu:  # the run would fail as it starts, in the background
            raise ValueError(NO_CUDA)
        check_pretraining(config)  # the batch against the memory free here, before a run's folder is made
    except (ValueError, CheckpointError) as e:
        config = None
        if corpus_error is None:
            corpus_error = str(e)
            st.error(corpus_error)

    # What the run will read: all its words (to tokenise before step 1) and the held-out ones (to evaluate); the
    # estimate is the command line's (``train.pretrain.estimate``), of the settings the run reads.
    est = None
    if config is not None and not corpus_error:
        if upload:  # (not stored yet: its words as counted when it was checked, split as the run will split them)
            first = slice(config.max_docs)  # ("use only the first N documents", as the run reads them)
            words_of = corpus_facts["document_words"][first]
            _, held = split_indices(corpus_facts["document_keys"][first], config.held_out_fraction, config.seed)
            counted = (sum(words_of), sum(words_of[i] for i in held) if evaluates_held_out(config, len(held)) else 0)
        else:
            counted = corpus_words(config.corpus, config.max_docs, config.held_out_fraction, config.seed,
                                   config.objective)
        # a small corpus (an upload, tiny, a few documents) cannot give the pieces asked for: its model, and the
        # estimate, are smaller
        learnt = None if init is not None else learnable_vocab_size(upload[1], config.vocab_size) if upload else \
            builtin_pieces(config.corpus, config.max_docs, config.held_out_fraction, config.seed, config.vocab_size)
        pieces = min(config.vocab_size, learnt or config.vocab_size)
        est = run_estimate(config, root, words=counted, vocab_size=pieces)
        # the MLM decoder's share of the tokens: the masked 15 %, or every one for a left-to-right model
        predicted = predicted_fraction(config)
        decoded = (f"the {predicted:.0%} masked tokens" if predicted < 1
                   else "every token (a left-to-right model predicts each)")
    if source != "Built-in" and (upload is None or corpus_error):
        st.caption("The parameters and the time are estimated once an upload is accepted.")  # (it said "0 words")
    elif est is not None:  # (refused settings: said above, nothing to estimate)
        m1, m2, m3 = st.columns(3)
        m1.metric("Parameters", f"{est['parameters'] / 1e6:,.1f} M")
        # the idle machine's time in large print, as the parts below add up to; the load's stretch in words under it
        # (the load of a passing moment in large print read as the run's time)
        m2.metric(f"Estimated time on {device_name()}", duration_text(est["seconds"]),
                  help="On an idle machine, the sum of the parts below; what else runs now may stretch it.")
        m3.metric("Training FLOPs", f"{est['tokens'] * est['flops_per_token']:.2e}")
        st.caption(f"On this machine now: {said(est['seconds'], background_threads())}.")
        st.caption(f"An **estimate**: {duration_text(est['seconds'])} on an idle machine, in four parts (the line above "
                   f"says how the load of the moment may stretch it). Training {duration_text(est['train_seconds'])}: {int(steps):,} "
                   f"steps × {int(batch)} × {int(seq_len)} tokens × {est['flops_per_token'] / 1e6:,.1f} MFLOPs per token "
                   f"(6·N + 12·L·H·T for N parameters, L layers, H hidden units and T tokens per sequence, + the output decoder on {decoded}) ÷ {est['flop_per_s'] / 1e9:,.0f} "
                   f"GFLOP/s ({est['basis']}). Evaluation {duration_text(est['eval_seconds'])}: "
                   f"{held_out_text(est['held_out_evaluations'], est['held_out_reason'])}"
                   f"{evaluated(est)}. Loading {duration_text(est['loading_seconds'])} before step 1 "
                   f"({est['loading_basis']}). Saving {duration_text(est['checkpoint_seconds'])}: {est['checkpoints']} "
                   f"checkpoint(s) of the weights and Adam's two moments, {est['checkpoint_bytes'] / 1e6:,.0f} MB each "
                   f"({est['checkpoint_basis']}).")
        if pieces < int(vocab_size):
            st.caption(f"The corpus gives **{pieces:,} WordPieces** of the {int(vocab_size):,} asked for (a small corpus "
                       "has too few pairs of pieces seen at least twice to learn more): the parameters, FLOPs and time "
                       "above are those of a model with that vocabulary.")

    if config is not None:  # what the run reads: a box showing a number out of its range keeps its last good one
        sequences = config.batch_size * config.grad_accum
        st.caption(f"Runs with: {config.max_steps:,} step{'' if config.max_steps == 1 else 's'} of {sequences} "
                   f"sequence{'' if sequences == 1 else 's'} of "
                   f"{config.max_seq_length} WordPieces, learning rate {config.lr:g} ({warmup_steps_of(config):,} "
                   f"warm-up steps), seed {config.seed}. A box that shows a number in red is out of its range: the run "
                   "keeps its last valid value.")
    run_name = kept_widget(st.text_input, "Run name (optional)", "pt_name", "", max_chars=200,
                           placeholder="automatic: pretrain-<size>-<corpus>-<time>")
    if run_name.strip() and slug(run_name) != run_name.strip():  # (cut or changed: said before the start)
        st.caption(f"Saved as **{slug(run_name)}**: a run's folder name keeps letters, digits, '-', '_' and '.', "
                   f"up to {NAME_CHARS} characters.")
    # a long run is asked for twice, as on Fine-tune (10,000,000 steps, 118 days here, started in one click)
    # a tick is for the run it was given for: a tick for 6,000 steps (40 min) held at 10,000,000 (46 days)
    confirmed = est is None or est["seconds"] <= LONG_RUN_ASK_S or not writes_allowed() or st.checkbox(
        f"Yes, pre-train for {said(est['seconds'], background_threads())} ({int(steps):,} steps). For a quicker run, "
        "set fewer steps or a smaller model.", key=f"pt_confirm_long_{settings_key(config.to_dict())}")
    if work_button("Start pre-training", type="primary", key="pt_start", disabled=bool(corpus_error) or not confirmed):
        run_dir = root / slug(run_name) if run_name.strip() else rv.new_run_dir(
            f"pretrain-{('warm-' + Path(init).name) if init else size}-{'upload' if upload else corpus}", root)
        refusal = new_run_refusal(run_dir, stored_first=False) or (  # checked before an upload is stored there
            f"A run called {run_dir.name} exists already; choose another name." if Run(run_dir).is_run() else None)
        if refusal:
            st.error(without_host_paths(refusal))
        else:
            path = None
            if upload:  # the text lives in the run directory, so the run can be resumed and repeated
                path = rv.store_upload(run_dir, "corpus.txt", upload[1])  # (a name a run's folder may hold)
                config = replace(config, corpus=str(path.resolve())) if path else None
            if config is not None and rv.launch("pretrain", config.to_dict(), run_dir, upload=path,
                                                remember=("pt_watch", finder.rel_name(run_dir, root))):
                st.success(f"Started {run_dir.name}.")  # and watched below

# ----- 2. watch a run ---------------------------------------------------------------------------
st.subheader("2. Watch a run")
shipped = shipped_frames()  # models that ship recorded time-lapse frames: the time-lapse works before any run
run, status = rv.watch_runs("pretrain", "pt_watch", "pt", root,
                            f"No pre-training runs under {shown_path(root)} yet: "
                            + ("start one above." if writes_allowed() else "your teacher can start one."),
                            stop=not shipped)

b1, b2, b3 = st.columns([1, 1, 2])
if run is None or not writes_allowed():
    pass  # no run yet, or classroom mode: no stop or resume from the network
elif run.is_active():
    if work_button("Stop", container=b1, key="pt_stop", help="Stops cleanly at the next step and writes a checkpoint."):
        run.request_stop()
        st.info("Stop requested: the run saves a checkpoint and stops at its next step.")
elif status.get("state") in ("stopped", "crashed", "failed", "finished"):
    cfg = {k: v for k, v in run.config().items() if k != "kind"}
    target = b2.number_input("Resume until step", 1, 10_000_000,  # keyed per run: each has its own end
                             max(int(cfg.get("max_steps", 1)), int(status.get("step") or 0) + 1),
                             key=f"pt_resume_to_{run.name}", persist_state="session")
    if work_button("Resume", container=b1, key="pt_resume", disabled=int(target) <= int(status.get("step") or 0),
                 help="Continues from the last checkpoint with the run's own settings (optimiser, schedule and data "
                      "position included). Another last step re-plans the learning-rate decay to reach 0 there; "
                      "the run's log says so."):
        try:  # the run's own settings, as its last checkpoint was trained with; only the end may move
            settings, _ = resume_settings(run.path, {"max_steps": int(target)})
            if refusal := text_changed(run.path, settings):  # (a process started on it would fail before training)
                raise ValueError(refusal)
        except (ValueError, OSError) as e:
            st.error(without_host_paths(str(e)))
        else:
            if rv.launch("pretrain", settings.to_dict(), run.path, resume=True):
                st.rerun()

ckpts = run.checkpoints() if run is not None else []
if ckpts:
    st.caption("Open any checkpoint in the exploration pages: the sidebar's **Model** list shows the checkpoints of "
               f"runs under {shown_path(root)} (e.g. `{shown_path(ckpts[-1][1])}`)"
               + ("; for another folder pick \"a local directory…\" and paste the path." if writes_allowed() else "."))

# ----- 3. time-lapse ----------------------------------------------------------------------------
st.subheader("3. Time-lapse: one sentence through training")


def _stamp(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # removed meanwhile (a deleted run)
        return 0


def _checkpoint_stamp(found) -> tuple:
    """(step, weights' version) of each checkpoint: a new one, or one re-written by a resume, changes it."""
    return tuple((s, weights_version(str(p))) for s, p in found)


def _run_stamp(path: Path) -> tuple:
    """The run's checkpoints and its frames file: what the time-lapse is drawn from."""
    return _checkpoint_stamp(Run(path).checkpoints()), _stamp(path / FRAMES_FILE)


RUN_SOURCE = "run"
sources = ([RUN_SOURCE] if run is not None else []) + list(shipped)
source = sources[0]
if len(sources) > 1:
    source = st.radio("Time-lapse of", sources, key="pt_tl_source", persist_state="session", horizontal=True,
                      format_func=lambda o: f"the run above ({run.name})" if o == RUN_SOURCE else
                      f"{o} (shipped with its recorded frames)")

if source == RUN_SOURCE and run.is_active():
    # While a run is active only its progress panel (a fragment in runs_view) redraws itself; the
    # rest of the page, this section included, was drawn once. This fragment looks for new
    # checkpoints and frames every few seconds and redraws the whole page when they changed, so
    # the time-lapse includes a checkpoint or a frame as soon as the run has written it.
    @st.fragment(run_every=3.0)
    def _watch_checkpoints(path: str, drawn: tuple):
        if _run_stamp(Path(path)) != drawn:
            st.rerun()

    _watch_checkpoints(str(run.path), _run_stamp(run.path))


@by_inputs(heavy=True, max_entries=16, show_spinner="Running the sentence through every checkpoint…")
def _timelapse(path: str, stamp: tuple, text: str, layer: int, head: int, k: int):
    # keyed by the checkpoints' steps and weights: a new or re-written checkpoint is a new entry
    return timelapse(path, text, layer, head, k, steps=[s for s, _ in stamp])


@by_inputs(max_entries=32)
def _recorded(path: str, stamp: int, sentence: int, layer: int, head: int, k: int):
    return timelapse_from_frames(path, sentence, layer, head, k)


@by_inputs(max_entries=8)
def _frames_doc(path: str, stamp: int) -> dict:
    return read_frames(path)


def _corpus_name(corpus: str) -> str:
    """A built-in corpus's name, or an upload's file name ("corpus-mine.txt (uploaded)"), not its host path."""
    return f"{Path(corpus).name} (uploaded)" if corpus.endswith(".txt") else corpus


OWN_SENTENCE = -1
frames_path = frames_file(run.path) if source == RUN_SOURCE else shipped[source]
doc = None
if frames_path is not None:
    try:
        doc = _frames_doc(str(frames_path), _stamp(frames_path))
    except ValueError as e:  # a damaged file: say so, and fall back on the checkpoints
        st.warning(sentence_of(e))
if doc is not None and not doc["frames"]:
    doc = None
if doc is None and (source != RUN_SOURCE or not ckpts):  # nothing to draw from (yet)
    if source == RUN_SOURCE:
        every = run.config().get("save_every")
        st.info("The time-lapse needs saved checkpoints; the run writes one "
                + (f"every {every:,} steps" if isinstance(every, int) and every != 1 else "at every step"
                   if every == 1 else "as it goes")
                + " and at the end (or set **Time-lapse frames to record** for the next run: it then records the "
                  "first frame at step 0).")
    st.stop()

sentence = OWN_SENTENCE
if doc is not None:
    choices = list(range(len(doc["sentences"]))) + ([OWN_SENTENCE] if source == RUN_SOURCE and ckpts else [])
    sentence = st.selectbox("Sentence", choices, key=f"pt_tl_sentence_{source}", persist_state="session",
                            format_func=lambda i: "your own sentence (read by every saved checkpoint)"
                            if i == OWN_SENTENCE else doc["sentences"][i]["text"] + "  (recorded frames)")

if sentence == OWN_SENTENCE:
    model_cfg = BertConfig.load(ckpts[-1][1])
    t1, t2, t3, t4 = st.columns([4, 1, 1, 1])
    # (each run its own box: an uploaded text's run opens on a sentence of its own held-out text)
    text = text_box(t1.text_input, "Sentence (write [MASK] where a word is hidden)", default_sentence(run.path),
                    key=f"pt_tl_text_{finder.rel_name(run.path, root)}", persist_state="session",
                    max_chars=limits.CHARS)
    # (a layer or head chosen on a deeper run becomes this one's last, said: it went to the first, unsaid)
    was = fit_kept("pt_tl_layer", model_cfg.num_layers - 1), fit_kept("pt_tl_head", model_cfg.num_heads - 1)
    layer = t2.selectbox("Layer", range(model_cfg.num_layers), key="pt_tl_layer",
                         persist_state="session", format_func=lambda i: f"{i + 1}")
    head = t3.selectbox("Head", range(model_cfg.num_heads), key="pt_tl_head",
                        persist_state="session", format_func=lambda i: f"{i + 1}")
    past_the_model(was, model_cfg.num_layers, model_cfg.num_heads)
    top_k = t4.number_input("Top-k", 1, 10, 5, key="pt_tl_k", persist_state="session")
    read = checkpoints_to_read(ckpts)
    if len(read) < len(ckpts):
        st.caption(f"The time-lapse reads {len(read)} of the run's {len(ckpts)} checkpoints, evenly spaced from step "
                   f"{read[0][0]:,} to step {read[-1][0]:,}: each one is loaded and run, and this server answers one "
                   "such request at a time.")
    try:
        tl = _timelapse(str(run.path), _checkpoint_stamp(read), text, layer, head, int(top_k))
    except ValueError as e:
        st.info(sentence_of(e))
        st.stop()
    moment = "checkpoint"
else:
    heads = [tuple(h) for h in doc["heads"]]
    t2, t3, t4 = st.columns(3)
    layer = t2.selectbox("Layer", sorted({a for a, _ in heads}), key=f"pt_tlf_layer_{source}", persist_state="session",
                         format_func=lambda i: f"{i + 1}")
    head = t3.selectbox("Head", [b for a, b in heads if a == layer], key=f"pt_tlf_head_{source}",
                        persist_state="session",
                        format_func=lambda i: f"{i + 1}")
    top_k = t4.number_input("Top-k", 1, int(doc["top_k"]), min(5, int(doc["top_k"])), key=f"pt_tlf_k_{source}",
                            persist_state="session")
    tl = _recorded(str(frames_path), _stamp(frames_path), sentence, layer, head, int(top_k))
    moment = "recorded step"
    src = tl.source
    c = src.get("config") or {}
    made = (f"Recorded by run **{src.get('run', '?')}** on {src.get('device', '?')} ({src.get('precision', '?')}): "
            f"{c.get('size') or c.get('init', '?')} model, corpus {_corpus_name(c.get('corpus', '?'))}, "
            f"{int(c.get('max_steps', 0)):,} steps of {c.get('batch_size', '?')} sequences, lr {c.get('lr', '?')}, "
            f"seed {c.get('seed', '?')}.")
    st.caption(made + (f" {src['note']}" if src.get("note") else ""))
    def pct(x):
        return None if x is None else round(100 * x, 1)

    with st.expander(f"What was measured at each of the {len(tl.frames)} recorded steps"):
        st.dataframe(pd.DataFrame([{
            "step": f.step, "sequences seen": f.sequences_seen, "tokens seen": f.tokens_seen,
            "held-out MLM accuracy (%)": pct(f.eval.get("mlm_accuracy")),
            "held-out MLM perplexity": None if f.eval.get("mlm_perplexity") is None else round(f.eval["mlm_perplexity"]),
            "held-out NSP accuracy (%)": pct(f.eval.get("nsp_accuracy"))} for f in tl.frames]), hide_index=True)

stack = tl.attention_stack()
# One colour scale for all moments, so the frames compare (darkest = the largest weight seen).
fig = px.imshow(stack, animation_frame=0, x=list(range(len(tl.tokens))), y=list(range(len(tl.tokens))),
                zmin=0, zmax=max(0.05, float(stack.max())), color_continuous_scale="Blues",
                labels=dict(x="attends to", y="query token", color="attention"),
                title=f"Layer {layer + 1}, head {head + 1}: attention at each {moment} (press ▶)")
ticks = dict(tickmode="array", tickvals=list(range(len(tl.tokens))), ticktext=tl.tokens)
fig.update_xaxes(**ticks)
fig.update_yaxes(**ticks)
for i, s in enumerate(fig.layout.sliders[0].steps if fig.layout.sliders else []):
    s.label = f"step {tl.steps[i]}"
if fig.layout.sliders:
    fig.layout.sliders[0].currentvalue.prefix = f"{moment}: "
fig.update_layout(height=520, margin=dict(l=10, r=10, t=50, b=10))
exports.figure(fig, "pt_tl_heatmap")

if tl.frames[-1].predictions:
    c1, c2 = st.columns(2)
    c1.markdown(f"**Masked-word guesses at each {moment}**")
    c1.dataframe(pd.DataFrame(tl.top_k_rows()), hide_index=True)
    rise = tl.emergence(3)
    if rise:
        df = pd.DataFrame([{"step": s, "word": w, "probability": p[i]} for w, p in rise.items()
                           for i, s in enumerate(tl.steps)])
        fig2 = px.line(df, x="step", y="probability", color="word", markers=True,
                       title=f"P(word) at the first [MASK]: the last {moment}'s top 3")
        fig2.update_layout(height=320, margin=dict(l=10, r=10, t=40, b=10))
        # in percent: plotly's own ticks for small probabilities are SI ("200µ"), which reads as a unit
        fig2.update_yaxes(tickformat=".3~%")
        exports.figure(fig2, "pt_tl_rise", container=c2)
        if df["probability"].isna().any():
            c2.caption("A gap: that recorded step (before a resume) did not keep this word's probability.")
else:
    st.info("Write [MASK] in the sentence to see the masked-word guesses too.")
