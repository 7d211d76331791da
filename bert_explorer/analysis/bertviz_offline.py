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

The attention data grows as layers × heads × T²; numbers are rounded to 3 decimals (the
drawing cannot show more) and the caller can keep only some layers (``layers``) — the page
says so when it does.
"""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from .attention import AttentionResult

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


@dataclass
class BertvizHtml:
    html: str                 # a whole HTML document, no external request
    layers: list[int]         # the (0-based) layers included
    rounded_to: int           # decimals kept in the attention numbers
    size_bytes: int


def _layers_within_budget(att: np.ndarray, max_bytes: int, copies: int) -> list[int]:
    """As many layers as fit ``max_bytes`` of JSON (≈ 6 bytes a number, ``copies`` times: the
    head view stores the sentence-pair blocks a second time)."""
    L, A, T, _ = att.shape
    per_layer = A * T * T * 6 * copies
    keep = max(1, min(L, max_bytes // max(per_layer, 1)))
    return list(range(L)) if keep >= L else sorted(set(np.linspace(0, L - 1, keep).round().astype(int).tolist()))


def render(result: AttentionResult, view: str = "head", layers: list[int] | None = None,
           max_bytes: int = 4_000_000, decimals: int = 3, dark: bool = False) -> BertvizHtml:
    """A bertviz ``view`` ("head" or "model") of ``result`` as a self-contained HTML page.

    ``layers`` picks the layers to draw (default: all that fit in ``max_bytes``). In the head
    view of a sentence pair bertviz adds a filter: All, A→A, B→B, A→B, B→A.
    """
    from bertviz import head_view, model_view

    att = result.attentions
    if layers is None:
        layers = _layers_within_budget(att, max_bytes, copies=2 if result.sentence_b_start else 1)
    bad = [layer for layer in layers if not 0 <= layer < att.shape[0]]
    if bad or not layers:
        raise ValueError(f"layers must be in 0..{att.shape[0] - 1}, got {layers}")
    # float64 before rounding so that 0.123 is written as 0.123, not 0.12300000339746475.
    rounded = torch.from_numpy(np.round(att.astype(np.float64), decimals))
    attention = [rounded[layer].unsqueeze(0) for layer in range(att.shape[0])]  # L of [1, A, T, T]
    kwargs = dict(attention=attention, tokens=list(result.tokens), sentence_b_start=result.sentence_b_start,
                  include_layers=list(layers), html_action="return")
    if view == "head":
        body = head_view(**kwargs).data
    elif view == "model":
        body = model_view(display_mode="dark" if dark else "light", **kwargs).data
    else:
        raise ValueError(f"view must be 'head' or 'model', not {view!r}")
    body = _CDN_SCRIPT.sub("", body)
    body = _REQUIRE_CONFIG.sub("", body, count=1)  # the CDN paths: nothing is fetched
    # The tokens are the user's text inside bertviz's one <script>: "</" must not close it early.
    # Greedy on purpose: a token "</script>" must not be taken for the script's real end.
    body = re.sub(r"(<script type=\"text/javascript\">)(.*)(</script>)",
                  lambda m: m.group(1) + m.group(2).replace("</", "<\\/") + m.group(3), body, flags=re.S)
    background = "#111" if dark and view == "model" else "#fff"
    html = (f"<!DOCTYPE html><html><head><meta charset='utf-8'>{javascript_libraries()}</head>"
            f"<body style='margin:0;background:{background}'>{body}</body></html>")
    return BertvizHtml(html, list(layers), decimals, len(html.encode("utf-8")))
