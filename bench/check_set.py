"""Score every shipped model with both pre-training heads on the hand-written check set.

    python bench/check_set.py [--models minilm-mlm-nsp,explorer-mini] [--details]

Prints, per model, how many clozes have an accepted answer in the top 5 and how many
next-sentence pairs are classified right (P(IsNext) > 0.5). The figures go into each model card.
"""
import argparse

import torch

from bert_explorer.analysis.probes.check_set import load_check_set, score_check_set
from bert_explorer.analysis.probes.pretraining_tasks import load_for_probe


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="minilm-mlm-nsp,explorer-mini")
    p.add_argument("--details", action="store_true", help="print every item")
    args = p.parse_args()
    torch.manual_seed(0)
    check = load_check_set()
    print(f"{'model':<18}{'clozes (answer in top 5)':>26}{'next-sentence pairs right':>28}")
    for name in args.models.split(","):
        s = score_check_set(load_for_probe(name, "mlm"), check)
        print(f"{name:<18}{s['cloze_solved']:>19} / {s['cloze_total']:<4}{s['nsp_correct']:>21} / {s['nsp_total']}")
        if args.details:
            for r in s["rows"]:
                print(f"   {'ok ' if r['ok'] else 'NO '} {r['kind']:<5} {r['text'][:90]:<90} -> {r['got']}")


if __name__ == "__main__":
    main()
