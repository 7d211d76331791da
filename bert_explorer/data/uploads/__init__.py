"""Reading fine-tuning data from files that people upload, and saying precisely what is wrong.

One function, :func:`.reader.read_task_file`, reads every format the explorer accepts and returns a
:class:`.core.TaskData`: the task type, the examples as plain dicts, the label names, and notes
about anything it repaired or skipped. Formats (detected from the content, the extension helping):

* **CSV / TSV** with a header row (``;`` and ``|`` separated files too). Sentence
  classification, sentence-pair classification and regression (GLUE-style: ``text,label``,
  ``sentence1,sentence2,label``, ``premise,hypothesis,label`` ...), SWAG-style multiple choice
  (``sent1,sent2,ending0..ending3,label`` or ``context,choice0..N,label``) and flat QA
  (``question,context,answer_text,answer_start``).
* **JSONL** (one JSON object a line) with the same column names; NER as
  ``{"tokens": [...], "tags": [...]}``, multiple choice as ``{"context", "choices": [...], "label"}``,
  QA with ``answers`` as SQuAD dicts or Hugging Face's ``{"text": [...], "answer_start": [...]}``.
* **SQuAD JSON**, v1.1 and v2.0 (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``);
  a ``.json`` file holding a list of records is read like JSONL.
* **CoNLL columns** for NER: one token a line, the token first and its tag last, tab or space
  separated, a blank line between sentences, ``-DOCSTART-`` lines skipped.
* **fastText** lines: ``__label__pos the film is great``.

Policies (each one is a note in ``TaskData.notes`` or a :class:`DataError`):

* Encoding: UTF-8 (a byte-order mark is dropped); a file that is not valid UTF-8 is read as
  Latin-1 and a note says so (every byte is a Latin-1 character, so this never fails, but
  accents may come out wrong). UTF-16 is decoded too, with a note: with a byte-order mark, or
  without one when every second byte is zero (little- or big-endian) and the result is text.
* Empty cells: a row whose text or label cell is empty is **skipped** and a note gives the
  line numbers. We skip rather than refuse because spreadsheets often end with half-filled
  rows; if so many rows are skipped that fewer than :data:`MIN_EXAMPLES` remain, it is an error.
  A label written ``NaN``, ``None`` or ``null`` (any case; a JSON NaN too) is missing, not a
  class: those rows are skipped the same way, and a note says how many.
* Size: besides ``max_bytes``, an upload holds at most :data:`.core.MAX_ROWS` rows (records,
  fastText lines, CoNLL token lines) and :data:`.core.MAX_CELLS` cells. A text file is counted as it
  is read and reading stops where a limit is passed; a Parquet file is measured from its footer
  (rows, values, bytes decompressed) before any data is read, and its repeated (dictionary-encoded)
  strings at their full length before any row becomes a Python object.
* Classes: more than :data:`.core.MAX_CLASSES` is an error (a wrong label column, or scores);
  fewer than :data:`.core.MIN_PER_CLASS` examples per class on average is a note.
* NER tags must be BIO. IOB1 (an entity starting with ``I-``), IOBES and BILOU tags are
  converted to BIO with a note; anything else (``PER``, ``B_PER``) is an error.
* SQuAD answers whose ``answer_start`` does not point at the answer text are repaired by
  searching the context (the occurrence nearest the given offset) with a note; an answer
  text that does not occur in its context at all is an error.
* Errors: empty, binary, too large (``max_bytes``, rows, cells), malformed or too deeply nested
  JSON/CSV (with line and column), ragged rows or CoNLL lines, missing or misnamed columns (the
  available columns are listed and the closest name is suggested), a single class, too many
  classes, fewer than ``MIN_EXAMPLES``.

Every :class:`.core.DataError` message is one sentence: which file, where (line, column, question
id), what is wrong, and what to do.

The modules: ``reader`` (the entry point and the format), ``core`` (``TaskData``, ``DataError``,
the column names recognised), ``tables``, ``structured``, ``json_formats`` and ``line_formats``
(the formats), ``decode`` (bytes to text), ``names`` (safe file and run names, a table's columns)
and ``helpers``.
"""
