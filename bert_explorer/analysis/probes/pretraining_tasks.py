"""Probes of the two pre-training tasks (paper, Section 3.1 and Figure 1).

* Masked-word probe: put ``[MASK]`` where a word was and read the MLM head's softmax over
  the vocabulary at that position: what BERT thinks the hidden word is, from both sides.
* Next-sentence probe: give sentence A and sentence B and read the NSP head's softmax over
  {IsNext, NotNext} from the pooled [CLS] vector.

Both need a model whose heads were trained (the shipped ``minilm-mlm-nsp`` and ``explorer-mini``
have them; the MiniLM encoder does not, and loading it here raises MissingHeadError with a clear message).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

import torch

from ...checkpoint import Loaded
from ...checkpoint import load as load_checkpoint
from ...data.pretraining import MaskingConfig, mask_tokens

MLM_HEAD, NSP_HEAD = "masked-LM head", "next-sentence head"
EVAL_FILE = "eval_metrics.json"  # what pre-training measured on held-out text, saved beside the weights


def load_for_probe(name_or_dir, kind: str, device="cpu") -> Loaded:
    need = (MLM_HEAD,) if kind == "mlm" else (NSP_HEAD,)
    return load_checkpoint(name_or_dir, "BertForPreTraining", need_heads=need, device=device)


MAX_TOP_K = 100  # predictions a [MASK]: more is a list no one reads (the page offers 20)


def mlm_top_k(loaded: Loaded, text: str, top_k: int = 5, text_b: str | None = None) -> list[dict]:
    """Top-k predictions at every [MASK] in ``text`` (and ``text_b``), of the first ``max_position_embeddings``
    WordPieces (a [MASK] past them is not read)."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, not {top_k!r}")
    tok = loaded.tokenizer
    limit = loaded.config.max_position_embeddings
    enc = tok.encode(text, text_b, max_length=limit)
    positions = [i for i, t in enumerate(enc.input_ids) if t == tok.mask_id]
    if not positions:
        raise ValueError(no_mask_sentence(f"{text} {text_b or ''}", limit))
    batch = tok.tensors([enc], device=next(loaded.model.parameters()).device)
    with torch.no_grad():
        logits = loaded.model(**batch).mlm_logits[0]  # [T, V]
    return top_k_at(logits, positions, tok, top_k)


def no_mask_sentence(text: str, limit: int) -> str:
    """Why the first ``limit`` WordPieces of ``text`` hold no [MASK] token, and what to do, in one sentence."""
    if "[MASK]" in text:
        return (f"every [MASK] of the text lies past the first {limit:,} WordPieces, all that the model reads: "
                "shorten the text, or put a [MASK] nearer its start")
    # (spaces inside, "[ MASK ]", read as ordinary text too: it was told only to write [MASK])
    other = re.search(r"\[\s*mask\s*\]", text, flags=re.IGNORECASE)
    if other:  # a special token is matched as written, before any lowercasing
        return (f"the text has no [MASK] token: “{other.group(0)}” is read as ordinary text (the token is matched "
                "as written); write [MASK] in capitals, with no space inside, where a word should be predicted")
    if not text.strip():
        return "write a sentence with [MASK] where a word should be predicted"
    return "the text has no [MASK] token; write [MASK] where a word should be predicted"


def top_k_at(logits: torch.Tensor, positions: list[int], tok, top_k: int) -> list[dict]:
    """The top-k words of the MLM ``logits`` ([T, V]) at each of ``positions``, as :func:`mlm_top_k` gives them."""
    probs = logits[positions].float().softmax(-1)      # [M, V]
    p, ids = probs.topk(top_k, dim=-1)
    return [
        {"position": pos, "predictions": [
            {"token": tok.id_to_token(i), "id": int(i), "probability": round(float(q), 6)}
            for q, i in zip(p[m].tolist(), ids[m].tolist())]}
        for m, pos in enumerate(positions)
    ]


def nsp_probability(loaded: Loaded, pairs: list[tuple[str, str]]) -> list[dict]:
    """P(IsNext) for each (A, B) pair; index 0 of the NSP head is IsNext, as in the original. ``wordpieces``:
    the pair's length before a pair longer than the model's positions is cut (longest first), which
    ``cut_sentence`` then says."""
    if not pairs:
        return []
    tok = loaded.tokenizer
    longest = loaded.config.max_position_embeddings
    device = next(loaded.model.parameters()).device
    whole = tok.encode_batch(pairs)  # (its lengths say what a cut would lose; encoded again only if one is cut)
    lengths = [len(e.input_ids) for e in whole]
    batch = tok.tensors(whole, device) if max(lengths) <= longest else tok.batch(pairs, longest, device)
    with torch.no_grad():
        probs = loaded.model(**batch).nsp_logits.float().softmax(-1)  # [B, 2]
    return [{"a": a, "b": b, "is_next": round(float(p[0]), 6), "not_next": round(float(p[1]), 6), "wordpieces": n}
            for (a, b), p, n in zip(pairs, probs, lengths)]


