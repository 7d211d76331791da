"""Two models side by side: what fine-tuning (or more pre-training, or another objective) changed.

The same sentences go through both models, and three things are set side by side:

* **Linear CKA** of every layer's vectors (``measures.linear_cka``; Kornblith et al. 2019): how alike
  the two models arrange the same tokens, layer by layer. It does not need the same width (H).
* The **Jensen-Shannon distance between attention rows** (``measures.js_distance``), one number per
  (layer, head). It needs the same tokens (the same vocabulary) and the same heads (the same L and A).
* The **masked-word and next-sentence probes** (``probes/pretraining_tasks.py``) side by side, when both
  models still have those heads (a fine-tuned checkpoint keeps only its encoder and its task head).

``comparable`` says in sentences what can and cannot be compared for a pair, and ``describe`` says
what this pair's numbers show (computed, never quoted from a paper).

When the vocabularies differ, the tokens differ too; vectors are then averaged over the
WordPieces of each word, and CKA compares the models word by word (both tokenizers split text
into the same words: on white space and punctuation, Section 3 of the BERT paper).

Layers are indexed as in ``hidden_states``: 0 is the embedding output and 1..L the encoder
layers, which is also how the pages number them. Heads are 0-based here and 1-based on the page.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ... import disk_cache
from ...checkpoint import Loaded, encoder_of
from ...checkpoint import load as load_checkpoint
from ...runs.run import runs_root
from ..attention.heads import attention_maps
from ..first_visit import first_visit
from . import candidates, held_out
from ..probes.pretraining_tasks import MLM_HEAD, NSP_HEAD, mlm_top_k, nsp_probability
from .measures import attention_change, cka_matrix

SPECIALS = frozenset({"[CLS]", "[SEP]", "[PAD]"})
ARCHITECTURE = "BertForPreTraining"  # fine-tuned checkpoints load too: their MLM/NSP heads are reported missing
COMPARISON_VERSION = 1  # bump when compare_models would answer the same two models differently
PAGE_SENTENCES = 64     # the held-out sentences the page compares on its first visit


# ----- what can be compared -------------------------------------------------------------------
def same_vocabulary(a: Loaded, b: Loaded) -> bool:
    """Do the two tokenizers cut every text into the same pieces with the same ids?"""
    ta, tb = a.tokenizer, b.tokenizer
    if ta.vocab_size != tb.vocab_size or ta.lowercase != tb.lowercase:
        return False
    return all(ta.id_to_token(i) == tb.id_to_token(i) for i in range(ta.vocab_size))


@dataclass
class Comparability:
    same_vocab: bool
    shape_a: tuple[int, int, int]      # (L, A, H)
    shape_b: tuple[int, int, int]
    mlm: bool                          # both have a trained masked-LM head
    nsp: bool                          # both have a trained next-sentence head
    sentences: list[str] = field(default_factory=list)  # what can and cannot be compared, in words

    @property
    def per_head(self) -> bool:
        """Head-by-head attention needs the same tokens and the same L and A."""
        return self.same_vocab and self.shape_a[:2] == self.shape_b[:2]

    @property
    def units(self) -> str:
        return "tokens" if self.same_vocab else "words"

    @property
    def same_depth(self) -> bool:
        return self.shape_a[0] == self.shape_b[0]


def _heads(loaded: Loaded) -> set[str]:
    return {h for h in (MLM_HEAD, NSP_HEAD) if h not in loaded.report.missing}


def comparable(a: Loaded, b: Loaded) -> Comparability:
    """What can and cannot be compared between models A and B, with a sentence for each."""
    ca, cb = a.config, b.config
    sa, sb = (ca.num_layers, ca.num_heads, ca.hidden_size), (cb.num_layers, cb.num_heads, cb.hidden_size)
    c = Comparability(same_vocabulary(a, b), sa, sb, MLM_HEAD in _heads(a) & _heads(b),
                      NSP_HEAD in _heads(a) & _heads(b))
    say = c.sentences.append
    if c.same_vocab:
        say(f"Both models use the same WordPiece vocabulary ({a.tokenizer.vocab_size:,} pieces), so a sentence is "
            "cut into the same tokens: their vectors are compared token by token.")
    else:
        say(f"The vocabularies differ ({a.tokenizer.vocab_size:,} and {b.tokenizer.vocab_size:,} pieces), so the "
            "same sentence becomes different tokens: each word's vector is the mean of its WordPieces, and the "
            "models are compared word by word (CKA only).")
    if c.per_head:
        say(f"Both have {sa[0]} layers × {sa[1]} heads: each head is set beside the head in the same place.")
    elif not c.same_vocab:
        say("Attention maps cannot be set side by side: different tokens give maps over different positions.")
    else:
        say(f"Model A has {sa[0]} layers × {sa[1]} heads, model B {sb[0]} × {sb[1]}: no head has a partner, so "
            "the attention grid is left out.")
    if c.same_depth:
        say(f"CKA compares each layer with the same layer of the other model (layers 0–{sa[0]}, 0 = embeddings)"
            + ("." if sa[2] == sb[2] else f"; it does not need the same width (H = {sa[2]} and {sb[2]})."))
    else:
        say(f"The models have {sa[0]} and {sb[0]} layers: CKA compares every layer of A with every layer of B"
            + ("." if sa[2] == sb[2] else f" (it does not need the same width: H = {sa[2]} and {sb[2]})."))
    for name, m in (("A", a), ("B", b)):
        lacking = [h for h in (MLM_HEAD, NSP_HEAD) if h not in _heads(m)]
        if lacking:
            untrained = {m.report.untrained[h] for h in lacking if h in getattr(m.report, "untrained", {})}
            # (a checkpoint of the paper's No NSP run was told it was a fine-tuned one)
            why = (f"it was pre-trained with {untrained.pop()}, which never trained it" if len(untrained) == 1
                   and len(lacking) == 1 else "a fine-tuned checkpoint keeps only its encoder and its task head")
            say(f"Model {name} has no trained {' or '.join(lacking)}, so the "
                f"{'probes are' if len(lacking) == 2 else 'probe is'} not set side by side ({why}).")
    if c.mlm and c.nsp:
        say("Both have trained masked-LM and next-sentence heads: their predictions are shown side by side.")
    return c


# ----- running both models ----------------------------------------------------------------------
@dataclass
class _Outputs:
    layers: list[np.ndarray]            # L+1 of [n_units, H]: the units' vectors, layer by layer
    attentions: list[np.ndarray]        # per sentence: [L, A, T, T] over its real tokens
    tokens: list[list[str]]             # per sentence: its real tokens
    keys: list[tuple[int, int]]         # (sentence, word) for each unit row (words), or (sentence, token)


def _run(loaded: Loaded, sentences: list[str], units: str, max_tokens: int = 64, batch_size: int = 16,
         attentions: bool = False) -> _Outputs:
    """Hidden states of every layer for the units (tokens or words) of ``sentences``.

    The sentences go through the model in batches of similar lengths (shortest first: little
    padding), and come out in their own order, as if run one by one."""
    tok = loaded.tokenizer
    encoder = encoder_of(loaded.model)
    device = next(encoder.parameters()).device
    L = loaded.config.num_layers
    per_sentence: dict[int, tuple] = {}  # s -> (tokens, attentions, [L+1 arrays of rows], keys)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    for start in range(0, len(order), batch_size):
        ids = order[start:start + batch_size]
        batch = [sentences[i] for i in ids]
        encs = tok.encode_batch(batch, max_length=max_tokens)
        cut = [len(full.input_ids) > len(e.input_ids) for full, e in zip(tok.encode_batch(batch), encs)]
        with torch.no_grad():
            res = encoder(**tok.tensors(encs, device=device), output_hidden_states=True,
                          output_attentions=attentions)
        hs = torch.stack(res.hidden_states, 1).float().cpu().numpy()            # [B, L+1, T, H]
        for b, enc in enumerate(encs):
            s = ids[b]
            real = [i for i, m in enumerate(enc.attention_mask) if m]
            att = (torch.stack([a[b] for a in res.attentions])[:, :, real][..., real].float().cpu().numpy()
                   if attentions else None)                                     # [L, A, T, T]
            keep = [i for i in real if enc.tokens[i] not in SPECIALS]
            if units == "tokens":
                per_sentence[s] = ([enc.tokens[i] for i in real], att, [hs[b, layer, keep] for layer in range(L + 1)],
                                   [(s, i) for i in keep])
                continue
            words: dict[int, list[int]] = {}
            for i in keep:
                words.setdefault(enc.word_ids[i], []).append(i)
            # the last word of a truncated input may have lost pieces: its vector would stand for part of it
            whole = sorted(words)[:-1] if cut[b] else sorted(words)
            per_sentence[s] = ([enc.tokens[i] for i in real], att,
                               [np.stack([hs[b, layer, words[w]].mean(0) for w in whole])
                                if whole else np.zeros((0, hs.shape[-1]), np.float32) for layer in range(L + 1)],
                               [(s, w) for w in whole])
    out = _Outputs([], [], [], [])
    for s in range(len(sentences)):
        tokens, att, rows, keys = per_sentence[s]
        out.tokens.append(tokens)
        if attentions:
            out.attentions.append(att)
        out.layers.append(rows)
        out.keys += keys
    out.layers = [np.concatenate([rows[layer] for rows in out.layers]) for layer in range(L + 1)]
    return out


def _aligned(oa: _Outputs, ob: _Outputs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The rows both models have (a word truncated in one model is dropped from both)."""
    common = sorted(set(oa.keys) & set(ob.keys))
    ia = {k: i for i, k in enumerate(oa.keys)}
    ib = {k: i for i, k in enumerate(ob.keys)}
    sel_a = np.array([ia[k] for k in common], dtype=int)
    sel_b = np.array([ib[k] for k in common], dtype=int)
    return [x[sel_a] for x in oa.layers], [y[sel_b] for y in ob.layers]


