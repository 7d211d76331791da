"""Text that came from a user, handed on in a format that would otherwise read it as code.

Uploaded data (a QA passage, an NER token, a label, a column's name) travels into two formats that
interpret what they are given:

* **CSV**, opened in a spreadsheet: a cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a
  carriage return is read as a formula (``=HYPERLINK(...)`` sends the reader to a site,
  ``+cmd|' /C calc'!A0`` runs a program through DDE). OWASP's advice on CSV injection is followed:
  such a *text* cell gets a single quote in front, so the spreadsheet shows it as text.
  :func:`csv_cell` is that rule, and every CSV the app or the command line writes goes through it
  (:func:`frame_csv` for a table, :func:`rows_csv` for rows of dicts); :func:`read_csv` takes the
  quote off again, so an export parses back to what was exported.
  Numbers are left alone: a number the app computed (−0.5) is not a formula, nor is a text that is
  exactly a decimal number ("-1" as a label), which a spreadsheet reads as that number.
* **Markdown**, rendered in every student's browser: ``![x](http://host/pixel.png)`` in a passage
  would be fetched as an image. :func:`markdown_text` escapes every character Markdown (and
  Streamlit's additions: colours, icons, LaTeX) could read as markup, so the text shows as its
  characters. A page shows user text with ``st.text``, in a dataframe cell, or through this.

No Streamlit here: the command line writes CSV too.
"""
from __future__ import annotations

import csv
import io
import re

import pandas as pd

# The first characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def _read_as_formula(text: str) -> bool:
    """A spreadsheet would read ``text`` (after any quotes we put in front) as a formula; quotes that
    already lead count too, so that :func:`read_csv` can tell ours from the user's."""
    rest = text.lstrip(QUOTE)
    return rest.startswith(FORMULA_START) and not _NUMBER.fullmatch(rest)


def csv_cell(value):
    """A CSV cell as a spreadsheet shows it and runs nothing: a text that would start a formula gets
    a single quote in front; anything else (numbers, None, NaN, plain text) is returned as it is."""
    if isinstance(value, str) and _read_as_formula(value):
        return QUOTE + value
    return value


def uncsv_cell(value):
    """The cell as it was before :func:`csv_cell` (the quote we added taken off)."""
    if isinstance(value, str) and value.startswith(QUOTE) and _read_as_formula(value[1:]):
        return value[1:]
    return value


def _map_text(df: pd.DataFrame, cell) -> pd.DataFrame:
    out = df.copy()
    for i in range(out.shape[1]):
        col = out.iloc[:, i]
        if not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_datetime64_any_dtype(col)):
            out.isetitem(i, col.astype(object).map(cell))  # a numeric column stays numeric
    out.columns = [cell(c) for c in out.columns]  # a header is a cell too (an upload names its columns)
    if not pd.api.types.is_numeric_dtype(out.index):
        out.index = out.index.map(cell)
    return out


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell and column name passed through :func:`csv_cell`."""
    return _map_text(df, csv_cell)


def frame_csv(df: pd.DataFrame, **kwargs) -> str:
    """``df`` as CSV text (``index=False`` unless asked), its text cells safe (:func:`csv_cell`)."""
    kwargs.setdefault("index", False)
    return csv_frame(df).to_csv(**kwargs)


def rows_csv(rows: list[dict]) -> str:
    """Rows of dicts as CSV text, one column for every key in the order first seen, every cell
    passed through :func:`csv_cell` (a missing key or None is an empty cell)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([csv_cell(str(c)) for c in columns])
    writer.writerows([csv_cell(r.get(c)) for c in columns] for r in rows)
    return out.getvalue()


def read_csv(text: str) -> pd.DataFrame:
    """A CSV written by :func:`frame_csv` or :func:`rows_csv`, back as a DataFrame with its cells as
    they were (numbers as numbers, the quotes :func:`csv_cell` added taken off)."""
    return _map_text(pd.read_csv(io.StringIO(text)), uncsv_cell)


# GitHub's Markdown makes a link of a bare address ("https://...", "www....", "name@host") in the text as read,
# escapes and all: a word joiner (U+2060, drawn as nothing) after "://", "www" and "@" keeps it the characters
# it is, not a link every browser of the class is offered
_AUTOLINK = re.compile(r"(://|\bwww(?=\.)|@)", re.IGNORECASE)


def chart_text(text) -> str:
    """``text`` to put in a plotly label, title, legend or hover and be shown as the characters it is: plotly draws
    a few HTML tags itself (a typed "<b>x</b>" was drawn as a bold x) and decodes entities."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_text(text) -> str:
    """``text`` to put inside Markdown and be shown as the characters it is: each ASCII punctuation
    character is escaped with a backslash (CommonMark allows exactly these), so no image, link, HTML,
    emphasis, heading, list, LaTeX or Streamlit colour is made of it, and a bare address is no link."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", _AUTOLINK.sub("\\1\u2060", str(text)))
