"""Probes of the two pre-training tasks (paper, Section 3.1 and Figure 1).

* Masked-word probe: put ``[MASK]`` where a word was and read the MLM head's softmax over
  the vocabulary at that position: what BERT thinks the hidden word is, from both sides.
* Next-sentence probe: give sentence A and sentence B and read the NSP head's softmax over
  {IsNext, NotNext} from the pooled [CLS] vector.

Both need a model whose heads were trained (the shipped BERT Explorer model has them; the
MiniLM encoder does not, and loading it here raises MissingHeadError with a clear message).
"""
from __future__ import annotations

import torch

from ..checkpoint import Loaded
from ..checkpoint import load as load_checkpoint

MLM_HEAD, NSP_HEAD = "masked-LM head", "next-sentence head"


def load_for_probe(name_or_dir, kind: str, device="cpu") -> Loaded:
    need = (MLM_HEAD,) if kind == "mlm" else (NSP_HEAD,)
    return load_checkpoint(name_or_dir, "BertForPreTraining", need_heads=need, device=device)


def mlm_top_k(loaded: Loaded, text: str, top_k: int = 5, text_b: str | None = None) -> list[dict]:
    """Top-k predictions at every [MASK] in ``text`` (and ``text_b``)."""
    tok = loaded.tokenizer
    enc = tok.encode(text, text_b, max_length=loaded.config.max_position_embeddings)
    positions = [i for i, t in enumerate(enc.input_ids) if t == tok.mask_id]
    if not positions:
        raise ValueError("the text has no [MASK] token; write [MASK] where a word should be predicted")
    batch = tok.tensors([enc], device=next(loaded.model.parameters()).device)
    with torch.no_grad():
        logits = loaded.model(**batch).mlm_logits[0]  # [T, V]
    probs = logits[positions].float().softmax(-1)      # [M, V]
    p, ids = probs.topk(top_k, dim=-1)
    return [
        {"position": pos, "predictions": [
            {"token": tok.id_to_token(i), "id": int(i), "probability": round(float(q), 6)}
            for q, i in zip(p[m].tolist(), ids[m].tolist())]}
        for m, pos in enumerate(positions)
    ]


def nsp_probability(loaded: Loaded, pairs: list[tuple[str, str]]) -> list[dict]:
    """P(IsNext) for each (A, B) pair; index 0 of the NSP head is IsNext, as in the original."""
    tok = loaded.tokenizer
    batch = tok.batch(pairs, max_length=loaded.config.max_position_embeddings,
                      device=next(loaded.model.parameters()).device)
    with torch.no_grad():
        probs = loaded.model(**batch).nsp_logits.float().softmax(-1)  # [B, 2]
    return [{"a": a, "b": b, "is_next": round(float(p[0]), 6), "not_next": round(float(p[1]), 6)}
            for (a, b), p in zip(pairs, probs)]