# The fewest tokens (or words) CKA is read from: of n points, linear CKA is biased towards 1 the fewer there are
# (of 2 centred points it is 1 for any two models, of 1 it is undefined); the page's fewest sentences give about 700.
MIN_UNITS = 10


def compare_models(a: Loaded, b: Loaded, sentences: list[str], max_tokens: int = 64) -> dict:
    """Everything that can be compared between A and B on ``sentences``, as plain data."""
    c = comparable(a, b)
    oa = _run(a, sentences, c.units, max_tokens, attentions=c.per_head)
    ob = _run(b, sentences, c.units, max_tokens, attentions=c.per_head)
    xa, xb = _aligned(oa, ob)
    if (n := int(xa[0].shape[0])) < MIN_UNITS:  # (2 tokens: "the two models barely differ", CKA 1 by construction)
        raise ValueError(f"CKA compares many {c.units}, and these sentences give {n:,}: with few, any two models "
                         f"look alike (with 2, CKA is 1 whatever they are); give text of at least {MIN_UNITS} "
                         f"{c.units}")
    matrix = cka_matrix(xa, xb, diagonal=c.same_depth)
    result = {
        "comparable": {**asdict(c), "per_head": c.per_head, "units": c.units},
        "sentences": len(sentences), "units": c.units, "n_units": int(xa[0].shape[0]),
        "cka_matrix": None if c.same_depth else matrix.round(6).tolist(),
        "cka_by_layer": [round(float(matrix[i, i]), 6) for i in range(len(xa))] if c.same_depth else None,
        "attention_js": attention_change(oa.attentions, ob.attentions).round(6).tolist() if c.per_head else None,
    }
    result["captions"] = describe(result)
    result["summary"] = " ".join(v for v in result["captions"].values() if v)
    return result


