"""Choices that hold from one page to the next.

Streamlit forgets a widget's value when the page that drew it is left: pick a model on Home,
open the Masked word probe from the menu, and its sidebar would start from the default again.
A kept widget copies its value under a second key (``be_kept_<key>``) after every run, which no
widget owns and Streamlit therefore never clears; the next page that draws a widget with the same
key starts from that copy. A user's choice holds until the user changes it.

What is kept across pages (the same key on every page that shows it):

- the model picked in the sidebar (and a checkpoint picked inside an ablation, a typed folder, a model of
  the paper picked in the gallery or a typed hub id);
- the sentence pair studied on Tokens and embeddings, Attention and Inside one layer
  (``be_sentence_a``/``be_sentence_b``): three views of one input;
- the Masked-word probe's sentence (``mlm_text``) and the Next-sentence probe's pair
  (``nsp_a``/``nsp_b``): kept for their own pages, and offered on Attributions as one click
  ("Explain the Masked-word probe's sentence"), which then fills its inputs;
- from a dev example on After fine-tuning, one click fills Attributions (the run's classifier and the
  example) or Attention (the example as sentences A and B, the run's fine-tuned model in the sidebar,
  which then lists it).

Everything else is per page: a layer, head or token means another thing on another page (and
models differ in depth); the probes and Attributions start from examples chosen for what each
shows, and a sentence studied on the Attention page usually has no [MASK] to fill; Attributions
keeps its own inputs until the user takes the probe's with its button. A page's own choices hold
when the user leaves it and comes back (Streamlit's ``persist_state="session"``; :func:`kept_tabs`
for the open tab, :func:`kept_table` for an edited table); a kept value that no longer fits (a layer of a
deeper model) gives the default (:func:`forget_outside` for sliders and number boxes).

A reload of the browser tab is a new session, which none of the above survives. Minutes of choices are also kept
in the page's address (Streamlit's ``bind="query-params"``): the model picked in the sidebar, the Ablation studio's
grid, and Pre-train's and Fine-tune's settings (:func:`setting`). A reload keeps the address, and the new session
reads them back, each value checked against its box's options and bounds (what fits none is ignored).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import pandas as pd
import streamlit as st

SHADOW = "be_kept_"
FOLLOWED = "be_followed_"  # the default a kept box that follows another choice was last given (follow)
WANTED = "be_wanted_"  # a layer or head chosen on a larger model, moved down on a smaller one (fit_kept)
# The sentence pair studied on Tokens and embeddings, Attention and Inside one layer.
SENTENCE_A, SENTENCE_B = "be_sentence_a", "be_sentence_b"
SENTENCE_A_DEFAULT, SENTENCE_B_DEFAULT = "the cat sat on the mat because it was warm .", "then it fell asleep in the sun ."


def kept_widget(widget: Callable, label: str, key: str, default: Any = None, *,
                valid: Callable[[Any], bool] | None = None, max_chars: int | None = None, **kwargs) -> Any:
    """Draw ``widget(label, key=key, **kwargs)`` starting from the value kept under ``key`` (or
    ``default`` the first time) and keep what it returns. ``valid`` refuses a kept value that no
    longer fits (a model whose run was deleted): the widget then starts from ``default``. A text box's
    ``max_chars`` bounds what the page reads, as :func:`text_box` does."""
    shadow = SHADOW + key
    value = st.session_state[key] if key in st.session_state else st.session_state.get(shadow, default)
    if valid is not None and not valid(value):
        value = default
    if value is not None:
        st.session_state[key] = value
    value = widget(label, key=key, **kwargs)
    st.session_state[shadow] = value
    return value if max_chars is None else _within(label, value, max_chars)


# The parameter that gives each kind of box its first value (a box not named here takes ``value=``).
FIRST_VALUE = {"radio": "index", "selectbox": "index", "multiselect": "default"}


def setting(widget: Callable, label: str, key: str, default: Any = None, *,
            valid: Callable[[Any], bool] | None = None, **kwargs) -> Any:
    """A run's setting (Pre-train's, Fine-tune's: minutes of choices), or a choice that a reload should keep (a
    pre-training inside an ablation, in the sidebar): a kept box, as :func:`kept_widget` draws one, whose value is
    also in the page's address (Streamlit's ``bind="query-params"``). A reload is a new session; it
    reads the settings back from the address, each value checked against its box's options and bounds.

    Streamlit leaves out of the address a value equal to the box's own first value, so the page's default is given
    as that first value (``value=``, ``index=``, ``default=``): given only in the session's state, the box's first
    value was its first option or its least number, and a choice equal to it (1 step, the first corpus) came back
    from a reload as the page's default. The box keeps its value for the session when the page is left
    (``persist_state``), so nothing is set in the state where the user's value already is."""
    if key in st.session_state and valid is not None and not valid(st.session_state[key]):
        st.session_state[key] = default
    name = getattr(widget, "__name__", "")
    first = FIRST_VALUE.get(name, "value")
    if default is None:
        pass  # the box's own first value (no option chosen, an empty box)
    elif first == "index":
        options = list(kwargs.get("options", []))
        if default in options:
            kwargs["index"] = options.index(default)
    elif isinstance(kwargs.get("min_value"), float):  # a float box given a whole default: Streamlit refuses mixed
        kwargs[first] = float(default)
    else:
        kwargs[first] = default
    bind = number_binding(key) if name == "number_input" else "query-params"
    value = widget(label, key=key, persist_state="session", bind=bind, **kwargs)
    st.session_state[SHADOW + key] = value
    return value


