"""Fine-tuning data: reading uploads (every malformed case gives a precise message), task and
column detection, built-in data sets, splits and the tiny generated sets."""
import json
from collections import Counter

import pytest

from bert_explorer.data.tasks import BUILTIN_TASKS, check_dev_labels, load_builtin, train_dev_split
from bert_explorer.data.tiny_tasks import make_tiny
from bert_explorer.data.uploads.core import DataError, TaskData
from bert_explorer.data.uploads.reader import read_task_file
from bert_explorer.tasks.registry import CLASSIFICATION, QA, TASKS


def write(tmp_path, name, content, encoding="utf-8"):
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_bytes(content.encode(encoding))
    return p


def error_of(path, **kwargs) -> str:
    with pytest.raises(DataError) as e:
        read_task_file(path, **kwargs)
    msg = str(e.value)
    assert path.name in msg and msg.endswith(".") and "\n" not in msg, msg
    return msg


REVIEWS = [("a wonderful film, I loved it", "pos"), ("dull and far too long", "neg"),
           ("the best thing I saw this year", "pos"), ("I walked out after an hour", "neg"),
           ("sharp, funny and moving", "pos"), ("a waste of a good cast", "neg")]


def csv_text(rows=REVIEWS, header="text,label"):
    return header + "\n" + "".join(f'"{t}",{y}\n' for t, y in rows)


# ----- malformed input: one test per case ---------------------------------------------------
def test_empty_file(tmp_path):
    assert "empty" in error_of(write(tmp_path, "train.csv", ""))
    assert "white space" in error_of(write(tmp_path, "blank.csv", "\n  \n\t\n"))


def test_binary_file(tmp_path):
    msg = error_of(write(tmp_path, "train.xlsx", b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(256))))
    assert "binary" in msg and "Excel" in msg and "CSV" in msg
    msg = error_of(write(tmp_path, "data.bin", b"text,label\nab\x00\x01\x02,pos\n"))
    assert "NUL byte at byte 13" in msg


def test_wrong_encoding_falls_back_to_latin1_with_a_note(tmp_path):
    rows = REVIEWS + [("un café très réussi", "pos")]
    data = read_task_file(write(tmp_path, "reviews.csv", csv_text(rows), encoding="latin-1"))
    assert data.examples[-1]["text"] == "un café très réussi"
    assert any("Latin-1" in n and "line 8" in n for n in data.notes), data.notes


def test_utf8_bom_and_utf16_are_read(tmp_path):
    data = read_task_file(write(tmp_path, "bom.csv", "\ufeff" + csv_text()))
    assert data.task.name == "classification" and len(data) == 6 and not any("Latin" in n for n in data.notes)
    data = read_task_file(write(tmp_path, "excel.txt", csv_text().replace(",", "\t"), encoding="utf-16"))
    assert len(data) == 6 and any("UTF-16" in n for n in data.notes)


def test_misnamed_label_column_suggests_the_closest(tmp_path):
    path = write(tmp_path, "train.csv", csv_text([(t, y) for t, y in REVIEWS], "text,lable").replace(
        "\n\"", "\n7,\"").replace("text,lable", "id,text,lable"))
    msg = error_of(path)
    assert "'lable' looks like a misspelling of 'label'" in msg and "'id', 'text', 'lable'" in msg
    assert "label_column" in msg
    # a column named by the caller that does not exist: the columns and the closest name
    msg = error_of(write(tmp_path, "t2.csv", csv_text()), label_column="lables")
    assert "no column 'lables'" in msg and "did you mean 'label'" in msg and "'text', 'label'" in msg


def test_header_that_is_data_is_pointed_out(tmp_path):
    path = write(tmp_path, "nohead.tsv", "".join(f"{t}\t{y}\t1\n" for t, y in REVIEWS))
    msg = error_of(path)
    assert "looks like data, not a header" in msg
    # a short first row of data (a sentence, and a label the column holds again below) was named as the columns
    rows = [("The food was awful", "negative"), ("A lovely evening", "positive"), ("Cold and slow", "negative")] * 4
    msg = error_of(write(tmp_path, "noheader.csv", "".join(f"{t},{y}\n" for t, y in rows)))
    assert "looks like data, not a header" in msg, msg
    assert "looks like data" not in error_of(write(tmp_path, "named.csv", "alpha,beta\n" + "".join(
        f"{t},{y}\n" for t, y in rows)))  # a real header of other names: no such hint


def test_empty_text_cells_are_skipped_with_line_numbers(tmp_path):
    rows = REVIEWS[:3] + [("", "neg")] + REVIEWS[3:] + [("  ", "pos"), ("fine", "")]
    data = read_task_file(write(tmp_path, "train.csv", csv_text(rows)))
    assert len(data) == 6
    assert "skipped 2 rows with an empty text cell (lines 5, 9)" in data.notes
    assert "skipped 1 row with an empty label cell (line 10)" in data.notes


def test_rows_of_separators_only_are_said_and_blank_lines_are_not(tmp_path):
    text = csv_text(REVIEWS[:3]) + ",\n\n" + csv_text(REVIEWS[3:]).split("\n", 1)[1] + " , \n"
    data = read_task_file(write(tmp_path, "train.csv", text))
    assert len(data) == len(REVIEWS)
    assert "skipped 2 rows with every cell empty (lines 5, 10)" in data.notes, data.notes