def kept_comparison(a: Loaded, b: Loaded, n: int = PAGE_SENTENCES) -> tuple[dict, str]:
    """:func:`compare_models` over ``n`` held-out sentences, and where they come from: kept on disk by
    both models' weights and the sentences, so a new server reads it back (both models over 64 sentences
    took 2-3 s of a first visit with the default model, 14 s with BERT-Base)."""
    sentences, source = held_out.held_out_sentences(n)
    return disk_cache.kept_json("two-models", a, lambda: compare_models(a, b, sentences),
                                what="a comparison of two models", **_settings(b, sentences)), source


def comparison_kept(a: Loaded, b: Loaded, n: int) -> bool:
    """Is :func:`kept_comparison` of ``n`` sentences on disk already (read back, not computed)?"""
    path = disk_cache.entry("two-models", a, **_settings(b, held_out.held_out_sentences(n)[0]))
    return (path / "result.json").is_file()


def _settings(b: Loaded, sentences: list[str]) -> dict:
    return {"version": COMPARISON_VERSION, "b": disk_cache.model_identity(b), "sentences": sentences}


@first_visit("Two models", "model A against its default model B over the held-out sentences")
def compare_the_default_pair(loaded: Loaded) -> None:
    b = candidates.default_b(loaded.name or str(loaded.path), runs_root())
    if b is not None:
        kept_comparison(loaded, load_checkpoint(b, ARCHITECTURE), PAGE_SENTENCES)


