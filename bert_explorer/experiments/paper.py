"""The published numbers our small ablations are shown beside (PAPER_NUMBERS.md of the team).

All values are percentages as printed in the papers. Every table carries its source so the
app can cite it ("Devlin et al. 2019, Table 5"). Our miniatures differ from the paper in
scale (millions of tokens, not billions), data and tasks, so the *directions* are what can be
compared, not the levels: see :mod:`.results`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tasks.registry import CLASSIFICATION, NER, PAIR_CLASSIFICATION, QA


@dataclass(frozen=True)
class PaperTable:
    source: str                  # how to cite it
    what: str                    # one line: what the table varies and on what
    columns: tuple[str, ...]
    rows: dict                   # row key -> {column: value}
    row_labels: dict             # row key -> the label printed in the paper


# ----- Table 5: pre-training tasks (BERT-Base, dev) ----------------------------------------
TABLE5 = PaperTable(
    "Devlin et al. 2019, Table 5",
    "pre-training tasks, BERT-Base, dev sets",
    ("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD F1"),
    {
        "mlm+nsp":    {"MNLI-m": 84.4, "QNLI": 88.4, "MRPC": 86.7, "SST-2": 92.7, "SQuAD F1": 88.5},
        "mlm":        {"MNLI-m": 83.9, "QNLI": 84.9, "MRPC": 86.5, "SST-2": 92.6, "SQuAD F1": 87.9},
        "ltr":        {"MNLI-m": 82.1, "QNLI": 84.3, "MRPC": 77.5, "SST-2": 92.1, "SQuAD F1": 77.8},
        "ltr+bilstm": {"MNLI-m": 82.1, "QNLI": 84.1, "MRPC": 75.7, "SST-2": 91.6, "SQuAD F1": 84.9},
    },
    {"mlm+nsp": "BERT-Base", "mlm": "No NSP", "ltr": "LTR & No NSP", "ltr+bilstm": "+ BiLSTM"},
)

# ----- Table 6: model size (dev); rows keyed by (L, H, A) -----------------------------------
TABLE6 = PaperTable(
    "Devlin et al. 2019, Table 6",
    "model size, dev sets; LM ppl = masked-LM perplexity of held-out training data",
    ("LM ppl", "MNLI-m", "MRPC", "SST-2"),
    {
        (3, 768, 12):   {"LM ppl": 5.84, "MNLI-m": 77.9, "MRPC": 79.8, "SST-2": 88.4},
        (6, 768, 3):    {"LM ppl": 5.24, "MNLI-m": 80.6, "MRPC": 82.2, "SST-2": 90.7},
        (6, 768, 12):   {"LM ppl": 4.68, "MNLI-m": 81.9, "MRPC": 84.8, "SST-2": 91.3},
        (12, 768, 12):  {"LM ppl": 3.99, "MNLI-m": 84.4, "MRPC": 86.7, "SST-2": 92.9},
        (12, 1024, 16): {"LM ppl": 3.54, "MNLI-m": 85.7, "MRPC": 86.9, "SST-2": 93.3},
        (24, 1024, 16): {"LM ppl": 3.23, "MNLI-m": 86.6, "MRPC": 87.8, "SST-2": 93.7},
    },
    {k: f"L={k[0]}, H={k[1]}, A={k[2]}" for k in
     ((3, 768, 12), (6, 768, 3), (6, 768, 12), (12, 768, 12), (12, 1024, 16), (24, 1024, 16))},
)

# ----- BERT miniatures (Turc et al. 2019, GLUE test); rows keyed by (L, H), A = H/64 ---------
MINIATURES = PaperTable(
    "Turc et al. 2019 (BERT miniatures, GLUE test)",
    "small BERTs pre-trained like BERT, then fine-tuned; GLUE test server scores",
    ("GLUE score", "SST-2", "MNLI-m", "QNLI", "CoLA"),
    {
        (2, 128): {"GLUE score": 64.2, "SST-2": 83.2, "MNLI-m": 70.2, "QNLI": 81.5, "CoLA": 0.0},
        (4, 256): {"GLUE score": 65.8, "SST-2": 85.9, "MNLI-m": 74.8, "QNLI": 84.1, "CoLA": 0.0},
        (4, 512): {"GLUE score": 71.2, "SST-2": 89.7, "MNLI-m": 77.6, "QNLI": 86.4, "CoLA": 27.8},
        (8, 512): {"GLUE score": 73.5, "SST-2": 89.6, "MNLI-m": 80.0, "QNLI": 87.7, "CoLA": 38.0},
    },
    {(2, 128): "BERT-Tiny", (4, 256): "BERT-Mini", (4, 512): "BERT-Small", (8, 512): "BERT-Medium"},
)

# ----- Table 7: CoNLL-2003 NER, feature-based vs fine-tuning (dev F1) ------------------------
TABLE7 = PaperTable(
    "Devlin et al. 2019, Table 7",
    "CoNLL-2003 NER dev F1: fine-tuning vs frozen features + a new 2-layer BiLSTM (BERT-Base)",
    ("NER",),
    {
        "fine-tune": {"NER": 96.4},          # BERT-Base (BERT-Large: 96.6)
        "embeddings": {"NER": 91.0},
        "second-to-last": {"NER": 95.6},
        "last": {"NER": 94.9},
        "sum-last-4": {"NER": 95.9},
        "concat-last-4": {"NER": 96.1},
        "sum-all": {"NER": 95.5},
    },
    {"fine-tune": "Fine-tuning BERT-Base", "embeddings": "Embeddings", "second-to-last": "Second-to-last hidden",
     "last": "Last hidden", "sum-last-4": "Weighted sum last four hidden", "concat-last-4": "Concat last four hidden",
     "sum-all": "Weighted sum all 12 layers"},
)

# ----- Table 8: masking strategies (dev); rows keyed "MASK/SAME/RND" in percent -------------
TABLE8 = PaperTable(
    "Devlin et al. 2019, Table 8",
    "masking strategies of the chosen 15%: [MASK] / unchanged (SAME) / random token (RND), dev sets",
    ("MNLI", "NER fine-tune", "NER feature-based"),
    {
        "80/10/10": {"MNLI": 84.2, "NER fine-tune": 95.4, "NER feature-based": 94.9},
        "100/0/0":  {"MNLI": 84.3, "NER fine-tune": 94.9, "NER feature-based": 94.0},
        "80/0/20":  {"MNLI": 84.1, "NER fine-tune": 95.2, "NER feature-based": 94.6},
        "80/20/0":  {"MNLI": 84.4, "NER fine-tune": 95.2, "NER feature-based": 94.7},
        "0/20/80":  {"MNLI": 83.7, "NER fine-tune": 94.8, "NER feature-based": 94.6},
        "0/0/100":  {"MNLI": 83.6, "NER fine-tune": 94.9, "NER feature-based": 94.6},
    },
    {k: f"MASK {k.split('/')[0]}%, SAME {k.split('/')[1]}%, RND {k.split('/')[2]}%" for k in
     ("80/10/10", "100/0/0", "80/0/20", "80/20/0", "0/20/80", "0/0/100")},
)

# ----- RoBERTa's re-examination of NSP (Liu et al. 2019, Table 2; BERT-Base size, 1 M steps) ------------
# Rows keyed by the input format; MNLI-m and SST-2 accuracy, SQuAD F1. What it adds to Table 5: the
# gain of NSP there came with its input format, not with the objective itself.
ROBERTA_NSP = PaperTable(
    "Liu et al. 2019 (RoBERTa), Table 2",
    "NSP re-examined: input format with and without NSP, BERT-Base size, Books + Wikipedia, dev sets",
    ("SQuAD 1.1 F1", "SQuAD 2.0 F1", "MNLI-m", "SST-2", "RACE"),
    {
        "segment-pair+nsp":  {"SQuAD 1.1 F1": 90.4, "SQuAD 2.0 F1": 78.7, "MNLI-m": 84.0, "SST-2": 92.9, "RACE": 64.2},
        "sentence-pair+nsp": {"SQuAD 1.1 F1": 88.7, "SQuAD 2.0 F1": 76.2, "MNLI-m": 82.9, "SST-2": 92.1, "RACE": 63.0},
        "full-sentences":    {"SQuAD 1.1 F1": 90.4, "SQuAD 2.0 F1": 79.1, "MNLI-m": 84.7, "SST-2": 92.5, "RACE": 64.8},
        "doc-sentences":     {"SQuAD 1.1 F1": 90.6, "SQuAD 2.0 F1": 79.7, "MNLI-m": 84.7, "SST-2": 92.7, "RACE": 65.6},
    },
    {"segment-pair+nsp": "SEGMENT-PAIR + NSP (BERT's own set-up, reimplemented)",
     "sentence-pair+nsp": "SENTENCE-PAIR + NSP (single sentences)",
     "full-sentences": "FULL-SENTENCES, no NSP", "doc-sentences": "DOC-SENTENCES, no NSP"},
)


def _roberta_on_nsp() -> str:
    r = ROBERTA_NSP.rows
    pair, single, full = r["segment-pair+nsp"], r["sentence-pair+nsp"], r["full-sentences"]
    return (f"{ROBERTA_NSP.source} re-examined NSP at BERT-Base size: without it on whole sentences MNLI-m "
            f"{full['MNLI-m']} and SQuAD 2.0 {full['SQuAD 2.0 F1']}, against {pair['MNLI-m']} / "
            f"{pair['SQuAD 2.0 F1']} with NSP on BERT's segment pairs and {single['MNLI-m']} / "
            f"{single['SQuAD 2.0 F1']} with NSP on single-sentence pairs: dropping NSP did not hurt once the input "
            "was packed with whole sentences, so Table 5's loss came with the input format more than with NSP")


# Which paper column stands for one of our tasks, by task type (a recipe can say otherwise).
DEFAULT_COLUMN = {CLASSIFICATION: "SST-2", PAIR_CLASSIFICATION: "MNLI-m", QA: "SQuAD F1", NER: "NER"}
# The task types of the sentence-pair tasks whose scores Table 5 says NSP helps (MNLI, QNLI; SQuAD).
NSP_TASK_TYPES = (PAIR_CLASSIFICATION, QA)
COLUMNS = ("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD F1", "NER")
# Tables 7 and 8 measured on CoNLL-2003, named so wherever they stand beside ours ("NER, not wnut16" read as if
# WNUT-16 were not NER)
NER_F1 = "CoNLL-2003 NER F1"
NER_FINE_TUNE_F1, NER_FEATURE_F1 = "CoNLL-2003 NER fine-tune F1", "CoNLL-2003 NER feature-based F1"
# The benchmark each of those names was measured on, and the Hugging Face Hub data sets that are those
# benchmarks, by the data set's name (its owner aside) and configuration (None: any): a task of ours that reads
# one of them is the paper's own task, not a stand-in for it
BENCHMARKS = {"MNLI-m": "MNLI", "MNLI": "MNLI", "QNLI": "QNLI", "MRPC": "MRPC", "SST-2": "SST-2",
              "SQuAD F1": "SQuAD", "NER": "CoNLL-2003", NER_F1: "CoNLL-2003", NER_FINE_TUNE_F1: "CoNLL-2003",
              NER_FEATURE_F1: "CoNLL-2003"}
HUB_BENCHMARKS = {("glue", "sst2"): "SST-2", ("glue", "mnli"): "MNLI", ("glue", "qnli"): "QNLI",
                  ("glue", "mrpc"): "MRPC", ("conll2003", None): "CoNLL-2003", ("squad", None): "SQuAD"}


def hub_benchmark(repo_id: str, config: str | None) -> str | None:
    """The paper's benchmark a Hub data set is (``nyu-mll/glue``, ``sst2``: SST-2), or None."""
    name = repo_id.rsplit("/", 1)[-1].lower()
    return HUB_BENCHMARKS.get((name, (config or "").lower())) or HUB_BENCHMARKS.get((name, None))