def text_box(widget: Callable, label: str, value: str = "", *, max_chars: int, **kwargs) -> str:
    """``widget(label, value, **kwargs)`` (``st.text_input``, ``st.text_area`` or a column's), of which the
    page reads at most ``max_chars`` characters.

    Streamlit's own ``max_chars`` is the browser's: a longer paste is dropped without a word, the box
    stays empty and the page answers as if nothing were typed. Here the box takes the whole paste, the
    page reads its first ``max_chars`` characters and says so in one sentence; the text stays in the box.
    It is a bound of the server's too (a client that is not the browser sends what it likes)."""
    return _within(label, widget(label, value, **kwargs), max_chars)


def _within(label: str, text: Any, max_chars: int) -> Any:
    if isinstance(text, str) and len(text) > max_chars:
        # A [MASK] cut off would leave the probe saying the text has none, under this warning.
        # (said of a box that reads a [MASK]: "Word to explain ... Every [MASK] in it lies past them" meant nothing)
        past = " Every [MASK] in it lies past them." if "[MASK]" in label and "[MASK]" in text and \
            "[MASK]" not in text[:max_chars] else ""
        st.warning(f"{label.split(' (')[0]} holds {len(text):,} characters; this box reads at most {max_chars:,}, so "
                   f"the page reads only its first {max_chars:,}.{past} Shorten it to choose what is read.")
        return text[:max_chars]
    return text


def kept_tabs(labels: list[str], key: str, **kwargs):
    """``st.tabs(labels, key=key, **kwargs)`` that opens on the tab last open when the page was left
    (widgets keep their values with ``persist_state="session"``; tabs have no such setting)."""
    kept = st.session_state.get(SHADOW + key)
    if key not in st.session_state and kept in labels:  # coming back: set as the page would (a `default=` that
        st.session_state[key] = kept                     # changed from run to run made the tabs a new widget)
    tabs = st.tabs(labels, key=key, **kwargs)
    st.session_state[SHADOW + key] = st.session_state.get(key)
    return tabs


def kept_table(data: Any, key: str, **kwargs) -> Any:
    """``st.data_editor(data, key=key, **kwargs)`` whose edits hold when the user leaves the page and comes back.
    The editor has no ``persist_state``, and it keeps its edits as changes to the table it was given (rows edited,
    added, deleted): the table the user made is kept under a second key and is the table given on the next visit
    (given while the editor is drawn, it would take the edits a second time)."""
    given, made = SHADOW + key + " given", SHADOW + key
    if key not in st.session_state:  # a visit's first run: the editor starts from the user's last table
        last = st.session_state.get(made, data)
        # numbered 0, 1, 2, ... again: a table with a row deleted kept its gaps (0, 1, 2, 4, 5), and the editor drew
        # them as an editable column, hide_index or not, that a row added there had to be given
        st.session_state[given] = last.reset_index(drop=True) if isinstance(last, pd.DataFrame) else last
    table = st.data_editor(st.session_state.get(given, data), key=key, **kwargs)
    st.session_state[made] = table
    return table


def forget_outside(key: str, low: float, high: float) -> None:
    """Forget the kept value of the slider or number box ``key`` when it lies outside ``low``..``high`` (a
    layer of a deeper model, more positions than this model has): Streamlit raises on such a kept value
    where a select box falls back to its default."""
    value = st.session_state.get(key)
    if isinstance(value, (int, float)) and not low <= value <= high:
        del st.session_state[key]


