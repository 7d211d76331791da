"""Reading line formats: CoNLL columns for NER and fastText ``__label__`` lines."""
from __future__ import annotations

import re
from collections import Counter
from itertools import islice

from . import core
from .core import TAG_RE, TaskData
from .helpers import _is_missing, _lines_note, _tag_names, iter_lines


class LineFormats:
    """CoNLL columns for NER and fastText lines (a mixin of the reader)."""

    def parse_conll(self) -> TaskData:
        self.fmt = "CoNLL"
        task = self.task_of_format("conll", "looks like CoNLL columns (a token and a tag on each line)")
        tab_line = next((n for n, ln in enumerate(islice(iter_lines(self.text), 2000), 1)
                         if ln.strip() and "\t" in ln.strip(" ")), None)
        use_tab = tab_line is not None
        sentences, tokens, tags, tag_lines = [], [], [], []
        expected, first_line, count = None, None, 0
        for n, raw in enumerate(iter_lines(self.text), 1):
            line = raw.strip()
            if not line:  # blank, or WNUT's separator: a line holding only a tab
                if tokens:
                    sentences.append((tokens, tags, tag_lines))
                    tokens, tags, tag_lines = [], [], []
                continue
            if line.startswith("-DOCSTART-"):
                continue
            cols = [c.strip() for c in raw.split("\t")] if use_tab else line.split()
            if use_tab:
                while len(cols) > 1 and cols[-1] == "":  # trailing tabs
                    cols.pop()
            if expected is None:
                expected, first_line = len(cols), n
                if expected < 2 and use_tab and len(line.split()) > 1:  # spaces here, a tab on another line
                    raise self.error(f"line {n}", f"has its token and tag separated by a space ({line!r}), line "
                                     f"{tab_line} by a tab; separate every line's columns the same way, by tabs or "
                                     "by spaces")
                if expected < 2:
                    raise self.error(f"line {n}", f"has {expected} column ({line!r}) but CoNLL data needs a token "
                                     f"and its tag on every line, separated by a tab or a space")
            if len(cols) != expected:
                columns = f"{len(cols)} column{'s' if len(cols) != 1 else ''}"
                raise self.error(f"line {n}", f"has {columns}, expected {expected} (like line {first_line}); "
                                 f"every token line needs the same columns, the token first and the tag last "
                                 f"({'tab' if use_tab else 'space'} separated), and sentences end with a blank line")
            count += 1
            core.check_row(self.name, count, n, unit="token lines")  # stops reading where the limit is passed
            tokens.append(cols[0])
            tags.append(cols[-1])
            tag_lines.append(n)
        if tokens:
            sentences.append((tokens, tags, tag_lines))
        if not sentences:
            raise self.error(None, "holds no token lines; write one 'token TAG' pair per line with a blank line "
                                   "between sentences")
        examples = self._check_bio([(t, g, [(ln, expected) for ln in lns]) for t, g, lns in sentences])
        self._check_count(examples, "sentences")
        return TaskData(task, examples, _tag_names(examples), "", self.notes)

    def _check_bio(self, sentences) -> list[dict]:
        """``sentences``: (tokens, tags, [(line, column)] per tag). Returns NER examples in BIO."""
        converted, examples = Counter(), []
        first_fix = None
        for tokens, tags, where in sentences:
            out, prev = [], "O"
            for tag, (line, col) in zip(tags, where):
                tag = str(tag).strip()
                if not TAG_RE.match(tag):
                    loc = (f"{self.unit} {line}, column {col!r}" if isinstance(col, str)
                           else f"line {line}, column {col}")
                    hint = f" (did you mean {tag.replace('_', '-', 1)!r}?)" if re.match(r"^[BI]_\S", tag) else ""
                    raise self.error(loc, f"tag {tag!r} is not a BIO tag{hint}; use O for words outside entities "
                                          f"and B-TYPE / I-TYPE for the first / following words of an entity "
                                          f"(e.g. B-PER, I-PER)")
                prefix, typ = (tag[0], tag[2:]) if tag != "O" else ("O", "")
                new = tag
                if prefix in "SU":
                    new = f"B-{typ}"
                elif prefix in "EL":
                    new = f"I-{typ}" if prev in (f"B-{typ}", f"I-{typ}") else f"B-{typ}"
                elif prefix == "I" and prev not in (f"B-{typ}", f"I-{typ}"):
                    new = f"B-{typ}"  # IOB1: an entity may start with I-
                if new != tag:
                    converted[f"{tag}->{new[0]}-"] += 1
                    first_fix = first_fix or line
                out.append(new)
                prev = new
            examples.append({"tokens": list(tokens), "tags": out})
        if converted:
            kinds = ", ".join(sorted({k.split('-')[0] + '-' for k in converted}))
            self.notes.append(f"converted {sum(converted.values())} tags to BIO ({kinds} at the start or end of "
                              f"an entity{'' if first_fix is None else f', first on line {first_fix}'}): an entity "
                              f"now starts with B- and continues with I-")
        return examples

    # ----- fastText --------------------------------------------------------------------
    def parse_fasttext(self) -> TaskData:
        self.fmt = "fastText"
        task = self.task_of_format("fasttext", "is in fastText format ('__label__X text' lines)")
        examples, empty, missing = [], [], []
        for n, line in enumerate(iter_lines(self.text), 1):
            if not line.strip():
                continue
            core.check_row(self.name, len(examples) + len(empty) + len(missing) + 1, n, unit="examples")
            words = line.split()
            labels = [w[len("__label__"):] for w in words if w.startswith("__label__")]
            text = " ".join(w for w in words if not w.startswith("__label__"))
            if not words[0].startswith("__label__"):
                raise self.error(f"line {n}", "does not start with __label__<name>; write every line as "
                                              "'__label__<name> <text>'")
            if len(labels) > 1:
                raise self.error(f"line {n}", f"has {len(labels)} labels but only single-label classification is "
                                              f"supported; keep one __label__ per line")
            if not text:
                empty.append(n)
                continue
            if _is_missing(labels[0]):  # __label__ alone, or __label__nan: no label, not a class
                missing.append(n)
                continue
            examples.append({"text": text, "label": labels[0]})
        if empty:
            self.notes.append(_lines_note("no text after the label", empty, self.unit))
        if missing:
            self.notes.append(_lines_note("a missing label (__label__ alone, or NaN, None or null, which mark a "
                                          "missing value, not a class)", missing, self.unit))
        return self._finish_classification(task, examples, "label")

    # ----- CSV / TSV -------------------------------------------------------------------