def test_only_one_class(tmp_path):
    msg = error_of(write(tmp_path, "train.csv", csv_text([(t, "pos") for t, _ in REVIEWS])))
    assert "only one class" in msg and "'pos'" in msg and "'label'" in msg


def test_ragged_csv_row(tmp_path):
    text = csv_text().replace('"dull and far too long"', "dull, and far too long")
    msg = error_of(write(tmp_path, "train.csv", text))
    assert "line 3" in msg and "3 fields" in msg and "header on line 1 has 2" in msg and "double quotes" in msg


def test_unclosed_quote(tmp_path):
    text = csv_text() + '"this quote never ends,pos\n'
    msg = error_of(write(tmp_path, "train.csv", text))
    assert "line 8" in msg and "quote" in msg


def test_ragged_conll_line(tmp_path):
    text = "EU B-ORG\nrejects O\nGerman B-MISC\n\nPeter B-PER\nBlackburn I-PER extra\n"
    msg = error_of(write(tmp_path, "train.conll", text))
    assert "train.conll, line 6 has 3 columns, expected 2 (like line 1)" in msg
    one = "EU B-ORG\nrejects O\nGerman\n"  # (it said "has 1 columns")
    assert "train2.conll, line 3 has 1 column, expected 2" in error_of(write(tmp_path, "train2.conll", one))
    # spaces on most lines, a tab on one: it said line 1 "has 1 column ('Mary B-PER')", separated by a space
    mixed = "Mary B-PER\nlikes O\n.\tO\n\nBob B-PER\nruns O\n"
    assert "mixed.conll, line 1 has its token and tag separated by a space ('Mary B-PER'), line 3 by a tab" in \
        error_of(write(tmp_path, "mixed.conll", mixed))


def test_invalid_bio_tag(tmp_path):
    text = "EU\tB-ORG\nrejects\tO\n\nPeter\tB_PER\nBlackburn\tI-PER\n"
    msg = error_of(write(tmp_path, "train.tsv", text), task="ner")
    assert "line 4, column 2" in msg and "'B_PER'" in msg and "did you mean 'B-PER'" in msg


def test_iob1_and_iobes_tags_are_converted_with_a_note(tmp_path):
    text = "Peter I-PER\nBlackburn I-PER\nsaw O\n\nParis S-LOC\nis O\nbig O\n\na O\nb O\n\nc O\nd O\n"
    data = read_task_file(write(tmp_path, "iob1.conll", text))
    assert data.examples[0]["tags"] == ["B-PER", "I-PER", "O"] and data.examples[1]["tags"][0] == "B-LOC"
    assert any("converted 2 tags to BIO" in n and "line 1" in n for n in data.notes), data.notes


def squad(answer_start=0, answer="Paris", version2=False):
    qas = [{"id": "q-capital", "question": "What is the capital of France?",
            "answers": [{"text": answer, "answer_start": answer_start}]}]
    for i in range(4):
        qas.append({"id": f"q{i}", "question": f"Where is thing {i}?",
                    "answers": [{"text": "France", "answer_start": 22}]})
    if version2:
        for q in qas:
            q["is_impossible"] = False
        qas.append({"id": "q-none", "question": "Who painted it?", "answers": [], "is_impossible": True,
                    "plausible_answers": [{"text": "Paris", "answer_start": 0}]})
    ctx = "Paris is the capital of France."
    return {"version": "v2.0" if version2 else "1.1", "data": [{"title": "France", "paragraphs": [
        {"context": ctx, "qas": qas}]}]}


def test_squad_answer_start_is_repaired_with_a_note(tmp_path):
    data = read_task_file(write(tmp_path, "train.json", json.dumps(squad(answer_start=5), indent=1)))
    assert data.task.name == "qa" and data.examples[0]["answers"] == [{"text": "Paris", "answer_start": 0}]
    assert any("'q-capital'" in n and "is at 0, not 5" in n for n in data.notes), data.notes



def test_squad_ids_given_twice_become_unique_even_beside_an_id_like_the_suffix(tmp_path):
    # "q0", "q0", "q0_2": the second "q0" must not become a second "q0_2" (scores are kept by id: one was lost).
    doc = squad()
    qas = doc["data"][0]["paragraphs"][0]["qas"]
    qas[1]["id"], qas[2]["id"], qas[3]["id"] = "q0", "q0", "q0_2"
    data = read_task_file(write(tmp_path, "train.json", json.dumps(doc)))
    ids = [ex["id"] for ex in data.examples]
    assert ids == ["q-capital", "q0", "q0_2", "q0_2_2", "q3"] and len(set(ids)) == len(ids)
    assert any(n.startswith("2 questions have an id an earlier question has (e.g. 'q0')") for n in data.notes)
    assert all("given_id" not in ex for ex in data.examples)

def test_squad_answer_not_in_context(tmp_path):
    msg = error_of(write(tmp_path, "train.json", json.dumps(squad(answer="Lyon"), indent=1)))
    assert "question 'q-capital' (line 11): answer 'Lyon' does not occur in its context" in msg
    assert "copied exactly" in msg


