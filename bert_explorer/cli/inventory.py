"""What is here: the built-in corpora (provenance, licence, installed or not), the runs and their state, a
model's size and heads,
the models on this machine and the paper's own one download away, and that download.

    bert-explorer corpora
    bert-explorer runs
    bert-explorer info --model minilm
    bert-explorer models
    bert-explorer download bert-base-uncased google/bert_uncased_L-2_H-128_A-2
    bert-explorer limits --model minilm-mlm-nsp bert-base-uncased
"""
from __future__ import annotations

import sys

from .. import checkpoint, hub, hub_names, limits
from ..data.corpora import BUILTIN_CORPORA, TINY_CORPUS
from ..full_disk import size_text
from .common import MODEL_HELP, print_json


def register(sub) -> None:
    """Add ``corpora`` and ``info`` to the subcommands ``sub``."""
    s = sub.add_parser("corpora", help="the built-in corpora, their provenance and licences")
    s.add_argument("--json", action="store_true", help="print JSON instead of a list")
    s.set_defaults(func=cmd_corpora)

    s = sub.add_parser("runs", help="the runs under the runs folder (BERT_EXPLORER_RUNS, else ./runs): kind, "
                                    "state, progress and key numbers, as the app's Runs page lists them")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("info", help="size and heads of a model")
    s.add_argument("--model", required=True, help=MODEL_HELP)
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("models", help="the models on this machine, and the paper's BERTs one download away")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("download", help="download models from the Hugging Face Hub (once; they open offline after)")
    s.add_argument("names", nargs="+", metavar="NAME",
                   help="bert-base-uncased, google/bert_uncased_L-2_H-128_A-2, ... (`bert-explorer models`), or any "
                        "hub id of a BERT")
    s.add_argument("--no-progress", action="store_true", help="show no progress bar")
    s.set_defaults(func=cmd_download)

    s = sub.add_parser("limits", help="how much one request may ask of the app's server, for each model")
    s.add_argument("--model", nargs="+", default=[checkpoint.DEFAULT_MODEL, "bert-base-uncased", "bert-large-uncased"],
                   metavar="NAME", help="models (short names, folders, or the paper's BERTs by hub id: no download)")
    s.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    s.set_defaults(func=cmd_limits)


def cmd_corpora(args) -> int:
    rows = [{"name": c.name, "installed": c.available, "description": c.description,
             "provenance": c.provenance, "licence": c.licence} for c in BUILTIN_CORPORA.values()] + [TINY_CORPUS]
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            print(f"{r['name']}{'' if r['installed'] else ' (not installed)'}: {r['description']}\n"
                  f"  source:  {r['provenance']}\n  licence: {r['licence']}\n")
    return 0


def cmd_runs(args) -> int:
    from ..runs.finder import find_runs
    from ..runs.report import run_row
    from ..runs.run import runs_root

    root = runs_root()
    rows = [run_row(r, root) for r in find_runs(root)]
    if args.json:
        print_json(rows)
    elif not rows:  # (where to look, and what puts a run there)
        print(f"no runs under {root} yet: the app's runs go there, and a command's where its --output says "
              "(BERT_EXPLORER_RUNS names another folder)", file=sys.stderr)
    else:
        columns = ["run", "kind", "state", "progress", "started", "duration", "key metrics"]
        widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns[:-1]]
        for line in [dict(zip(columns, columns)), *rows]:
            print("  ".join(str(line[c]).ljust(w) for c, w in zip(columns, widths)) + "  " + str(line[columns[-1]]))
    return 0


PRETRAINING_HEADS = ("masked-LM head", "next-sentence head")


def cmd_info(args) -> int:
    loaded = checkpoint.load(args.model)
    c = loaded.config
    # the pre-training heads the checkpoint holds, read as the probes read it: loaded as the encoder alone, a model
    # with none said "heads_missing": [] (docs/models.md sends readers here for the heads a model has)
    missing = set(checkpoint.load(args.model, "BertForPreTraining").report.missing_heads) \
        if type(loaded.model).__name__ == "BertModel" else set()
    print_json({
        "path": str(loaded.path), "architecture": type(loaded.model).__name__,
        "L": c.num_layers, "H": c.hidden_size, "A": c.num_heads, "vocab_size": c.vocab_size,
        "parameters": loaded.num_parameters, "lowercase": loaded.tokenizer.lowercase,
        "pretraining_heads": [h for h in PRETRAINING_HEADS if h not in missing]
        if type(loaded.model).__name__ in ("BertModel", "BertForPreTraining") else [],
        "heads_missing": sorted(missing | set(loaded.report.missing_heads)),
    })
    return 0


