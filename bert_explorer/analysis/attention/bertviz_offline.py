"""bertviz's head view and model view, rendered with no network.

bertviz (Vig 2019) draws attention with d3 and jQuery that its HTML fetches from a CDN
through require.js, so offline (or behind a firewall, or in a classroom with bad wifi) the
page stays blank. Here the same bertviz HTML is made self-contained:

1. d3 5.7.0 (the version bertviz asks for, shipped by the PyPI package ``mpld3``) and jQuery
   (shipped by ``XStatic-jQuery``) are inlined as plain ``<script>`` tags, first;
2. a ten-line ``require``/``requirejs`` shim hands bertviz those two globals instead of
   loading anything (bertviz only ever asks for ``['jquery', 'd3']``);
3. the ``<script src=…require.min.js>`` tag bertviz adds is dropped.

The order matters: d3 checks for an AMD ``define`` when it loads, so it must come before
anything AMD-aware.

The attention data grows as layers × heads × T². bertviz writes it as JSON numbers (about 6 bytes a
weight) and, for a sentence pair, twice (all tokens, then the four A/B blocks): a 128-token pair
was 3 MB for one layer of BERT-Base. Here each weight is one byte, weight × 255 rounded (the
drawing cannot show a finer step: an opacity is 8 bits), in base64 (4/3 of a byte), once; the
A/B blocks are cut from it in the browser, and a layer is decoded when it is first drawn
(``_compact_weights``). So a 128-token pair of BERT-Base carries all 12 layers in 3.1 MB. The caller can
keep only some layers (``layers``): the page says so when it does.

Two more changes to what bertviz draws:

* **Numbering.** bertviz labels layers and heads with the indices it is given (0-based). Its
  JavaScript uses ``include_layers`` / ``include_heads`` only as labels (and the model view's
  layer colours); it finds the data by position. So the labels are handed over counted from
  1, like the rest of the app and the paper. ``BertvizHtml.numbered_from`` says which
  numbering the drawing shows (0 if a future bertviz's page could not be relabelled).
* **Model-view size.** The model view draws a 970-px-wide SVG whose height grows with
  layers × tokens and, oddly, *shrinks* with more heads (each token row of a thumbnail is
  7·12/A px high), e.g. 970 × 2,094 px for 4 layers × 4 heads × 24 tokens.
  ``fit_model_view`` computes that size from bertviz's own layout constants and a scale
  that brings the whole grid into a frame of about ``MODEL_VIEW_MAX_HEIGHT`` px; the SVG
  gets a ``viewBox`` and is drawn at that scale, or narrower when the frame is narrower, so
  every layer and head is always inside the frame.

And one change to how it draws: **only lines that can be seen.** bertviz draws one SVG line for
every (query, key) pair of every head, also where the weight is a few thousandths: a 128-token
window of a 12-head model is 196,608 lines per layer, and the browser needed seconds to build
them. A line is drawn with the weight as its opacity divided by the number of heads shown, so
a line whose opacity would be under ``MIN_VISIBLE_WEIGHT`` (1/255: less than one step of an 8-bit
colour) draws nothing that can be seen; those lines are left out (``_draw_visible_lines_only``).
With all 12 heads of a layer shown that is every weight under 12/255 (a random BERT-Base's
128-token layer drew 195,000 lines, now none but its few heavy ones); a hidden head draws no line,
and showing or hiding one draws the layer again, so one head alone shows every weight from 1/255.
The data (and the standalone download) keep every weight, to 1/255.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from bertviz import head_view, model_view

from .heads import AttentionResult

# bertviz asks for exactly these two modules; the shim answers with the inlined globals.
_REQUIRE_SHIM = """
(function () {
  var modules = {jquery: window.jQuery, d3: window.d3};
  function requirejs(deps, callback) {
    if (typeof deps === "string") { return modules[deps]; }
    var found = deps.map(function (name) { return modules[name]; });
    if (callback) { callback.apply(window, found); }
  }
  requirejs.config = function () {};
  window.requirejs = requirejs;
  window.require = requirejs;
})();
"""

_CDN_SCRIPT = re.compile(r"<script\s+src=\"https?://[^\"]*\"\s*>\s*</script>", re.IGNORECASE)
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\);", re.S)


class OfflineAssetsMissing(RuntimeError):
    """d3 or jQuery is not installed (the packages mpld3 / XStatic-jQuery)."""


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise OfflineAssetsMissing(f"the package {package!r} is not installed; it ships the JavaScript bertviz needs")
    path = Path(list(spec.submodule_search_locations)[0], *parts)
    if not path.is_file():
        raise OfflineAssetsMissing(f"{path} is missing; reinstall the package {package!r}")
    return path


@lru_cache(maxsize=1)
def javascript_libraries() -> str:
    """d3 5.7.0 and jQuery as inline ``<script>`` tags, followed by the require shim."""
    d3 = _package_file("mpld3", "js", "d3.v5.min.js").read_text(encoding="utf-8")
    jquery = _package_file("xstatic.pkg.jquery", "data", "jquery.min.js").read_text(encoding="utf-8")
    return "".join(f"<script>{js}</script>\n" for js in (d3, jquery, _REQUIRE_SHIM))


# ----- the model view's size --------------------------------------------------------------------
# bertviz 1.4.1 model_view.js, the constants at the top of its drawing code (px);
# tests/test_attention_views.py checks them against the installed file.
MV_DIV_WIDTH = 970             # DIV_WIDTH: the SVG's width, whatever the model
MV_THUMBNAIL_PADDING = 5       # THUMBNAIL_PADDING: above and below each thumbnail
MV_AXIS = 15 + 5 + 13 + 5      # axisSize = HEADING_TEXT_SIZE + HEADING_PADDING + TEXT_SIZE + TEXT_PADDING
MV_ROW_HEIGHTS = 7 * 12        # thumbnailBoxHeight = 7 * (12 / totalHeads): one token's row in a thumbnail
MV_DETAIL_BOX_HEIGHT = 18      # the enlarged head shown on click: DETAIL_BOX_HEIGHT per token,
MV_DETAIL_EXTRA = 2 * 15 + 25  # + 2 * DETAIL_PADDING + DETAIL_HEADING_HEIGHT
MV_FILTER_HEIGHT = 24          # the "Attention: All / A -> B …" menu above the SVG (sentence pairs only)
SAVE_BAR_HEIGHT = 30           # the "Save SVG" button's row, moved above the drawing (_SAVE_SVG): 22 + 2 · 4 px
FRAME_SLACK = 8                # px under the drawing, so that rounding never shows a scroll bar

MODEL_VIEW_MAX_HEIGHT = 900    # px: aim to show the whole grid on one laptop screen
MODEL_VIEW_MIN_SCALE = 0.4     # below this the thumbnails' lines blur together: the frame grows instead
MODEL_VIEW_LEGIBLE_SCALE = 0.75  # bertviz's 13-15 px labels stay at least 10 px: a long input's view


def model_view_drawing(num_layers: int, num_heads: int, num_tokens: int) -> tuple[float, float]:
    """Width and height (px) of the SVG bertviz's model view draws for ``num_layers`` layers,
    ``num_heads`` heads per layer and ``num_tokens`` tokens, by bertviz's own layout:

        thumbnail height = T · 7·12/A + 2 · THUMBNAIL_PADDING
        height = max(L · thumbnail height + axisSize, T · 18 + 2 · 15 + 25)   (the click-up detail)
        width  = DIV_WIDTH = 970      (each head gets (970 − axisSize) / A px)
    """
    if min(num_layers, num_heads, num_tokens) < 1:
        raise ValueError(f"need at least one layer, head and token, got {num_layers}, {num_heads}, {num_tokens}")
    thumbnail = num_tokens * MV_ROW_HEIGHTS / num_heads + 2 * MV_THUMBNAIL_PADDING
    detail = num_tokens * MV_DETAIL_BOX_HEIGHT + MV_DETAIL_EXTRA
    return float(MV_DIV_WIDTH), float(max(num_layers * thumbnail + MV_AXIS, detail))


@dataclass(frozen=True)
class FrameFit:
    """How to show a bertviz drawing: at ``scale`` it takes at most ``width`` × (``height`` −
    the menu) px; ``height`` is what the frame needs, menu and slack included."""

    scale: float
    width: int                    # px: the drawing's width at ``scale`` (narrower in a narrower frame)
    height: int                   # px: the frame's height
    drawing: tuple[float, float]  # bertviz's own (unscaled) width and height


def fit_model_view(num_layers: int, num_heads: int, num_tokens: int, pair: bool = False,
                   max_height: int = MODEL_VIEW_MAX_HEIGHT, min_scale: float = MODEL_VIEW_MIN_SCALE) -> FrameFit:
    """The scale and frame size that show bertviz's whole model view: every layer and head.

    The scale brings the drawing within ``max_height`` (never above 1: small drawings keep
    their size); it stops at ``min_scale`` so that big models stay legible, and the frame
    then grows taller than ``max_height`` instead of cutting layers off.
    """
    width, height = model_view_drawing(num_layers, num_heads, num_tokens)
    menu = SAVE_BAR_HEIGHT + (MV_FILTER_HEIGHT if pair else 0)
    scale = min(1.0, max(min_scale, (max_height - menu - FRAME_SLACK) / height))
    return FrameFit(scale=scale, width=math.ceil(width * scale),
                    height=math.ceil(menu + height * scale) + FRAME_SLACK, drawing=(width, height))


def head_view_height(num_tokens: int) -> int:
    """Frame height (px) for bertviz's head view: its menus, the head squares and one 22.5-px
    row per token (BOXHEIGHT in head_view.js), with room to spare, and the *Save SVG* row."""
    return 170 + SAVE_BAR_HEIGHT + 23 * num_tokens


# The SVG gets a viewBox each time bertviz (re)draws it (the pair menu redraws), so CSS can
# scale it: 100 % of the frame's width, at most the fitted width, height from the aspect ratio.
_SCALE_TO_FIT = """
<style>#vis > svg {{display: block; width: 100%; max-width: {width}px; height: auto;}}</style>
<script>
(function () {{
  function fit(svg) {{
    if (!svg.getAttribute("viewBox")) {{
      svg.setAttribute("viewBox", "0 0 " + svg.getAttribute("width") + " " + svg.getAttribute("height"));
    }}
  }}
  document.querySelectorAll("#vis").forEach(function (vis) {{
    vis.querySelectorAll("svg").forEach(fit);
    new MutationObserver(function () {{ vis.querySelectorAll(":scope > svg").forEach(fit); }})
      .observe(vis, {{childList: true}});
  }});
}})();
</script>
"""


# A button above the drawing that saves the SVG as it is now (the layer, heads and filter the
# user picked), with the page's fonts written into it, so it opens alike in an editor.
_SAVE_SVG = """
<div style="font:12px sans-serif;height:22px;margin:4px 8px"><button id="be-save-svg" type="button"
 style="font:inherit;height:22px;box-sizing:border-box">Save SVG</button></div>
