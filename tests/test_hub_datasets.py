"""Data sets by their Hub name (hf:owner/name[/config][:split]), against the local stand-in of the Hub
(tests/hub_standin.py) serving small data set repositories in the real layouts: GLUE's (a
configuration a folder, a split in shards), SQuAD's (one configuration, plain_text) and CoNLL-2003's
(a loading script in the repository, the tables on the Hub's refs/convert/parquet branch). The
tables carry Hugging Face datasets' features in their schema (ClassLabel names). No test reaches
the real Hub."""
import json
import shutil

import pytest

import hub_standin
from bert_explorer import hub_datasets
from bert_explorer.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

WORDS_POS = ("a gripping , funny film", "warm and wise", "the best movie of the year", "a joy to watch")
WORDS_NEG = ("a dull , lifeless mess", "painfully slow", "the worst script in years", "nothing works")


def _write(path, rows: dict, features: dict):
    """A Parquet table as Hugging Face datasets writes it: its features in the schema's metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(rows).replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    pq.write_table(table, path)


def _sst2(n, start=0):
    texts = [(WORDS_POS if i % 2 else WORDS_NEG)[i % 4] + f" ({i})" for i in range(start, start + n)]
    return {"sentence": texts, "label": [i % 2 for i in range(start, start + n)], "idx": list(range(start, start + n))}


SST2 = {"sentence": {"dtype": "string", "_type": "Value"},
        "label": {"names": ["negative", "positive"], "_type": "ClassLabel"}, "idx": {"dtype": "int32", "_type": "Value"}}
TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


@pytest.fixture(scope="module")
def data_repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    glue = root / "nyu-mll" / "glue"
    _write(glue / "sst2" / "train-00000-of-00002.parquet", _sst2(30), SST2)
    _write(glue / "sst2" / "train-00001-of-00002.parquet", _sst2(30, 30), SST2)
    _write(glue / "sst2" / "validation-00000-of-00001.parquet", _sst2(20, 100), SST2)
    _write(glue / "cola" / "train-00000-of-00001.parquet", _sst2(20), SST2)
    (glue / "README.md").write_text("---\nlicense: other\n---\n# GLUE (a stand-in)\n")
    conll = root / "eriktks" / "conll2003"
    conll.mkdir(parents=True)
    (conll / "conll2003.py").write_text("# a loading script: the Hub keeps the tables on refs/convert/parquet\n")
    tokens = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["BRUSSELS", "1996-08-22"]] * 8
    tags = [[3, 0, 7, 0], [1, 2], [5, 0]] * 8
    _write(root / "eriktks" / "conll2003@refs-convert-parquet" / "conll2003" / "train" / "0000.parquet",
           {"id": [str(i) for i in range(24)], "tokens": tokens, "ner_tags": tags},
           {"id": {"dtype": "string", "_type": "Value"}, "tokens": {"feature": {"dtype": "string", "_type": "Value"},
                                                                   "_type": "Sequence"},
            "ner_tags": {"feature": {"names": TAGS, "_type": "ClassLabel"}, "_type": "Sequence"}})
    return root


@pytest.fixture
def standin(data_repos, tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    with hub_standin.HubStandin(tmp_path / "models", datasets=data_repos) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        yield server


def test_a_split_is_fetched_into_the_hugging_face_cache_then_read_offline(standin, tmp_path, monkeypatch):
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    cfg = FinetuneConfig(train="hf:nyu-mll/glue/sst2:train")
    data = read_spec(cfg, cfg.train)
    assert data.task.name == "classification" and len(data.examples) == 60
    assert data.label_names == ["negative", "positive"]  # the ClassLabel's names, not 0/1
    assert data.examples[1]["label"] == "positive" and data.examples[1]["text"] == "warm and wise (1)"
    assert data.notes[0].startswith("read hf:nyu-mll/glue/sst2:train (downloaded from http://127.0.0.1:")
    cache = tmp_path / "hf-cache" / "datasets--nyu-mll--glue"
    (snapshot,) = (cache / "snapshots").iterdir()
    assert sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.parquet")) == [
        "sst2/train-00000-of-00002.parquet", "sst2/train-00001-of-00002.parquet"]  # the split only
    assert (cache / "refs" / "main").read_text() == snapshot.name
    fetched = [r.filename for r in standin.requests if r.method == "GET" and r.filename]
    standin.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = read_spec(cfg, cfg.train)  # no server: the cache
    assert [e["text"] for e in again.examples] == [e["text"] for e in data.examples]
    assert "the Hugging Face cache" in again.notes[0] and len(fetched) == 2
    with pytest.raises(ValueError, match="is not on this machine yet and this machine is set to work offline"):
        read_spec(cfg, "hf:nyu-mll/glue/sst2:validation")


def test_a_split_whose_download_was_cut_off_is_not_read_from_the_cache_as_whole(standin, tmp_path, monkeypatch):
    """The first of a split's two shards fetched, the second refused: the shard was already in the snapshot, which
    the split's commit names, and the split was then read from the cache as if whole (30 rows of 60)."""
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    cfg = FinetuneConfig(train="hf:nyu-mll/glue/sst2:validation")
    read_spec(cfg, cfg.train)  # (the commit is now in the cache, named by refs/main)
    snapshot = next((tmp_path / "hf-cache" / "datasets--nyu-mll--glue" / "snapshots").iterdir())
    shard = snapshot / "sst2" / "train-00000-of-00002.parquet"
    shard.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(standin.datasets / "nyu-mll" / "glue" / "sst2" / "train-00000-of-00002.parquet", shard)
    standin.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="is not on this machine yet"):
        read_spec(cfg, "hf:nyu-mll/glue/sst2:train")