def fit_kept(key: str, high: int) -> int | None:
    """Bring the kept value of the select box ``key`` (a layer's or a head's index, from 0) down to ``high`` where
    it is past it: the layer 6 chosen for a 6-layer model is this 4-layer model's last, not its first (a select
    box falls back to its first option without a word). The value it was, for the page to say so; else None.
    The value chosen comes back on a model that has it, unless the user chose another meanwhile (layer 6 and head
    7, a visit to a 4 x 4 model, and back: 4 and 4 stayed). (A select box drawn without ``index``: one drawn with
    it would warn of a value set twice.)"""
    value, wanted = st.session_state.get(key), st.session_state.get(WANTED + key)
    if wanted is not None:
        chosen, moved_to = wanted
        if value != moved_to:  # the user chose again on the smaller model: that choice is theirs now
            del st.session_state[WANTED + key]
        elif chosen <= high:
            st.session_state[key] = chosen
            del st.session_state[WANTED + key]
            return None
        elif value != high:  # a model between the two: its last, not the smaller one's (6, then 4 and 2 layers,
            st.session_state[key], st.session_state[WANTED + key] = high, (chosen, high)  # then 5: it stayed at 2)
            return chosen
    if isinstance(value, int) and not isinstance(value, bool) and value > high:
        st.session_state[key], st.session_state[WANTED + key] = high, (value, high)
        return value
    return None


def past_the_model(was: tuple[int | None, int | None], layers: int, heads: int) -> None:
    """One sentence where :func:`fit_kept` moved a layer or a head chosen for a larger model (``was``: the
    indexes it had, or None) to this one's last."""
    parts = [f"layer {was[0] + 1}" if was[0] is not None else "", f"head {was[1] + 1}" if was[1] is not None else ""]
    if any(parts):
        st.caption(f"This model has {layers} layers of {heads} heads: the {' and '.join(p for p in parts if p)} chosen "
                   "before, on a larger model, became its last.")


def past_the_layers(was: int | None, layers: int) -> None:
    """:func:`past_the_model` for a page whose layers are numbered as the user reads them (1..L, or 0 for the
    embeddings): ``was`` the layer :func:`fit_kept` moved, or None."""
    if was is not None:
        st.caption(f"This model has {layers} layers: the layer {was} chosen before, on a deeper model, became its "
                   "last.")


def opening_index(key: str, index: int) -> dict:
    """``index=`` for a select box whose kept value :func:`fit_kept` may move, given only while nothing is kept:
    a default beside a value the page set makes Streamlit warn of a value set twice."""
    return {} if key in st.session_state else {"index": index}


def follow(key: str, default: Any) -> bool:
    """Start the box ``key`` (kept in the address: ``kept_widget(..., address=True)``) from ``default``, a default
    that follows another choice (the paper's batch for the task chosen), unless the user set the box: a value still
    equal to the default it was last given moves to the new one, a value the user gave holds. True where the box
    holds the user's own value (after a reload, the number the address gives it)."""
    given = st.session_state.get(FOLLOWED + key, default)
    value = st.session_state[key] if key in st.session_state else _address_number(key)
    own = value is not None and value != given
    if not own and key in st.session_state and st.session_state[key] != default:
        st.session_state[key] = default
    st.session_state[FOLLOWED + key] = default
    return own


def _address_number(key: str) -> float | None:
    """The finite number the page's address gives the box ``key``, or None."""
    try:
        number = float(st.query_params.get(key, ""))
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def remembered(key: str, default: Any = None) -> Any:
    """The value kept under ``key`` (what the user last chose on any page), or ``default``."""
    return st.session_state.get(key, st.session_state.get(SHADOW + key, default))



def settings_key(settings: dict) -> str:
    """A short key of these settings, for a widget that belongs to them alone (a long run's confirmation: a tick
    given for 40 minutes held when the steps were raised to 46 days)."""
    import hashlib
    import json

    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def number_binding(key: str) -> str | None:
    """``bind=`` for a whole-number box kept in the page's address: ``"query-params"``, unless the address
    this session opened on gives the box something that is no finite number. Streamlit reads "inf", "1e400" or
    a 400-digit number as infinity and fails to make an int of it (the Ablation studio was a traceback for
    ``?abl_steps=inf``); such a value is taken out of the address, and the box is kept for the session only."""
    unbound = f"be_unbound_{key}"
    if unbound not in st.session_state:
        given = st.query_params.get_all(key)
        st.session_state[unbound] = bool(given) and not all(_finite(v) for v in given)
        if st.session_state[unbound]:
            del st.query_params[key]
    return None if st.session_state[unbound] else "query-params"


def _finite(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except (ValueError, OverflowError):
        return False
