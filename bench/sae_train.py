"""How long the feature explorer's default SAE takes to train here, activations included, and how
good it is: one build of ``analysis/features/build.py`` from an empty cache, timed part by part.

    python bench/sae_train.py                              # minilm-mlm-nsp, middle layer (3), defaults
    python bench/sae_train.py --model explorer-mini --layer 2 --tokens 200000 --output sae.json

It builds into a cache folder of its own (``--cache``, a fresh temporary one by default) so nothing
is reused, prints the estimate the page would show first, then the measured seconds of each part
(activations, training, statistics and losses), the quality figures and the machine's load average
(this 2-core CPU is shared: the figures hold for the load printed beside them). The entry stays in
``--cache`` for the app: ``BERT_EXPLORER_CACHE=<cache> streamlit run run_app.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm-mlm-nsp")
    p.add_argument("--layer", type=int, default=None, help="default: the middle layer")
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--cache", default=None, help="cache folder (default: a new temporary one)")
    p.add_argument("--output", default=None, help="also write the figures as JSON here")
    args = p.parse_args()
    os.environ["BERT_EXPLORER_CACHE"] = args.cache or tempfile.mkdtemp(prefix="sae-bench-")

    import torch

    from bert_explorer import checkpoint
    from bert_explorer.analysis.features import build as fb
    from bert_explorer.analysis.features.sae import SaeConfig

    loaded = checkpoint.load(args.model, "BertForPreTraining")
    layer = args.layer or fb.default_layer(loaded)
    cfg = SaeConfig(**({"epochs": args.epochs} if args.epochs else {}))
    settings = fb.FeatureSettings(layer=layer, sae=cfg, **({"tokens": args.tokens} if args.tokens else {}))
    est = fb.estimate_seconds(loaded, settings)
    print(f"estimate: {est['seconds']:.0f} s (activations {est['activation_seconds']:.0f} s, training "
          f"{est['train_seconds']:.0f} s at {est['step_seconds']:.2f} s a step); load {os.getloadavg()}", flush=True)
    t = time.time()
    last = [0.0]

    def progress(f, m):
        if time.time() - last[0] > 30:
            last[0] = time.time()
            print(f"  {time.time() - t:5.0f} s  {f:4.0%}  {m}", flush=True)

    path = fb.build(loaded, settings, progress)
    wall = time.time() - t
    meta = json.loads((path / "meta.json").read_text())
    out = {"model": args.model, "layer": layer, "tokens": meta["tokens"], "features": meta["n_features"],
           "k": meta["k"], "wall_seconds": round(wall, 1), "activation_seconds": meta["activation_seconds"],
           "train_seconds": meta["train_seconds"], "estimate_seconds": round(est["seconds"], 1),
           **{k: meta[k] for k in ("fve", "mean_l0", "dead_fraction", "dense_fraction", "loss_clean", "loss_sae",
                                    "loss_mean", "loss_recovered", "eval_sequences")},
           "threads": torch.get_num_threads(), "load_after": os.getloadavg(), "entry": str(path)}
    print(json.dumps(out, indent=1))
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