# The paper's four ablation findings that the studio checks in our numbers.
DIRECTIONS = {
    "nsp_helps_pairs": ("NSP helps sentence-pair tasks",
                        "Table 5: removing NSP hurts QNLI, MNLI and SQuAD (MNLI-m 84.4 -> 83.9, QNLI 88.4 -> 84.9)"),
    "bidirectional_beats_ltr": ("bidirectional beats left-to-right",
                                "Table 5: LTR & No NSP is below No NSP on every task, even with a BiLSTM on top "
                                "(MRPC 86.5 -> 77.5 / 75.7)"),
    "bigger_beats_smaller": ("bigger beats smaller",
                             "Table 6: more layers / larger H improve every task (MNLI-m 77.9 at 3 layers -> 86.6 "
                             "at BERT-Large)"),
    "concat_close_to_finetune": ("concat-last-4 close to fine-tuning, well above embeddings",
                                 "Table 7: 96.1 vs 96.4 fine-tuned, 91.0 from the embeddings alone"),
}
# What later work found about a direction, shown beside the paper's own evidence.
LATER_WORK = {"nsp_helps_pairs": _roberta_on_nsp()}


def paper_number(axis: str, value, column: str | None, *, layers_hidden_heads: tuple | None = None,
                 feature_based: bool = False) -> dict | None:
    """The paper's number for one setting of one axis, or None where the paper has none.

    ``axis`` is objective, size, transfer or masking; ``value`` its setting (a size needs
    ``layers_hidden_heads`` = (L, H, A)); ``column`` the paper column that stands for our task
    (MNLI-m, QNLI, MRPC, SST-2, SQuAD F1 or NER). Tables 7 and 8 report NER (and MNLI) only,
    so for other tasks their nearest column is returned and named in ``metric`` (their NER as CoNLL-2003's).

    Returns ``{"value", "source", "metric", "row"}``.
    """
    def hit(table: PaperTable, key, col):
        v = table.rows.get(key, {}).get(col)
        if v is None:
            return None
        return {"value": v, "source": table.source, "metric": col, "row": table.row_labels.get(key, str(key))}

    if axis == "objective":
        return hit(TABLE5, value, column)
    if axis == "size":
        if layers_hidden_heads is None:
            return None
        L, H, A = layers_hidden_heads
        found = hit(TABLE6, (L, H, A), column)
        if found is None and A == H // 64:
            found = hit(MINIATURES, (L, H), column)
        return found
    if axis == "transfer":
        found = hit(TABLE7, value, "NER")
        if found:
            found["metric"] = NER_F1
        return found
    if axis == "masking":
        if column == "NER":
            found = hit(TABLE8, value, "NER feature-based" if feature_based else "NER fine-tune")
            if found:
                found["metric"] = NER_FEATURE_F1 if feature_based else NER_FINE_TUNE_F1
            return found
        return hit(TABLE8, value, "MNLI")
    return None
