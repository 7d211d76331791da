"""Where BERT's heads look over a thousand Wikipedia segments, measured as Clark et al. (2019) did.

Kevin Clark, Urvashi Khandelwal, Omer Levy and Christopher Manning asked "What Does BERT Look
At?" (BlackboxNLP 2019). Before any linguistics they counted, for every head of bert-base-uncased,
where its attention goes on ordinary text (their Section 3):

* **The input** (Section 3, first paragraph): 1,000 Wikipedia segments of at most 128 WordPieces,
  built the way BERT's pre-training builds them, ``[CLS] A [SEP] B [SEP]`` with A and B
  consecutive text of one article, nothing masked. :func:`make_segments` does the same with the
  sentences of the built-in Wikipedia corpus (``data.corpora``, "wiki"; "vital" where gensim's
  dump is missing): a document's sentences are gathered until about 125 WordPieces, cut into A
  and B at a random sentence, and the longer of the two loses a whole word from its front or its
  back until the pair fits. Then ``segments`` of all of them are drawn at random. The seed fixes
  every choice: the same corpus and seed give the same segments in every process.
* **Words, not WordPieces** (Section 4.1): "Dedekind" is three pieces, but a reader asks where the
  *word* looks. Attention **to** a split word is the **sum** over its pieces (it received all of
  it); attention **from** a split word is the **mean** over its pieces (each piece is one
  reader). Every row still sums to 1. :func:`word_attention` does this; ``--wordpieces`` on the
  command line keeps the pieces instead, as the authors' published code does for these counts.
* **The measures** (Sections 3.1-3.3), per head, averaged over the words of a segment and then
  over the segments, each segment counting once: the attention to [CLS], to [SEP] (both of
  them), to periods and commas, to the word itself, to the previous word and to the next word
  (the first word has no previous one and counts 0, as in their code); the entropy of each word's
  attention in nats (high = spread out, low = focused; the weights smoothed by 10⁻⁴ as they did,
  so log 0 never happens), and the entropy of [CLS]'s own attention.

From the measures come the paper's sentences, computed from *this* model (:func:`statements`):
which layers give over half their attention to [SEP], which layers attend most to [CLS], most
broadly and most to punctuation, which heads put over 50% on the previous word, and how broad
[CLS]'s attention is in the last layer. What Clark et al. wrote for bert-base-uncased is kept
word for word in :data:`CLARK_STATEMENTS`, with the figure or section it comes from, and is
shown only beside that model (:func:`is_reference_model`).

1,000 segments through BERT-Base are minutes of CPU, so the measurement is built once per weights
in the background (``python -m bert_explorer.cli.attention_measures build``, started by the
Attention page through ``runs/neighbour_jobs``) into a disk-cache entry that the page then reads.
Layers and heads are 0-based in the arrays and counted from 1 wherever a person reads them.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ... import disk_cache, hub, hub_names, limits
from ...checkpoint import Loaded, encoder_of
from ...data.corpora import BUILTIN_CORPORA, load_corpus
from ...runs import neighbour_jobs
from ...runs.report import duration_text

FORMAT = 1              # bump when measures.json changes: older entries are then never read
FILE = "measures.json"  # the entry's one file
MAX_SEGMENTS = 1_000    # what Clark et al. used; the most one build may run (its cost: estimate_seconds)
MAX_PIECES = 128        # WordPieces of a segment, [CLS] and both [SEP]s included (Section 3)
CORPORA = ("wiki", "vital")  # Wikipedia only, as in the paper: the dump first, the lead sections if it is missing
PUNCTUATION = (".", ",")     # Section 3.2 counts periods and commas
SMOOTHING = 1e-4        # their entropy: 0.9999 · attention + 0.0001 / n, "to avoid NaNs"
TOKEN_BUDGET = 2048     # padded WordPieces per forward batch (16 segments of 128)
PREPARE_S = 9.0         # a background build's start, reading the Wikipedia dump and cutting it into segments:
                        # 8-9 s measured (2-core EPYC, idle)

REFERENCE_MODEL = "google-bert/bert-base-uncased"  # the model Clark et al. measured
BUILD_COMMAND = ("bert_explorer.cli.attention_measures", "build")  # what builds an entry in the background

# What Clark et al. (2019) state for bert-base-uncased, with where they state it. Nothing else of
# theirs is shown: no per-layer number beyond these sentences.
CLARK_STATEMENTS = {
    "sep": "Over half of the attention in layers 6-10 goes to [SEP] (Fig. 2).",
    "early_late": "Layers 1-2 attend broadly (Fig. 4) and to [CLS] (Fig. 2); layers 11-12 attend to periods and "
                  "commas (Fig. 2).",
    "previous": "Four heads, in layers 2, 4, 7 and 8, put more than 50% of their attention on the previous token "
                "(Section 3.1).",
    "cls_entropy": "In the last layer the attention from [CLS] has an entropy of 3.89 nats: very broad "
                   "(Section 3.3, Fig. 4).",
}
STATEMENT_TOPICS = {"sep": "[SEP]", "early_late": "first and last layers", "previous": "previous-token heads",
                    "cls_entropy": "[CLS] in the last layer"}

# measure -> what a person reads as its heading
MEASURES = {"to_sep": "[SEP]", "to_cls": "[CLS]", "to_punct": ". and ,", "to_prev": "previous", "to_next": "next",
            "to_self": "itself", "entropy": "entropy (nats)", "cls_entropy": "[CLS] entropy (nats)"}

Progress = Callable[[float, str], None]


def is_reference_model(name: str | None) -> bool:
    """Is ``name`` the model Clark et al. measured, google-bert/bert-base-uncased (under any of the
    names that reach it: ``bert-base-uncased``, ``hf:google-bert/bert-base-uncased``, ...)?"""
    if not name or not hub_names.is_hub_name(str(name)):
        return False
    try:
        return hub.canonical(str(name)) == REFERENCE_MODEL
    except hub.HubError:
        return False


def report_segments(report, done: int, total: int, started: float) -> None:
    """A measurement over segments tells its progress: the share done, the rate and the time left."""
    rate = done / max(time.time() - started, 1e-6)
    report(done / total, f"{done:,} of {total:,} segments ({rate:.1f} a second, about "
                         f"{duration_text((total - done) / rate)} left)")


def default_corpus() -> str:
    """The Wikipedia dump when it is installed (gensim's test data), else the Vital Articles' leads."""
    return next((c for c in CORPORA if BUILTIN_CORPORA[c].available), CORPORA[0])


# ----- the segments ----------------------------------------------------------------------------------
@dataclass
class Segment:
    """One input ``[CLS] A [SEP] B [SEP]``: its WordPieces, and the word each piece belongs to."""
    input_ids: list[int]
    token_type_ids: list[int]   # 0 for [CLS] A [SEP], 1 for B [SEP]
    groups: list[int]           # piece i belongs to word groups[i] (0 = [CLS]); non-decreasing
    words: list[str]            # each word's text ("[CLS]", "play##ing" written "playing", ".", "[SEP]")

    def __len__(self) -> int:
        return len(self.input_ids)


def _sentence_words(tokenizer, sentences: list[str]) -> list[list[tuple[list[int], str]]]:
    """Each sentence as its words, each word as (its piece ids, its text). A word is what BERT's
    basic tokeniser cuts at white space and punctuation, so "." and "," are words of their own."""
    out = []
    for enc in tokenizer.encode_batch(sentences):
        words: list[tuple[list[int], str]] = []
        last = None
        for piece_id, token, word in zip(enc.input_ids[1:-1], enc.tokens[1:-1], enc.word_ids[1:-1]):
            if word != last or not words:
                words.append(([piece_id], token))
                last = word
            else:
                ids, text = words[-1]
                ids.append(piece_id)
                words[-1] = (ids, text + token.removeprefix("##"))
        out.append(words)
    return out


def _pieces(words) -> int:
    return sum(len(ids) for ids, _ in words)


def _truncate_pair(a: list, b: list, max_pieces: int, rng: random.Random) -> None:
    """Take whole words off the longer of A and B, from its front or its back at random, until both
    fit in ``max_pieces`` (google-research/bert's ``truncate_seq_pair``, which Clark et al. reused,
    takes pieces; we take words, so that no word is left with half its pieces)."""
    def drop_a_word(words: list) -> int:  # its number of pieces
        ids, _ = words.pop(0) if rng.random() < 0.5 else words.pop()
        return len(ids)

    in_a, in_b = _pieces(a), _pieces(b)
    while in_a + in_b > max_pieces:
        if in_a > in_b:
            in_a -= drop_a_word(a)
        else:
            in_b -= drop_a_word(b)


def _document_segments(tokenizer, document: list[str], max_len: int, rng: random.Random) -> list[Segment]:
    """Clark et al.'s ``prep_document`` (after BERT's ``create_pretraining_data.py``): gather
    sentences until they fill the segment (or the document ends), put a random number of them in A
    and the rest in B. A chunk of one sentence has no B and is skipped."""
    room = max_len - 3  # [CLS], [SEP], [SEP]
    sentences = [w for w in _sentence_words(tokenizer, [s for s in document if s.strip()]) if w]
    out, chunk, length = [], [], 0
    for i, words in enumerate(sentences):
        chunk.append(words)
        length += _pieces(words)
        if i < len(sentences) - 1 and length < room:
            continue
        if len(chunk) >= 2:
            a_end = rng.randint(1, len(chunk) - 1)
            a = [w for s in chunk[:a_end] for w in s]
            b = [w for s in chunk[a_end:] for w in s]
            _truncate_pair(a, b, room, rng)
            if a and b:
                out.append(_segment(tokenizer, a, b))
        chunk, length = [], 0
    return out


def _segment(tokenizer, a, b) -> Segment:
    cls, sep = ([tokenizer.cls_id], "[CLS]"), ([tokenizer.sep_id], "[SEP]")
    words = [cls, *a, sep, *b, sep]
    ids = [i for piece_ids, _ in words for i in piece_ids]
    groups = [w for w, (piece_ids, _) in enumerate(words) for _ in piece_ids]
    a_pieces = 2 + _pieces(a)
    return Segment(input_ids=ids, token_type_ids=[0] * a_pieces + [1] * (len(ids) - a_pieces), groups=groups,
                   words=[text for _, text in words])


def make_segments(tokenizer, corpus: str = "wiki", segments: int = MAX_SEGMENTS, seed: int = 0,
                  max_len: int = MAX_PIECES) -> list[Segment]:
    """``segments`` inputs ``[CLS] A [SEP] B [SEP]`` of at most ``max_len`` WordPieces from the built-in
    corpus ``corpus`` (or a list of documents, each a list of sentences): every document is cut
    into segments as BERT's pre-training does, then ``segments`` of them are drawn at random
    (Clark et al.'s "1000 random Wikipedia segments"). Fewer come back when the corpus has fewer."""
    check_segments(segments)
    documents = load_corpus(corpus) if isinstance(corpus, str) else [list(d) for d in corpus]
    rng = random.Random(seed)
    every = [s for doc in documents for s in _document_segments(tokenizer, doc, max_len, rng)]
    return rng.sample(every, min(segments, len(every)))


def check_segments(segments: int) -> None:
    if not 1 <= int(segments) <= MAX_SEGMENTS:
        raise ValueError(f"the number of segments must be between 1 and {MAX_SEGMENTS:,} (Clark et al. used "
                         f"1,000), not {segments}")


# ----- from WordPieces to words, and the measures -----------------------------------------------------
def word_attention(att, groups) -> torch.Tensor:
    """Token-to-token attention [L, A, T, T] -> word-to-word attention [L, A, n, n] (Clark et al.
    2019, Section 4.1). ``groups[i]`` is the word of piece i (0..n-1, in order).

    Attention *to* a word is the sum over its pieces: ``to = att @ M`` with M [T, n] the 0/1 matrix
    "piece i is in word w". Attention *from* a word is the mean over its pieces: ``M̄ᵀ @ to``, where
    M̄ is M with each column divided by its word's number of pieces. Rows still sum to 1."""
    att = torch.as_tensor(att)
    groups = torch.as_tensor(list(groups), dtype=torch.long)
    n = int(groups.max()) + 1
    member = torch.nn.functional.one_hot(groups, n).to(att.dtype)   # [T, n]
    to_words = att @ member                                            # [L, A, T, n]  (summed)
    mean_of = member / member.sum(0, keepdim=True)                     # [T, n]: 1/pieces of each word
    return mean_of.T @ to_words                                        # [L, A, n, n]  (averaged)


def segment_measures(att, words: list[str]) -> dict[str, np.ndarray]:
    """The measures of one segment, each [L, A], from its attention ``att`` [L, A, n, n] (rows sum
    to 1) over the ``words`` (tokens) it is made of. Every word is a query and counts once: the
    mean over n, as in Clark et al.'s own code (so the first word's missing previous word, and
    the last word's missing next word, count as 0)."""
    a = torch.as_tensor(att, dtype=torch.float64)
    n = a.shape[-1]
    if len(words) != n:
        raise ValueError(f"{len(words)} words for attention over {n} positions")
    is_cls = torch.tensor([w == "[CLS]" for w in words])
    is_sep = torch.tensor([w == "[SEP]" for w in words])
    is_punct = torch.tensor([w in PUNCTUATION for w in words])
    smooth = (1 - SMOOTHING) * a + SMOOTHING / n
    entropy = -(smooth * smooth.log()).sum(-1)                         # [L, A, n]: each word's attention
    measures = {
        "to_sep": a[..., is_sep].sum(-1).mean(-1),
        "to_cls": a[..., is_cls].sum(-1).mean(-1),
        "to_punct": a[..., is_punct].sum(-1).mean(-1),
        "to_prev": a.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / n,  # [i, i-1]
        "to_next": a.diagonal(offset=1, dim1=-2, dim2=-1).sum(-1) / n,   # [i, i+1]
        "to_self": a.diagonal(dim1=-2, dim2=-1).mean(-1),
        "entropy": entropy.mean(-1),
        "cls_entropy": entropy[..., int(is_cls.int().argmax())] if is_cls.any() else torch.full(a.shape[:2], np.nan),
    }
    return {k: v.numpy() for k, v in measures.items()}


@dataclass
class ClarkMeasures:
    """Clark et al.'s measures of one model: ``heads[m]`` is an [L, A] array per measure m of
    :data:`MEASURES`, each the mean over the segments. ``uniform`` holds what attention spread
    evenly over every word would score on the same segments (the baseline to read them against)."""
    heads: dict[str, np.ndarray]
    uniform: dict[str, float]
    segments: int
    words: int
    wordpieces: int
    word_level: bool = True
    corpus: str = "wiki"
    seed: int = 0
    info: dict = field(default_factory=dict)   # model name, seconds, threads, when built

    @property
    def num_layers(self) -> int:
        return self.heads["to_sep"].shape[0]

    @property
    def num_heads(self) -> int:
        return self.heads["to_sep"].shape[1]

    def layer_means(self, measure: str) -> np.ndarray:
        """[L]: the measure averaged over the heads of each layer."""
        return self.heads[measure].mean(axis=1)

    def to_dict(self) -> dict:
        return {"format": FORMAT, "segments": self.segments, "words": self.words, "wordpieces": self.wordpieces,
                "word_level": self.word_level, "corpus": self.corpus, "seed": self.seed, "info": self.info,
                "uniform": self.uniform, "heads": {k: v.round(6).tolist() for k, v in self.heads.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "ClarkMeasures":
        return cls(heads={k: np.array(v, dtype=np.float64) for k, v in d["heads"].items()}, uniform=d["uniform"],
                   segments=d["segments"], words=d["words"], wordpieces=d["wordpieces"], word_level=d["word_level"],
                   corpus=d["corpus"], seed=d["seed"], info=d.get("info", {}))


def _batches(segments: list[Segment]) -> list[list[int]]:
    """Segment indices in batches of similar length, at most TOKEN_BUDGET padded pieces each."""
    order = sorted(range(len(segments)), key=lambda i: len(segments[i]))
    batches, i = [], 0
    while i < len(order):
        n = 1
        while i + n < len(order) and (n + 1) * len(segments[order[i + n]]) <= TOKEN_BUDGET:
            n += 1
        batches.append(order[i:i + n])
        i += n
    return batches


def measure(loaded: Loaded, segments: list[Segment], word_level: bool = True,
            progress: Progress | None = None) -> ClarkMeasures:
    """Run ``loaded`` over ``segments`` with its attentions, make them word-level (or keep the
    WordPieces with ``word_level=False``) and average the measures over the segments."""
    if not segments:
        raise ValueError("no segments to measure: the corpus gave none")
    report = progress or (lambda f, m: None)
    tok = loaded.tokenizer
    model = encoder_of(loaded.model)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    sums: dict[str, np.ndarray] = {}
    uniform = {"to_sep": 0.0, "to_cls": 0.0, "to_punct": 0.0, "to_prev": 0.0, "entropy": 0.0}
    words = pieces = done = 0
    started = time.time()
    try:
        for batch in _batches(segments):
            T = max(len(segments[b]) for b in batch)
            ids = torch.full((len(batch), T), tok.pad_id, dtype=torch.long)
            types = torch.zeros_like(ids)
            mask = torch.zeros_like(ids)
            for row, b in enumerate(batch):
                s = segments[b]
                ids[row, :len(s)] = torch.tensor(s.input_ids)
                types[row, :len(s)] = torch.tensor(s.token_type_ids)
                mask[row, :len(s)] = 1
            with torch.inference_mode():
                out = model(input_ids=ids.to(device), token_type_ids=types.to(device),
                            attention_mask=mask.to(device), output_attentions=True)
                att = torch.stack(out.attentions, dim=1).float().cpu()    # [B, L, A, T, T]
            for row, b in enumerate(batch):
                s = segments[b]
                t = len(s)
                a = att[row, :, :, :t, :t]                                 # padding keys weigh exactly 0
                if word_level:
                    a, shown = word_attention(a, s.groups), s.words
                else:
                    shown = [tok.id_to_token(i) for i in s.input_ids]
                for k, v in segment_measures(a, shown).items():
                    sums[k] = sums.get(k, 0.0) + v
                n = len(shown)
                uniform["to_sep"] += shown.count("[SEP]") / n
                uniform["to_cls"] += shown.count("[CLS]") / n
                uniform["to_punct"] += sum(w in PUNCTUATION for w in shown) / n
                uniform["to_prev"] += (n - 1) / n / n
                uniform["entropy"] += float(np.log(n))
                words += len(s.words)
                pieces += t
            done += len(batch)
            report_segments(report, done, len(segments), started)
    finally:
        model.train(was_training)
    m = len(segments)
    return ClarkMeasures(heads={k: v / m for k, v in sums.items()}, uniform={k: v / m for k, v in uniform.items()},
                         segments=m, words=words, wordpieces=pieces, word_level=word_level,
                         info={"model": loaded.name or str(loaded.path), "seconds": round(time.time() - started, 1),
                               "threads": torch.get_num_threads(), "built": time.strftime("%Y-%m-%d %H:%M:%S")})


# ----- what the measures say, in the paper's words -------------------------------------------------------
def _layers_text(layers) -> str:
    """[6, 7, 8, 10] -> "layers 6-8 and 10", [4, 5] -> "layers 4 and 5" (1-based numbers)."""
    runs: list[list[int]] = []
    for x in sorted(layers):
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    parts = [p for r in runs for p in ([f"{r[0]}-{r[-1]}"] if len(r) > 2 else map(str, r))]
    text = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return ("layers " if len(layers) > 1 else "layer ") + text


def _top_layers(values: np.ndarray, k: int = 2) -> list[int]:
    """The 1-based numbers of the ``k`` layers with the largest values, in layer order."""
    return sorted(int(i) + 1 for i in np.argsort(-values, kind="stable")[:min(k, len(values))])


def statements(m: ClarkMeasures) -> dict[str, str]:
    """Clark et al.'s four statements, each computed from this model's measures: the same keys as
    :data:`CLARK_STATEMENTS`, every number from ``m``."""
    L = m.num_layers
    sep = m.layer_means("to_sep")
    most = int(np.argmax(sep))
    over = [i + 1 for i in range(L) if sep[i] > 0.5]
    uniform_sep = f"attention spread evenly would give {m.uniform['to_sep']:.0%}"
    if over:
        sep_text = (f"Over half of the attention in {_layers_text(over)} goes to [SEP] (the most: layer {most + 1}, "
                    f"{sep[most]:.0%}; {uniform_sep}).")
    else:
        sep_text = (f"In no layer does over half of the attention go to [SEP]; the most is layer {most + 1}, "
                    f"{sep[most]:.0%} ({uniform_sep}).")

    def top(measure: str, fmt: str, unit: str = "") -> str:
        values = m.layer_means(measure)
        layers = _top_layers(values)
        return f"{_layers_text(layers)} ({', '.join(format(values[i - 1], fmt) for i in layers)}{unit})"

    early_late = (f"The broadest attention (highest mean entropy) is in {top('entropy', '.2f', ' nats')}; the most "
                  f"attention to [CLS] in {top('to_cls', '.1%')}; the most to periods and commas in "
                  f"{top('to_punct', '.1%')}.")

    prev = m.heads["to_prev"]
    heads = [(l, h) for l in range(L) for h in range(m.num_heads) if prev[l, h] > 0.5]
    name = "word" if m.word_level else "token"
    if heads:
        listed = "; ".join(f"layer {l + 1} head {h + 1} ({prev[l, h]:.0%})" for l, h in heads)
        previous = (f"{len(heads)} head{'s' if len(heads) > 1 else ''} put{'' if len(heads) > 1 else 's'} more than "
                    f"50% of {'their' if len(heads) > 1 else 'its'} attention on the previous {name}: {listed}.")
    else:
        l, h = np.unravel_index(int(np.argmax(prev)), prev.shape)
        previous = (f"No head puts more than 50% of its attention on the previous {name}; the most is layer "
                    f"{l + 1} head {h + 1}, {prev[l, h]:.0%}.")

    cls = m.heads["cls_entropy"][-1].mean()
    cls_entropy = (f"In the last layer (layer {L}) the attention from [CLS] has an entropy of {cls:.2f} nats (mean of "
                   f"its {m.num_heads} heads; attention spread evenly over these segments' {name}s would have "
                   f"{m.uniform['entropy']:.2f}).")
    return {"sep": sep_text, "early_late": early_late, "previous": previous, "cls_entropy": cls_entropy}


def layer_table(m: ClarkMeasures) -> pd.DataFrame:
    """One row per layer (counted from 1): each measure averaged over the layer's heads."""
    table = pd.DataFrame({"layer": np.arange(1, m.num_layers + 1)})
    for key, heading in MEASURES.items():
        table[heading] = m.layer_means(key)
    return table.round(3)


def head_table(m: ClarkMeasures) -> pd.DataFrame:
    """One row per head (layers and heads counted from 1) with every measure."""
    L, A = m.num_layers, m.num_heads
    table = pd.DataFrame({"layer": np.repeat(np.arange(1, L + 1), A), "head": np.tile(np.arange(1, A + 1), L)})
    for key, heading in MEASURES.items():
        table[heading] = m.heads[key].reshape(-1)
    return table.round(4)


# ----- the cost, the cache entry and its build -------------------------------------------------------------
def estimate_seconds(config, segments: int) -> float:
    """About how long ``segments`` segments take on an idle machine, in a background build: the corpus
    read and cut (``PREPARE_S``), a forward pass of MAX_PIECES WordPieces each (``limits.forward_flops``)
    and the word-level products (about 4·L·A·T³ operations a segment), at this CPU's measured rate
    (``train.estimate.cpu_flop_s``)."""
    from ...train.estimate import background_threads, cpu_flop_s

    T = min(MAX_PIECES, config.max_position_embeddings)
    forward = limits.forward_flops(config.num_layers, config.hidden_size, config.intermediate_size, T) * T
    words = 4.0 * config.num_layers * config.num_heads * T ** 3
    rate, _ = cpu_flop_s("forward", config.hidden_size, background_threads(), False, config.intermediate_size)
    return PREPARE_S + segments * (forward + words) / rate


def measures_path(loaded: Loaded, corpus: str = "wiki", segments: int = MAX_SEGMENTS, seed: int = 0,
                  word_level: bool = True) -> Path:
    """Where the measures of (these weights, corpus, segments, seed, words or pieces) live once built."""
    return disk_cache.entry("clark-measures", loaded, corpus=str(corpus), segments=int(segments), seed=int(seed),
                            word_level=bool(word_level), max_pieces=MAX_PIECES, format=FORMAT)


def is_complete(path: Path) -> bool:
    return (Path(path) / FILE).is_file()


def measures_state(path: Path) -> dict:
    """ready / building / stopped / failed / missing, with the builder's progress (``neighbour_jobs``)."""
    return neighbour_jobs.build_state(Path(path), is_complete(path))


def read_measures(path: Path) -> ClarkMeasures | None:
    """The measures built into ``path``, or None when there are none (yet)."""
    data = disk_cache.read_json(path, FILE)
    return ClarkMeasures.from_dict(data) if data and data.get("format") == FORMAT else None


def build_measures(loaded: Loaded, corpus: str = "wiki", segments: int = MAX_SEGMENTS, seed: int = 0,
                   word_level: bool = True, progress: Progress | None = None) -> Path:
    """Measure ``loaded`` on ``segments`` segments of ``corpus`` into its cache entry and return the
    entry's folder; an entry built already is returned at once. Holds the build's lock
    (``neighbour_jobs.BuildBusy`` when another process builds it now) and reports its progress
    where every page and the CLI can read it; a failure is written there too, in one sentence."""
    check_segments(segments)
    if corpus not in BUILTIN_CORPORA:
        raise ValueError(f"no built-in corpus called {corpus!r}; Clark et al. measured on Wikipedia: "
                         f"{' or '.join(CORPORA)}")
    path = measures_path(loaded, corpus, segments, seed, word_level)

    def work(say) -> dict[str, str]:
        started = time.time()
        say(0.0, f"cutting the {corpus} corpus into segments…")
        max_len = min(MAX_PIECES, loaded.config.max_position_embeddings)
        chosen = make_segments(loaded.tokenizer, corpus, segments, seed, max_len)
        result = measure(loaded, chosen, word_level, lambda f, m: say(0.98 * f, m))
        result.corpus, result.seed = corpus, seed
        result.info["seconds"] = round(time.time() - started, 1)
        return {FILE: json.dumps(result.to_dict(), indent=1)}

    return neighbour_jobs.build_entry(path, is_complete, work, progress)
