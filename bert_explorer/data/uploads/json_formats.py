"""Reading JSON uploads: JSONL records, a JSON list of records, and SQuAD v1.1/v2.0."""
from __future__ import annotations

import json
import re
import sys

from . import core
from .core import MIN_EXAMPLES, TaskData
from .helpers import _as_bool, _Lazy, iter_lines


def loads(text: str, error, where: str | None = None):
    """``json.loads``, but a value nested so deeply that Python's parser runs out of recursion (it
    gives up near ``sys.getrecursionlimit()`` levels) is ``error(where, ...)``, one sentence, not a traceback;
    and a text of more values than :data:`core.MAX_CELLS` is refused before it is parsed (every value after the
    first follows a comma or opens a bracket: 60 MB of ``[{},{},…]`` held 1.7 GB before its count was read)."""
    if len(text) > core.MAX_CELLS and text.count(",") + text.count("{") + text.count("[") > core.MAX_CELLS:
        raise error(where, f"holds more than the {core.MAX_CELLS:,} values a data file may have; use a sample of it")
    try:
        return json.loads(text)
    except RecursionError:
        raise error(where, f"is nested too deeply to be read (more than about {sys.getrecursionlimit():,} levels of "
                           f"brackets); write each example as a flat object such as {{\"text\": \"...\", \"label\": "
                           f"\"...\"}}") from None


