"""How long does one masked-word probe take? Ours against transformers on the same weights.

    python bench/probe_latency.py [--repeats 50] [--threads N] [--models minilm-mlm-nsp,explorer-mini,minilm]

One probe = what the exploration pages do for every keystroke: tokenise a 16-WordPiece
sentence with one [MASK], run the model *with attention probabilities* (every layer's
[A, T, T], for the attention views), and take the top-5 words at the mask. The anchor is
transformers' BertForPreTraining with eager attention (the only transformers attention that
returns probabilities) and its fast tokenizer, loaded from the same checkpoint directory, in
the same process, timed alternately with ours.

MiniLM ships without an MLM head: both sides then get a freshly initialised head of the same
shape. The words it predicts are noise, the time is what a probe of that size costs.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from bert_explorer import checkpoint

SENTENCE = "the old man walked slowly to the [MASK] near the river every morning ."


def ours(loaded, text: str, k: int = 5):
    tok = loaded.tokenizer
    enc = tok.encode(text)
    batch = tok.tensors([enc])
    with torch.no_grad():
        out = loaded.model(**batch, output_attentions=True)
    pos = enc.input_ids.index(tok.mask_id)
    return out.mlm_logits[0, pos].softmax(-1).topk(k).indices.tolist(), len(out.attentions)


def theirs(model, tokenizer, text: str, k: int = 5):
    batch = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    pos = batch["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    return out.prediction_logits[0, pos].softmax(-1).topk(k).indices.tolist(), len(out.attentions)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--models", default="minilm-mlm-nsp,explorer-mini,minilm")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}")
    print(f"{'model':<15}{'T':>4}{'ours ms':>10}{'transformers ms':>17}{'ratio':>8}  same top-5")
    for name in args.models.split(","):
        loaded = checkpoint.load(name, "BertForPreTraining")
        with tempfile.TemporaryDirectory() as d:
            # Export ours (heads included, fresh or trained) so both sides hold identical weights.
            checkpoint.save(loaded.model, loaded.tokenizer, d)
            hf = transformers.BertForPreTraining.from_pretrained(d, attn_implementation="eager").eval()
            hf_tok = transformers.BertTokenizerFast.from_pretrained(d)
        T = len(loaded.tokenizer.encode(SENTENCE).input_ids)
        for _ in range(3):  # warm-up: first calls allocate
            ours(loaded, SENTENCE), theirs(hf, hf_tok, SENTENCE)
        t_ours, t_hf = [], []
        for i in range(args.repeats):  # alternate A B B A so machine drift hits both alike
            order = ((ours, (loaded, SENTENCE), t_ours), (theirs, (hf, hf_tok, SENTENCE), t_hf))
            for fn, fargs, times in (order if i % 2 == 0 else order[::-1]):
                t = time.perf_counter()
                fn(*fargs)
                times.append(time.perf_counter() - t)
        a, b = statistics.median(t_ours) * 1e3, statistics.median(t_hf) * 1e3
        same = ours(loaded, SENTENCE)[0] == theirs(hf, hf_tok, SENTENCE)[0]
        print(f"{name:<15}{T:>4}{a:>10.1f}{b:>17.1f}{b / a:>7.2f}x  {same}")
    print("ratio = transformers time / our time (above 1: ours is faster); medians of "
          f"{args.repeats} probes; goal: ours <= 50 ms")


if __name__ == "__main__":
    main()