def test_malformed_json(tmp_path):
    text = json.dumps(squad(), indent=1).replace('"question": "What', '"question" "What')
    msg = error_of(write(tmp_path, "train.json", text))
    assert "is not valid JSON: Expecting ':' delimiter at line 12, column 19" in msg


def test_malformed_jsonl_line(tmp_path):
    lines = [json.dumps({"text": t, "label": y}) for t, y in REVIEWS]
    lines[2] = lines[2][:-1]
    msg = error_of(write(tmp_path, "train.jsonl", "\n".join(lines)))
    assert "line 3, column" in msg and "one complete JSON object" in msg


def test_file_larger_than_max_bytes(tmp_path):
    path = write(tmp_path, "big.csv", csv_text())
    msg = error_of(path, max_bytes=100)
    assert f"is {path.stat().st_size} bytes, larger than the limit of 100 bytes (max_bytes=100)" in msg
    assert "sample" in msg


def test_too_few_examples(tmp_path):
    msg = error_of(write(tmp_path, "train.csv", csv_text(REVIEWS[:3])))
    assert "only 3 usable examples" in msg and "at least 4" in msg
    msg = error_of(write(tmp_path, "t2.csv", csv_text(REVIEWS[:2] + [("", "pos")] * 3)))
    assert "only 2 usable examples after skipping 3 rows with an empty text cell (lines 4, 5, 6), but" in msg


def test_regression_label_that_is_not_a_number(tmp_path):
    rows = [(t, str(i / 2)) for i, (t, _) in enumerate(REVIEWS)] + [("odd one", "high")]
    msg = error_of(write(tmp_path, "sts.csv", csv_text(rows, "text,score")), task="regression")
    assert "line 8, column 'score'" in msg and "'high' is not a number" in msg


def test_multiple_choice_label_out_of_range(tmp_path):
    head = "context,choice0,choice1,label\n"
    rows = "".join(f"q{i},a,b,{i % 2}\n" for i in range(5)) + "q9,a,b,2\n"
    msg = error_of(write(tmp_path, "mc.csv", head + rows))
    assert "line 7, column 'label'" in msg and "0 to 1" in msg



def test_multiple_choice_names_the_line_of_an_odd_row_after_skipped_ones_and_refuses_one_choice(tmp_path):
    rows = [{"context": "", "choices": ["a", "b", "c"], "label": 0}] * 2  # skipped: lines 1-2
    rows += [{"context": f"q{i}", "choices": ["a", "b", "c"], "label": 0} for i in range(5)]  # lines 3-7
    rows.insert(5, {"context": "odd", "choices": ["a", "b"], "label": 0})  # line 6
    msg = error_of(write(tmp_path, "mc.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n"))
    assert "line 6" in msg and "different number of choices" in msg, msg
    one = [{"context": f"q{i}", "choices": ["only"], "label": 0} for i in range(6)]
    msg = error_of(write(tmp_path, "mc1.jsonl", "\n".join(json.dumps(r) for r in one) + "\n"), task="multiple-choice")
    assert "has one answer choice" in msg and "two or more" in msg, msg

def test_multiple_choice_whose_answer_is_always_the_same_choice_says_so(tmp_path):
    """A SWAG export with the gold ending always first was read without a word: "always choose 0" scores 100 %."""
    head = "context,choice0,choice1,label\n"
    first = read_task_file(write(tmp_path, "first.csv", head + "".join(f"q{i},a,b,0\n" for i in range(30))))
    assert [n for n in first.notes if n.startswith("Every example's right answer is choice 0")] == [
        "Every example's right answer is choice 0: a model that always picks choice 0 scores 100 %, so its accuracy "
        "here says nothing; shuffle each example's choices (and its label with them) before fine-tuning"]
    mixed = read_task_file(write(tmp_path, "mixed.csv", head + "".join(f"q{i},a,b,{i % 2}\n" for i in range(30))))
    assert not [n for n in mixed.notes if "right answer" in n]


def test_unknown_task_and_missing_file(tmp_path):
    with pytest.raises(DataError, match="did you mean 'regression'"):
        read_task_file(write(tmp_path, "a.csv", csv_text()), task="regresion")
    with pytest.raises(DataError, match="does not exist"):
        read_task_file(tmp_path / "nope.csv")


# ----- detection of task and columns on realistic small files -----------------------------------
def test_csv_text_label(tmp_path):
    data = read_task_file(write(tmp_path, "reviews.csv", csv_text()))
    assert data.task.name == "classification" and data.label_names == ["neg", "pos"]
    assert data.examples[0] == {"text": "a wonderful film, I loved it", "label": "pos"}