def cmd_models(args) -> int:
    """The short names installed here, then the catalogue: on this machine or how much a download is."""
    rows = [{"name": name, "what": description.split(" (")[0].split(";")[0], "on_this_machine": locate() is not None}
            for name, (locate, description) in checkpoint.SHORT_NAMES.items()]
    rows += [{"name": r["id"], "what": f"{r['name']}: L={r['L']}, H={r['H']}, A={r['A']}, "
              f"{r['parameters'] / 1e6:,.1f} M parameters, {r['licence']}",
              "on_this_machine": r["on_this_machine"], "download_about": size_text(r["download_bytes_about"]),
              "bytes_here": r["bytes_here"]}
             for r in hub.catalogue_rows()]
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        where = "here" if r["on_this_machine"] else "not installed" if "download_about" not in r else \
            f"partly here, {size_text(r['bytes_here'])} of about {r['download_about']}" if r["bytes_here"] else \
            f"download about {r['download_about']}"
        print(f"{r['name']:45} {where:22} {r['what']}")
    return 0


def cmd_download(args) -> int:
    """Each name fetched into the Hugging Face cache (a copy already there is kept), then loaded once to
    say what it holds: the heads are found by loading, never assumed."""
    from tqdm import tqdm

    for name in args.names:
        try:
            repo_id = hub.canonical(name)
        except hub.HubError as e:
            raise checkpoint.CheckpointError(str(e)) from None
        copy = hub.local_copy(repo_id)
        if copy is None:
            bars = []  # drawn at the first byte: a download refused before it starts prints one line, no bar

            def progress(done, total, file, bars=bars, waited=[]):
                if file == hub.WAITING and not waited:  # (it printed "0%" and nothing else for as long)
                    waited.append(True)
                    print(f"waiting for another download of {repo_id} (the app's or another command's) to end: "
                          "the files are fetched once, and this goes on then", file=sys.stderr, flush=True)
                if args.no_progress or file == hub.WAITING:
                    return
                if not bars:
                    bars.append(tqdm(total=total, unit="B", unit_scale=True, desc=repo_id, file=sys.stderr))
                bars[0].total = total
                bars[0].update(done - bars[0].n)
            try:
                copy = hub.download(repo_id, progress)
            except hub.HubError as e:
                raise checkpoint.CheckpointError(str(e)) from None
            finally:
                for bar in bars:
                    bar.close()
        loaded = checkpoint.load(copy, "BertForPreTraining")
        heads = [h for h in ("masked-LM head", "next-sentence head") if h not in loaded.report.missing_heads]
        print(f"{repo_id}: {loaded.parameters_text}, "
              f"{' and '.join(heads) if heads else 'no pre-training heads (an encoder only)'}, in {copy}")
    return 0


def _config(name: str):
    """A model's config without its weights: the catalogue's shape for the paper's BERTs (no download),
    else the checkpoint's config.json, checked (checkpoint.inspect)."""
    if hub_names.is_hub_name(name) and hub.local_copy(name) is None:
        m = hub.CATALOGUE.get(hub.canonical(name))
        if m is None:
            raise checkpoint.CheckpointError(f"{name} is not downloaded and not in the catalogue; "
                                             "`bert-explorer download` it first")
        from ..model import BertConfig
        return BertConfig(vocab_size=m.vocab_size, hidden_size=m.hidden, num_layers=m.layers, num_heads=m.heads,
                          intermediate_size=4 * m.hidden)
    return checkpoint.inspect(checkpoint.resolve(name))


def cmd_limits(args) -> int:
    """The limits table of the README, for the models named: what the app's pages accept in one request."""
    try:
        table = {name: limits.for_config(_config(name)) for name in args.model}
    except (checkpoint.CheckpointError, hub.HubError) as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)  # (as every other command says it)
        return 2
    if args.json:
        print_json({name: dict(zip(limits.WHAT, (v for _, v in lim.rows()))) for name, lim in table.items()})
        return 0
    print(f"Each limit keeps the worst input under it to about {limits.SECONDS:.0f} s of one CPU core and "
          f"{limits.MEMORY / 1e6:.0f} MB of memory (bert_explorer/limits.py).\n")
    print("| limit | " + " | ".join(table) + " |")
    print("|---|" + "---:|" * len(table))
    for i, what in enumerate(limits.WHAT.values()):
        print(f"| {what} | " + " | ".join(f"{lim.rows()[i][1]:,}" for lim in table.values()) + " |")
    return 0
