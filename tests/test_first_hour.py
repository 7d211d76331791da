"""A practitioner's first hour: what using the app and the CLI for real found (a Pre-train page that
read the working folder, a large upload that could not be stopped, ablation verdicts drawn from noise,
a seed that did not fix the run)."""
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer.data import corpora


@pytest.fixture
def reading_forbidden(monkeypatch):
    """Fails the test if anything loads a corpus other than a built-in one (the page reads no file here)."""
    from bert_explorer.train import pretrain

    real = corpora.load_corpus

    def load(name, *args, **kwargs):
        if str(name) not in corpora.BUILTIN_CORPORA:
            raise AssertionError(f"{name!r} was read as a corpus")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(corpora, "load_corpus", load)
    monkeypatch.setattr(pretrain, "load_corpus", load)


@pytest.mark.parametrize("how", ["upload chosen, no file yet", "every built-in corpus removed"])
def test_the_pretrain_page_never_reads_the_working_folder(runs_root, reading_forbidden, how):
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    if how.startswith("upload"):
        at.radio(key="pt_corpus_source").set_value("Upload a .txt file").run()
    else:
        at.multiselect(key="pt_corpus").set_value([]).run()
    assert not at.exception and not at.error
    assert at.button(key="pt_start").disabled
    # the rest of the page is there: the run watcher and the time-lapse
    assert {"2. Watch a run", "3. Time-lapse: one sentence through training"} <= {h.value for h in at.subheader}


def test_an_empty_corpus_name_is_refused_by_the_library():
    from bert_explorer.train.pretrain import PretrainConfig

    with pytest.raises(ValueError, match="no corpus given"):
        corpora.load_corpus("")
    with pytest.raises(ValueError, match="names no corpus"):
        PretrainConfig(corpus="")
    with pytest.raises(ValueError, match="an empty part between two"):
        PretrainConfig(corpus="bbc++wiki")
