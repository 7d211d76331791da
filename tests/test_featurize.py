"""Task inputs: QA windows over long contexts, answer labels, and SQuAD 2.0's threshold τ."""
import torch

from bert_explorer.checkpoint import resolve
from bert_explorer.tokenizer import WordPieceTokenizer
from bert_explorer.tasks.registry import QA

TOK = WordPieceTokenizer.from_dir(resolve("minilm"))
CONTEXT = " ".join(f"word{i % 7} is near the river ." for i in range(20)) + " the answer is a cat . " + \
    " ".join(f"more{i % 5} text follows here ." for i in range(20))


def _qa(answer_text, question="who discombobulated the xylophonists?"):
    start = CONTEXT.index(answer_text.strip()) - (len(answer_text) - len(answer_text.lstrip()))
    return {"id": "q", "question": question, "context": CONTEXT,
            "answers": [{"text": answer_text, "answer_start": start}], "is_impossible": False}


def test_windows_move_by_doc_stride_and_cover_the_context():
    feats = QA.featurize([_qa("cat")], TOK, None, max_seq_length=32, doc_stride=8)
    n_context = len(TOK.tokenize(CONTEXT))
    # each window moves 8 context tokens: about n/8 windows, not one per token
    assert len(feats) <= n_context // 8 + 2
    covered = set()
    for f in feats:
        covered |= {f["offsets"][t] for t, s in enumerate(f["sequence_ids"]) if s == 1}
    assert len(covered) == n_context


def test_answer_labels_decode_to_the_answer_even_with_spaces():
    for text in ("cat", "cat ", " cat"):
        feats = QA.featurize([_qa(text)], TOK, None, max_seq_length=32, doc_stride=8)
        labelled = [f for f in feats if f["start_positions"] > 0]
        assert len(labelled) >= 2  # overlapping windows both hold the answer
        for f in labelled:
            a, b = f["offsets"][f["start_positions"]][0], f["offsets"][f["end_positions"]][1]
            assert CONTEXT[a:b] == "cat"


def test_null_threshold_can_choose_to_answer_nothing():
    examples = [_qa("cat"), {**_qa("cat"), "id": "u1", "is_impossible": True, "answers": []},
                {**_qa("cat"), "id": "u2", "is_impossible": True, "answers": []}]
    feats = QA.featurize(examples, TOK, None, max_seq_length=64, doc_stride=32)
    outputs = []
    for f in feats:  # every window: a confident wrong span ("river") far above the null score
        T = len(f["input_ids"])
        s, e = torch.zeros(T), torch.zeros(T)
        tokens = f["sequence_ids"]
        wrong = next(t for t, sid in enumerate(tokens) if sid == 1)
        s[wrong], e[wrong] = 5.0, 5.0
        outputs.append((s, e))
    ev = QA.evaluate(examples, feats, outputs, None)
    # answering nothing gets the two unanswerable questions right: F1 = 2/3
    assert ev["f1"] >= 66.6 and ev["null_threshold"] > 0
