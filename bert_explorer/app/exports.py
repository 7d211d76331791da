"""Download buttons for every view: plots (PNG from plotly's toolbar, standalone HTML here),
tables (CSV), bertviz views (SVG from a button inside the drawing, standalone HTML here), and
one "download this page's results" zip per exploration page (``app/result_bundle.py``).

Downloads are built only when clicked (Streamlit runs a callable ``data`` then), so a page that
offers ten of them costs nothing until one is used.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from .result_bundle import ResultBundle, figure_html, safe_name, table_csv, titled_html
from .state import without_host_paths

# plotly's toolbar: the camera icon saves a PNG at twice the screen resolution.
PLOT_CONFIG = {"displaylogo": False,
               "toImageButtonOptions": {"format": "png", "scale": 2}}


def _button(container, label: str, data, file_name: str, mime: str, key: str, help: str | None = None) -> None:
    container.download_button(label, data=data, file_name=file_name, mime=mime, key=key, help=help,
                              on_click="ignore", type="tertiary", icon=":material/download:")


def figure(fig, key: str, name: str | None = None, bundle: ResultBundle | None = None, container=None,
           on_click=None, drawn: bool = True) -> None:
    """A plotly chart with its PNG (toolbar) and HTML (button) downloads; added to ``bundle``.
    ``name`` (for the files) defaults to the figure's title. ``on_click`` (a callback) runs when a
    point is clicked; it reads the selection from ``st.session_state[key]``.

    ``drawn=False`` (a chart in a tab that is not open) only adds it to ``bundle``: the browser lays
    out every chart it is sent, hidden tabs included, and a token-by-token heatmap's labels cost it
    about a second on two cores."""
    where = container or st
    name = name or fig.layout.title.text or key
    if not drawn:
        if bundle is not None:
            bundle.add_figure(name, fig)
        return
    config = dict(PLOT_CONFIG, toImageButtonOptions=dict(PLOT_CONFIG["toImageButtonOptions"],
                                                         filename=safe_name(name)))
    clicks = {"on_select": on_click, "selection_mode": "points"} if on_click else {}
    where.plotly_chart(fig, key=key, config=config, **clicks)
    shown = shown_bundle(bundle) if bundle is not None else None
    _button(where, "HTML", lambda: figure_html(fig, name, shown and shown.model, shown and shown.inputs),
            f"{safe_name(name)}.html", "text/html",
            f"{key}_html", help="This plot as a standalone page that works offline (PNG: the camera icon "
                               "in the plot's toolbar).")
    if bundle is not None:
        bundle.add_figure(name, fig)


MISSING = "—"  # an empty cell as drawn: Streamlit's grid draws a missing value as "None", whatever its format


def shown_cells(df, formats: dict[str, str]):
    """``df`` as the grid draws it, and its column_config: the columns of ``formats`` ({"paper": "{:.1f}"})
    as right-aligned text in that format, and every missing value, in any column, as a dash (a student read
    the grid's grey "None" as a word of Python's). The CSV keeps the numbers and its empty cells."""
    out = df.copy()
    for column, fmt in formats.items():
        out[column] = pd.Series([MISSING if pd.isna(v) else fmt.format(v) for v in df[column]], index=out.index,
                                dtype=object)
    for column in out.columns:
        if column not in formats and not pd.api.types.is_numeric_dtype(out[column]):
            out[column] = pd.Series([MISSING if pd.isna(v) else v for v in out[column]], index=out.index, dtype=object)
    config = {c: st.column_config.TextColumn(alignment="right") for c in formats}
    return out, config


def table(df, key: str, name: str, bundle: ResultBundle | None = None, container=None, static: bool = False,
          numbers: dict[str, str] | None = None, **kwargs) -> None:
    """A dataframe with a CSV download; added to ``bundle``. ``static`` draws it as a plain table whose
    cells wrap, for short tables of long texts (sentences) that an interactive grid would cut. ``numbers``:
    the grid draws these columns in these formats and missing values as a dash (``shown_cells``)."""
    where = container or st
    if static:
        styled = df.style.format(kwargs.get("formats", {}))
        where.table(styled.hide(axis="index") if kwargs.get("hide_index") else styled)
    elif numbers is not None:
        shown, config = shown_cells(df, numbers)
        where.dataframe(shown, key=key, column_config={**config, **kwargs.pop("column_config", {})}, **kwargs)
    else:
        where.dataframe(df, key=key, **kwargs)
    _button(where, "CSV", lambda: table_csv(df), f"{safe_name(name)}.csv", "text/csv", f"{key}_csv")
    if bundle is not None:
        bundle.add_table(name, df)


def view(html: str, key: str, name: str, bundle: ResultBundle | None = None, container=None) -> None:
    """The standalone-HTML download of a bertviz view (its SVG button is inside the drawing)."""
    shown = shown_bundle(bundle) if bundle is not None else None
    _button(container or st, "Standalone HTML", lambda: titled_html(html, name, shown and shown.model,
                                                                     shown and shown.inputs),
            f"{safe_name(name)}.html", "text/html", f"{key}_html",
            help="The drawing as one HTML file that works offline (d3 and jQuery inside). The *Save SVG* "
                 "button in the drawing saves the picture itself, as you have set it up.")
    if bundle is not None:
        bundle.add_view(name, html)


def shown_bundle(bundle: ResultBundle) -> ResultBundle:
    """The bundle as this server may hand it out: in classroom mode its model's name and inputs name
    no folder of the host (``state.without_host_paths``); the results themselves are the same."""
    return replace(bundle, model=without_host_paths(bundle.model), inputs=without_host_paths(bundle.inputs))


def bundle_button(bundle: ResultBundle, key: str, container=None) -> None:
    """One zip of everything the page showed: data, views, the input and the model's name."""
    (container or st).download_button(
        "Download this page's results (.zip)", data=lambda: shown_bundle(bundle).zip_bytes(), key=key,
        on_click="ignore", file_name=f"{safe_name(bundle.page)}-{safe_name(shown_bundle(bundle).model)}.zip",
        mime="application/zip", icon=":material/folder_zip:",
        help="Tables as CSV, arrays as NPZ, the plots and bertviz views as offline HTML, and input.json "
             "with the input and the model's name, so the figures can be made again.")
