"""Uploads that cost more than their size: each one found by attacking the app with files, each
refused (or read) in one sentence before it costs memory or CPU. The limits are lowered with
monkeypatch so that every case is a few kilobytes; a call the limit must prevent is patched to raise."""
import json
import struct
import tracemalloc

import pytest

from bert_explorer.data.uploads import core, helpers
from bert_explorer.data.uploads.core import DataError
from bert_explorer.data.uploads.names import table_columns
from bert_explorer.data.uploads.reader import read_task_file


def write(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return p


def error_of(path, **kwargs) -> str:
    """The DataError's message, checked to be one sentence that names the file."""
    with pytest.raises(DataError) as e:
        read_task_file(path, **kwargs)
    msg = str(e.value)
    assert path.name in msg and msg.endswith(".") and "\n" not in msg and msg.count(". ") == 0, msg
    return msg


def rows(n, labels=("pos", "neg")):
    return [(f"film number {i} was {'good' if i % 2 else 'bad'}", labels[i % len(labels)]) for i in range(n)]


def csv_text(examples):
    return "text,label\n" + "".join(f"{t},{y}\n" for t, y in examples)


def _no_data_reads(monkeypatch):
    """Every pyarrow call that reads a Parquet file's data fails the test if reached."""
    import pyarrow.parquet as pq

    def reached(*args, **kwargs):
        raise AssertionError("the Parquet data was read before the limit was checked")
    monkeypatch.setattr(pq, "read_table", reached)
    for method in ("read", "read_row_group", "read_row_groups", "iter_batches"):
        monkeypatch.setattr(pq.ParquetFile, method, reached)


# ----- 1. rows: Parquet from its footer, text formats as they are read ----------------------------
def test_parquet_rows_are_counted_from_the_footer_before_any_data_is_read(tmp_path, monkeypatch):
    """The attack: 20 M dictionary-encoded rows in 133 kB went past 8 GB; here 50 rows over a limit of 10."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = pa.DictionaryArray.from_arrays(pa.array([0, 1] * 25, pa.int32()), pa.array(["a good film", "a bad one"]))
    pq.write_table(pa.table({"text": text, "label": pa.array(["pos", "neg"] * 25)}), tmp_path / "big.parquet")
    monkeypatch.setattr(core, "MAX_ROWS", 10)
    _no_data_reads(monkeypatch)
    assert error_of(tmp_path / "big.parquet") == ("big.parquet holds 50 rows, more than the 10 a data file may have; "
                                                  "use a sample of it.")


def test_parquet_values_and_decompressed_bytes_are_bounded_before_any_data_is_read(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # list items count: 5 sentences of 10 tokens and 10 tags are 100 values
    pq.write_table(pa.table({"tokens": [["w"] * 10] * 5, "tags": [["O"] * 10] * 5}), tmp_path / "lists.parquet")
    # plain (not dictionary) encoded and compressed: 20 rows of 10,000 characters are 200 kB in a file of a few kB
    long = pa.table({"text": ["a" * 10_000] * 20, "label": ["pos", "neg"] * 10})
    pq.write_table(long, tmp_path / "zipped.parquet", use_dictionary=False, compression="zstd")
    monkeypatch.setattr(core, "MAX_CELLS", 60)
    _no_data_reads(monkeypatch)
    msg = error_of(tmp_path / "lists.parquet")
    assert "holds 100 values (cells and list items), more than the 60 a data file may have" in msg
    assert (tmp_path / "zipped.parquet").stat().st_size < 20_000
    msg = error_of(tmp_path / "zipped.parquet", max_bytes=100_000)
    assert "once decompressed, larger than the limit of 100.0 kB (max_bytes=100000)" in msg


def test_parquet_repeated_strings_are_measured_at_full_length_before_rows_are_made(tmp_path):
    """Dictionary encoding stores a 10,000-character value once: 20 rows of it are 200 kB as Python strings."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = pa.DictionaryArray.from_arrays(pa.array([0, 1] * 10, pa.int32()), pa.array(["a" * 10_000, "b" * 10_000]))
    pq.write_table(pa.table({"text": text, "label": pa.array(["pos", "neg"] * 10)}), tmp_path / "dict.parquet")
    msg = error_of(tmp_path / "dict.parquet", max_bytes=100_000)
    assert "once its repeated values are written out, larger than the limit of 100.0 kB" in msg
    assert len(read_task_file(tmp_path / "dict.parquet", max_bytes=1_000_000)) == 20  # within the limit: read


@pytest.mark.parametrize("name, text, unit", [
    ("train.csv", csv_text(rows(8)) + '"an unclosed quote,pos\n', "rows"),
    ("train.tsv", csv_text(rows(8)).replace(",", "\t") + "a\tragged\trow\n", "rows"),
    ("train.jsonl", "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows(8)) + "{not json\n", "rows"),
    ("train.txt", "".join(f"__label__{y} {t}\n" for t, y in rows(8)) + "__label__a __label__b two\n", "examples"),
    ("train.conll", "".join(f"w{i} O\n" + "\n" * (i % 3 == 2) for i in range(8)) + "a ragged line\n", "token lines"),
], ids=["csv", "tsv", "jsonl", "fasttext", "conll"])
def test_text_formats_stop_reading_where_the_row_limit_is_passed(tmp_path, monkeypatch, name, text, unit):
    """Six rows are allowed; what follows the seventh (a line that cannot be parsed) is never read."""
    monkeypatch.setattr(core, "MAX_ROWS", 6)
    msg = error_of(write(tmp_path, name, text))
    assert msg.startswith(f"{name} holds more than the 6 {unit} a data file may have ({unit[:-1]} 7 is on line ")
    assert msg.endswith("; use a sample of it.")


def test_a_json_list_of_records_is_held_to_the_row_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(core, "MAX_ROWS", 6)
    path = write(tmp_path, "train.json", json.dumps([{"text": t, "label": y} for t, y in rows(8)]))
    assert error_of(path) == "train.json holds 8 records, more than the 6 a data file may have; use a sample of it."


def test_a_wide_csv_is_held_to_the_cell_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(core, "MAX_CELLS", 30)
    header = "text,label," + ",".join(f"c{i}" for i in range(8))
    path = write(tmp_path, "wide.csv", header + "\n" + "".join(f"{t},{y}" + ",x" * 8 + "\n" for t, y in rows(8)))
    msg = error_of(path)
    assert "holds more than the 30 cells a data file may have (it passes them on line 5, row 4)" in msg


def test_a_csv_over_the_row_limit_is_not_split_into_lines_in_memory(tmp_path, monkeypatch):
    """200,000 short lines, 6 allowed: the reader stops at the 7th without a list of every line
    (str.splitlines made one: about 60 bytes a line, 12 MB here and gigabytes at 200 MB)."""
    monkeypatch.setattr(core, "MAX_ROWS", 6)
    monkeypatch.setattr(helpers, "_CHUNK", 4096)
    path = write(tmp_path, "many.csv", "text,label\n" + "x,y\n" * 200_000)
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as e:
            read_task_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * path.stat().st_size, peak  # the file's bytes and its text, and little more
    assert "holds more than the 6 rows a data file may have (row 7 is on line 8)" in str(e.value)


# ----- 2. missing labels --------------------------------------------------------------------------
def test_nan_none_null_and_empty_labels_are_missing_not_classes(tmp_path):
    examples = rows(8) + [("one", "NaN"), ("two", "nan"), ("three", "None"), ("four", "null"), ("five", "NULL")]
    data = read_task_file(write(tmp_path, "train.csv", csv_text(examples + [("six", "")])))
    assert data.label_names == ["neg", "pos"] and len(data) == 8
    assert "skipped 5 rows with a missing label ('NaN', 'nan', 'None', 'null', 'NULL', which mark a missing value, " \
           "not a class) (lines 10, 11, 12, 13, 14)" in data.notes, data.notes
    assert "skipped 1 row with an empty label cell (line 15)" in data.notes
    # JSON's NaN (a float) and null, and a regression's NaN, are missing too
    lines = [json.dumps({"text": t, "label": y}) for t, y in rows(8)] + ['{"text": "x", "label": NaN}',
                                                                           '{"text": "y", "label": null}']
    data = read_task_file(write(tmp_path, "train.jsonl", "\n".join(lines)))
    assert data.label_names == ["neg", "pos"] and any("skipped 1 row with a missing label ('nan'" in n
                                                      for n in data.notes), data.notes
    scores = [(t, str(i + 0.5)) for i, (t, _) in enumerate(rows(8))] + [("x", "NaN")]
    data = read_task_file(write(tmp_path, "scores.csv", csv_text(scores)), task="regression")
    assert len(data) == 8 and any("missing label ('NaN'" in n for n in data.notes)
    data = read_task_file(write(tmp_path, "ft.txt", "".join(f"__label__{y} {t}\n" for t, y in rows(8))
                                + "__label__nan some text\n"))
    assert data.label_names == ["neg", "pos"] and any("skipped 1 row with a missing label" in n for n in data.notes)


# ----- 3. classes ---------------------------------------------------------------------------------
def test_too_many_classes_is_refused(tmp_path, monkeypatch):
    """The attack: 10,000 classes of 2 examples each; here 12 classes over a limit of 10."""
    monkeypatch.setattr(core, "MAX_CLASSES", 10)
    path = write(tmp_path, "train.csv", csv_text(rows(24, labels=[f"c{i}" for i in range(12)])))
    assert error_of(path) == ("train.csv has 12 classes in column 'label', more than the 10 a classifier may have; "
                              "check that the right column is the label, merge rare classes, or use "
                              "task='regression' if the labels are scores.")


def test_nearly_a_class_per_example_is_refused_as_a_swapped_column(tmp_path):
    """--text-column stars --label-column review trained an 80-class model of one review each, said only in
    notes: a label column with nearly a class per example is what a swapped column gives, and no classifier
    learns it."""
    reviews = [(f"review {i} of the film which was {'good' if i % 2 else 'bad'}", str(i % 5 + 1)) for i in range(96)]
    swapped = write(tmp_path, "swapped.csv", "stars,review\n" + "".join(f"{y},{t}\n" for t, y in reviews))
    assert error_of(swapped, text_column="stars", label_column="review") == (
        "swapped.csv has 96 classes in column 'review' for 96 examples, nearly one each, which no classifier can "
        "learn; check that the right column is the label (the text may be in it), or use task='regression' if the "
        "labels are scores.")
    assert len(read_task_file(swapped, text_column="review", label_column="stars").label_names) == 5


def test_few_examples_per_class_is_a_note(tmp_path):
    data = read_task_file(write(tmp_path, "train.csv", csv_text(rows(12, labels=["a", "b", "c", "d"]))))
    assert len(data.label_names) == 4
    assert any(n.startswith("4 classes for 12 examples, 3.0 per class on average: fewer than 5 training examples "
                            "per class") for n in data.notes), data.notes
    data = read_task_file(write(tmp_path, "enough.csv", csv_text(rows(20))))
    assert not any("per class on average" in n for n in data.notes), data.notes


# ----- 4. deep nesting ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, text, where", [
    ("deep.jsonl", '{"text": "a", "label": ' + "[" * 100_000 + "\n", "deep.jsonl, line 1 is"),
    ("deep.json", "[" * 100_000, "deep.json is"),
    ("qa.csv", 'question,context,answers\nwho?,Anna,"' + "[" * 100_000 + '"\n', "qa.csv, line 2, column 'answers' is"),
], ids=["jsonl", "json", "csv-cell"])
def test_deeply_nested_json_is_one_sentence_not_a_recursion_error(tmp_path, name, text, where):
    msg = error_of(write(tmp_path, name, text))
    assert msg.startswith(f"{where} nested too deeply to be read (more than about"), msg


def test_the_pages_column_list_of_deeply_nested_json_is_none_not_a_recursion_error():
    assert table_columns(('{"text": ' + "[" * 100_000).encode()) is None  # reading the file says why


# ----- 5. UTF-16 without a byte-order mark --------------------------------------------------------
@pytest.mark.parametrize("codec, order", [("utf-16-le", "little"), ("utf-16-be", "big")])
def test_utf16_without_a_byte_order_mark_is_decoded_with_a_note(tmp_path, codec, order):
    text = csv_text(rows(8) + [("un café très réussi", "pos")]).replace(",", "\t")
    data = read_task_file(write(tmp_path, "excel.txt", text.encode(codec)))
    assert len(data) == 9 and data.examples[-1]["text"] == "un café très réussi"
    assert f"read excel.txt as UTF-16 (it has no byte-order mark, but a zero byte at every second position, as " \
           f"UTF-16 {order}-endian text has)" in data.notes, data.notes
    assert table_columns(text.encode(codec)) == ["text", "label"]


def test_binary_files_with_many_zero_bytes_are_still_binary(tmp_path):
    numbers = struct.pack("<1000h", *[1 + i % 250 for i in range(1000)])  # int16s: a zero at every second byte
    assert "is a binary file (it contains a NUL byte at byte 1)" in error_of(write(tmp_path, "a.csv", numbers))
    noise = bytes((i * 7919) % 251 for i in range(4000)).replace(b"\x00", b"\x01") + b"\x00" * 10
    assert "is a binary file" in error_of(write(tmp_path, "b.csv", noise))


# ----- found by reading the readers against hostile files ------------------------------------------
def test_a_json_document_of_more_values_than_the_cell_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """60 MB of [{},{},…] held 1.7 GB of objects before the list's length was compared with the limit; a JSONL
    line is one such document too."""
    from bert_explorer.data.uploads import json_formats

    def parsed(*args, **kwargs):
        raise AssertionError("the JSON was parsed before its size in values was checked")
    monkeypatch.setattr(core, "MAX_CELLS", 1000)
    monkeypatch.setattr(json_formats.json, "loads", parsed)
    msg = error_of(write(tmp_path, "many.json", "[" + ",".join(["{}"] * 2000) + "]"))
    assert msg == "many.json holds more than the 1,000 values a data file may have; use a sample of it."
    line = json.dumps({"text": "x", "label": [0] * 1500}).replace(" ", "")
    msg = error_of(write(tmp_path, "wide.jsonl", line + "\n"))
    assert msg == "wide.jsonl, line 1 holds more than the 1,000 values a data file may have; use a sample of it."


def test_squad_questions_and_a_jsonl_line_s_tokens_count_toward_the_limits(tmp_path, monkeypatch):
    """A SQuAD file's questions were never counted against the row limit, and a JSONL NER line counted as two
    cells whatever its tokens: 50 questions read under a limit of 10, 300 tokens and tags under a limit of 100."""
    monkeypatch.setattr(core, "MAX_ROWS", 10)
    qas = [{"id": f"q{i}", "question": "who?", "answers": [{"text": "Ann", "answer_start": 0}]} for i in range(50)]
    squad = {"data": [{"title": "t", "paragraphs": [{"context": "Ann went home.", "qas": qas}]}]}
    msg = error_of(write(tmp_path, "squad.json", json.dumps(squad)))
    assert msg.startswith("squad.json holds more than the 10 questions a data file may have (question 11 is on line")
    monkeypatch.setattr(core, "MAX_ROWS", 1_000_000)
    monkeypatch.setattr(core, "MAX_CELLS", 100)
    ner = "".join(json.dumps({"tokens": ["w"] * 30, "tags": ["O"] * 30}) + "\n" for _ in range(5))
    msg = error_of(write(tmp_path, "ner.jsonl", ner))
    assert msg.startswith("ner.jsonl holds more than the 100 cells a data file may have (it passes them on line 2")


def test_an_answer_start_of_json_s_infinity_is_one_sentence(tmp_path):
    squad = {"data": [{"paragraphs": [{"context": "Ann went home.", "qas": [
        {"id": "a", "question": "who?", "answers": [{"text": "Ann", "answer_start": 1}]},
        {"id": "b", "question": "who?", "answers": [{"text": "Ann", "answer_start": 0}]}]}]}]}
    text = json.dumps(squad).replace('"answer_start": 1}', '"answer_start": 1e999}')
    msg = error_of(write(tmp_path, "inf.json", text))
    assert "has answer_start inf, which is not a number; give the character offset of the answer" in msg


def test_parquet_metadata_nested_past_the_parser_names_no_labels_and_reads(tmp_path):
    """A table whose Hugging Face metadata is b"[" * 100,000 stopped the Fine-tune page on a RecursionError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"text": [t for t, _ in rows(8)], "label": [0, 1] * 4})
    pq.write_table(table.replace_schema_metadata({b"huggingface": b"[" * 100_000}), tmp_path / "deep.parquet")
    data = read_task_file(tmp_path / "deep.parquet")
    assert len(data) == 8 and set(data.label_counts()) == {"0", "1"}


def test_a_hub_answer_nested_past_the_parser_is_one_sentence(monkeypatch):
    from bert_explorer import hub_server

    monkeypatch.setattr(hub_server, "within", lambda read, what: b"[" * 200_000)
    with pytest.raises(hub_server.HubError, match="^the Hub's answer about a/b is not JSON; try again later$"):
        hub_server.read_json("http://127.0.0.1:9/api/models/a/b", "a/b")


def test_records_without_fields_are_said_so_not_an_empty_list_of_columns(tmp_path):
    msg = error_of(write(tmp_path, "empty.json", json.dumps([{}] * 8)))
    assert "its records hold no fields, so name the column" in msg and "are ," not in msg