def test_tsv_sentence_pair_and_regression(tmp_path):
    pairs = [("A man is playing a guitar.", "A man plays guitar.", "entailment"),
             ("A dog runs.", "A cat sleeps.", "contradiction"), ("Kids play.", "Children are playing.", "entailment"),
             ("It rains.", "The sun shines.", "contradiction"), ("A bird sings.", "An animal makes noise.", "neutral")]
    text = "index\tsentence1\tsentence2\tgold_label\n" + "".join(f"{i}\t{a}\t{b}\t{y}\n" for i, (a, b, y) in
                                                                 enumerate(pairs))
    data = read_task_file(write(tmp_path, "dev.tsv", text))
    assert data.task.name == "pair-classification" and data.label_names == ["contradiction", "entailment", "neutral"]
    # the column the model does not read (index) is kept beside the example, to slice the dev set by
    assert data.examples[0] == {"text": "A man is playing a guitar.", "text_pair": "A man plays guitar.",
                                "label": "entailment", "extra": {"index": "0"}}
    scores = "sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{i * 0.7:.2f}\n" for i, (a, b, _) in
                                                         enumerate(pairs * 2))
    data = read_task_file(write(tmp_path, "sts.tsv", scores))
    assert data.task.name == "regression" and data.examples[1]["label"] == 0.7 and data.examples[1]["text_pair"]
    # integer star ratings stay classes
    stars = "review,stars\n" + "".join(f'"{t}",{i % 5 + 1}\n' for i, (t, _) in enumerate(REVIEWS))
    assert read_task_file(write(tmp_path, "stars.csv", stars)).label_names == ["1", "2", "3", "4", "5"]


def test_semicolon_csv_and_unnamed_text_column(tmp_path):
    text = "id;comment_body;category\n" + "".join(f"{i};{t};{y}\n" for i, (t, y) in enumerate(REVIEWS))
    data = read_task_file(write(tmp_path, "export.csv", text))
    assert data.task.name == "classification" and data.examples[0]["text"] == REVIEWS[0][0]
    assert any("longest cells" in n for n in data.notes)


def test_jsonl_classification_and_json_list(tmp_path):
    lines = "\n".join(json.dumps({"sentence": t, "label": int(y == "pos")}) for t, y in REVIEWS)
    data = read_task_file(write(tmp_path, "train.jsonl", lines))
    assert data.task.name == "classification" and data.label_names == ["0", "1"]
    data = read_task_file(write(tmp_path, "train.json", "[" + lines.replace("\n", ",") + "]"))
    assert len(data) == 6
    # a .json file that is really JSONL
    assert len(read_task_file(write(tmp_path, "lines.json", lines))) == 6


