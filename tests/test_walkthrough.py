"""What a walk through every page found, each read from what the page shows."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from bert_explorer.analysis.attributions import integrated_gradients as ig

ROOT = Path(__file__).resolve().parent.parent


def _page(name: str) -> AppTest:
    return AppTest.from_file(str(ROOT / "pages" / name), default_timeout=120)


@pytest.fixture
def classroom(monkeypatch):
    """The app served beyond this machine, writing off."""
    from bert_explorer.app import roles

    before = st_config.get_option("server.address")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    st_config.set_option("server.address", "0.0.0.0")
    yield
    st_config.set_option("server.address", before)


def test_inside_one_layer_offers_no_step_past_the_first_or_the_last():
    at = _page("3_Inside_one_layer.py").run()
    assert at.button(key="ins_prev").disabled and not at.button(key="ins_next").disabled
    at.select_slider(key="ins_step").set_value(8).run()
    assert at.button(key="ins_next").disabled and not at.button(key="ins_prev").disabled
    at.button(key="ins_prev").click().run()
    assert at.select_slider(key="ins_step").value == 7 and not at.button(key="ins_next").disabled


def _reliable_at_once(model, f, inputs, baselines, n_steps):  # f(x) - f(x') = 1, delta 0
    T = inputs["input_ids"].shape[1]
    return [torch.linspace(0, 1, T)] * 3, 1.0, 0.0, 0.0


@pytest.fixture
def fake_results_forgotten(monkeypatch, tmp_path):
    """The server's store of computed results, and the disk cache that keeps an attribution for a new server,
    outlive a test: what a faked computation put there (the page's first, default sentence among it) goes
    into a cache of the test's own and is taken out of the store after, or a later test of the same page
    (test_attributions, run after this file) reads the fake."""
    from bert_explorer import shared_work

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    yield
    shared_work.RESULTS.clear()


def test_attributions_say_when_the_word_explained_is_copied_from_the_sentence(monkeypatch, fake_results_forgotten):
    monkeypatch.setattr(ig, "integrated_gradients", _reliable_at_once)
    at = _page("6_Attributions.py").run()
    at.text_input(key="attr_mlm_text").input("the price rose and the [MASK] went up .")
    at.text_input(key="attr_mlm_word").input("price").run()
    said = " ".join(c.value for c in at.caption)
    assert not at.exception and "**price** is a word of the sentence itself" in said
    at.text_input(key="attr_mlm_word").input("cost").run()
    assert "is a word of the sentence itself" not in " ".join(c.value for c in at.caption)


def test_two_models_in_classroom_mode_makes_no_offer_above_its_refusal(classroom):
    at = _page("7_Two_models.py").run()
    shown = " ".join(str(e.value) for e in [*at.info, *at.caption, *at.markdown])
    assert not at.exception
    assert "One click fine-tunes it" not in shown and not [b for b in at.button if b.key == "two_finetune"]
    assert "fine-tuning it here is off in classroom mode" in shown


def test_each_page_has_one_name_in_the_menu_and_at_its_top(runs_root):
    from bert_explorer.app.widgets import MENU

    for path, label, _ in MENU[1:]:
        at = AppTest.from_file(str(ROOT / path), default_timeout=120).run()
        assert not at.exception, path
        assert at.title[0].value == label, path


def test_bertviz_gives_every_head_of_bert_large_and_every_layer_its_own_colour():
    """bertviz's ten colours made head 11 look like head 1; 16 heads (BERT-Large) and 24 layers now each
    get one of their own, in both views."""
    import re

    import numpy as np

    from bert_explorer.analysis.attention.bertviz_offline import COLOURS, render
    from bert_explorer.analysis.attention.heads import AttentionResult

    L, A, T = 24, 16, 5
    att = np.full((L, A, T, T), 1 / T, dtype=np.float32)
    result = AttentionResult(["[CLS]", "a", "b", "c", "[SEP]"], [0] * T, att)
    assert len({c.lower() for c in COLOURS}) == len(COLOURS) >= L >= A
    head = render(result, "head", layers=[0]).html
    assert "d3.scaleOrdinal(d3.schemeCategory10)" not in head  # (d3 itself, inlined, still defines it)
    palette = re.search(r"d3\.scaleOrdinal\((\[[^\]]*\])\)", head)
    assert palette and len(set(json_list(palette.group(1))[:A])) == A
    model = render(result, "model", layers=list(range(L))).html
    assert "LAYER_COLORS = d3.schemeCategory10" not in model and "% LAYER_COLORS.length" in model


def json_list(text: str) -> list:
    import json

    return json.loads(text)


def test_what_was_typed_on_attributions_two_models_and_fine_tune_holds_after_another_page(runs_root):
    at = AppTest.from_file(str(ROOT / "run_app.py"), default_timeout=120).run()
    at.switch_page("pages/6_Attributions.py").run()
    at.text_input(key="attr_mlm_word").input("cost").run()
    at.switch_page("pages/11_Fine-tune.py").run()
    at.number_input(key="ft_epochs").set_value(5.0)
    at.number_input(key="ft_seed").set_value(7)
    at.radio(key="ft_mode").set_value("feature-based").run()
    at.switch_page("pages/1_Tokens_and_embeddings.py").run()  # away...
    at.switch_page("pages/11_Fine-tune.py").run()             # ...and back
    assert not at.exception
    assert (at.number_input(key="ft_epochs").value, at.number_input(key="ft_seed").value,
            at.radio(key="ft_mode").value) == (5.0, 7, "feature-based")
    at.switch_page("pages/6_Attributions.py").run()
    assert not at.exception and at.text_input(key="attr_mlm_word").value == "cost"


def test_the_pre_training_set_up_and_the_data_chosen_on_fine_tune_hold_after_another_page(runs_root):
    """Pre-train's form came back at L4-H256 / 1,000 steps / batch 32 after a look at Runs; Fine-tune's
    choice of data went back to its default."""
    at = AppTest.from_file(str(ROOT / "run_app.py"), default_timeout=120).run()
    at.switch_page("pages/10_Pre-train.py").run()
    at.multiselect(key="pt_corpus").set_value(["tiny"])
    at.selectbox(key="pt_size").set_value("L2-H128")
    at.number_input(key="pt_steps").set_value(40)
    at.number_input(key="pt_batch").set_value(8)
    at.number_input(key="pt_seed").set_value(3)
    at.text_input(key="pt_name").input("my-run").run()
    at.switch_page("pages/11_Fine-tune.py").run()
    at.radio(key="ft_source").set_value("Built-in dataset").run()
    at.selectbox(key="ft_builtin").set_value("tiny:regression").run()
    at.switch_page("pages/13_Runs.py").run()        # away...
    at.switch_page("pages/10_Pre-train.py").run()   # ...and back
    assert not at.exception
    assert (at.multiselect(key="pt_corpus").value, at.selectbox(key="pt_size").value,
            at.number_input(key="pt_steps").value, at.number_input(key="pt_batch").value,
            at.number_input(key="pt_seed").value, at.text_input(key="pt_name").value) == (
        ["tiny"], "L2-H128", 40, 8, 3, "my-run")
    at.switch_page("pages/11_Fine-tune.py").run()
    assert not at.exception
    assert (at.radio(key="ft_source").value, at.selectbox(key="ft_builtin").value) == ("Built-in dataset", "tiny:regression")


def test_a_file_uploaded_on_fine_tune_is_read_again_after_another_page_until_replaced_or_forgotten(
        runs_root, monkeypatch):
    """Streamlit empties an uploader when its page is left: the file had to be uploaded again after a look at
    Runs. (AppTest cannot drive an uploader: this one hands over what the test puts in "test_file".)"""
    from types import SimpleNamespace

    import streamlit as st

    from bert_explorer.app import data_view

    def uploader(container, label, key, **options):
        container.file_uploader(label, key=key, **options)  # the widget, whose state the page leaving clears
        given = st.session_state.get("test_file")
        return SimpleNamespace(name=given[0], getvalue=lambda: given[1]) if given else None

    monkeypatch.setattr(data_view, "uploader", uploader)
    rows = "text,label\n" + "".join(f"{'a fine day' if i % 2 else 'a bad day'} number {i},{i % 2}\n" for i in range(40))
    at = AppTest.from_file(str(ROOT / "run_app.py"), default_timeout=120).run()
    at.switch_page("pages/11_Fine-tune.py")
    at.session_state["test_file"] = ("days.csv", rows.encode())
    at.run()
    assert any("Detected task" in s.value for s in at.success)

    def detected(at):
        return any("Detected task" in s.value for s in at.success)

    at.session_state["test_file"] = None  # the uploader is empty when the page comes back
    at.switch_page("pages/13_Runs.py").run()
    at.switch_page("pages/11_Fine-tune.py").run()
    assert not at.exception and detected(at)
    assert any(i.value.startswith("days.csv (") and "uploaded earlier in this session, is read again" in i.value
               for i in at.info)
    at.run()  # another run of the page (a setting changed): still read
    assert detected(at)
    at.button(key="ft_upload_forget").click().run()
    assert not detected(at) and not any("read again" in i.value for i in at.info)

    at.session_state["test_file"] = ("days.csv", rows.encode())
    at.run()
    at.session_state["test_file"] = None  # the user takes it out of the uploader on this page: forgotten
    at.run()
    assert not detected(at)
    at.switch_page("pages/13_Runs.py").run()
    at.switch_page("pages/11_Fine-tune.py").run()
    assert not detected(at)
