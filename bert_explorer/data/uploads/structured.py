"""Reading multiple-choice, question-answering and NER records from tables and JSONL."""
from __future__ import annotations

import json
from collections import Counter

from .core import ENDING_RE, MC_LABEL_NAMES, TaskData
from .helpers import _as_bool, _choice_index, _lines_note, _tag_names
from .json_formats import loads


class StructuredRecords:
    """Records of multiple choice, question answering and NER (a mixin of the reader)."""

    @staticmethod
    def _ending_columns(columns) -> list[str]:
        found = sorted(((int(m.group(1)), c) for c in columns if (m := ENDING_RE.match(str(c).strip()))))
        return [c for _, c in found]

    def _mc_label_col(self, required: bool = True) -> str | None:
        col = self._resolve(self.label_column, "labels", "label_column") or self._col(MC_LABEL_NAMES)
        if col is None and required:
            raise self._missing("label (the number of the right choice)", MC_LABEL_NAMES, "label_column")
        return col

    def read_multiple_choice(self, task) -> TaskData:
        endings = self._ending_columns(self.columns)
        label_col = self._mc_label_col()
        choices_col = self._col(["choices", "endings", "options"])
        if len(endings) < 2 and choices_col is None:
            raise self.error(None, f"has no answer choices: its columns are {', '.join(map(repr, self.columns))}, so "
                                   f"add SWAG columns (sent1, sent2, ending0, ending1 and so on) or context, choice0, "
                                   f"choice1 and so on")
        sent1 = self._col(["sent1"])
        sent2 = self._col(["sent2"])
        context_col = self._resolve(self.text_column, "context", "text_column") or sent1 or self._col(
            ["context", "startphrase", "question", "sentence", "prompt", "text", "premise", "stem", "goal"])
        if context_col is None:
            raise self._missing("context", ("context", "sent1", "startphrase", "question"), "text_column")
        self.notes.append(f"{self.fmt}: multiple choice, context column {context_col!r}"
                          + (f" (+ {sent2!r} at the start of every choice, as in SWAG)" if sent1 and sent2 else "")
                          + f", choices {', '.join(map(repr, endings)) if endings else repr(choices_col)}, "
                            f"label column {label_col!r}")
        examples, empty, sizes, lines = [], [], Counter(), []  # lines: each example's line
        for line, rec in self.rows:
            context = self._cell(rec, context_col)
            if endings:
                raw = [self._cell(rec, c) for c in endings]
            else:
                raw = rec.get(choices_col)
                if not isinstance(raw, list):
                    raise self.error(self._where(line, choices_col), "must be a list of answer choices, e.g. "
                                     "[\"first ending\", \"second ending\"]")
                raw = [c.strip() if isinstance(c, str) else c for c in raw]
            if not context or any(not isinstance(c, str) or not c for c in raw):
                empty.append(line)
                continue
            if len(raw) < 2:  # one choice is always right: its accuracy would be 100 % whatever the model learnt
                raise self.error(self._where(line, choices_col or endings[0]),
                                 f"has {'one answer choice' if raw else 'no answer choices'}; give every example two "
                                 "or more to choose from")
            start = self._cell(rec, sent2) if (sent1 and sent2 and context_col == sent1) else ""
            choices = [f"{start} {c}".strip() if start else c for c in raw]
            label = self._cell(rec, label_col)
            index = _choice_index(label, len(choices))
            if index is None:
                raise self.error(self._where(line, label_col), f"{label!r} is not the number of a choice; write "
                                 f"the index of the right choice, 0 to {len(choices) - 1} (or a letter A-"
                                 f"{chr(64 + len(choices))})")
            sizes[len(choices)] += 1
            examples.append({"context": context, "choices": choices, "label": index})
            lines.append(line)
        if empty:
            self.notes.append(_lines_note("an empty context or choice", empty, self.unit))
        if len(sizes) > 1:
            common = sizes.most_common(1)[0][0]
            odd = next(ln for ln, ex in zip(lines, examples) if len(ex["choices"]) != common)
            raise self.error(self._where(odd), f"has a different number of choices than most rows ({common}); give "
                             f"every example the same number of choices")
        self._check_count(examples, "examples")
        answers = Counter(ex["label"] for ex in examples)
        if len(answers) == 1:  # an export whose gold ending always comes first: "always choose it" scores 100 %
            only = next(iter(answers))
            self.notes.append(f"Every example's right answer is choice {only}: a model that always picks choice "
                              f"{only} scores 100 %, so its accuracy here says nothing; shuffle each example's "
                              "choices (and its label with them) before fine-tuning")
        return TaskData(task, examples, None, "", self.notes)

    # ----- QA from records ---------------------------------------------------------------
    def read_qa(self, task) -> TaskData:
        q_col = self._resolve(self.text_column, "question", "text_column") or self._col(["question", "query"])
        c_col = self._resolve(self.text_pair_column, "context", "text_pair_column") or self._col(
            ["context", "passage", "paragraph", "document"])
        if q_col is None or c_col is None:
            raise self._missing("question" if q_col is None else "context",
                                ("question",) if q_col is None else ("context", "passage"),
                                "text_column" if q_col is None else "text_pair_column")
        ans_col = self._resolve(self.label_column, "answers", "label_column") or self._col(["answers"])
        text_col = self._col(["answer_text", "answer", "answertext"]) if ans_col is None else None
        start_col = self._col(["answer_start", "answerstart", "start"])
        imp_col = self._col(["is_impossible", "impossible", "unanswerable"])
        id_col = self._col(["id", "qid", "question_id"])
        examples, seen, repaired, empty = [], Counter(), [], []
        for i, (line, rec) in enumerate(self.rows):
            question, context = self._cell(rec, q_col), rec.get(c_col)
            if not question or not isinstance(context, str) or not context.strip():
                empty.append(line)
                continue
            qid = str(self._cell(rec, id_col) or f"q{i + 1}")
            seen[qid] += 1
            if seen[qid] > 1:
                qid = f"{qid}_{seen[qid]}"
            at = f"{self._where(line)} (question {qid!r})"
            answers = []
            if ans_col is not None:
                raw = rec.get(ans_col)
                if isinstance(raw, str):  # a CSV cell may hold JSON
                    try:
                        raw = loads(raw, self.error, self._where(line, ans_col)) if raw.strip()[:1] in "[{" \
                            else ([raw] if raw.strip() else [])
                    except json.JSONDecodeError:
                        raw = [raw]
                if isinstance(raw, dict):  # Hugging Face: {"text": [...], "answer_start": [...]}
                    texts, starts = raw.get("text", []), raw.get("answer_start", [])
                    texts = texts if isinstance(texts, list) else [texts]
                    starts = starts if isinstance(starts, list) else [starts]
                    raw = [{"text": t, "answer_start": s} for t, s in zip(texts, starts + [None] * len(texts))]
                answers = list(raw or [])
            elif text_col is not None:
                t = self._cell(rec, text_col)
                if t:
                    answers = [{"text": t, "answer_start": self._cell(rec, start_col) if start_col else None}]
            impossible = _as_bool(self._cell(rec, imp_col)) if imp_col and self._cell(rec, imp_col) not in (None, "") \
                else not answers
            fixed = [] if impossible else [self._fix_answer(a, context, at, qid, repaired) for a in answers]
            if not impossible and not fixed:
                raise self.error(at, "has no answer but is not marked unanswerable; add the answer text")
            examples.append({"id": qid, "question": question, "context": context, "answers": fixed,
                             "is_impossible": impossible})
        if empty:
            self.notes.append(_lines_note("an empty question or context", empty, self.unit))
        if repaired:
            self.notes.append(f"repaired answer_start of {len(repaired)} answers by finding the answer text in the "
                              f"context: " + "; ".join(repaired[:5]) + ("; ..." if len(repaired) > 5 else ""))
        self.notes.append(f"{self.fmt}: question column {q_col!r}, context column {c_col!r}; "
                          f"{sum(e['is_impossible'] for e in examples)} of {len(examples)} questions unanswerable")
        self._check_count(examples, "questions")
        return TaskData(task, examples, None, "", self.notes)

    # ----- NER from records --------------------------------------------------------------
    def read_ner_records(self, task) -> TaskData:
        tok_col = self._resolve(self.text_column, "tokens", "text_column") or self._col(["tokens", "words"])
        tag_col = self._resolve(self.label_column, "tags", "label_column") or self._col(
            ["tags", "ner_tags", "labels", "ner", "label"])
        if tok_col is None or tag_col is None:
            raise self._missing("tokens" if tok_col is None else "tags",
                                ("tokens",) if tok_col is None else ("tags", "ner_tags"),
                                "text_column" if tok_col is None else "label_column")
        sentences = []
        for i, (line, rec) in enumerate(self.rows):
            tokens, tags = rec.get(tok_col), rec.get(tag_col)
            where = self._where(line)
            if isinstance(tokens, str) and isinstance(tags, str):  # a CSV cell: space-separated
                tokens, tags = tokens.split(), tags.split()
            if not isinstance(tokens, list) or not isinstance(tags, list):
                raise self.error(where, f"needs {tok_col!r} and {tag_col!r} as lists of the same length, e.g. "
                                        f"{{\"tokens\": [\"Anna\", \"lives\"], \"tags\": [\"B-PER\", \"O\"]}}")
            if len(tokens) != len(tags):
                raise self.error(where, f"has {len(tokens)} tokens but {len(tags)} tags; give one tag per token")
            if tags and all(isinstance(t, int) for t in tags):
                raise self.error(where, "has tag numbers instead of tag names; write the tags as strings such as "
                                        "\"B-PER\" (the names of Hugging Face's ClassLabel feature)")
            if tokens:
                sentences.append(([str(t) for t in tokens], tags, [(line, tag_col)] * len(tags)))
        examples = self._check_bio(sentences)
        self.notes.append(f"{self.fmt}: tokens column {tok_col!r}, tags column {tag_col!r}")
        self._check_count(examples, "sentences")
        return TaskData(task, examples, _tag_names(examples), "", self.notes)
