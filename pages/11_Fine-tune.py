from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from bert_explorer import limits
from bert_explorer.app import exports
from bert_explorer.app import data_view as dv
from bert_explorer.app import runs_view as rv
from bert_explorer.app.run_figures import confusion_shown
from bert_explorer.app.keep import follow, kept_widget, setting, settings_key, text_box
from bert_explorer.app.state import by_inputs, device_name, model_picker, shown_path, without_host_paths
from bert_explorer.app.roles import work_button, writes_allowed, writes_off
from bert_explorer.app.widgets import intro
from bert_explorer import checkpoint
from bert_explorer.checkpoint import CheckpointError
from bert_explorer.data.tasks import BUILTIN_TASKS, check_dev_labels
from bert_explorer.data.uploads.core import DataError
from bert_explorer.data.uploads.names import slug, table_columns
from bert_explorer.data.uploads.reader import FORMATS, ONE_TASK_FORMATS
from bert_explorer.runs import finder
from bert_explorer.runs.run import runs_root
from bert_explorer.runs.report import LABELS, SCORES, duration_text, finetune_result, score_text
from bert_explorer.safe_text import markdown_text as md
from bert_explorer.tasks.base import CUT_SAMPLE, cut_note
from bert_explorer.tasks.registry import GLUE_SETTINGS, TASK_TYPES, task_type
from bert_explorer.tasks.metrics import small_dev_warning
from bert_explorer.hub_datasets import EXAMPLE
from bert_explorer.train.estimate import LONG_RUN_ASK_S
from bert_explorer.train.finetune_resume import resume_settings as resume_finetuning
from bert_explorer.train.speed import said
from bert_explorer.train.finetune import (check_start as check_finetuning, dev_sample_note, estimate, few_steps_note,
                                          ltr_problem, positions_of, read_spec, repeated_examples, resume_refusal,
                                          steps_text)
from bert_explorer.train.finetune_config import (FEATURE_MODES, FINETUNE_DEFAULT_MODEL, MAX_GRAD_ACCUM, MAX_PATIENCE,
                                                 MAX_TRAIN_EXAMPLES, DEV_FRACTION_RANGE, FinetuneConfig)

intro("Fine-tune", """
BERT's second stage (Devlin et al. 2019, Section 3.2 and Figure 4; its results are Section 4): put **one small
output layer** on the pre-trained model and train everything for a few epochs on labelled data: sentence or pair
classification (GLUE), token tagging (NER), answer spans (SQuAD) or multiple choice (SWAG). Bring a
file or pick a built-in set; the settings start from what the paper used for the task chosen (GLUE: batch 32,
lr 5e-5, 3 epochs; SWAG: batch 16, lr 2e-5), and *Settings* says which.
The **feature-based** mode (Section 5.3, Table 7) freezes BERT and trains a small BiLSTM on its
activations instead.
""")




@by_inputs(max_entries=16, show_spinner=False)
def _cut_cached(model: str, texts: tuple, max_len: int) -> str | None:
    return cut_note([{"tokens": list(t)} if p == WORDS else {"text": t, "text_pair": p} for t, p in texts],
                    checkpoint.tokenizer_of(model), max_len)


WORDS = "\0words"  # in place of a pair: the text is a tagged sentence of words (no typed text holds a NUL)