def test_a_set_kept_as_a_script_is_read_from_the_hubs_parquet_branch(standin):
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    data = read_spec(FinetuneConfig(), "hf:eriktks/conll2003:train")
    assert data.task.name == "ner" and len(data.examples) == 24
    assert data.examples[0] == {"tokens": ["EU", "rejects", "German", "call"], "tags": ["B-ORG", "O", "B-MISC", "O"]}


@pytest.mark.parametrize("spec, said", [
    ("hf:nyu-mll/glue", r"nyu-mll/glue has 2 configurations \(cola, sst2\): name one, e\.g\. "
                        r"hf:nyu-mll/glue/cola:train"),
    ("hf:nyu-mll/glue/mnli", r"has no configuration 'mnli'; it has cola, sst2"),
    ("hf:nyu-mll/glue/sst2:test", r"nyu-mll/glue \(sst2\) has no split 'test'; its splits are train, validation"),
    ("hf:glue", r"does not name a Hugging Face data set: write hf:<owner>/<name>"),
    ("hf:nyu-mll/glue/../../etc:train", r"does not name a Hugging Face data set"),
    ("hf:someone/nothing", r"the server asked, 127\.0\.0\.1:\d+ \(HF_ENDPOINT\), has no data set someone/nothing"),
])
def test_a_name_that_chooses_no_split_is_one_sentence_and_nothing_is_written(standin, tmp_path, spec, said):
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    with pytest.raises(ValueError, match=said):
        read_spec(FinetuneConfig(), spec)
    assert not (tmp_path / "hf-cache").exists() or not any((tmp_path / "hf-cache").rglob("*.parquet"))


def test_a_data_set_the_server_lacks_names_the_server_and_proposes_no_name(tmp_path, monkeypatch):
    """The placeholder itself, asked of a mirror that does not keep it: the sentence names the server
    asked (its host only) and what to check, and does not offer the name that just failed."""
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    (tmp_path / "models").mkdir()
    (tmp_path / "no-datasets").mkdir()
    with hub_standin.HubStandin(tmp_path / "models", datasets=tmp_path / "no-datasets") as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        where = server.endpoint.removeprefix("http://")
        with pytest.raises(ValueError) as e:
            read_spec(FinetuneConfig(), hub_datasets.EXAMPLE)
    said = str(e.value)
    assert said.startswith(f"the server asked, {where} (HF_ENDPOINT), has no data set nyu-mll/glue, or it is private "
                           "there: check the owner and name"), said
    assert "point HF_ENDPOINT at a server that keeps it" in said
    assert hub_datasets.EXAMPLE not in said and "http" not in said and "e.g." not in said


def test_the_server_of_a_message_is_its_host_alone(monkeypatch):
    import urllib.error

    from bert_explorer import hub_server

    monkeypatch.setenv("HF_ENDPOINT", "https://someone:secret@mirror.example:8443/hf/")
    assert hub_server.host() == "mirror.example:8443"
    monkeypatch.delenv("HF_ENDPOINT")
    assert hub_server.host() == "huggingface.co"
    # the Hub itself: no mirror to point elsewhere
    said = str(hub_server.failed(urllib.error.HTTPError("u", 404, "Not Found", None, None), "someone/nothing",
                           "the data set"))
    assert said.startswith("the server asked, huggingface.co, has no data set someone/nothing") and "HF_ENDPOINT" not in said


def test_an_unreachable_hub_tells_how_to_get_a_data_set_not_a_model(standin):
    """With no network, a data set's sentence said to run `bert-explorer download`, which fetches models."""
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    standin.stop()
    with pytest.raises(ValueError) as e:
        read_spec(FinetuneConfig(), "hf:nyu-mll/glue/sst2:train")
    said = str(e.value)
    assert "is not on this machine yet and the Hugging Face Hub" in said and "cannot be reached" in said
    assert "fine-tune on it once where there is internet" in said and "bert-explorer download" not in said