class JsonFormats:
    """JSON and JSONL files, SQuAD JSON among them (a mixin of the reader)."""

    # ----- JSON ------------------------------------------------------------------------
    def parse_jsonl(self) -> tuple[list[str], list[tuple[int, dict]]]:
        self.fmt = "JSONL"
        rows, columns, cells = [], {}, 0
        for n, line in enumerate(iter_lines(self.text), 1):
            if not line.strip():
                continue
            try:
                obj = loads(line, self.error, f"line {n}")
            except json.JSONDecodeError as e:
                raise self.error(f"line {n}, column {e.colno}", f"is not valid JSON ({e.msg}); every line of a JSONL "
                                 f"file must be one complete JSON object, so fix or delete that line") from e
            if not isinstance(obj, dict):
                raise self.error(f"line {n}", f"holds a JSON {type(obj).__name__}, not an object; write each example "
                                 f"as an object such as {{\"text\": \"...\", \"label\": \"...\"}}")
            cells += sum(len(v) if isinstance(v, (list, dict)) else 1 for v in obj.values())  # (a NER line's tokens)
            core.check_row(self.name, len(rows) + 1, n, cells)  # stops reading where the limit is passed
            columns.update(dict.fromkeys(obj))
            rows.append((n, obj))
        return list(columns), rows

    def from_json(self, obj) -> TaskData:
        self.fmt = "JSON"
        if isinstance(obj, dict) and isinstance(obj.get("data"), list) and obj["data"] \
                and isinstance(obj["data"][0], dict) and "paragraphs" in obj["data"][0]:
            return self.parse_squad(obj)
        records = obj.get("data") if isinstance(obj, dict) and isinstance(obj.get("data"), list) else obj
        if isinstance(records, list) and records and all(isinstance(r, dict) for r in records):
            if len(records) > core.MAX_ROWS:
                raise core.too_many_rows(self.name, len(records), "records")
            columns = list(dict.fromkeys(k for r in records for k in r))
            self.unit = "record"  # a JSON array gives no line per record: messages count records instead
            return self.from_records((columns, list(enumerate(records, 1))), "JSON")
        if isinstance(records, list) and not records:
            raise self.error(None, f"holds no examples (an empty list); add at least {MIN_EXAMPLES} examples")
        raise self.error(None, "is JSON but not in a layout this reader knows; use SQuAD's {\"data\": "
                               "[{\"paragraphs\": [{\"context\": ..., \"qas\": [...]}]}]} for QA, or a list of "
                               "objects (or JSONL) with fields such as text and label")

    # ----- SQuAD -----------------------------------------------------------------------
    def _line_of(self, needle: str) -> int | None:
        at = self.text.find(needle)
        return self.text.count("\n", 0, at) + 1 if at >= 0 else None

    def parse_squad(self, obj: dict) -> TaskData:
        self.fmt = "SQuAD JSON"
        task = self.task_of_format("squad", "is a SQuAD file (articles of paragraphs of questions)")
        examples, seen, no_flag, repaired = [], set(), [], []  # seen: the ids kept so far
        v2 = False
        for a, article in enumerate(obj["data"]):
            paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
            if not isinstance(paragraphs, list):
                raise self.error(f"data[{a}]", "has no 'paragraphs' list; each article needs "
                                 "{\"paragraphs\": [{\"context\": ..., \"qas\": [...]}]} as in SQuAD")
            for p, para in enumerate(paragraphs):
                where = f"data[{a}].paragraphs[{p}]"
                if not isinstance(para, dict) or not isinstance(para.get("context"), str) \
                        or not isinstance(para.get("qas"), list):
                    raise self.error(where, "needs a 'context' string and a 'qas' list as in SQuAD; add the "
                                            "missing field")
                context = para["context"]
                for q, qa in enumerate(para["qas"]):
                    if len(examples) >= core.MAX_ROWS:  # (stops reading there; its line is looked for then only)
                        core.check_row(self.name, len(examples) + 1, self._line_of(context[:80]) or 1,
                                       unit="questions")
                    examples.append(self._squad_question(qa, context, f"{where}.qas[{q}]", seen, no_flag, repaired))
                    v2 = v2 or "is_impossible" in qa
        if no_flag:
            shown = ", ".join(repr(i) for i in no_flag[:5]) + (", ..." if len(no_flag) > 5 else "")
            self.notes.append(f"{len(no_flag)} questions have no answers and no is_impossible flag ({shown}); "
                              f"read them as unanswerable (SQuAD 2.0)")
        if repaired:
            self.notes.append(f"repaired answer_start of {len(repaired)} answers by finding the answer text in the "
                              f"context: " + "; ".join(repaired[:5]) + ("; ..." if len(repaired) > 5 else ""))
        dupes = [ex.pop("given_id") for ex in examples if "given_id" in ex]
        if dupes:
            self.notes.append(f"{len(dupes)} questions have an id an earlier question has (e.g. {dupes[0]!r}); they "
                              f"got the suffix _2, _3, ... so that every id is unique")
        n_imp = sum(ex["is_impossible"] for ex in examples)
        self.notes.append(f"SQuAD {'v2.0' if v2 or n_imp else 'v1.1'} layout: {len(examples)} questions, "
                          f"{n_imp} unanswerable")
        self._check_count(examples, "questions")
        return TaskData(task, examples, None, "", self.notes)

    def _squad_question(self, qa, context, where, seen, no_flag, repaired) -> dict:
        if not isinstance(qa, dict):
            raise self.error(where, "is not an object; each question needs \"id\", \"question\" and \"answers\"")
        qid = str(qa.get("id", "")).strip() or where

        def locate() -> str:  # only when a message needs it: finding the line scans the file
            line = self._line_of(f'"{qa["id"]}"') if qa.get("id") else None
            return f"question {qid!r}" + (f" (line {line})" if line else f" ({where})")
        at = _Lazy(locate)
        question = qa.get("question")
        if not isinstance(question, str) or not question.strip():
            raise self.error(at, "has no question text; add a non-empty \"question\" string")
        if not context.strip():
            raise self.error(at, "has an empty context; add the paragraph the answer comes from")
        given = qid
        if qid in seen:  # the next free suffix: a file may hold "a", "a" and "a_2"; each id stays one question
            n = 2
            while f"{qid}_{n}" in seen:
                n += 1
            qid = f"{qid}_{n}"
        seen.add(qid)
        answers = qa.get("answers", [])
        if not isinstance(answers, list):
            raise self.error(at, "has 'answers' that is not a list; write [{\"text\": ..., \"answer_start\": ...}]")
        impossible = qa.get("is_impossible")
        if impossible is None:
            impossible = not answers
            if impossible:
                no_flag.append(qid)
        impossible = _as_bool(impossible)
        fixed = []
        if not impossible:
            if not answers:
                raise self.error(at, "has is_impossible false but no answers; add an answer or set is_impossible "
                                     "to true")
            for ans in answers:
                fixed.append(self._fix_answer(ans, context, at, qid, repaired))
        return {"id": qid, "question": question.strip(), "context": context, "answers": fixed,
                "is_impossible": impossible, **({"given_id": given} if given != qid else {})}

    def _fix_answer(self, ans, context: str, at: str, qid: str, repaired: list[str]) -> dict:
        if isinstance(ans, str):
            ans = {"text": ans}
        if not isinstance(ans, dict) or not isinstance(ans.get("text"), str) or not ans["text"].strip():
            raise self.error(at, "has an answer without text; each answer needs {\"text\": ..., \"answer_start\": ...}")
        text = ans["text"]
        start = ans.get("answer_start")
        try:
            start = int(start) if start is not None else None
        except (TypeError, ValueError, OverflowError):  # (1e999 is JSON's infinity)
            raise self.error(at, f"has answer_start {start!r}, which is not a number; give the character offset of "
                                 f"the answer in the context (counting from 0)") from None
        if start is not None and context[start:start + len(text)] == text:
            return {"text": text, "answer_start": start}
        found = [m.start() for m in re.finditer(re.escape(text), context)]
        if not found and text.strip() != text:
            text = text.strip()
            found = [m.start() for m in re.finditer(re.escape(text), context)]
        if not found:
            there = "" if start is None else f" (answer_start {start} points at {context[start:start + len(text)]!r})"
            raise self.error(at, f"answer {ans['text']!r} does not occur in its context{there}; correct the answer "
                                 f"text so that it is copied exactly from the context")
        best = min(found, key=lambda s: abs(s - (start if start is not None else 0)))
        repaired.append(f"question {qid!r}: {text!r} is at {best}, not {start}" if start is not None
                        else f"question {qid!r}: no answer_start, found {text!r} at {best}")
        return {"text": text, "answer_start": best}

    # ----- CoNLL -----------------------------------------------------------------------
