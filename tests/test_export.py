"""Saving views: the results zip reads back with standard tools, plots and views open offline."""
import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.express as px
from streamlit.testing.v1 import AppTest

from bert_explorer.app.result_bundle import ResultBundle, figure_html, figures_html

PAGES = Path(__file__).resolve().parent.parent / "pages"
EXTERNAL = re.compile(r"""<(script|link)[^>]+(src|href)=["']?(https?:)?//""", re.I)


def test_bundle_zip_reads_back_with_pandas_numpy_and_json():
    df = pd.DataFrame({"token": ["[CLS]", "bank", "[SEP]"], "score": [0.5, -1.25, 3.0]})
    att = np.random.default_rng(0).random((2, 3, 4, 4)).astype(np.float32)
    b = ResultBundle("Attention", "minilm-mlm-nsp", {"text": "the bank ."})
    b.add_table("scores per token", df)
    b.add_array("attentions", att, "float16")
    b.add_array("ids", np.arange(5))
    b.add_figure("a plot", px.bar(df, x="token", y="score"))
    b.add_view("bertviz head view", "<!DOCTYPE html><html><body><div id='vis'></div></body></html>")
    b.add_data("tokens", ["[CLS]", "bank", "[SEP]"])
    z = zipfile.ZipFile(io.BytesIO(b.zip_bytes()))
    names = set(z.namelist())
    assert {"input.json", "README.txt", "tables/scores-per-token.csv", "arrays.npz", "figures.html",
            "views/bertviz-head-view.html", "data.json"} <= names
    meta = json.loads(z.read("input.json"))
    assert meta["model"] == "minilm-mlm-nsp" and meta["inputs"] == {"text": "the bank ."}
    pd.testing.assert_frame_equal(pd.read_csv(z.open("tables/scores-per-token.csv")), df)
    arrays = np.load(io.BytesIO(z.read("arrays.npz")))
    assert arrays["attentions"].dtype == np.float16 and np.allclose(arrays["attentions"], att, atol=1e-3)
    assert arrays["ids"].tolist() == [0, 1, 2, 3, 4]
    assert json.loads(z.read("data.json"))["tokens"][1] == "bank"


def test_plots_save_as_standalone_offline_html():
    fig = px.line(x=[0, 1, 2], y=[1.0, 0.5, 0.25], title="cosine by layer")
    html = figure_html(fig)
    assert not EXTERNAL.search(html)                      # nothing fetched from a CDN
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js is inside the file
    two = figures_html({"one": fig, "two": fig})
    assert two.count("Plotly.newPlot") == 2 and len(two) < len(html) * 1.2  # plotly.js inlined once


def test_attention_page_offers_every_download_and_handles_512_tokens():
    at = AppTest.from_file(str(PAGES / "2_Attention.py"), default_timeout=300).run()
    assert not at.exception
    keys = {b.proto.id for b in at.get("download_button")}
    for tab in ("Heatmap", "Head behaviours", "Rollout and flow"):  # a tab's plots are sent while it is open
        at.session_state["att_view"] = tab
        keys |= {b.proto.id for b in at.run().get("download_button")}
    assert len(keys) >= 7  # a bertviz view, plots, tables, the page's bundle
    at.session_state["att_view"] = "Head view"
    at.slider(key="att_max_tokens").set_value(512).run()
    at.text_area(key="be_sentence_a").set_value(" ".join(["the river bank flooded the old mill ."] * 40))
    at.text_area(key="be_sentence_b").set_value(" ".join(["prices rose again at the bank ."] * 40)).run()
    assert not at.exception
    assert any("bertviz draws tokens 0–127" in c.value for c in at.caption)
    at.session_state["att_view"] = "Heatmap"
    at.run()
    heatmap = json.loads(at.get("plotly_chart")[0].proto.spec)
    z = heatmap["data"][0]["z"]
    assert len(z) == 512 or (isinstance(z, dict) and z.get("shape") in ("512, 512", [512, 512]))