def cut_sentence(scored: dict, longest: int) -> str | None:
    """One sentence when a pair was longer than the model reads (a 900-WordPiece pair was scored with no word
    that it was cut to 512); None when it was read whole."""
    n = scored.get("wordpieces") or 0
    if n <= longest:
        return None
    return (f"This pair is {n:,} WordPieces with [CLS] and [SEP], more than the {longest:,} this model reads: the "
            "longer sentence lost its last pieces until the pair fit (longest first), so P(IsNext) is for what "
            "was kept.")


def nsp_table_summary(kinds: list, p_is_next: list[float]) -> str:
    """One sentence on what the model did with labelled pairs ("real" / "random"), computed."""
    real = [p for k, p in zip(kinds, p_is_next) if k == "real"]
    rand = [p for k, p in zip(kinds, p_is_next) if k == "random"]
    parts = []
    if real:
        parts.append(f"{sum(p > 0.5 for p in real)} of {len(real)} real pairs get P(IsNext) > 0.5")
    if rand:
        parts.append(f"{sum(p <= 0.5 for p in rand)} of {len(rand)} random pairs get P(IsNext) ≤ 0.5")
    if not parts:
        return "Mark rows as real or random to see how often this model is right."
    text = "This model: " + "; ".join(parts) + "."
    if real and rand:
        text += (f" Mean P(IsNext): {sum(real) / len(real):.2f} for real B, {sum(rand) / len(rand):.2f} "
                 "for random B.")
    return text


def mlm_by_layer(loaded: Loaded, text: str, top_k: int = 3, text_b: str | None = None) -> list[dict]:
    """What each layer 'would predict' at the first [MASK]: the MLM head applied to every
    layer's hidden state (the "logit lens"). The head was trained on the last layer only, so
    early layers are read through a lens made for another layer: a picture, not a measurement."""
    tok = loaded.tokenizer
    enc = tok.encode(text, text_b, max_length=loaded.config.max_position_embeddings)
    if tok.mask_id not in enc.input_ids:
        raise ValueError("the text has no [MASK] token; write [MASK] where a word should be predicted")
    pos = enc.input_ids.index(tok.mask_id)
    batch = tok.tensors([enc], device=next(loaded.model.parameters()).device)
    with torch.no_grad():
        hs = loaded.model.bert(**batch, output_hidden_states=True).hidden_states  # L+1 of [1, T, H]
        stacked = torch.stack([h[0, pos] for h in hs])                             # [L+1, H]
        probs = loaded.model.cls.predictions(stacked).float().softmax(-1)           # [L+1, V]
    p, ids = probs.topk(top_k, dim=-1)
    return [{"layer": layer, "predictions": [{"token": tok.id_to_token(i), "probability": round(float(q), 4)}
                                             for q, i in zip(p[layer].tolist(), ids[layer].tolist())]}
            for layer in range(len(hs))]


def masking_demo(loaded: Loaded, text: str, seed: int = 0, mlm_probability: float = 0.15) -> list[dict]:
    """The pre-training corruption of one sentence (Section 3.1): 15% of the WordPieces are
    chosen; of those 80% become [MASK], 10% a random token and 10% stay as they are."""
    tok = loaded.tokenizer
    enc = tok.encode(text)
    cfg = MaskingConfig(mlm_probability=mlm_probability, max_predictions_per_seq=512)
    new_ids, positions, labels = mask_tokens(enc.input_ids, tok.special_ids(), tok.vocab_size, cfg,
                                             random.Random(seed), mask_id=tok.mask_id)
    chosen = dict(zip(positions, labels))
    rows = []
    for t, (old, new) in enumerate(zip(enc.input_ids, new_ids)):
        what = "—"
        if t in chosen:
            what = "[MASK]" if new == tok.mask_id else ("kept" if new == old else "random token")
        rows.append({"position": t, "original": tok.id_to_token(old), "model sees": tok.id_to_token(new),
                     "chosen": t in chosen, "treatment": what})
    return rows


def stored_evaluation(loaded: Loaded) -> dict | None:
    """The held-out evaluation saved with the model: ``eval_metrics.json`` in its folder (every
    pre-training checkpoint writes one; the shipped models carry theirs), with at least the MLM
    accuracy. None when the folder has none, so nothing is shown that was not measured."""
    path = Path(loaded.path) / EVAL_FILE
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(stored, dict) and isinstance(stored.get("mlm_accuracy"), (int, float))
    return stored if ok else None


def copied_word(text: str, predictions: list[dict]) -> str | None:
    """The top prediction when it is a word the sentence itself contains, else None. An
    under-trained masked LM often copies a word it can see ("the capital of france is [MASK] ."
    → france) instead of predicting the hidden one."""
    if not predictions:
        return None
    top = predictions[0]["token"].lower()
    words = set(re.findall(r"[^\W_]+(?:'[^\W_]+)?", text.replace("[MASK]", " ").lower()))
    return top if top in words else None
