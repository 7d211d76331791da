"""Saving what a page shows, so that a figure can be reproduced and put in a paper or a slide.

A page collects its results in a ``ResultBundle`` as it draws them: the input and the model's
name, every table (CSV), every array (one NPZ), every plot (one HTML file with plotly.js inlined
once, so it opens offline) and every bertviz view (standalone HTML). ``zip_bytes`` packs them
with a ``README.txt`` that says what each file is.

Single plots are also saved on their own: ``figure_html`` is a standalone HTML page of one plot
(plotly.js inlined: it works with no network). PNG comes from plotly's own toolbar in the
browser, so no server-side image renderer (and its browser binary) is needed.

No Streamlit here (``app/exports.py`` adds the download buttons), so a test builds a zip without a
page; it sits in ``app/`` because only the pages and their helpers save results.
"""
from __future__ import annotations

import html
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import numpy as np
import pandas as pd

from .. import __version__
from ..safe_text import frame_csv


def safe_name(name: str) -> str:
    """A file name from a title: letters, digits, '-' and '_' only."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-").lower() or "result"


def provenance_html(title: str, model: str | None = None, inputs: dict | None = None) -> str:
    """A heading for a saved page: what it shows, from which model, for which input, so a file found
    later in a downloads folder says where it came from."""
    lines = [f"<h1 style='font-size:1.3em;margin:0.4em 0'>{html.escape(title)}</h1>"]
    if model:
        lines.append(f"<p style='margin:0.2em 0'>Model: <code>{html.escape(str(model))}</code></p>")
    shown = {k: v for k, v in (inputs or {}).items() if v not in (None, "")}
    if shown:
        items = "".join(f"<li>{html.escape(str(k))}: <code>{html.escape(str(v))}</code></li>"
                        for k, v in shown.items())
        lines.append(f"<p style='margin:0.2em 0'>Input:</p><ul style='margin:0.2em 0'>{items}</ul>")
    lines.append(f"<p style='margin:0.2em 0;color:#666'>Saved by BERT Explorer {html.escape(__version__)} on "
                 f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.</p>")
    return "\n".join(lines)


def _page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif'>{body}</body></html>")


def figure_html(fig, title: str | None = None, model: str | None = None, inputs: dict | None = None) -> str:
    """One plotly figure as a standalone HTML page (plotly.js inlined, no network), titled, with the
    model and the input it was computed from."""
    title = title or _figure_title(fig) or "BERT Explorer figure"
    div = fig.to_html(include_plotlyjs=True, full_html=False, default_width="100%",
                      config={"displaylogo": False}, div_id=safe_name(title))
    return _page(title, provenance_html(title, model, inputs) + "\n" + div)


def titled_html(page: str, title: str, model: str | None = None, inputs: dict | None = None) -> str:
    """A whole HTML page (a bertviz view) with a <title> and the provenance heading added at the top
    of its body."""
    if "<title>" not in page:
        page = re.sub(r"(<head[^>]*>)", lambda m: m.group(1) + f"<title>{html.escape(title)}</title>", page,
                      count=1, flags=re.I)
    heading = f"<div style='font-family:sans-serif;margin:0 8px'>{provenance_html(title, model, inputs)}</div>"
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + heading, page, count=1, flags=re.I)


def _figure_title(fig) -> str:
    text = fig.layout.title.text
    return re.sub(r"<[^>]+>", " ", text).strip() if text else ""


def figures_html(figures: dict[str, object], page: str = "BERT Explorer figures", model: str | None = None,
                 inputs: dict | None = None) -> str:
    """Several plotly figures on one standalone HTML page, plotly.js inlined once."""
    parts = []
    for i, (name, fig) in enumerate(figures.items()):
        div = fig.to_html(include_plotlyjs=(i == 0), full_html=False, default_width="100%",
                          config={"displaylogo": False}, div_id=safe_name(name))
        parts.append(f"<h2>{html.escape(name)}</h2>\n{div}")
    return _page(page, provenance_html(page, model, inputs) + "\n" + "\n".join(parts))


def table_csv(df: pd.DataFrame) -> bytes:
    """A table as CSV, its text cells safe to open in a spreadsheet (``safe_text.csv_cell``)."""
    return frame_csv(df).encode("utf-8")


@dataclass
class ResultBundle:
    """Everything one page showed for one input."""
    page: str
    model: str
    inputs: dict
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    arrays: dict[str, tuple] = field(default_factory=dict)  # name -> (array, dtype to save it in or None)
    figures: dict[str, object] = field(default_factory=dict)
    views: dict[str, str | Callable[[], str]] = field(default_factory=dict)   # name -> standalone HTML
    data: dict[str, object] = field(default_factory=dict)  # name -> JSON-ready

    def add_table(self, name: str, df: pd.DataFrame) -> None:
        self.tables[name] = df

    def add_array(self, name: str, array, dtype=None) -> None:
        """Keep ``array`` (converted to ``dtype`` only when the zip is made: a page pays nothing for
        an export no one asks for)."""
        self.arrays[safe_name(name)] = (array, dtype)

    def add_figure(self, name: str, fig) -> None:
        self.figures[name] = fig

    def add_view(self, name: str, html: str | Callable[[], str]) -> None:
        """A bertviz view's page, or a function that makes it (or returns None where it cannot): a
        view the page did not draw this run (its tab not chosen) is rendered only when the zip is made."""
        self.views[name] = html

    def add_data(self, name: str, value) -> None:
        self.data[name] = value

    def manifest(self) -> dict:
        return {"page": self.page, "model": self.model, "inputs": self.inputs,
                "bert_explorer_version": __version__,
                "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}

    def zip_bytes(self) -> bytes:
        buf = io.BytesIO()
        lines = [f"BERT Explorer — {self.page}", f"model: {self.model}",
                 "input: see input.json (the page's inputs, the model's name and the app's version)", ""]
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("input.json", json.dumps(self.manifest(), indent=2, ensure_ascii=False, default=str))
            for name, df in self.tables.items():
                z.writestr(f"tables/{safe_name(name)}.csv", table_csv(df))
                lines.append(f"tables/{safe_name(name)}.csv — {name}")
            if self.arrays:
                arr = io.BytesIO()
                arrays = {k: np.asarray(a, dtype=dtype) for k, (a, dtype) in self.arrays.items()}
                np.savez_compressed(arr, **arrays)
                z.writestr("arrays.npz", arr.getvalue())
                lines.append("arrays.npz — numpy arrays: "
                             + ", ".join(f"{k} {v.shape} {v.dtype}" for k, v in arrays.items()))
            if self.data:
                z.writestr("data.json", json.dumps(self.data, indent=1, ensure_ascii=False, default=_plain))
                lines.append(f"data.json — {', '.join(self.data)}")
            if self.figures:
                z.writestr("figures.html", figures_html(self.figures, self.page, self.model, self.inputs))
                lines.append(f"figures.html — the plots, interactive, offline: {', '.join(self.figures)}")
            for name, view in self.views.items():
                view = view() if callable(view) else view
                if view is None:
                    continue
                z.writestr(f"views/{safe_name(name)}.html", titled_html(view, name, self.model, self.inputs))
                lines.append(f"views/{safe_name(name)}.html — {name} (bertviz, standalone, offline)")
            z.writestr("README.txt", "\n".join(lines) + "\n")
        return buf.getvalue()


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)
