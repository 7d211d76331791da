"""The hand-written check set and the captions that report what the model on screen did."""
import numpy as np
import pytest

from bert_explorer.analysis.probes.check_set import cloze_score, load_check_set, score_check_set
from bert_explorer.analysis.embeddings import ContextSimilarity
from bert_explorer.analysis.probes.pretraining_tasks import nsp_table_summary
from bert_explorer.checkpoint import load
from shared import needs_model


def test_check_set_has_30_or_more_of_each_and_balanced_pairs():
    check = load_check_set()
    assert len(check["cloze"]) >= 30 and len(check["nsp"]) >= 30
    labels = [p["is_next"] for p in check["nsp"]]
    assert labels.count(True) == labels.count(False)
    assert all(c["text"].count("[MASK]") == 1 for c in check["cloze"])


def test_every_accepted_answer_is_one_wordpiece_of_the_standard_vocabulary(minilm_dir):
    from bert_explorer.tokenizer import WordPieceTokenizer

    tok = WordPieceTokenizer.from_dir(minilm_dir)
    for item in load_check_set()["cloze"]:
        for answer in item["answers"]:
            assert len(tok.encode(answer).input_ids) == 3, answer  # [CLS] answer [SEP]


def test_check_set_sentences_are_not_in_the_training_documents():
    """The pairs were written from held-out documents: no pair's A and B sit next to each
    other in a training document of the default model's corpus."""
    import json

    from bert_explorer.checkpoint import ASSETS
    from bert_explorer.train.pretrain_config import PretrainConfig
    from bert_explorer.train.pretraining_data import split_corpus

    cfg = PretrainConfig.from_dict(json.loads((ASSETS / "pretrain-minilm-mlm-nsp.json").read_text()))
    train, held = split_corpus(cfg)
    train_sentences = {s.lower() for d in train for s in d}
    held_sentences = {s.lower() for d in held for s in d}
    real = [p for p in load_check_set()["nsp"] if p["is_next"]]
    assert not any(p["a"].lower() in train_sentences for p in real)
    assert sum(p["a"].lower() in held_sentences for p in real) >= 5  # several are verbatim held-out text


def test_scoring_counts_answers_in_the_top_5():
    loaded = load("minilm", "BertForPreTraining")  # fresh (random) heads: a model that knows nothing
    check = {"cloze": [{"text": "the [MASK] sat down .", "answers": ["cat"]}],
             "nsp": [{"a": "one .", "b": "two .", "is_next": True}]}
    s = score_check_set(loaded, check)
    row = s["rows"][0]
    assert s["cloze_solved"] == int("cat" in row["got"]) and len(row["got"]) == 5
    assert s["nsp_correct"] == int(s["rows"][1]["ok"]) and 0 <= s["rows"][1]["got"] <= 1


def test_a_cased_models_capital_answer_counts_as_solved(tmp_path):
    """The answers are written in lower case: a cased model (bert-base-cased) whose first word after "the United"
    is "States" was scored wrong, on the probe's quality line and in the check set's rows."""
    import torch

    from bert_explorer.checkpoint import save
    from bert_explorer.model import BertConfig, BertForPreTraining
    from bert_explorer.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer

    items = load_check_set()["cloze"]
    words = SPECIAL_TOKENS + ["States", "the", "The"]
    (tmp_path / "vocab.txt").write_text("".join(w + "\n" for w in words))
    tok = WordPieceTokenizer.from_dir(tmp_path)
    tok.lowercase = False
    model = BertForPreTraining(BertConfig(vocab_size=len(words), hidden_size=32, num_layers=1, num_heads=2,
                                          intermediate_size=64))
    with torch.no_grad():
        model.cls.predictions.bias[words.index("States")] = 1e4  # "States" first at every [MASK]
    save(model, tok, tmp_path / "cased")
    loaded = load(tmp_path / "cased", "BertForPreTraining")
    expected = sum("states" in item["answers"] for item in items)
    assert expected >= 1
    assert cloze_score(loaded, top_k=1)["solved"] == expected
    scored = score_check_set(loaded, {"cloze": items, "nsp": []}, top_k=1)
    assert scored["cloze_solved"] == expected and all(r["got"] == ["States"] for r in scored["rows"])


def test_nsp_summary_counts_what_the_model_did():
    text = nsp_table_summary(["real", "real", "random", ""], [0.9, 0.4, 0.2, 0.7])
    assert "1 of 2 real pairs get P(IsNext) > 0.5" in text
    assert "1 of 1 random pairs get P(IsNext) ≤ 0.5" in text
    assert "0.65 for real B, 0.20 for random B" in text


def _similarity(cosine):
    return ContextSimilarity("bank", ["a", "b", "c"], [(0, 1), (0, 2), (1, 2)], np.array(cosine), None)


def test_context_caption_says_what_the_vectors_did():
    apart = _similarity([[1.0, 0.8, 0.5], [1.0, 0.7, 0.3], [0.9, 0.8, 0.6]]).describe()
    assert "drift apart" in apart and "from 0.97 at layer 0 to 0.47 at layer 2" in apart
    assert "most alike pair is 2 vs 3 (0.60)" in apart and "least alike 1 vs 3 (0.30)" in apart
    still = _similarity([[0.9, 0.9, 0.9], [0.9, 0.9, 0.92], [0.9, 0.9, 0.88]]).describe()
    assert "hardly move" in still and "drift apart" not in still


@needs_model("minilm-mlm-nsp")
@pytest.mark.parametrize("top_k", [1, 5, 50])
def test_the_pages_batched_cloze_count_is_the_sentence_by_sentence_count(top_k):
    """cloze_score runs the check set in one padded batch with the MLM head on the [MASK] only
    (the Masked word probe's first visit): it counts what score_check_set, one sentence and every
    position at a time, counts, for a top 1 where few are solved up to a top 50 where most are."""
    loaded = load("minilm-mlm-nsp", "BertForPreTraining")
    check = load_check_set()
    one_by_one = sum(r["ok"] for r in score_check_set(loaded, check, top_k)["rows"] if r["kind"] == "cloze")
    assert cloze_score(loaded, top_k) == {"solved": one_by_one, "total": len(check["cloze"]), "top_k": top_k}


@pytest.mark.slow
@needs_model("minilm-mlm-nsp")
def test_default_model_solves_the_check_set_as_its_card_says():
    loaded = load("minilm-mlm-nsp", "BertForPreTraining")
    s = score_check_set(loaded, load_check_set())
    card = (loaded.path / "model_card.md").read_text()
    assert f"{s['cloze_solved']} / {s['cloze_total']}" in card
    assert f"{s['nsp_correct']} / {s['nsp_total']}" in card


def test_head_behaviour_caption_counts_this_models_heads():
    import pandas as pd

    from bert_explorer.analysis.attention.heads import describe_behaviours

    stats = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                          "behaviour": ["broad", "previous-token head", "[SEP] head", "[SEP] head"],
                          "entropy": [2.0, 1.0, 0.5, 0.3]})
    text = describe_behaviours(stats)
    assert "of this model's 4 heads: 1 previous-token head; 2 [SEP] heads; 1 broad." in text
    assert "1.50 nats in layer 1 and 0.40 in layer 2 (broader attention in the first layer)" in text
