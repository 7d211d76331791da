"""``bert-explorer attribute``: Integrated Gradients, as the Attributions page computes them.

    bert-explorer attribute --model minilm-mlm-nsp --text "oil prices will [MASK] next year ." --word rise
    bert-explorer attribute --model minilm-mlm-nsp --text "the match ended ." --text-b "both teams scored ."
    bert-explorer attribute --model runs/bbc --text "Shares fell sharply after the bank's results."

Which input words raised the model's score f and which lowered it: f is log P(word) at the first [MASK], the
next-sentence log-odds, or a fine-tuned classifier's log P(class). The attributions add up to f(x) − f(baseline);
the integration steps double until the convergence delta is within the page's rule, within the same budget of
WordPieces × steps the app allows one attribution (``limits``).
"""
from __future__ import annotations

import sys
from pathlib import Path

from .. import checkpoint, limits
from ..analysis.attributions.integrated_gradients import (BASELINES, DEFAULT_BASELINE, baseline_note,
                                                          explain_classifier, explain_masked_word,
                                                          explain_next_sentence)
from ..analysis.attributions.kept import integration
from ..analysis.attributions.reliability import DEFAULT_STEPS, MAX_STEPS
from ..analysis.probes.pretraining_tasks import copied_word, load_for_probe
from ..tasks.registry import task_type
from ..train.predict import training_args
from .common import MODEL_HELP, UserError, print_json, refuse_second_text, user_errors, whole

TARGETS = ("masked-word", "next-sentence", "classifier")


def register(sub) -> None:
    a = sub.add_parser("attribute", help="Integrated Gradients: which input words made the model's answer")
    a.add_argument("--model", required=True, help=MODEL_HELP + "; for --target classifier, a fine-tuning run "
                                                               "or its model folder")
    a.add_argument("--text", required=True, help="the input (with a [MASK] for --target masked-word)")
    a.add_argument("--text-b", help="a second sentence: sentence B of a pair")
    a.add_argument("--target", choices=TARGETS,
                   help="what is explained (default: classifier for a fine-tuned model, masked-word for a text "
                        "with [MASK], else next-sentence)")
    a.add_argument("--word", help="masked-word: the word whose probability is explained (default: the model's "
                                  "first guess)")
    a.add_argument("--label", help="classifier: the class explained (default: the predicted one)")
    a.add_argument("--steps", type=whole(1, MAX_STEPS), default=DEFAULT_STEPS,
                   help=f"integration steps to try first, doubled up to {MAX_STEPS} until reliable "
                        f"(default {DEFAULT_STEPS})")
    a.add_argument("--baseline", choices=list(BASELINES), default=DEFAULT_BASELINE,
                   help="the input the path starts from (default: words, every word a [PAD])")
    a.add_argument("--json", action="store_true", help="print every token's numbers as JSON")
    a.set_defaults(func=cmd_attribute)


def _model_folder(model: str) -> tuple[Path, list[str]] | None:
    """The model folder of a fine-tuning run given by its folder, or the folder itself (a path, or a name the loader
    resolves), with the architectures its config.json names; None where neither is readable."""
    try:
        where = checkpoint.resolve(model)
    except (checkpoint.CheckpointError, OSError, ValueError):
        where = Path(model)
    for d in (Path(model) / "model", Path(where)):
        try:
            return d, checkpoint.inspect(d).architectures
        except (checkpoint.CheckpointError, OSError, ValueError):
            continue
    return None