def test_saved_html_has_a_title_and_states_model_and_input():
    """A plot or view saved on its own says what it is, from which model, for which input."""
    from html.parser import HTMLParser

    class Read(HTMLParser):
        def __init__(self):
            super().__init__()
            self.title, self.text, self._in = "", [], None

        def handle_starttag(self, tag, attrs):
            self._in = tag

        def handle_data(self, data):
            if self._in == "title":
                self.title += data
            elif self._in not in ("script", "style"):
                self.text.append(data)

    def read(page):
        r = Read()
        r.feed(page)
        return r.title, " ".join(" ".join(r.text).split())

    fig = px.line(x=[0, 1, 2], y=[1.0, 0.5, 0.25], title="cosine by layer")
    inputs = {"text": "the bank <raised> rates .", "text_b": None}
    title, text = read(figure_html(fig, "cosine by layer", "minilm-mlm-nsp", inputs))
    assert title == "cosine by layer"
    assert "Model: minilm-mlm-nsp" in text and "text: the bank <raised> rates ." in text
    assert read(figure_html(fig))[0] == "cosine by layer"  # the figure's own title when none is given
    b = ResultBundle("Attention", "minilm-mlm-nsp", inputs)
    b.add_figure("a plot", fig)
    b.add_view("bertviz head view", "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><div id='vis'>"
                                    "</div></body></html>")
    z = zipfile.ZipFile(io.BytesIO(b.zip_bytes()))
    for name in ("figures.html", "views/bertviz-head-view.html"):
        title, text = read(z.read(name).decode())
        assert title and "Model: minilm-mlm-nsp" in text and "the bank <raised> rates ." in text, name


def test_a_view_not_drawn_is_rendered_when_the_zip_is_made():
    """The Attention page draws only the chosen bertviz view; the other goes into the zip as a
    function, called only when the zip is made (and left out where it cannot be drawn)."""
    calls = []
    b = ResultBundle("Attention", "m", {})
    b.add_view("bertviz model view", lambda: calls.append(1) or "<html><body>model</body></html>")
    b.add_view("bertviz head view", lambda: None)
    assert calls == []
    z = zipfile.ZipFile(io.BytesIO(b.zip_bytes()))
    assert calls == [1] and "model" in z.read("views/bertviz-model-view.html").decode()
    assert "views/bertviz-head-view.html" not in z.namelist()


def test_attention_page_draws_only_the_chosen_bertviz_view():
    at = AppTest.from_file(str(PAGES / "2_Attention.py"), default_timeout=300).run()
    assert [("renderThumbnail" in f.proto.srcdoc) for f in at.get("iframe")] == [False]  # the head view alone
    at.session_state["att_view"] = "Model view"
    at.run()
    assert [("renderThumbnail" in f.proto.srcdoc) for f in at.get("iframe")] == [True]


def test_a_chart_in_a_closed_tab_is_not_sent_but_goes_into_the_zip():
    """``exports.figure(drawn=False)``: the browser is spared the chart (it lays out hidden tabs' charts
    too), the page's zip still holds it."""
    def page():
        import plotly.express as px
        import streamlit as st

        from bert_explorer.app import exports
        from bert_explorer.app.result_bundle import ResultBundle

        bundle = ResultBundle("P", "m", {})
        exports.figure(px.bar(x=["a"], y=[0.2], title="open tab"), "shown", bundle=bundle)
        exports.figure(px.bar(x=["a"], y=[0.3], title="closed tab"), "kept", bundle=bundle, drawn=False)
        st.text(" | ".join(bundle.figures))

    at = AppTest.from_function(page).run()
    assert not at.exception
    charts = at.get("plotly_chart")
    assert len(charts) == 1 and "open tab" in charts[0].proto.spec
    assert [b.proto.id.endswith("shown_html") for b in at.get("download_button")] == [True]
    assert at.text[0].value == "open tab | closed tab"
