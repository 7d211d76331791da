"""What a person sees in a chart, read from the figure a page sends to the browser.

AppTest exposes each ``st.plotly_chart`` as plotly's JSON; plotly encodes numeric arrays as
base64 (``{"dtype": "f8", "bdata": …, "shape": "3, 4"}``). ``figures(at)`` decodes them, and
``check(fig)`` looks at the chart as a student would:

- no trace draws two values at one x (bars, lines): one unnamed trace that holds several series
  stacks them into one bar, which is what ``px.bar(color="")`` does;
- when a chart has several traces, each is named (the legend tells the series apart) and no
  two share a name on the same axes;
- stacked bars (``barmode`` stack or relative) add their series up: each part is named, and a
  stack of weights or probabilities stays within 1;
- attention weights, probabilities, shares, CKA and Jensen-Shannon distances lie in [0, 1], and so
  does the height of a stack of them; cosines lie in [-1, 1]. Which charts hold such values is
  read from the value axis' or colour bar's title (or given: ``bounded=True``).

``bar(fig, series, category)`` reads one bar, so a test can hold a caption's number against it.
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field

import numpy as np

BOUNDED = re.compile(r"(?i)probabilit|\bweight\b|^attention$|^share$|P\(IsNext\)|\bCKA\b|JS distance")
COSINE = re.compile(r"(?i)\bcosine\b")  # within [-1, 1]
DTYPES = {"f8": "<f8", "f4": "<f4", "i1": "i1", "u1": "u1", "i2": "<i2", "u2": "<u2", "i4": "<i4", "u4": "<u4",
          "i8": "<i8", "u8": "<u8"}


def decode(value):
    """A plotly array (plain list or base64 ``bdata``) as a numpy array; anything else unchanged."""
    if isinstance(value, dict) and "bdata" in value:
        a = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(DTYPES.get(value["dtype"], value["dtype"])))
        shape = value.get("shape")
        if shape:
            a = a.reshape([int(s) for s in str(shape).split(",")])
        return a
    if isinstance(value, list):
        if value and isinstance(value[0], (list, dict)):
            return np.array([decode(v) for v in value], dtype=object if isinstance(value[0], dict) else None)
        return np.array(value, dtype=object if any(isinstance(v, str) or v is None for v in value) else float)
    return value


def _text(title) -> str:
    if isinstance(title, dict):
        return str(title.get("text") or "")
    return str(title or "")


@dataclass
class Trace:
    type: str
    name: str
    raw: dict
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    z: np.ndarray | None = None

    @property
    def horizontal(self) -> bool:
        return self.raw.get("orientation") == "h"

    @property
    def categories(self):
        return self.y if self.horizontal else self.x

    @property
    def values(self):
        if self.type in ("heatmap", "image", "contour"):
            return self.z
        return self.x if self.horizontal else self.y

    @property
    def axes(self) -> tuple[str, str]:
        return self.raw.get("xaxis", "x"), self.raw.get("yaxis", "y")


@dataclass
class Figure:
    spec: dict
    traces: list[Trace] = field(default_factory=list)

    @property
    def layout(self) -> dict:
        return self.spec.get("layout", {})

    @property
    def title(self) -> str:
        return _text(self.layout.get("title"))

    def axis_title(self, axis: str) -> str:
        """The title of an axis ("x", "y2", …) as drawn."""
        key = axis[0] + "axis" + axis[1:]
        return _text(self.layout.get(key, {}).get("title"))

    def colour_title(self, trace: Trace) -> str:
        bar = trace.raw.get("colorbar") or {}
        if bar.get("title"):
            return _text(bar["title"])
        axis = trace.raw.get("coloraxis")
        if axis:
            return _text(self.layout.get(axis, {}).get("colorbar", {}).get("title"))
        return ""

    def value_title(self, trace: Trace) -> str:
        """What the values of ``trace`` are called on the chart."""
        if trace.type in ("heatmap", "image", "contour"):
            return self.colour_title(trace)
        x, y = trace.axes
        return self.axis_title(x if trace.horizontal else y)


def figure(spec: str | dict) -> Figure:
    spec = json.loads(spec) if isinstance(spec, str) else spec
    traces = []
    for t in spec.get("data", []):
        traces.append(Trace(t.get("type", "scatter"), str(t.get("name") or ""), t,
                            *(decode(t[k]) if k in t else None for k in ("x", "y", "z"))))
    return Figure(spec, traces)


def figures(at) -> list[Figure]:
    """Every plotly chart the page drew, in page order."""
    return [figure(c.proto.spec) for c in at.get("plotly_chart")]


def _is_series(t: Trace) -> bool:
    return t.type == "bar" or (t.type in ("scatter", "scattergl") and "lines" in str(t.raw.get("mode", "lines")))


def problems(fig: Figure, *, bounded: bool | None = None) -> list[str]:
    """What is wrong with the chart as drawn (an empty list when nothing is)."""
    out: list[str] = []
    where = f"chart {fig.title!r}"
    series = [t for t in fig.traces if _is_series(t)]
    # 1. one value per x in a trace
    for t in series:
        cats = t.categories
        if cats is None or len(cats) == 0:
            continue
        seen: dict = {}
        for c in cats.tolist():
            key = json.dumps(c, default=str)
            seen[key] = seen.get(key, 0) + 1
        twice = [k for k, n in seen.items() if n > 1]
        if twice:
            out.append(f"{where}: trace {t.name!r} draws {len(twice)} categories twice (e.g. {twice[0]}): "
                       "several series in one trace")
    # 2. several series on one set of axes: each named, names distinct
    by_axes: dict = {}
    for t in series:
        if t.raw.get("showlegend") is False and t.raw.get("legendgroup"):
            continue  # a facet's repeat of a series already in the legend
        by_axes.setdefault(t.axes, []).append(t)
    for axes, ts in by_axes.items():
        if len(ts) > 1:
            names = [t.name for t in ts]
            if any(not n.strip() for n in names):
                out.append(f"{where}: {len(ts)} series on axes {axes} and some have no name: {names}")
            elif len(set(names)) < len(names):
                out.append(f"{where}: two series share a name on axes {axes}: {names}")
    # 3. stacked bars add their series up (their names are checked above; their sum below)
    barmode = fig.layout.get("barmode")
    bars = [t for t in fig.traces if t.type == "bar"]
    # 4. weights and probabilities within [0, 1]
    for t in fig.traces:
        vals = t.values
        if vals is None:
            continue
        is_bounded = bounded if bounded is not None else bool(BOUNDED.search(fig.value_title(t)))
        low = -1.0 if not is_bounded and COSINE.search(fig.value_title(t)) else 0.0
        if not is_bounded and not low:
            continue
        v = np.asarray(vals, dtype=float)
        v = v[np.isfinite(v)]
        if v.size and (v.min() < low - 1e-6 or v.max() > 1 + 1e-6):
            out.append(f"{where}: trace {t.name!r} ({fig.value_title(t) or 'bounded'}) has values outside "
                       f"[{low:g}, 1]: {v.min():.3g} … {v.max():.3g}")
    if (bounded or any(BOUNDED.search(fig.value_title(t)) for t in bars)) and len(bars) > 1 and barmode in (
            "stack", "relative"):
        totals: dict = {}
        for t in bars:
            for c, v in zip(t.categories.tolist(), np.asarray(t.values, dtype=float).tolist()):
                totals[json.dumps(c, default=str)] = totals.get(json.dumps(c, default=str), 0.0) + v
        high = {c: v for c, v in totals.items() if v > 1 + 1e-6}
        if high:
            c, v = next(iter(high.items()))
            out.append(f"{where}: stacked bars reach {v:.2f} at {c}, above 1")
    return out


def _number(value) -> bool:
    try:
        float(str(value).strip().replace(",", ""))
    except ValueError:
        return False
    return bool(str(value).strip())


def names_read_as_numbers(fig: Figure, types: tuple[str, ...] | None = None) -> list[str]:
    """Axes whose names (label names, slices, a column's values) plotly would draw on a number line.

    plotly.js types an axis without ``type`` from its values: strings count as numbers when they
    parse as one, and the axis is a category axis only when its distinct non-numbers outnumber its
    distinct numbers two to one (``axis_autotype.js``). Labels "0" and "1" then stand among ticks
    -0.5, 0.5 and 1.5, and a name that is not a number is not drawn at all. ``types``: only traces of
    these types (bars and heat maps name things; a line may draw layers "0", "1" on a number line)."""
    out = []
    for t in fig.traces:
        if types is not None and t.type not in types:
            continue
        x, y = t.axes
        named = [(x, t.x), (y, t.y)] if t.type in ("heatmap", "image") else \
            [(y if t.horizontal else x, t.categories)]
        for axis, values in named:
            if values is None or not len(values) or not any(isinstance(v, str) for v in values.tolist()):
                continue  # numbers drawn as numbers (steps, layers) are what a number line is for
            key = axis[0] + "axis" + axis[1:]
            if fig.layout.get(key, {}).get("type") == "category":
                continue
            distinct = {str(v) for v in values.tolist()}
            numbers = sum(_number(v) for v in distinct)
            if numbers and len(distinct) - numbers <= 2 * numbers:
                out.append(f"chart {fig.title!r}: trace {t.name!r} names {sorted(distinct)[:4]} on {key}, which "
                           "plotly draws as a number line (no type='category')")
    return out


def check(fig: Figure, **kwargs) -> None:
    found = problems(fig, **kwargs)
    assert not found, "\n".join(found)


def bar(fig: Figure, series: str, category) -> float:
    """The height of one bar: series ``series`` (a trace name) at ``category``."""
    for t in fig.traces:
        if t.type == "bar" and t.name == series:
            cats = t.categories.tolist()
            if category in cats:
                return float(np.asarray(t.values, dtype=float)[cats.index(category)])
            raise KeyError(f"{category!r} is not a category of {series!r}: {cats}")
    raise KeyError(f"no bar series {series!r} in {fig.title!r}: {[t.name for t in fig.traces]}")
