"""The words of a lesson: Home says which model every page starts on and how far BERT-Base is; a "##"
answer, a corpus's name and the head map's and the SAE's measures are said in plain words."""
import json

from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint, hub
from bert_explorer.app import gallery
from bert_explorer.data.corpora import BUILTIN_CORPORA, corpus_title


def test_home_says_the_default_is_a_small_model_and_bert_base_is_one_download_away(runs_root):
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    try:
        at = AppTest.from_file("../run_app.py", default_timeout=180).run()
    finally:
        st_config.set_option("server.address", before)
    assert not at.exception
    top = at.info[0].value
    cfg = json.loads((checkpoint.SHORT_NAMES[checkpoint.DEFAULT_MODEL][0]() / "config.json").read_text())
    assert top.startswith(f"Every page starts on **{checkpoint.DEFAULT_MODEL}**, a small BERT "
                          f"({cfg['num_hidden_layers']} layers, H = {cfg['hidden_size']}, about ")
    assert "it is not the paper's BERT-Base" in top
    assert "**BERT-Base** (12 layers, H = 768, 110 M parameters) is one download away (about 440 MB)" in top
    assert "`bert-explorer download bert-base-uncased`" in top


def test_a_wordpiece_answer_is_explained_with_the_word_it_ends(runs_root):
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=180)
    at.session_state["mlm_text"] = "he paid with his credit [MASK] ."
    at.run()
    assert not at.exception
    (said,) = [c.value for c in at.caption if "is not a word of its own" in c.value]
    assert said.startswith("The top answer, **##s**, is not a word of its own: a WordPiece that starts with ## "
                           "continues the piece before it: here “credit” + “s” = “credits”.")


def test_bert_base_is_named_in_the_grid_and_a_corpus_by_what_it_is():
    grid = gallery.miniature_grid()
    assert grid.loc["L=12", "H=768 (A=12)"].startswith("BERT-Base's size · 110.1 M · ")
    assert not grid.loc["L=2", "H=128 (A=2)"].startswith("BERT-Base")
    assert corpus_title("vital") == "Wikipedia lead sections" and corpus_title("my.txt") == "my.txt"
    assert all(c.plain and c.plain != c.name for c in BUILTIN_CORPORA.values())
    assert hub.CATALOGUE["google/bert_uncased_L-12_H-768_A-12"].title.startswith("BERT-Base size")