<script>
// The drawing's size in plain pixels: a viewBox holds four numbers, and the head view's SVG says
// width="100%" height="525px", so a length with a unit is measured on the page instead.
function drawnSize(svg) {
  var box = svg.getBoundingClientRect();
  function pixels(name, measured) {
    var value = (svg.getAttribute(name) || "").trim();
    return /^[0-9.]+(px)?$/.test(value) ? parseFloat(value) : Math.round(measured);
  }
  return {width: pixels("width", box.width), height: pixels("height", box.height)};
}
(function () {
  var button = document.getElementById("be-save-svg");
  button.parentNode.parentNode.insertBefore(button.parentNode, button.parentNode.parentNode.firstChild);
  button.addEventListener("click", function () {
    var svg = document.querySelector("#vis svg");
    if (!svg) { return; }
    var copy = svg.cloneNode(true);
    copy.setAttribute("xmlns", "http://www.w3.org/2000/svg");
    var size = drawnSize(svg);
    if (!/^\s*-?[0-9.]+([ ,]+-?[0-9.]+){3}\s*$/.test(copy.getAttribute("viewBox") || "")) {
      copy.setAttribute("viewBox", "0 0 " + size.width + " " + size.height);
    }
    copy.setAttribute("width", size.width);
    copy.setAttribute("height", size.height);
    copy.setAttribute("style", "font-family:" + getComputedStyle(svg).fontFamily +
                      ";background:" + getComputedStyle(document.body).backgroundColor);
    var text = new XMLSerializer().serializeToString(copy);
    var link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([text], {type: "image/svg+xml"}));
    link.download = "attention-{view}-view.svg";
    document.body.appendChild(link);
    link.click();
    link.remove();
  });
})();
</script>
"""


@dataclass
class BertvizHtml:
    html: str                 # a whole HTML document, no external request
    layers: list[int]         # the (0-based) layers included
    weight_steps: int         # the weights are kept as whole multiples of 1/weight_steps
    size_bytes: int
    height: int = 0           # px: the frame that shows the whole drawing
    fit: FrameFit | None = None  # the model view's scale and size (None for the head view)
    numbered_from: int = 1    # the number the drawing gives the first layer and head


_PARAMS = "const params = "
_HACK = "; // HACK: "


def _number_from_one(body: str, view: str, labels: dict[str, list[int]] | None = None) -> tuple[str, bool]:
    """Hand bertviz's JavaScript layer (and, in the model view, head) labels counted from 1:
    bertviz's own (0-based) ones plus 1, or ``labels`` (``include_layers`` / ``include_heads``, as
    they are to be shown) where bertviz was given a placeholder of one layer and one head.

    bertviz's views use ``include_layers`` / ``include_heads`` only to label (and, in the model
    view, to colour) what they draw; the data are found by position. Returns the page and
    whether the labels could be changed (a bertviz that lays out its page differently is left
    as it is).

    bertviz writes its ``params`` (every weight) into the line ``const params = X; // HACK: X is…``:
    its template marker stands in a comment too, so the page carried the data twice. The comment
    goes, and the lists are rewritten where they stand in X, which is otherwise left as it is
    (decoding and encoding a long input's megabytes of weights took seconds). A token cannot
    imitate a key: inside a JSON string its quotes are escaped."""
    start = body.find(_PARAMS)
    if start < 0:
        return body, False
    start += len(_PARAMS)
    end = body.find("\n", start)
    end = len(body) if end < 0 else end
    line = body[start:end]
    params = line[:max(line.find(_HACK), 0)]
    if not params or not line.startswith(params + _HACK + params):
        return body, False
    keys = ["include_layers"] + (["include_heads"] if view == "model" else [])
    for key in keys:
        pattern = re.compile(rf'"{key}": \[([0-9, ]*)\]')
        if len(pattern.findall(params)) != 1:
            return body, False
        shown = (labels[key] if labels else
                 [int(i) + 1 for i in pattern.search(params).group(1).split(",") if i.strip()])
        params = pattern.sub(lambda m: f'"{key}": ' + json.dumps(shown), params)
    return body[:start] + params + ";" + body[end:], True


MIN_VISIBLE_WEIGHT = 1 / 255  # as an opacity, less than one step of an 8-bit colour

# Defined before bertviz's own script: a row of weights as the lines worth drawing, each a
# Number (so that bertviz's opacity arithmetic reads it as before) that knows its key's index.
# ``shared`` is what the opacity is divided by: the head view draws a weight at weight / (heads
# shown), so with 12 heads shown a line needs a weight of 12/255 to be seen.
_VISIBLE_LINES = """<script>
function __beVisible(row, shared) {
  var out = [];
  for (var j = 0; j < row.length; j++) {
    if (row[j] / shared >= %r) { var w = new Number(row[j]); w.j = j; out.push(w); }
  }
  return out;
}
</script>
""" % MIN_VISIBLE_WEIGHT

# bertviz 1.4.1's data joins for the lines (head_view.js, model_view.js) and the places that
# read a line's position among its row's keys from its index, which now comes with the weight.
# In the head view a hidden head draws no line and a shown one only what its share of the opacity
# lets be seen; so showing or hiding a head draws the lines again (bertviz only re-set opacities).
_LINE_PATCHES = {
    "head": [(re.compile(r'(\.selectAll\("line"\)\s*\.data\()d => d(\)\s*\.enter\(\)\s*\.append\("line"\))'),
              r'\1function (d) { const h = +this.parentNode.getAttribute("head-index"); '
              r'return config.headVis[h] ? __beVisible(d, activeHeads()) : []; }\2', 1),
             (re.compile(re.escape("updateAttention(svg);")),
              "renderAttention(svg, config.attention[config.filter].attn[config.layer_seq]);", 2),
             (re.compile(re.escape('.attr("y2", (d, rightTokenIndex) => TEXT_TOP + rightTokenIndex * BOXHEIGHT')),
              '.attr("y2", (d) => TEXT_TOP + d.j * BOXHEIGHT', 1),
             (re.compile(re.escape('.attr("right-token-index", (d, i) => i)')),
              '.attr("right-token-index", (d) => d.j)', 1)],
    "model": [(re.compile(r'(\.selectAll\("line"\)\s*\.data\(function \(d\) \{ // Loop over all target tokens\s*'
                          r'return )d;'), r"\1__beVisible(d, 1);", 2),
              (re.compile(re.escape('.attr("y2", function (d, targetIndex) {')),
               '.attr("y2", function (d) { var targetIndex = d.j;', 2)],
}


# bertviz colours heads (head view) and layers (model view) from d3's ten colours, so head 11 looked
# like head 1. Enough distinct colours for BERT-Large: 16 heads, 24 layers (d3's ten, then the dark
# and light pairs of its category-20 scales that none of the ten is close to).
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3",
           "#b5cf6b", "#e7ba52", "#ad494a", "#de9ed6", "#9c9ede", "#cedb9c", "#e7969c", "#6b6ecf"]
_COLOUR_PATCHES = {
    "head": [(re.compile(re.escape("d3.scaleOrdinal(d3.schemeCategory10)")),
              "d3.scaleOrdinal(" + json.dumps(COLOURS) + ")", 1)],
    "model": [(re.compile(re.escape("const LAYER_COLORS = d3.schemeCategory10;")),
               "const LAYER_COLORS = " + json.dumps(COLOURS) + ";", 1),
              (re.compile(re.escape("LAYER_COLORS[config.layers[layer] % 10]")),
               "LAYER_COLORS[config.layers[layer] % LAYER_COLORS.length]", 1)],
}


def _distinct_colours(body: str, view: str) -> str:
    """bertviz's page with a colour of its own for each of up to 16 heads and 24 layers (``COLOURS``);
    a bertviz whose code differs from the one these patches were written for keeps its ten."""
    patched = body
    for pattern, replacement, count in _COLOUR_PATCHES[view]:
        patched, n = pattern.subn(lambda m: replacement, patched)
        if n != count:
            return body
    return patched


def _draw_visible_lines_only(body: str, view: str) -> tuple[str, bool]:
    """bertviz's page drawing only the lines whose weight can be seen (``MIN_VISIBLE_WEIGHT``).
    Returns the page and whether it could be changed; a bertviz whose code differs from the one
    these patches were written for is left drawing every line."""
    patched = body
    for pattern, replacement, count in _LINE_PATCHES[view]:
        patched, n = pattern.subn(replacement, patched)
        if n != count:
            return body, False
    return _VISIBLE_LINES + patched, True


WEIGHT_STEPS = 255  # a weight is kept as round(weight × 255) / 255: one step of an 8-bit opacity
BYTES_PER_WEIGHT = 4 / 3  # one byte a weight, in base64


MODEL_VIEW_WEIGHTS = 400_000  # the model view draws every layer at once: a line per weight that can be seen


def layers_within_budget(result: AttentionResult, max_bytes: int = 4_000_000, view: str = "head") -> list[int]:
    """The layers ``render`` draws by default, spread over the model (all of them for a short input).
    The head view draws one layer at a time, so it carries as many as fit ``max_bytes`` (a byte a
    weight, in base64); the model view draws all it carries at once, a line for each weight that
    can be seen, so it carries at most ``MODEL_VIEW_WEIGHTS`` weights (two layers of BERT-Base at 128
    tokens: a random model's near-uniform weights, 1/128 each, are all seen)."""
    L, A, T, _ = result.attentions.shape
    per_layer = A * T * T
    budget = max_bytes / BYTES_PER_WEIGHT if view == "head" else MODEL_VIEW_WEIGHTS
    keep = max(1, min(L, int(budget // max(per_layer, 1))))
    return list(range(L)) if keep >= L else sorted(set(np.linspace(0, L - 1, keep).round().astype(int).tolist()))


# The weights of the layers drawn, defined before bertviz's own script: ``__beAttention(r0, r1, c0, c1)``
# stands where bertviz's data had each filter's ``attn`` (rows r0..r1-1 attend to columns c0..c1-1:
# all tokens, or a sentence's block); its layers are decoded the first time bertviz reads them.
_COMPACT_WEIGHTS = """<script>
var __beWeights = %s;
function __beLayer(l) {
  var w = __beWeights, cache = w.cache || (w.cache = []);
  if (!cache[l]) {
    var bytes = atob(w.layers[l]), n = w.tokens, k = 0, layer = [];
    for (var h = 0; h < w.heads; h++) {
      var head = [];
      for (var i = 0; i < n; i++) {
        var row = new Array(n);
        for (var j = 0; j < n; j++) { row[j] = bytes.charCodeAt(k++) / %d; }
        head.push(row);
      }
      layer.push(head);
    }
    cache[l] = layer;
  }
  return cache[l];
}
function __beAttention(r0, r1, c0, c1) {
  var layers = [], whole = r0 === 0 && c0 === 0 && r1 === __beWeights.tokens && c1 === __beWeights.tokens;
  __beWeights.layers.forEach(function (_, l) {
    var block = null;
    Object.defineProperty(layers, l, {enumerable: true, get: function () {
      if (whole) { return __beLayer(l); }
      return block || (block = __beLayer(l).map(function (head) {
        return head.slice(r0, r1).map(function (row) { return row.slice(c0, c1); });
      }));
    }});
  });
  return layers;
}
</script>
"""

# bertviz's filters, in the order its Python writes them: all tokens, then (for a pair) A→A, B→B, A→B, B→A.
_ATTN = re.compile(r'"attn": \[[\[\]0-9.,eE+\- ]*\]')


def _blocks(num_tokens: int, sentence_b_start: int | None) -> list[tuple[int, int, int, int]]:
    """(first row, row end, first column, column end) of each of bertviz's filters."""
    t, b = num_tokens, sentence_b_start
    whole = [(0, t, 0, t)]
    return whole if b is None else whole + [(0, b, 0, b), (b, t, b, t), (0, b, b, t), (b, t, 0, b)]


def _compact_weights(body: str, drawn: np.ndarray, sentence_b_start: int | None, view: str) -> tuple[str, bool]:
    """bertviz's page with the weights of ``drawn`` ([layer, head, query, key]) as bytes in base64,
    in place of the placeholders bertviz was given (and, in the model view, whose layout divides its
    width by them, the number of heads). Returns the page and whether it could be changed (a bertviz
    that writes its data differently is left as it is, and ``render`` gives it the data)."""
    start = body.find(_PARAMS)
    if start < 0:
        return body, False
    end = body.find("\n", start)
    end = len(body) if end < 0 else end
    line, blocks = body[start:end], _blocks(drawn.shape[-1], sentence_b_start)
    if len(_ATTN.findall(line)) != len(blocks):
        return body, False
    calls = iter(f'"attn": __beAttention({r0}, {r1}, {c0}, {c1})' for r0, r1, c0, c1 in blocks)
    line = _ATTN.sub(lambda m: next(calls), line)
    line, n = re.subn(r'"total_heads": [0-9]+', f'"total_heads": {drawn.shape[1]}', line)
    if n != (1 if view == "model" else 0):
        return body, False
    steps = np.rint(np.clip(drawn, 0.0, 1.0) * WEIGHT_STEPS).astype(np.uint8)
    weights = {"heads": int(drawn.shape[1]), "tokens": int(drawn.shape[2]),
               "layers": [base64.b64encode(layer.tobytes()).decode("ascii") for layer in steps]}
    return _COMPACT_WEIGHTS % (json.dumps(weights), WEIGHT_STEPS) + body[:start] + line + body[end:], True


def _bertviz_page(view: str, attention: list, result: AttentionResult, layers: list[int], dark: bool) -> str:
    """bertviz's own page of ``view`` for ``attention`` (one [1, A, T, T] tensor per layer)."""
    kwargs = dict(attention=attention, tokens=list(result.tokens), sentence_b_start=result.sentence_b_start,
                  include_layers=list(layers), html_action="return")
    if view == "head":
        return head_view(**kwargs).data
    return model_view(display_mode="dark" if dark else "light", **kwargs).data


def render(result: AttentionResult, view: str = "head", layers: list[int] | None = None,
           max_bytes: int = 4_000_000, dark: bool = False,
           min_scale: float = MODEL_VIEW_MIN_SCALE) -> BertvizHtml:
    """A bertviz ``view`` ("head" or "model") of ``result`` as a self-contained HTML page.

    ``layers`` picks the layers to draw (default: all that fit in ``max_bytes``). In the head
    view of a sentence pair bertviz adds a filter: All, A→A, B→B, A→B, B→A. The model view is
    drawn at ``min_scale`` of bertviz's size or larger (``fit_model_view``).
    """
    att = result.attentions
    if layers is None:
        layers = layers_within_budget(result, max_bytes, view)
    bad = [layer for layer in layers if not 0 <= layer < att.shape[0]]
    if bad or not layers:
        raise ValueError(f"layers must be in 0..{att.shape[0] - 1}, got {layers}")
    if view not in ("head", "model"):
        raise ValueError(f"view must be 'head' or 'model', not {view!r}")
    # bertviz is handed a placeholder of one layer and one head (it checks the tokens against its
    # size): writing millions of weights as JSON took it seconds. _compact_weights puts them in, a
    # byte each, and the labels say which layers and heads they are.
    placeholder = [torch.zeros(1, 1, att.shape[2], att.shape[3])]
    labels = {"include_layers": [layer + 1 for layer in layers], "include_heads": list(range(1, att.shape[1] + 1))}
    body, relabelled = _number_from_one(_bertviz_page(view, placeholder, result, [0], dark), view, labels)
    body, compact = _compact_weights(body, att[layers], result.sentence_b_start, view) if relabelled else (body, False)
    if not compact:  # a bertviz whose page differs: its own JSON, in the same steps
        steps = torch.from_numpy(np.rint(att.astype(np.float64) * WEIGHT_STEPS) / WEIGHT_STEPS)
        body, relabelled = _number_from_one(_bertviz_page(view, [steps[layer].unsqueeze(0) for layer in
                                                                 range(att.shape[0])], result, layers, dark), view)
    body, _ = _draw_visible_lines_only(body, view)
    body = _distinct_colours(body, view)
    body = _CDN_SCRIPT.sub("", body)
    body = _REQUIRE_CONFIG.sub("", body, count=1)  # the CDN paths: nothing is fetched
    # The tokens are the user's text inside bertviz's one <script>: "</" must not close it early.
    # Greedy on purpose: a token "</script>" must not be taken for the script's real end.
    body = re.sub(r"(<script type=\"text/javascript\">)(.*)(</script>)",
                  lambda m: m.group(1) + m.group(2).replace("</", "<\\/") + m.group(3), body, flags=re.S)
    if view == "model":
        fit = fit_model_view(len(layers), att.shape[1], len(result.tokens), pair=result.sentence_b_start is not None,
                             min_scale=min_scale)
        body += _SCALE_TO_FIT.format(width=fit.width)
        height = fit.height
    else:
        fit, height = None, head_view_height(len(result.tokens))
    body += _SAVE_SVG.replace("{view}", view)
    background = "#111" if dark and view == "model" else "#fff"
    html = (f"<!DOCTYPE html><html><head><meta charset='utf-8'>{javascript_libraries()}</head>"
            f"<body style='margin:0;background:{background}'>{body}</body></html>")
    return BertvizHtml(html, list(layers), WEIGHT_STEPS, len(html.encode("utf-8")), height=height, fit=fit,
                       numbered_from=1 if relabelled else 0)