def cmd_attribute(args) -> int:
    if not args.text.strip() or (args.text_b is not None and not args.text_b.strip()):
        raise UserError("--text and --text-b must hold some text")
    folder, architectures = _model_folder(args.model) or (None, [])
    classifier = folder if "BertForSequenceClassification" in architectures else None
    # a fine-tuned model of another kind (a tagger, a reader of spans): a tagger's run was told to write a [MASK]
    tuned = next((a for a in architectures if a.startswith("BertFor") and a != "BertForPreTraining"
                  and a not in checkpoint.READ_AS), None)
    if classifier is None and tuned:
        raise UserError(f"{args.model} is a fine-tuned {tuned} model: attribute explains a masked word, a pair's "
                        "next sentence, or a sequence classifier's class, not its answers")
    target = args.target or ("classifier" if classifier else "masked-word" if "[MASK]" in args.text
                             else "next-sentence")
    for flag, value, applies in (("--word", args.word, "masked-word"), ("--label", args.label, "classifier")):
        if value is not None and target != applies:  # (dropped without a word, the answer was another question's)
            raise UserError(f"{flag} applies to --target {applies}, and this explains {target}")
    if target == "next-sentence" and not args.text_b:
        raise UserError("--target next-sentence explains a pair: give sentence B with --text-b" if args.target else
                        "--text has no [MASK] and there is no --text-b: write [MASK] where a word is hidden, or give "
                        "sentence B of a pair with --text-b")
    with user_errors():
        if target == "classifier":
            if classifier is None:
                raise UserError(f"{args.model} is not a fine-tuned sequence classifier (a run folder, or a folder "
                                "whose config.json names BertForSequenceClassification)")
            if args.text_b is not None and (named := training_args(classifier).get("task")):
                refuse_second_text(task_type(named), True, "give --text alone, without --text-b")
            loaded = checkpoint.load(classifier, "BertForSequenceClassification")
            result = explain_classifier(loaded, args.text, args.text_b, args.label,
                                        **integration(loaded, args.steps, args.baseline))
        else:
            loaded = load_for_probe(args.model, "mlm" if target == "masked-word" else "nsp")
            settings = integration(loaded, args.steps, args.baseline)
            result = explain_masked_word(loaded, args.text, args.word, text_b=args.text_b, **settings) \
                if target == "masked-word" else explain_next_sentence(loaded, args.text, args.text_b, **settings)
    verdict = result.reliability
    longest = loaded.config.max_position_embeddings
    if (n := len(loaded.tokenizer.encode(args.text, args.text_b).input_ids)) > longest:
        print(f"note: the input is {n:,} WordPieces with [CLS] and [SEP], more than the {longest:,} this model reads: "
              + ("the longer sentence lost its last pieces until the pair fit (longest first), and they have no "
                 "attribution" if args.text_b else "what follows them takes no part, and has no attribution"),
              file=sys.stderr)
    if note := baseline_note(result):  # (the page's notes: a baseline that scores above the input, a word copied)
        print(f"note: {note}", file=sys.stderr)
    if target == "masked-word" and (copied := copied_word(args.text, [{"token": result.details["word"]}])):
        print(f"note: {copied} is a word of the sentence itself: an under-trained masked LM often copies a word it "
              "can see instead of predicting the hidden one", file=sys.stderr)
    if result.steps_tried and result.steps_tried[0][0] < args.steps:
        print(f"note: {result.steps_tried[0][0]} integration steps of the {args.steps} asked: one attribution spends "
              f"at most about {limits.SECONDS:.0f} s of CPU (WordPieces × steps), and a shorter input allows more",
              file=sys.stderr)
    if args.json:
        print_json({"target": result.target, "score": result.score, "f_input": result.f_input,
                    "f_baseline": result.f_baseline, "delta": result.delta, "steps": result.n_steps,
                    "steps_tried": result.steps_tried, "baseline": result.baseline, "reliable": verdict.reliable,
                    "verdict": verdict.reason, "details": result.details, "tokens": result.rows()})
        return 0
    print(f"f = {result.score}: f(x) = {result.f_input:.3f}, f(baseline) = {result.f_baseline:.3f}, "
          f"difference {result.difference:.3f} (convergence delta {result.delta:.2e} after {result.n_steps} steps)")
    print(verdict.reason)
    up, down = result.pushes()
    for name, words in (("raised f most", up), ("lowered f most", down)):
        if words:  # (each word with its position: two "its" read as one)
            print(f"{name}: " + ", ".join(f"{label.split(' ', 1)[1]} (position {label.split(' ', 1)[0]}) "
                                          f"{value:+.3f} ({share:+.0%})" for label, value, share in words))
    return 0
