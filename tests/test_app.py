"""The Streamlit app, driven headless with AppTest."""
from streamlit.testing.v1 import AppTest


def test_home_page_explains_bert_and_lists_minilm():
    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    assert not at.exception
    assert "BERT Explorer" in at.title[0].value
    assert any("Devlin et al. 2019" in m.value for m in at.markdown)
    table = at.dataframe[0].value
    row = table[table["name"] == "minilm"].iloc[0]
    assert (row["L"], row["H"], row["A"]) == (6, 384, 12)


def test_home_page_shows_corpus_provenance_and_licence():
    at = AppTest.from_file("../run_app.py", default_timeout=60).run()
    corpora = at.dataframe[1].value.set_index("name")
    assert set(corpora.index) == {"bbc", "wiki", "lee"}
    assert "CC BY-SA" in corpora.loc["wiki", "licence"]
    assert "Greene" in corpora.loc["bbc", "source"]