def head_maps(a: Loaded, b: Loaded, text: str, text_b: str | None = None, max_tokens: int = 64) -> dict:
    """Both models' attention on one input, for the head-by-head view: tokens, [L, A, T, T] each,
    and the mean JS distance per (layer, head) on this input."""
    ra = attention_maps(a, text, text_b, max_tokens)
    rb = attention_maps(b, text, text_b, max_tokens)
    if ra.tokens != rb.tokens or ra.attentions.shape != rb.attentions.shape:
        raise ValueError("the two models cut this input into different tokens or have different heads")
    return {"tokens": ra.tokens, "a": ra.attentions, "b": rb.attentions,
            "js": attention_change([ra.attentions], [rb.attentions])}


def probes_side_by_side(a: Loaded, b: Loaded, masked: str, pair: tuple[str, str], top_k: int = 5) -> dict:
    """Masked-word top-k and P(IsNext) of both models; a probe is None when a model lacks its head."""
    c = comparable(a, b)
    out = {"mlm": None, "nsp": None}
    if c.mlm and "[MASK]" in masked:
        out["mlm"] = {"a": mlm_top_k(a, masked, top_k), "b": mlm_top_k(b, masked, top_k)}
    if c.nsp:
        out["nsp"] = {"a": nsp_probability(a, [pair])[0], "b": nsp_probability(b, [pair])[0]}
    return out


# ----- what the numbers say ---------------------------------------------------------------------
# Above this CKA in every layer, two models arrange the held-out tokens alike up to a rotation and a
# scale (Kornblith et al. 2019): naming a "largest change" would name noise. A 6-step fine-tuning of
# minilm-mlm-nsp on 60 BBC articles stayed above 0.998 in every layer.
BARELY_DIFFER = 0.99


def describe(result: dict) -> dict:
    """Sentences about this pair's numbers (computed, never quoted from a paper): {"cka", "attention"}."""
    parts = {"cka": "", "attention": ""}
    by_layer = result.get("cka_by_layer")
    if by_layer and min(by_layer) > BARELY_DIFFER:
        low = int(np.argmin(by_layer))
        parts["cka"] = (f"The two models barely differ: CKA is above {BARELY_DIFFER} in every one of layers "
                        f"0–{len(by_layer) - 1} (lowest {by_layer[low]:.4f}, in layer {low}), measured on "
                        f"{result['n_units']:,} {result['units']} of {result['sentences']:,} "
                        f"sentence{'' if result['sentences'] == 1 else 's'}.")
    elif by_layer:
        low = int(np.argmin(by_layer))
        parts["cka"] = (f"Across layers 0–{len(by_layer) - 1}, CKA goes from {by_layer[0]:.2f} (embeddings) to "
                        f"{by_layer[-1]:.2f} (layer {len(by_layer) - 1}); the largest change is in layer {low} "
                        f"(CKA {by_layer[low]:.2f}), measured on {result['n_units']:,} {result['units']} of "
                        f"{result['sentences']:,} sentence{'' if result['sentences'] == 1 else 's'}.")
    else:
        m = np.asarray(result["cka_matrix"])
        i, j = np.unravel_index(int(np.nanargmax(m)), m.shape)
        parts["cka"] = (f"The best match of model B's last layer is model A's layer {int(m[:, -1].argmax())} "
                        f"(CKA {m[:, -1].max():.2f}); the most alike pair is A's layer {i} and B's layer {j} "
                        f"(CKA {m[i, j]:.2f}), measured on {result['n_units']:,} {result['units']} of "
                        f"{result['sentences']:,} sentence{'' if result['sentences'] == 1 else 's'}.")
    js = result.get("attention_js")
    if js is not None:
        js = np.asarray(js)
        layer, head = np.unravel_index(int(js.argmax()), js.shape)
        per_layer = js.mean(1)
        parts["attention"] = (f"Attention moved most in layer {layer + 1}, head {head + 1} (mean JS distance "
                              f"{js[layer, head]:.2f}); averaged over heads, layer {int(per_layer.argmax()) + 1} "
                              f"changed most ({per_layer.max():.2f}) and layer {int(per_layer.argmin()) + 1} least "
                              f"({per_layer.min():.2f}).")
    return parts