def test_what_the_server_says_of_a_size_is_bounded_before_a_byte_is_fetched(standin, tmp_path):
    from bert_explorer.train.finetune import FinetuneConfig, read_spec

    standin.lies["size"] = {"sst2/validation-00000-of-00001.parquet": 10 ** 10}
    with pytest.raises(ValueError, match=r"says sst2/validation-00000-of-00001\.parquet of nyu-mll/glue is 10 GB, "
                                         r"more than the 200 MB such a file can be here"):
        read_spec(FinetuneConfig(), "hf:nyu-mll/glue/sst2:validation")
    assert not any((tmp_path / "hf-cache").rglob("*.parquet"))


def test_the_command_line_fine_tunes_on_a_hub_data_set(standin, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["finetune", "--model", "minilm-mlm-nsp", "--train", "hf:nyu-mll/glue/sst2:train", "--dev",
                 "hf:nyu-mll/glue/sst2:validation", "--epochs", "1", "--batch-size", "16", "--max-seq-length", "32",
                 "--device", "cpu", "--output", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["train_examples"], result["dev_examples"]) == (60, 20)
    assert json.loads((out / "metrics.json").read_text())["label_names"] == ["negative", "positive"]
    assert "note: read hf:nyu-mll/glue/sst2:validation (the Hugging Face cache" in (out / "log.txt").read_text()


def test_the_layouts_a_split_is_found_in():
    asked = hub_datasets.parse("hf:owner/set:validation")
    assert hub_datasets.split_files(["data/train-00000-of-00001.parquet", "data/validation-00000-of-00001.parquet",
                                     "README.md"], asked) == ["data/validation-00000-of-00001.parquet"]
    assert hub_datasets.split_files(["plain_text/train-00000-of-00001.parquet",
                                     "plain_text/validation-00000-of-00001.parquet"], asked) == [
        "plain_text/validation-00000-of-00001.parquet"]
    assert hub_datasets.split_files(["default/validation/0000.parquet", "default/validation/0001.parquet"], asked) == [
        "default/validation/0000.parquet", "default/validation/0001.parquet"]
    assert hub_datasets.parse("hf:rajpurkar/squad").split == "train"
    # a lying server's names: a path out of the snapshot, or names that are not a configuration, are no split's
    assert hub_datasets.split_files(["../../evil/validation-0.parquet", "sst2/../../validation-0.parquet",
                                     "a/b/c/validation/0.parquet", ".hidden/validation-0.parquet"], asked) == []


def test_the_fine_tune_page_downloads_a_hub_split_and_trains_on_it(standin, runs_root, base_model):
    """The Fine-tune page's third source: the split named, downloaded on the teacher's click (never on a
    visit), previewed with its label names, and trained on in the background from the cache."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.runs.run import Run

    at = AppTest.from_file("../pages/11_Fine-tune.py", default_timeout=120)
    at.session_state["be_model_choice"], at.session_state["be_model_path"] = "a local directory…", base_model
    at.run()
    at.radio(key="ft_source").set_value("A Hugging Face data set").run()
    assert not at.exception and not [r for r in standin.requests if r.path.startswith("/api/datasets")]
    at.text_input(key="ft_hub_spec").set_value("hf:nyu-mll/glue/sst2:train")
    at.text_input(key="ft_hub_dev").set_value("hf:nyu-mll/glue/sst2:validation").run()
    assert not [r for r in standin.requests if r.path.startswith("/api/datasets")]  # typing fetches nothing
    at.button(key="ft_hub_fetch").click().run()
    assert not at.exception and not at.error
    assert "Detected task: **classification** · 60 examples · labels: negative\\, positive" in at.success[0].value
    for key, value in (("ft_epochs", 1.0), ("ft_batch", 16), ("ft_max_len", 32)):
        at.number_input(key=key).set_value(value)
    at.run()
    assert any("20 dev examples scored" in c.value for c in at.caption)  # the dev split's own size, not a part
    at.button(key="ft_start").click().run()
    assert not at.exception
    (folder,) = [p for p in runs_root.iterdir() if (p / "status.json").exists()]
    status = Run(folder).wait(timeout=240)
    assert status["state"] == "finished", (folder / "log.txt").read_text()[-2000:]
    cfg = Run(folder).config()
    assert (cfg["train"], cfg["dev"]) == ("hf:nyu-mll/glue/sst2:train", "hf:nyu-mll/glue/sst2:validation")