def test_conll_2003_layout(tmp_path):
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n\n"
            "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n-DOCSTART- -X- -X- O\n\nBRUSSELS NNP B-NP B-LOC\n"
            "1996-08-22 CD I-NP O\n\nJapan NNP B-NP B-LOC\nwins VBZ B-VP O\n")
    data = read_task_file(write(tmp_path, "eng.train", text))
    assert data.task.name == "ner" and len(data) == 4
    assert data.examples[1] == {"tokens": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"]}
    assert data.label_names == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_wnut_layout_with_tab_only_separators(tmp_path):
    text = "@user\tO\nlove\tO\nNew\tB-geo-loc\nYork\tI-geo-loc\n\t\n" * 4
    data = read_task_file(write(tmp_path, "ner.txt", text))
    assert data.task.name == "ner" and len(data) == 4 and data.examples[0]["tags"][2:] == ["B-geo-loc", "I-geo-loc"]


def test_jsonl_ner(tmp_path):
    lines = "\n".join(json.dumps({"tokens": ["Anna", "lives", "in", "Rome"], "ner_tags": ["B-PER", "O", "O", "B-LOC"]})
                      for _ in range(4))
    data = read_task_file(write(tmp_path, "ner.jsonl", lines))
    assert data.task.name == "ner" and data.examples[0]["tags"] == ["B-PER", "O", "O", "B-LOC"]
    bad = lines.replace('"O", "B-LOC"]', '"O"]', 1)
    assert "4 tokens but 3 tags" in error_of(write(tmp_path, "bad.jsonl", bad))


def test_squad_v1_and_v2(tmp_path):
    v1 = read_task_file(write(tmp_path, "train-v1.1.json", json.dumps(squad())))
    assert v1.task.name == "qa" and len(v1) == 5 and not any(ex["is_impossible"] for ex in v1.examples)
    assert v1.examples[0] == {"id": "q-capital", "question": "What is the capital of France?",
                              "context": "Paris is the capital of France.",
                              "answers": [{"text": "Paris", "answer_start": 0}], "is_impossible": False}
    assert any("v1.1" in n for n in v1.notes)
    v2 = read_task_file(write(tmp_path, "train-v2.0.json", json.dumps(squad(version2=True))))
    assert len(v2) == 6 and v2.examples[-1]["is_impossible"] and v2.examples[-1]["answers"] == []
    assert any("v2.0" in n and "1 unanswerable" in n for n in v2.notes)


def test_jsonl_qa_in_hugging_face_layout(tmp_path):
    ctx = "The Nile flows through Egypt and Sudan."
    rows = [{"id": f"h{i}", "question": "Where does the Nile flow?", "context": ctx,
             "answers": {"text": ["Egypt"], "answer_start": [23]}} for i in range(4)]
    rows.append({"id": "h-none", "question": "Who?", "context": ctx, "answers": {"text": [], "answer_start": []}})
    data = read_task_file(write(tmp_path, "qa.jsonl", "\n".join(map(json.dumps, rows))))
    assert data.task.name == "qa" and data.examples[0]["answers"] == [{"text": "Egypt", "answer_start": 23}]
    assert data.examples[-1]["is_impossible"]


def test_swag_csv(tmp_path):
    head = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    rows = "".join(f'v{i},{i},"She opens the door. She",She opens the door.,She,gold,walks in.,'
                   f'eats the door.,flies away.,"sings, loudly.",{i % 4}\n' for i in range(5))
    data = read_task_file(write(tmp_path, "train.csv", head + rows))
    assert data.task.name == "multiple-choice" and len(data) == 5
    ex = data.examples[1]
    assert ex["context"] == "She opens the door." and ex["label"] == 1
    assert ex["choices"] == ["She walks in.", "She eats the door.", "She flies away.", "She sings, loudly."]


def test_generic_multiple_choice_columns_and_letter_labels(tmp_path):
    head = "question,option_1,option_2,option_3,answer\n"
    rows = "".join(f"What is {i}+1?,{i + 1},{i + 2},{i + 3},{'ABC'[i % 3]}\n" for i in range(5))
    data = read_task_file(write(tmp_path, "quiz.csv", head + rows))
    assert data.task.name == "multiple-choice" and [ex["label"] for ex in data.examples] == [0, 1, 2, 0, 1]


def test_fasttext_format(tmp_path):
    text = "".join(f"__label__{y} {t}\n" for t, y in REVIEWS)
    data = read_task_file(write(tmp_path, "train.txt", text))
    assert data.task.name == "classification" and data.examples[0] == {"text": REVIEWS[0][0], "label": "pos"}


# ----- splits and dev labels -----------------------------------------------------------------
def classes(counts: dict) -> TaskData:
    examples = [{"text": f"{label} {i}", "label": label} for label, n in counts.items() for i in range(n)]
    return TaskData(CLASSIFICATION, examples, sorted(counts), "train.csv", [])


def test_train_dev_split_is_stratified_and_deterministic():
    data = classes({"a": 60, "b": 30, "c": 9, "d": 1})
    train, dev = train_dev_split(data, 0.2, seed=3)
    assert Counter(ex["label"] for ex in dev.examples) == {"a": 12, "b": 6, "c": 2}
    assert len(train) + len(dev) == 100 and not {e["text"] for e in train.examples} & {e["text"] for e in dev.examples}
    assert dev.label_names == train.label_names == ["a", "b", "c", "d"]
    again = train_dev_split(data, 0.2, seed=3)
    assert again[1].examples == dev.examples and again[0].examples == train.examples
    assert train_dev_split(data, 0.2, seed=4)[1].examples != dev.examples
    assert any("stratified" in n for n in dev.notes) and data.notes == []


def test_train_dev_split_keeps_qa_contexts_together():
    data = load_builtin("synthetic-qa")
    train, dev = train_dev_split(data, 0.1)
    assert not {ex["context"] for ex in train.examples} & {ex["context"] for ex in dev.examples}
    assert 0.05 < len(dev) / len(data) < 0.15



def test_qa_dev_split_leaves_a_passage_too_large_for_it_to_training():
    # 90 questions on one passage and 10 on ten others: a tenth held out must not take the large passage.
    ex = [{"id": f"a{i}", "question": f"q{i}?", "context": "One long passage.", "answers": [], "is_impossible": True}
          for i in range(90)]
    ex += [{"id": f"b{i}", "question": "q?", "context": f"Passage {i}.", "answers": [], "is_impossible": True}
           for i in range(10)]
    for seed in range(6):
        train, dev = train_dev_split(TaskData(QA, ex, None, "qa.json"), 0.1, seed)
        assert (len(train), len(dev)) == (90, 10)
        assert not {e["context"] for e in train.examples} & {e["context"] for e in dev.examples}
    # three passages of 30, 30 and 40 questions: a whole passage would hold out 30 %, so the split is at random
    big = [{"id": f"p{p}q{i}", "question": "q?", "context": f"Passage {p}.", "answers": [], "is_impossible": True}
           for p, n in enumerate((30, 30, 40)) for i in range(n)]
    train, dev = train_dev_split(TaskData(QA, big, None, "qa.json"), 0.1, 0)
    assert len(dev) == 10 and "at random" in dev.notes[0]

def test_check_dev_labels():
    train = classes({"a": 5, "b": 5})
    check_dev_labels(train, classes({"a": 2, "b": 1}))
    dev = classes({"a": 2, "c": 1, "zz": 2})
    dev.source = "dev.csv"
    with pytest.raises(DataError, match=r"dev set \(dev.csv\) has labels that the training set \(train.csv\) never "
                                        r"uses: 'c', 'zz' \(3 dev examples\)"):
        check_dev_labels(train, dev)
    ner_train, ner_dev = make_tiny("ner", 20), make_tiny("ner", 5, seed=1)
    check_dev_labels(ner_train, ner_dev)
    ner_dev.examples[0]["tags"][0] = "B-ORG"
    with pytest.raises(DataError, match="tags .* 'B-ORG'"):
        check_dev_labels(ner_train, ner_dev)
    with pytest.raises(DataError, match="'regression' data"):
        check_dev_labels(train, make_tiny("regression", 8))


# ----- built-in data sets ----------------------------------------------------------------------
BUILTIN_EXPECTED = {  # name: (task, examples, labels)
    "bbc-topics": ("classification", 2113, ["business", "entertainment", "politics", "sports", "tech"]),
    "tweets": ("classification", 37197, ["negative", "neutral", "positive"]),
    "wnut16": ("ner", 2394, None),
    "pang-lee": ("classification", 200, ["neg", "pos"]),
    "synthetic-qa": ("qa", 422, None),
    "synthetic-mc": ("multiple-choice", 300, None),
}


@pytest.mark.parametrize("name", list(BUILTIN_EXPECTED))
def test_builtin_datasets(name):
    info = BUILTIN_TASKS[name]
    if not info.available:
        pytest.skip(f"{info.package} is not installed")
    task, size, labels = BUILTIN_EXPECTED[name]
    data = load_builtin(name)
    assert data.task == info.task and data.task.name == task and len(data) == size and data.source == f"builtin:{name}"
    assert info.provenance and info.licence and info.description
    if labels:
        assert data.label_names == labels
    if name == "wnut16":
        assert len(data.label_names) == 21 and data.label_names[0] == "O"
        assert Counter(t for ex in data.examples for t in ex["tags"])["B-person"] == 449
    if name == "pang-lee":
        assert Counter(ex["label"] for ex in data.examples) == {"neg": 100, "pos": 100}
        assert any("\u2014" in ex["text"] for ex in data.examples)  # the cp1252 em dash
    if name.startswith("synthetic"):
        assert "SYNTHETIC" in info.description and load_builtin(name).examples == data.examples
        assert load_builtin(name, seed=1).examples != data.examples
    if name == "synthetic-qa":
        assert sum(ex["is_impossible"] for ex in data.examples) == 120
        for ex in data.examples:
            for a in ex["answers"]:
                assert ex["context"][a["answer_start"]:].startswith(a["text"])
    small = load_builtin(name, max_examples=50, seed=1)
    assert len(small) == 50 and small.examples == load_builtin(name, max_examples=50, seed=1).examples
    data.examples.clear()  # callers get copies: the cache is not touched
    assert len(load_builtin(name)) == size


def test_unknown_builtin():
    with pytest.raises(DataError, match="did you mean 'tweets'"):
        load_builtin("tweet")


# ----- tiny generated sets -----------------------------------------------------------------------
KEYS = {"classification": {"text", "label"}, "pair-classification": {"text", "text_pair", "label"},
        "regression": {"text", "text_pair", "label"}, "ner": {"tokens", "tags"},
        "qa": {"id", "question", "context", "answers", "is_impossible"},
        "multiple-choice": {"context", "choices", "label"}, "multi-label": {"text", "labels"}}


@pytest.mark.parametrize("task", TASKS)
def test_make_tiny(task):
    data = make_tiny(task, n=40, seed=2)
    assert data.task.name == task and len(data) == 40 and all(set(ex) == KEYS[task] for ex in data.examples)
    assert make_tiny(task, n=40, seed=2).examples == data.examples != make_tiny(task, n=40, seed=3).examples
    assert any("SYNTHETIC" in n for n in data.notes)
    if task in ("classification", "pair-classification"):
        assert Counter(ex["label"] for ex in data.examples) == dict.fromkeys(data.label_names, 20)
    if task == "ner":
        assert all(len(ex["tokens"]) == len(ex["tags"]) for ex in data.examples)
        assert {t for ex in data.examples for t in ex["tags"]} <= set(data.label_names)
    if task == "qa":
        for ex in data.examples:
            a = ex["answers"][0]
            assert ex["context"][a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
    if task == "multiple-choice":
        assert all(len(ex["choices"]) == 4 and 0 <= ex["label"] < 4 for ex in data.examples)


def test_tiny_files_round_trip(tmp_path):
    """What make_tiny writes in the upload formats is read back unchanged."""
    data = make_tiny("qa", 8)
    squad_json = {"data": [{"paragraphs": [{"context": ex["context"], "qas": [
        {k: ex[k] for k in ("id", "question", "answers", "is_impossible")}]} for ex in data.examples]}]}
    assert read_task_file(write(tmp_path, "qa.json", json.dumps(squad_json))).examples == data.examples
    ner = make_tiny("ner", 8)
    conll = "\n".join("\n".join(f"{w}\t{t}" for w, t in zip(ex["tokens"], ex["tags"])) + "\n" for ex in ner.examples)
    assert read_task_file(write(tmp_path, "ner.conll", conll)).examples == ner.examples


def test_glue_style_tsv_with_literal_quotes_and_excel_trailing_commas(tmp_path):
    text = "sentence\tlabel\n" + "".join(f"{t}\t{int(y == 'pos')}\n" for t, y in REVIEWS) + '"Hi," he said.\t1\n'
    data = read_task_file(write(tmp_path, "SST-2.tsv", text))
    assert data.examples[-1]["text"] == '"Hi," he said.' and len(data) == 7
    excel = "text,label,,\n" + "".join(f'"{t}",{y},,\n' for t, y in REVIEWS)
    assert len(read_task_file(write(tmp_path, "excel.csv", excel))) == 6


def test_train_dev_split_sizes():
    train, dev = train_dev_split(classes({"x": 3, "y": 2}), 0.1)
    assert (len(train), len(dev)) == (4, 1)
    train, dev = train_dev_split(classes({"x": 3, "y": 3}), 0.5)
    assert Counter(ex["label"] for ex in dev.examples) == {"x": 2, "y": 1}
    train, dev = train_dev_split(make_tiny("ner", 30), 0.2)
    assert (len(train), len(dev)) == (24, 6) and dev.label_names == make_tiny("ner", 30).label_names
    with pytest.raises(DataError, match="between 0 and 1"):
        train_dev_split(classes({"x": 3, "y": 2}), 1.5)


def test_lone_extra_column_is_taken_as_label_unless_it_is_an_id(tmp_path):
    text = "review,verdict\n" + "".join(f'"{t}",{y}\n' for t, y in REVIEWS)
    data = read_task_file(write(tmp_path, "r.csv", text))
    assert data.label_names == ["neg", "pos"] and any("'verdict' as the label" in n for n in data.notes)
    text = "review,uid\n" + "".join(f'"{t}",u{i}\n' for i, (t, _) in enumerate(REVIEWS))
    assert "has no label column" in error_of(write(tmp_path, "ids.csv", text))


# ----- Parquet (how Hugging Face datasets are stored and exported) ---------------------------------
def test_parquet_follows_the_csv_column_rules(tmp_path):
    import pandas as pd

    rows = REVIEWS * 4
    # a Hugging Face export: labels as class ids (ClassLabel), an id column, the text called "sentence"
    pd.DataFrame({"idx": range(len(rows)), "sentence": [t for t, _ in rows],
                  "label": [int(y == "pos") for _, y in rows]}).to_parquet(tmp_path / "train.parquet")
    data = read_task_file(tmp_path / "train.parquet")
    assert data.task == CLASSIFICATION and data.label_names == ["0", "1"]
    assert [(ex["text"], ex["label"]) for ex in data.examples] == [(t, str(int(y == "pos"))) for t, y in rows]
    assert any(n.startswith("Parquet: text column 'sentence'") for n in data.notes)
    # the same rules as CSV: a missing label column is named, with the columns there are
    pd.DataFrame({"sentence": [t for t, _ in rows], "sentiment_lbl": [y for _, y in rows]}).to_parquet(
        tmp_path / "nolabel.parquet")
    assert read_task_file(tmp_path / "nolabel.parquet").examples[0]["label"] == "pos"  # the only other column
    pd.DataFrame({"sentence": [t for t, _ in rows], "labl": [y for _, y in rows],
                  "source": ["imdb"] * len(rows)}).to_parquet(tmp_path / "misspelt.parquet")
    assert "'labl' looks like a misspelling of 'label'" in error_of(tmp_path / "misspelt.parquet")
    # list columns (tokens and tags) are NER records, as in JSONL; detection works without the extension
    ner = make_tiny("ner", n=40, seed=0)
    pd.DataFrame({"tokens": [ex["tokens"] for ex in ner.examples],
                  "ner_tags": [ex["tags"] for ex in ner.examples]}).to_parquet(tmp_path / "ner.bin")
    data = read_task_file(tmp_path / "ner.bin")
    assert data.task.name == "ner" and data.examples[0]["tokens"] == ner.examples[0]["tokens"]


def test_a_malformed_parquet_file_is_one_sentence(tmp_path):
    import pandas as pd

    pd.DataFrame({"text": [t for t, _ in REVIEWS], "label": [y for _, y in REVIEWS]}).to_parquet(
        tmp_path / "good.parquet")
    good = (tmp_path / "good.parquet").read_bytes()
    msg = error_of(write(tmp_path, "cut.parquet", good[: len(good) // 2]))
    assert "not a complete Parquet file" in msg and "cut short" in msg and "to_parquet" in msg
    assert msg.count(". ") == 0
    msg = error_of(write(tmp_path, "renamed.parquet", csv_text()))
    assert "not a complete Parquet file" in msg and "another format" in msg
    msg = error_of(write(tmp_path, "broken.parquet", good[:4] + b"\x00" * (len(good) - 8) + good[-4:]))
    assert "cannot be read as Parquet" in msg and "damaged" in msg and msg.count(". ") == 0
    assert "another format" in error_of(write(tmp_path, "tiny.parquet", b"PAR"))  # shorter than its own marks
    assert "cut short" in error_of(write(tmp_path, "marks.parquet", b"PAR1PAR1"))


def test_json_lines_of_other_keys_are_said_so_not_called_empty(tmp_path):
    """A JSONL whose every fifth row is {"sentence": ..., "label": ...} among {"text": ...} rows: those 60 rows were
    "skipped ... with an empty text cell", though they are full rows of another key."""
    rows = [{"sentence": f"row {i} is good", "label": "pos"} if i % 5 == 0 else
            {"text": f"row {i} is {'good' if i % 2 else 'bad'}", "label": "pos" if i % 2 else "neg"} for i in range(60)]
    f = tmp_path / "mixed.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = read_task_file(str(f))
    assert len(data.examples) == 48
    assert ("skipped 12 rows with no 'text' (they hold 'sentence', 'label'; pass text_column to read another) "
            "(lines 1, 6, 11") in " ".join(data.notes)
    assert not any("empty text cell" in n for n in data.notes)


def test_a_file_saved_by_excel_on_windows_keeps_its_quotes_dashes_and_euros(tmp_path):
    """A CSV in Windows-1252 was read as Latin-1: “best” – €5 and it’s became control characters, which the
    tokenizer drops ("costs 0 and its fine"). Its bytes 0x80-0x9F are read as Windows-1252 now, and a file
    without them is said Latin-1 as before (both read it alike)."""
    rows = [("The “best” film – costs €5 and it’s fine", "pos"), ("awful – a waste", "neg")] * 4
    f = tmp_path / "excel.csv"
    f.write_bytes(csv_text(rows).encode("cp1252"))
    data = read_task_file(str(f))
    assert data.examples[0]["text"] == "The “best” film – costs €5 and it’s fine"
    assert any(n.startswith("read as Windows-1252 (its curly quotes, dashes and euro signs) because") for n in data.notes)
    g = tmp_path / "latin.csv"
    g.write_bytes(csv_text([("Café crème, £3", "pos"), ("naïve plot", "neg")] * 4).encode("latin-1"))
    latin = read_task_file(str(g))
    assert latin.examples[0]["text"] == "Café crème, £3" and any(n.startswith("read as Latin-1") for n in latin.notes)


def test_a_utf8_mark_before_a_latin1_body_is_no_part_of_the_first_column(tmp_path):
    """An editor's UTF-8 byte-order mark before text it never converted: read as Latin-1, the first column was named
    "ï»¿text" (and --text-column text had no such column)."""
    f = tmp_path / "marked.csv"
    rows = [("Café crème, £3", "pos"), ("naïve plot", "neg")] * 4
    f.write_bytes(b"\xef\xbb\xbf" + csv_text(rows).encode("latin-1"))
    data = read_task_file(str(f))
    assert data.examples[0]["text"] == "Café crème, £3"
    assert any("though it begins with UTF-8's byte-order mark" in n for n in data.notes), data.notes


def test_a_built_in_data_set_is_not_said_to_need_re_saving():
    """The built-in pang-lee's log said it was read as Windows-1252, "re-save it as UTF-8 if so": advice for an upload,
    which nobody can follow for a file that ships."""
    from bert_explorer.data.tasks import _pang_lee

    notes = " ".join(_pang_lee().notes)
    assert "is Windows-1252 text (not UTF-8) and is read as such" in notes and "re-save" not in notes


def test_numeric_labels_say_why_they_were_read_as_scores_or_classes(tmp_path):
    """200 rows with class ids 0-24 were "detected task 'regression'" with no reason; 1-5 stars became classes
    without a word either."""
    ids = tmp_path / "int25.csv"
    ids.write_text("text,label\n" + "".join(f"text number {i} of {k},{k}\n" for k in range(25) for i in range(8)))
    assert ("detected task 'regression' (25 distinct numbers in 'label', read as scores; choose the task "
            "classification if they are class ids)") in read_task_file(str(ids)).notes[0]
    stars = tmp_path / "stars.csv"
    stars.write_text("text,label\n" + "".join(f"review {i} with {k} stars,{k}\n" for k in range(1, 6) for i in range(8)))
    assert "(5 distinct numbers in 'label', read as classes; choose the task regression if they are scores)" in \
        read_task_file(str(stars)).notes[0]


def test_one_number_is_one_class_whatever_its_spelling(tmp_path):
    """Labels 2 and 2.0 were two classes ("labels: 2, 2.0, 3") where the note counted 2 distinct numbers; inf and
    Infinity the same. Words keep each spelling."""
    f = tmp_path / "mixed.csv"
    f.write_text("text,label\n" + "".join(f"review {i},{lab}\n" for i, lab in
                                          enumerate(["2", "2.0", "3", "3", "2", "3.0"] * 4)))
    data = read_task_file(str(f))
    assert sorted({ex["label"] for ex in data.examples}) == ["2", "3"]
    assert any("'2' and '2.0' are one number, read as one class, '2'" in n for n in data.notes), data.notes
    assert any("(2 distinct numbers in 'label', read as classes" in n for n in data.notes)
    words = tmp_path / "words.csv"
    words.write_text("text,label\n" + "".join(f"review {i},{lab}\n" for i, lab in enumerate(["Pos", "pos", "neg"] * 4)))
    assert sorted({ex["label"] for ex in read_task_file(str(words)).examples}) == ["Pos", "neg", "pos"]


def test_a_class_the_dev_split_left_out_is_said():
    """A class of 3 examples got no dev example from the stratified split, and macro-F1 then averaged 5 of the 6
    classes the table shows without a word."""
    from bert_explorer.data.uploads.core import TaskData as TD

    examples = [{"text": f"text {i}", "label": c} for c, n in (("a", 40), ("b", 40), ("rare", 3)) for i in range(n)]
    train, dev = train_dev_split(TD(CLASSIFICATION, examples, ["a", "b", "rare"], "x.csv"), 0.1, seed=0)
    assert not any(ex["label"] == "rare" for ex in dev.examples)  # (stratified: 3 x 10 % rounds to none)
    said = [n for n in dev.notes if n.startswith("the dev split holds no example of 'rare' (3 examples)")]
    assert said and said == [n for n in train.notes if n.startswith("the dev split holds")]
    whole = [{"text": f"t {i}", "label": "ab"[i % 2]} for i in range(40)]
    _, dev = train_dev_split(TD(CLASSIFICATION, whole, ["a", "b"], "y.csv"), 0.1, seed=0)
    assert not [n for n in dev.notes if n.startswith("the dev split holds")]