def _cut(model: str, data, max_len: int) -> str | None:
    """How many of an upload's texts (or NER sentences) are longer than the run reads (``tasks.base.cut_note``)."""
    first = data.examples[0] if data.examples else {}
    if not (isinstance(first.get("text"), str) or isinstance(first.get("tokens"), list)):
        return None
    step = max(1, len(data.examples) // CUT_SAMPLE)
    texts = tuple((tuple(map(str, ex["tokens"])), WORDS) if "tokens" in ex else (ex["text"], ex.get("text_pair"))
                  for ex in data.examples[::step][:CUT_SAMPLE])
    try:
        return _cut_cached(str(model), texts, int(max_len))
    except checkpoint.CheckpointError:
        return None

def long_run_confirmed(config: FinetuneConfig, data, n_dev: int | None = None) -> bool:
    """The estimate of this run on this machine, said before it starts; above LONG_RUN_ASK_S a box
    must be ticked first. The counts are the run's own (``finetune.estimate``): the dev set split off
    (or ``n_dev``, a dev set given apart), the sampling of a set larger than one run keeps, the
    WordPieces as the run featurises and pads them."""
    try:
        est = estimate(config, data, n_dev)
    except (CheckpointError, OSError, ValueError, KeyError) as e:  # the run says why, in one sentence, as it starts
        st.caption(without_host_paths(f"No estimate of this run's time: {e}"))
        return True
    n_train, n_dev, kept = est["train_examples"], est["dev_examples"], est["train_available"]
    sampled = f" ({n_train:,} of the {kept:,} training examples, sampled)" if n_train < kept else ""
    dev_sampled = f" (of the {est['dev_available']:,} the dev set holds, sampled: a run scores at most {n_dev:,})" \
        if n_dev < est["dev_available"] else ""
    when = f"every {config.eval_every:,} steps" if config.eval_every else "after each epoch"
    st.caption(f"Estimated time on {device_name()}: **{said(est['seconds'], est['threads'])}**: {steps_text(est, config)}"
               f"{sampled} of about "
               f"{est['tokens_per_example']:.0f} WordPieces (about {duration_text(est['train_seconds'])}), {n_dev:,} dev "
               f"examples{dev_sampled} scored {when} "
               f"and at the end (about {duration_text(est['eval_seconds'])}), and the start, the model read and saved (about "
               f"{duration_text(est['loading_seconds'])}); {est['basis']}.")
    if est["seconds"] <= LONG_RUN_ASK_S:
        return True
    return st.checkbox(f"Yes, fine-tune for {said(est['seconds'], est['threads'])} ({est['steps']:,} steps). For a "
                       "quicker run, set *Use at most N training examples* or fewer epochs under Advanced settings.",
                       key=f"ft_confirm_long_{settings_key(asdict(config))}")  # (a tick for the run it was given for)


root = runs_root()
said_above = None  # the small-dev-set sentence said for the upload, if any (the run's is then not said again)
base = model_picker(FINETUNE_DEFAULT_MODEL)  # the pre-trained model to start from (sidebar)

if not writes_off("Fine-tuning"):  # classroom mode: watch runs, start none
    # ----- 1. data ------------------------------------------------------------------------------------
    st.subheader("1. Data")
    # kept, like the settings below: the data chosen holds when the user leaves the page and comes back
    source = setting(st.radio, "Training data", "ft_source", "Upload a file",
                         options=["Upload a file", "Built-in dataset", "A Hugging Face data set"], horizontal=True)
    upload, data, data_error, spec, columns, hub_spec, hub_dev = None, None, None, {}, None, "", ""
    dev_upload, dev_data = None, None  # an uploaded dev file, and what it reads as
    hub_dev_examples = None  # a Hub dev split's size: the estimate counts it, not a part of the training split
    named_task = None  # the task the user named for an upload, rather than one read off the file
    if source == "Upload a file":
        # the formats the reader reads, each with what it holds (data/uploads/reader.py): none more, none fewer
        tables = [f for f in FORMATS if f not in ONE_TASK_FORMATS]
        upload = dv.uploaded_file(
            f"{', '.join(tables[:-1])} or {tables[-1]} for any task ({', '.join(TASK_TYPES)}); "
            + "; ".join(f"{f} for {task}" for f, task in ONE_TASK_FORMATS.items()),
            key="ft_upload", help="  \n".join(f"**{name}**: {what}." for name, what in FORMATS.items())
            + "  \nThe file is saved into the run's directory; it is read as a table or as text, never unpickled.")
        if upload is None:
            data_error = "Upload a file, or choose a built-in dataset."
        else:
            name, raw = upload
            columns = table_columns(raw)
            c = st.columns(4)
            # the task a person names here is the object from then on (None: detect it from the file)
            tasks = [None, *TASK_TYPES.values()]
            task = kept_widget(c[0].selectbox, "Task", "ft_task", None, options=tasks, valid=lambda t: t in tasks,
                               format_func=lambda t: "(detect)" if t is None else t.name)
            pick = {}
            if columns:
                for col, (what, key) in zip(c[1:], (("Text column", "text_column"), ("Second text column (pairs)",
                                                                                       "text_pair_column"),
                                                    ("Label column", "label_column"))):
                    pick[key] = kept_widget(col.selectbox, what, f"ft_{key}", "(detect)", options=["(detect)", *columns],
                                            valid=lambda v: v in ["(detect)", *columns])
            chosen = {k: (None if v == "(detect)" else v) for k, v in pick.items()}
            spec, named_task = {"task": task and task.name, **chosen}, task
            outcome, result = dv.read_upload(name, raw, task, chosen.get("text_column"),
                                            chosen.get("text_pair_column"), chosen.get("label_column"))
            if outcome == "error":
                data_error = result
                st.error(result)
            else:
                data = result
                # a dev file of the user's own: the paper's dev sets are given apart from their training sets
                dev_upload = dv.uploaded_file("Dev file (optional: else a part of the training file is held out)",
                                              key="ft_dev_upload",
                                              help="Read as the training file is, with the same task and columns; "
                                                   "saved into the run's directory beside it.")
                if dev_upload is not None:
                    dev_outcome, dev_data = dv.read_upload(dev_upload[0], dev_upload[1], data.task,
                                                           chosen.get("text_column"), chosen.get("text_pair_column"),
                                                           chosen.get("label_column"))
                    try:
                        if dev_outcome == "error":
                            raise DataError(dev_data)
                        check_dev_labels(data, dev_data)
                    except DataError as e:
                        data_error = str(e)
                        st.error(data_error)
                    else:
                        scored = dev_sample_note(len(dev_data.examples))
                        st.caption(f"Dev file {md(dev_upload[0])}: {len(dev_data.examples):,} examples, scored "
                                   "instead of a part of the training file" + (f"; {scored}." if scored else "."))
    elif source == "A Hugging Face data set":
        h1, h2 = st.columns(2)
        hub_spec = text_box(h1.text_input, "Training split", key="ft_hub_spec", persist_state="session",
                            max_chars=200, placeholder=EXAMPLE,
                            help="hf:OWNER/NAME[/CONFIG][:SPLIT], as on the data set's Hub page: its Parquet "
                                 "files are downloaded once into the Hugging Face cache (HF_HOME), then read "
                                 "offline, bounded like an upload.").strip()
        hub_dev = text_box(h2.text_input, "Dev split (optional; else a part of the training split)", key="ft_hub_dev",
                           persist_state="session", max_chars=200,
                           placeholder=EXAMPLE.replace(":train", ":validation")).strip()
        fetched = st.session_state.get("ft_hub_read") == (hub_spec, hub_dev)
        if not hub_spec:
            data_error = f"Name a data set on the Hub, e.g. {EXAMPLE}."
        elif fetched or work_button("Download and read it", key="ft_hub_fetch",
                                    help="Fetches the split's Parquet files from the Hugging Face Hub (nothing "
                                         "else of the data set), or reads them from the cache."):
            for part in filter(None, (hub_dev, hub_spec)):  # the training split last: its data is the preview
                outcome, result = dv.hub_split(part)
                if outcome == "error":
                    data, data_error = None, result
                    st.error(without_host_paths(result))
                    break
                if part == hub_dev and part != hub_spec:
                    hub_dev_examples = len(result.examples)
                data = result
            if data_error is None:
                st.session_state["ft_hub_read"] = (hub_spec, hub_dev)
        else:
            data_error = "Download the data set (the button above) to see it and fine-tune on it."
    else:
        options = [n for n, t in BUILTIN_TASKS.items() if t.available] + [f"tiny:{t}" for t in TASK_TYPES]
        builtin = setting(st.selectbox, "Built-in dataset", "ft_builtin", options[0], options=options,
                              valid=lambda v: v in options,
                              format_func=lambda n: f"{n} ({BUILTIN_TASKS[n].task.name})" if n in BUILTIN_TASKS else
                              f"{n} (generated, 64 examples: a run in seconds)")
        if builtin in BUILTIN_TASKS:
            info = BUILTIN_TASKS[builtin]
            st.caption(f"{info.description}  \n*Source:* {info.provenance}  \n*Licence:* {info.licence}")
        if st.toggle("Show a preview", key="ft_builtin_preview", persist_state="session"):
            data = dv.builtin_data(builtin)

    if data is not None:
        summary = data.summary()
        st.success(f"{'Task (as chosen)' if named_task is not None else 'Detected task'}: **{data.task.name}** · "
                   f"{len(data.examples):,} examples"
                   + (f" · labels: {md(', '.join(map(str, data.label_names[:12])))}" if data.label_names else ""))
        for note in data.notes:
            st.caption(f"• {md(note)}")  # a note may quote the file: shown as its characters
        st.dataframe(dv.examples_frame(data, 20), hide_index=True)
        if summary.get("label_counts") and not data.task.per_token:  # NER counts tags, shown above
            st.caption("Examples per label: " + ", ".join(f"{md(str(k))} {v:,}" for k, v in summary["label_counts"].items()))

    # ----- 2. settings ----------------------------------------------------------------------------------
    st.subheader("2. Settings")
    if data is not None:
        task_kind = data.task
    elif source == "Built-in dataset":
        task_kind = BUILTIN_TASKS[builtin].task if builtin in BUILTIN_TASKS else task_type(builtin[5:])
    else:
        task_kind = None
    # the paper's settings differ by task (Section 4): the boxes start from what it used for this task, not GLUE's
    # for all; a value the user gave holds when the task changes (keep.follow)
    task_defaults = task_kind.paper_defaults if task_kind is not None else TASK_TYPES["classification"].paper_defaults
    own = [name for key, name, value in zip(("ft_batch", "ft_lr", "ft_epochs"), ("batch", "learning rate", "epochs"),
                                            task_defaults) if follow(key, value)]
    named = task_kind.in_words or task_kind.name if task_kind is not None else ""
    if task_kind is None:
        used = ("The boxes start from the paper's GLUE settings (Section 4.1): batch 32, lr 5e-5, 3 epochs; they "
                "follow the task once it is known.")
    elif task_kind.paper_settings == GLUE_SETTINGS:  # (said once: "GLUE" twice read as two sets of settings)
        used = (f"The boxes start from the paper's own settings for {named}, a GLUE task's (Section 4.1): batch 32, "
                "3 epochs, the best on dev of lr 5e-5, 4e-5, 3e-5 and 2e-5 (5e-5 here).")
    elif task_kind.paper_settings:
        batch, rate, n = task_defaults
        rate = f"{rate:.0e}".replace("e-0", "e-")  # (as the paper writes it: 2e-5)
        numbers = f"batch {batch}, lr {rate}, {n:g} epochs"
        origin, _, given = task_kind.paper_settings.partition(": ")
        # the source alone where the paper's settings are these numbers (else they would be said twice)
        origin = origin if given == numbers else task_kind.paper_settings
        used = f"The boxes start from what the paper used for {named}: {numbers} ({origin})."
    else:
        used = (f"For {named} the paper gives no settings of its own: the boxes start from its GLUE ones (Section "
                "4.1: batch 32, lr 5e-5, 3 epochs), within Appendix A.3's ranges.")
    mine = (f" What you typed holds ({', '.join(own)}): type the paper's value back to follow the task again."
            if own else "")
    st.caption(used + mine + " Dropout 0.1 and a 10 % linear warm-up as in Google's released scripts (the paper "
               "gives none for fine-tuning). Appendix A.3 suggests searching the learning rates 5e-5, 3e-5 and 2e-5 "
               "(with batch 16 or 32 and 2 to 4 epochs) and keeping the best on dev; one rate is the default because "
               "the three take three times as long: tick *Try 5e-5, 3e-5, 2e-5* under Advanced settings to search "
               "them.")
    with st.expander("Advanced settings"):
        a1, a2, a3 = st.columns(3)
        # kept: the settings hold when the user leaves the page and comes back (app/keep.py)
        lr = setting(a1.number_input, "Learning rate", "ft_lr", task_defaults[1], min_value=1e-6, max_value=1e-2,
                         step=1e-5, format="%.0e")
        grid = setting(a1.checkbox, "Try 5e-5, 3e-5, 2e-5 and keep the best on dev", "ft_lr_grid", False)
        epochs = setting(a2.number_input, "Epochs", "ft_epochs", task_defaults[2], min_value=0.1, max_value=100.0,
                             step=1.0)
        batch = setting(a2.number_input, "Batch size", "ft_batch", task_defaults[0], min_value=1, max_value=1024)
        # no longer than the model's learned positions (a small model of one's own may have fewer than 512)
        longest = min(512, positions_of(base) or 512) if base else 512
        max_len = setting(a3.number_input, "Max sequence length (WordPieces)", "ft_max_len", min(128, longest),
                              min_value=min(16, longest), max_value=longest, step=16, valid=lambda v: v <= longest)
        mode = setting(a3.radio, "Mode", "ft_mode", "fine-tune", options=["fine-tune", "feature-based"],
                           help="feature-based: BERT frozen, a 2-layer BiLSTM trained on its activations (Table 7).")
        features = setting(a3.selectbox, "Features (feature-based)", "ft_features", "concat-last-4",
                               options=FEATURE_MODES, disabled=mode != "feature-based")
        max_train = setting(a1.number_input, f"Use at most N training examples (0 = all, up to "
                                f"{MAX_TRAIN_EXAMPLES:,})", "ft_max_train", 0, min_value=0, max_value=MAX_TRAIN_EXAMPLES)
        dev_fraction = setting(a2.number_input, "Dev fraction held out", "ft_dev_fraction", 0.1,
                                   min_value=DEV_FRACTION_RANGE[0], max_value=DEV_FRACTION_RANGE[1])
        seed = setting(a3.number_input, "Seed", "ft_seed", 0, min_value=0, max_value=1_000_000)
        pos_weight = setting(a1.selectbox, "Label weights (multi-label)", "ft_pos_weight", "none",
                                 options=["none", "balanced"],
                                 help="balanced: each label's positive examples weigh its negatives over its positives "
                                      "in the training set (at most 100), so that rare labels are learnt too.")
        # what transformers' Trainer users reach for (its setting's name in each help)
        accum = setting(a2.number_input, "Gradient accumulation (batches a step)", "ft_grad_accum", 1, min_value=1,
                            max_value=MAX_GRAD_ACCUM,
                            help="Adds up the gradients of this many batches before each update: a larger batch than "
                                 "fits in memory (gradient_accumulation_steps).")
        eval_every = setting(a3.number_input, "Evaluate every N steps (0 = after each epoch)", "ft_eval_every", 0,
                                 min_value=0, max_value=1_000_000, help="eval_strategy='steps', eval_steps.")
        patience = setting(a1.number_input, "Early stopping: patience (0 = never)", "ft_patience", 0, min_value=0,
                               max_value=MAX_PATIENCE,
                               help="Stops after this many evaluations in a row whose main dev metric did not beat the "
                                    "best so far (EarlyStoppingCallback).")
        threshold = setting(a2.number_input, "Early stopping: least improvement", "ft_threshold", 0.0,
                                min_value=0.0, max_value=1.0, step=0.001, format="%.3f",
                                help="How much the main dev metric must beat the best so far to count as better.")
        keep_best = setting(a3.checkbox, "Keep the best evaluation's model", "ft_keep_best", False,
                                help="The run's model is the one of its best evaluation, not its last; the log says "
                                     "which step (load_best_model_at_end).")
        save_checkpoints = setting(a3.checkbox, "A checkpoint at each evaluation", "ft_save_checkpoints", False,
                                       help="So that a run killed mid-way can resume (a Stop always saves one).")

    if data is not None and source == "Upload a file":
        n_dev = len(dev_data.examples) if dev_upload and dev_data is not None and data_error is None else \
            round(len(data.examples) * dev_fraction)  # dev is split off first, where no dev file is given
        if warning := small_dev_warning(n_dev, counted=data.task.right_or_wrong):
            st.warning(warning)
            said_above = warning
        if not dev_upload and (repeated := repeated_examples(data)):  # (split at random: copies in train and dev)
            st.warning(f"{repeated:,} of the {len(data.examples):,} examples share their text word for word with "
                       "another: a random split puts copies in train and dev alike, and the dev score then counts "
                       "text the model trained on. Remove the repeated rows, or give a dev file of its own.")
    if data_error is None and base and (why := ltr_problem(base, task_kind, mode)):
        data_error = why
        st.error(why)
    if data_error is None and task_kind is not None and pos_weight != "none":
        try:  # the task says whether it weighs labels: a refusal here, not when the run starts
            task_kind.positive_weights([], [], pos_weight)
        except ValueError as e:
            data_error = str(e)[0].upper() + str(e)[1:] + "."
            st.error(data_error)
    # The run's settings as the object the run reads, built now: a bad value is said here, before a run starts.
    # The uploaded file's place in the run directory is known only once the run is made (below).
    try:
        config = FinetuneConfig(
            model=str(Path(base).resolve()) if base and Path(base).exists() else (base or FINETUNE_DEFAULT_MODEL),
            train=(upload[0] if upload else "" if source == "Upload a file" else hub_spec
                   if source == "A Hugging Face data set" else builtin if builtin.startswith("tiny:")
                   else f"builtin:{builtin}"),
            dev=hub_dev or (dev_upload[0] if dev_upload else None),
            **{k: v for k, v in spec.items() if v}, mode=mode, features=features, max_seq_length=int(max_len),
            batch_size=int(batch), lr=float(lr), lr_grid=[5e-5, 3e-5, 2e-5] if grid else [], epochs=float(epochs),
            max_train_examples=int(max_train) or None, dev_fraction=float(dev_fraction), seed=int(seed),
            pos_weight=pos_weight, grad_accum=int(accum), eval_every=int(eval_every) or None,
            early_stopping_patience=int(patience) or None, early_stopping_threshold=float(threshold),
            keep_best=bool(keep_best), save_checkpoints=bool(save_checkpoints))
        if base:  # the length against the model's positions, the batch against the memory free here
            check_finetuning(config)
    except (ValueError, CheckpointError) as e:
        config = None
        if data_error is None:
            data_error = str(e)
            st.error(data_error)
    ready = data_error is None and bool(base)
    if not base:
        st.info("Choose the pre-trained model to start from in the sidebar.")
    if ready and config is not None:  # how long, before it starts; a long run is asked for, never started by a slip
        if source == "Built-in dataset" and builtin.startswith("tiny:"):
            estimated = read_spec(config, config.train)  # generated at the run's own size
        else:
            estimated = data if data is not None else dv.builtin_data(builtin)
        ready = long_run_confirmed(config, estimated, hub_dev_examples if source == "A Hugging Face data set" else
                                   len(dev_data.examples) if dev_upload and dev_data is not None else None)
    if config is not None:  # what the run reads: a box showing a number out of its range keeps its last good one
        # the model first: it is the sidebar's, which every page shares (a choice made on another page was fine-tuned
        # without a word of it on this one)
        st.caption(f"Runs with: **{md(shown_path(base))}**, the model chosen in the sidebar (choose another there), "
                   f"{config.epochs:g} epoch{'s' if config.epochs != 1 else ''}, learning rate "
                   + (", ".join(f"{v:g}" for v in config.lr_grid) + " (the best on dev kept)" if config.lr_grid
                      else f"{config.lr:g}")
                   + f", batch {config.batch_size * config.grad_accum}, {config.max_seq_length} WordPieces at most, "
                     f"{config.dev_fraction:.0%} held out for dev (when no dev set is given), seed {config.seed}. A box "
                     "that shows a number in red is out of its range: the run keeps its last valid value.")
        if data is not None and source == "Upload a file":  # (dev is split off first, then the cap applies)
            n_train = len(data.examples) - (0 if dev_upload else round(len(data.examples) * config.dev_fraction))
            if few := few_steps_note(min(n_train, config.max_train_examples or n_train), config):
                st.info(few[0].upper() + few[1:] + ".")
            if cut := _cut(config.model, data, config.max_seq_length):  # (said before the run, not after it)
                st.info(cut[0].upper() + cut[1:] + ".")
    if work_button("Fine-tune", type="primary", key="ft_start", disabled=not ready):
        stem = Path(upload[0]).stem if upload else slug(hub_spec) if hub_spec else builtin.replace(":", "-")
        named = Path(base).parent.name if Path(base).name == "model" else Path(base).name  # (a run's model/ folder)
        run_dir = rv.new_run_dir(f"finetune-{slug(named or base)}-{stem}", root)  # the model in the name too
        path, stored = None, []
        if upload:  # the data travels with the run: it can be repeated and inspected later
            path = rv.store_upload(run_dir / "data", upload[0], upload[1])
            config = replace(config, train=str(path.resolve())) if path else None
            stored = [path] if path else []
        if upload and dev_upload and config is not None:
            dev_path = rv.store_upload(run_dir / "data", dev_upload[0], dev_upload[1])
            config = replace(config, dev=str(dev_path.resolve())) if dev_path else None
            stored += [dev_path] if dev_path else []
        if config is not None and rv.launch("finetune", asdict(config), run_dir, upload=stored,
                                            remember=("ft_watch", finder.rel_name(run_dir, root))):
            st.success(f"Started {run_dir.name}.")  # and shown below

# ----- 3. the run -------------------------------------------------------------------------------------
st.subheader("3. Run and dev results")
run, status = rv.watch_runs("finetune", "ft_watch", "ft", root, f"No fine-tuning runs under {shown_path(root)} yet.")
if run.is_active() and writes_allowed() and work_button("Stop", key="ft_stop",
                                 help="Stops at the next step, then evaluates and saves the model as it is."):
    run.request_stop()  # a queued run leaves the GPU queue; a running one stops cleanly
    st.rerun()
if (writes_allowed() and status.get("state") in ("stopped", "failed", "crashed") and run.resumable_checkpoints()
        and work_button("Resume", key="ft_resume",
                        help="Continues from the run's last checkpoint with its own settings (weights, optimiser, "
                             "schedule, data order and evaluations so far); what the stopped run kept is moved to "
                             "set_aside/.")):
    try:  # the run's own settings, on the data it trained on: a resume changes nothing it has trained on
        settings, _ = resume_finetuning(run.path, {}, FinetuneConfig)
        if refusal := resume_refusal(settings, run.path):
            raise ValueError(refusal)
    except (ValueError, OSError, KeyError) as e:
        st.error(without_host_paths(str(e)))
    else:
        if rv.launch("finetune", asdict(settings), run.path, resume=True):
            st.rerun()
result = finetune_result(run)
if result is None:
    st.stop()
has_model = (run.path / "model").is_dir() or (run.path / "feature_head").is_dir()

def _scores_table(frame: pd.DataFrame, where) -> None:
    """Precision, recall and F1 by class or by type in per cent, as the tiles above say scores (they were fractions
    to three decimals beside them, and an F1 of 0 read "0"); counts as counts."""
    where.dataframe(frame, column_config={c: st.column_config.NumberColumn(format="percent")
                                          for c in frame.columns if c in SCORES})


dev = result["dev"]
task = result["task"]
kind = TASK_TYPES.get(task)  # the run names its task type; None: one this version does not know
main = list(kind.metrics) if kind else []
shown = [k for k in main if isinstance(dev.get(k), (int, float))]
cols = st.columns(max(1, len(shown)) + 1)
for col, k in zip(cols, shown):
    named = f" of {dev['f1_of']}" if k == "f1" and dev.get("f1_of") else ""  # the class a two-class F1 is of
    col.metric(f"dev {LABELS.get(k, k)}{named}, saved model", score_text(k, dev[k], kind.percent),
               help="The model as saved, scored on the dev set in float32 at the end of the run (a run trained in "
                    "bf16 measured its curves in bf16, which moved a Pearson r in the second decimal); After "
                    "fine-tuning reads the same model example by example.")
cols[-1].metric("examples (train / dev)", f"{result.get('train_examples', 0):,} / {result.get('dev_examples', 0):,}")
if result.get("steps") == 0 and has_model:  # (its tiles and its Try box read as a trained model's)
    st.warning("This run stopped before its first step: its model is the pre-trained one with an untrained task head, "
               "so its dev scores are that head's guesses and its answers below are not a fine-tuned model's; start "
               "it again to fine-tune.")
# said once: the upload's dev set above and this run's may be the same 8 examples, in the same sentence
if (warning := small_dev_warning(result.get("dev_examples", 0), counted=kind.right_or_wrong if kind else True)) \
        and warning != said_above:
    st.warning(warning)

if "confusion_matrix" in dev:
    labels = [str(x) for x in dev.get("labels") or result.get("label_names") or []]
    matrix, labels, title, shown_note = confusion_shown(dev["confusion_matrix"], labels)
    if shown_note:
        st.caption(shown_note)
    fig = px.imshow(matrix, x=labels, y=labels, text_auto=True, color_continuous_scale="Blues",
                    labels=dict(x="predicted", y="true", color="examples"), title=title)
    # label names are names even when they look like numbers: plotly would put labels 0 and 1 on a number
    # line ticked -0.5, 0, 0.5, ...
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    fig.update_layout(height=200 + 30 * len(labels), margin=dict(l=10, r=10, t=40, b=10))
    c1, c2 = st.columns(2)
    exports.figure(fig, "ft_confusion", container=c1)
    _scores_table(pd.DataFrame(dev.get("per_class", {})).T, c2)
if dev.get("per_type"):  # entity F1 by type (NER)
    st.markdown("**Entities by type (dev, exact span and type)**")
    _scores_table(pd.DataFrame(dev["per_type"]).T, st)
if kind.after_run_answers:
    if dev.get("null_threshold") is not None:
        st.caption(f"No-answer threshold τ = {dev['null_threshold']:.2f}, tuned on dev (Section 4.3).")
    if has_model:
        st.markdown("**Some dev questions**")
        st.dataframe(pd.DataFrame(dv.qa_examples(str(run.path))), hide_index=True)

# ----- 4. try it ---------------------------------------------------------------------------------------
if not has_model:
    st.info("This run kept its metrics but not its model (an ablation cell keeps only its score), so there is "
            "nothing to try or download.")
    st.stop()
st.subheader("4. Try the model")
# each run's own boxes (a box shared by every run showed the last run's prediction under a box drawn empty)
typed = [text_box(st.text_area if i.long else st.text_input, i.label, key=f"{key}_{run.name}",
                  max_chars=limits.CHARS, persist_state="session")
         for i, key in zip(kind.inputs if kind else (), ("ft_try_text", "ft_try_pair"))]
example = None
if typed and all(t.strip() for t, i in zip(typed, kind.inputs) if i.required):
    second = typed[1] if len(typed) > 1 else ""
    if kind.inputs[-1].choices:
        second = [c.strip() for c in second.splitlines() if c.strip()]
    try:
        example = kind.example_from_text(typed[0], second or None)
    except ValueError:  # not enough to predict yet (e.g. one choice)
        example = None
if example is not None:
    try:
        predictor = rv.predictor(run)
        out = predictor.predict([example])[0]
    except (KeyError, ValueError) as e:
        st.error(without_host_paths(f"The input does not fit a {task} model: {e}"))
        out = None
    except CheckpointError as e:
        st.error(without_host_paths(f"The model of this run cannot be loaded: {e}"))
        out = None
    if out is not None:  # the task type of the model that answered says how its answer reads
        shown = predictor.task.shown(out, example)
        if shown.table is None:
            st.metric(shown.title, shown.text)
        else:  # one column per word, then the answer in a line
            st.dataframe(pd.DataFrame(shown.table).T)
            st.write(f"{md(shown.title)}: {md(shown.text)}")
        if shown.scores:
            # multi-label: each label's own probability; one label: the softmax over the labels (sums to 1)
            st.bar_chart(pd.Series(shown.scores, name="probability"), x_label="label",
                         y_label="probability" + (" (each label on its own)" if shown.title == "Labels" else ""))

# ----- 5. download -------------------------------------------------------------------------------------
st.subheader("5. Download")
model_dir = run.path / "model" if (run.path / "model").is_dir() else run.path / "feature_head"
if model_dir.is_dir():
    # Packed when the button is clicked (Streamlit calls the function then), not on every first visit: a
    # model of 90 MB takes seconds to pack.
    st.download_button("Download the model (zip)", lambda: rv.zip_model(model_dir, f"{run.name}-{model_dir.name}"),
                       file_name=f"{run.name}-{model_dir.name}.zip", mime="application/zip", key="ft_download")
    if model_dir.name == "model":
        st.caption("A transformers-compatible checkpoint (config.json with the label names, model.safetensors, "
                   "vocab.txt): `BertFor…from_pretrained(folder)` loads it; so does this app's sidebar "
                   "(\"a local directory…\").")
    else:
        st.caption("Feature-based runs save only the BiLSTM head (safetensors) and the name of the frozen base model.")
