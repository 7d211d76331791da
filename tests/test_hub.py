"""The paper's BERTs from the Hugging Face Hub, against a local stand-in of the Hub (tests/hub_standin.py)
serving tiny random checkpoints in the real repositories' layouts; no test reaches the real Hub.

What is checked: only what loading needs is fetched; our model equals transformers' BertForPreTraining
on the downloaded folder (masked-word top 5 and NSP probability, to 1e-5) for BERT-Base's layout
(safetensors, legacy LayerNorm.gamma/beta names) and a miniature's (pytorch_model.bin only, zip and
legacy torch formats, a config without model_type); a second open needs no server; an interrupted
download goes on with a Range request; every failure is one sentence."""
import json
import re

import pytest
import torch

import hub_standin
from bert_explorer import checkpoint, full_disk, hub, hub_names, hub_server
from bert_explorer.app.gallery import ANOTHER_ID
from bert_explorer.cli import main

transformers = pytest.importorskip("transformers")

BASE, TINY = "google-bert/bert-base-uncased", "google/bert_uncased_L-2_H-128_A-2"
NEEDED = {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json"}


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    hub_standin.write_bert_base_layout(root / BASE, seed=1)
    hub_standin.write_miniature_layout(root / TINY, seed=2)
    hub_standin.write_miniature_layout(root / "google/bert_uncased_L-4_H-256_A-4", legacy_format=True,
                                       with_heads=False, seed=3)
    (root / "someone/not-a-bert").mkdir(parents=True)
    (root / "someone/not-a-bert" / "config.json").write_text("{}")
    (root / "someone/not-a-bert" / "tf_model.h5").write_bytes(b"\0" * 100)
    hub_standin.write_miniature_layout(root / "someone/gated-bert", seed=4)
    hub_standin.write_miniature_layout(root / "someone/plain-bert", seed=5)  # a BERT not of the paper's
    return root


@pytest.fixture
def standin(repos, tmp_path, monkeypatch):
    with hub_standin.HubStandin(repos, gated={"someone/gated-bert"}) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        yield server


def _probe(folder, model):
    """Top-5 words at the [MASK] of one sentence with their probabilities, and P(IsNext) of a pair,
    from our model and from transformers' BertForPreTraining on the same folder."""
    from transformers import BertForPreTraining

    tok = checkpoint.WordPieceTokenizer.from_dir(folder)
    enc = tok.encode("the capital of france is [MASK] .", "paris is a big city .")
    ids = torch.tensor([enc.input_ids])
    types, mask_at = torch.tensor([enc.token_type_ids]), enc.tokens.index("[MASK]")
    theirs = BertForPreTraining.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        ours_out = model.eval()(input_ids=ids, token_type_ids=types)
        their_out = theirs(input_ids=ids, token_type_ids=types)
    result = []
    for mlm, nsp in ((ours_out.mlm_logits, ours_out.nsp_logits), (their_out.prediction_logits,
                                                                  their_out.seq_relationship_logits)):
        p = mlm[0, mask_at].softmax(-1)
        top = p.topk(5)
        result.append((top.indices.tolist(), top.values, nsp.softmax(-1)[0, 0]))
    return result


@pytest.mark.parametrize("name, repo", [("hf:bert-base-uncased", BASE), ("bert-base-uncased", BASE),
                                        (f"hf:{TINY}", TINY), ("hf:google/bert_uncased_L-4_H-256_A-4", None)])
def test_a_hub_model_loads_as_transformers_reads_it_and_fetches_only_what_loading_needs(standin, name, repo):
    repo = repo or hub.canonical(name)
    legacy_no_heads = repo.startswith("google/bert_uncased_L-4")
    loaded = checkpoint.load(name, "BertForPreTraining")
    assert loaded.path == hub.local_copy(repo) and loaded.path.parent.parent.name == "models--" + repo.replace("/", "--")
    weights = "model.safetensors" if repo == BASE else "pytorch_model.bin"
    expected = NEEDED - {"model.safetensors"} | {weights} if repo == BASE else {"config.json", weights, "vocab.txt"}
    assert set(standin.fetched(repo)) == expected  # never tf_model.h5, flax, rust, onnx, coreml or TF checkpoints
    if legacy_no_heads:  # the heads are found by loading: this one has none, and says so
        assert loaded.report.missing_heads == ["masked-LM head", "next-sentence head"]
        with pytest.raises(checkpoint.MissingHeadError, match="has no trained masked-LM head"):
            checkpoint.load(name, "BertForPreTraining", need_heads=("masked-LM head",))
        return
    assert loaded.report.missing_heads == []
    (ours, ours_p, ours_nsp), (theirs, theirs_p, theirs_nsp) = _probe(loaded.path, loaded.model)
    assert ours == theirs
    assert torch.allclose(ours_p, theirs_p, atol=1e-5) and abs(float(ours_nsp - theirs_nsp)) < 1e-5


def test_a_downloaded_model_opens_again_with_no_server_and_in_the_standard_cache(standin, monkeypatch):
    first = checkpoint.resolve("hf:bert-base-uncased")
    asked = len(standin.requests)
    standin.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert checkpoint.resolve("bert-base-uncased") == first == checkpoint.resolve(f"hf:{BASE}")
    assert len(standin.requests) == asked
    # the layout huggingface_hub (and so transformers) reads: one copy on the machine for both
    from huggingface_hub import snapshot_download

    assert snapshot_download(BASE, local_files_only=True) == str(first)


def test_an_interrupted_download_goes_on_from_its_bytes_with_a_range_request(standin):
    weights = standin.repo_dir(BASE) / "model.safetensors"
    cut = weights.stat().st_size // 3
    standin.drop_after("model.safetensors", cut, times=1)  # one dropped connection: taken up again at once
    folder = hub.download("bert-base-uncased")
    assert (folder / "model.safetensors").read_bytes() == weights.read_bytes()
    assert [r.range for r in standin.range_requests()] == [f"bytes={cut}-"]

    # a connection that keeps dropping: one sentence, the bytes kept, and the next try starts from them
    tiny = standin.repo_dir(TINY) / "pytorch_model.bin"
    cut = tiny.stat().st_size // 2
    standin.drop_after("pytorch_model.bin", cut, times=None)
    with pytest.raises(hub.HubError) as e:
        hub.download(TINY)
    assert re.fullmatch(r"the download of pytorch_model\.bin from google/bert_uncased_L-2_H-128_A-2 stopped at "
                        r"[\d.]+ kB of [\d.]+ kB \(.+\); run the same again to go on from there: what was fetched is "
                        r"kept", str(e.value)), str(e.value)
    assert hub.local_copy(TINY) is None  # a model not whole is not listed as here
    standin.clear_faults()
    standin.requests.clear()
    folder = hub.download(TINY)
    assert (folder / "pytorch_model.bin").read_bytes() == tiny.read_bytes()
    gets = [r for r in standin.requests if r.method == "GET" and r.filename == "pytorch_model.bin"]
    assert [r.range for r in gets] == [f"bytes={cut}-"]  # never from zero


def test_a_cancelled_download_lists_no_model_and_goes_on_later(standin):
    with pytest.raises(hub.DownloadCancelled, match="was cancelled"):
        hub.download(BASE, cancel=lambda: True)
    assert hub.local_copy(BASE) is None
    seen = []
    hub.download(BASE, progress=lambda done, total, f: seen.append((done, total)))
    assert hub.local_copy(BASE) is not None
    total = seen[-1][1]
    assert seen[-1][0] == total and all(0 <= d <= total for d, _ in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # the bar only moves forward


@pytest.mark.parametrize("case, message", [
    ("no network", r"google-bert/bert-base-uncased is not on this machine yet and the Hugging Face Hub \(http://"
                   r"127\.0\.0\.1:\d+\) cannot be reached \(.+\): run `bert-explorer download google-bert/"
                   r"bert-base-uncased` where there is internet"),
    ("offline", r"is not on this machine yet and this machine is set to work offline \(HF_HUB_OFFLINE\): run "
                r"`bert-explorer download"),
    ("unknown", r"there is no model nobody/no-such-bert on the Hugging Face Hub \(or it is private\); check the name"),
    ("gated", r"someone/gated-bert is gated on the Hugging Face Hub: accept its terms on its page there and log in"),
    ("not a bert", r"someone/not-a-bert holds no BERT weights this app reads"),
    ("full disk", r"no space left in .+ to download google-bert/bert-base-uncased \(.+ free, about [\d.]+ [kM]B needed: "
                  r"its files and a twentieth more\); free some space, or point HF_HOME at a disk with room"),
])
def test_each_failure_is_one_sentence_that_says_what_to_do(standin, monkeypatch, capsys, case, message):
    name = {"unknown": "hf:nobody/no-such-bert", "gated": "hf:someone/gated-bert",
            "not a bert": "hf:someone/not-a-bert"}.get(case, "bert-base-uncased")
    if case == "no network":
        standin.stop()
    elif case == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    elif case == "full disk":
        monkeypatch.setattr(full_disk, "free_bytes", lambda folder: 1000)
    with pytest.raises((checkpoint.CheckpointError, full_disk.DiskFull)) as e:
        checkpoint.load(name)
    assert re.search(message, str(e.value)), str(e.value)
    assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
    code = main(["download", name.removeprefix("hf:"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == (1 if case == "full disk" else 2) and len(err.splitlines()) == 1, err
    assert err.startswith("bert-explorer: error: ") and re.search(message, err), err


def test_the_cli_downloads_lists_and_reopens(standin, monkeypatch, capsys):
    assert main(["models"]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"google-bert/bert-base-uncased\s+download about 440 MB\s+BERT-Base, uncased: L=12, H=768, "
                     r"A=12, 110\.1 M parameters, Apache-2\.0", listed), listed
    assert len([line for line in listed.splitlines() if line.startswith("google/bert_uncased_L-")]) == 24
    assert main(["download", "bert-base-uncased", TINY, "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{BASE}: ") and "masked-LM head and next-sentence head" in out[0]
    assert out[1].startswith(f"{TINY}: ")
    standin.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["models"]) == 0
    assert re.search(r"google-bert/bert-base-uncased\s+here", capsys.readouterr().out)
    assert main(["probe", "mlm", "--model", "bert-base-uncased", "--text", "the capital of france is [MASK] ."]) == 0


def test_the_catalogue_is_the_papers():
    assert len(hub.CATALOGUE) == 29
    base = hub.CATALOGUE[BASE]
    assert (base.layers, base.hidden, base.heads) == (12, 768, 12) and round(base.parameters / 1e6) == 110
    large = hub.CATALOGUE["google-bert/bert-large-uncased"]
    assert (large.layers, large.hidden, large.heads) == (24, 1024, 16) and round(large.parameters / 1e6) == 336
    tiny = hub.CATALOGUE[TINY]
    assert abs(tiny.download_bytes / 1e6 - 17.7) < 0.1  # FIELD_NOTES: 17.7 MB of pytorch_model.bin
    assert hub.canonical("bert-large-cased") == "google-bert/bert-large-cased" == hub.canonical("hf:bert-large-cased")
    assert hub.canonical("hf:someone/else") == "someone/else" and not hub_names.is_hub_name("minilm")
    for bad in ("hf:../../etc", "a/b/c", "hf:", "x" * 300):  # the longest a user can type is refused before any request
        with pytest.raises(hub.HubError, match="is not a Hugging Face model id; write it as owner/name"):
            hub.canonical(bad)
        assert hub.local_copy(bad) is None


def test_a_downloaded_model_is_in_the_sidebar_and_opens_with_no_server(standin, monkeypatch, runs_root):
    from streamlit.testing.v1 import AppTest

    hub.download(TINY)
    standin.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120).run()
    box = at.sidebar.selectbox(key="be_model_choice")
    assert "BERT-Tiny (L=2, H=128), uncased (downloaded)" in box.options  # as it is shown
    box.set_value(TINY).run()
    assert not at.exception and not at.sidebar.error
    assert any("**L** = 2 layers" in m.value and "masked-LM head, next-sentence head" in m.value
               for m in at.sidebar.markdown)


def test_a_downloaded_bert_not_of_the_papers_opens_from_the_sidebar_and_the_gallery(standin, monkeypatch, runs_root):
    """A hub id typed in the gallery was downloaded, then "no model called 'someone/plain-bert'" on every page:
    the sidebar and the gallery gave its bare id, which reads as a folder."""
    hub.download("someone/plain-bert")
    standin.stop()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = _sidebar_page()
    box = at.sidebar.selectbox(key="be_model_choice")
    assert "someone/plain-bert (downloaded)" in box.options
    box.set_value("hf:someone/plain-bert").run()
    assert not at.exception and not at.sidebar.error and any("**L** = 2 layers" in m.value for m in at.sidebar.markdown)
    at = _sidebar_page(be_model_choice=GALLERY, be_hub_choice=ANOTHER_ID, be_hub_id="someone/plain-bert")
    assert not at.exception and not at.sidebar.error and any("**L** = 2 layers" in m.value for m in at.sidebar.markdown)
    assert at.get("plotly_chart")  # the page itself ran on it


# ----- the gallery in the app, and a download in the background ------------------------------------------------
GALLERY = "the paper's BERTs (Hugging Face Hub)…"


def _sidebar_page(**state):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


def _wait(repo_id, states=("here", "cancelled", "failed"), timeout=60):
    import time

    from bert_explorer.runs import download_jobs

    deadline = time.time() + timeout
    while time.time() < deadline:
        now = download_jobs.state(repo_id)
        if now["state"] in states:
            return now
        time.sleep(0.1)
    raise AssertionError(f"{repo_id} stayed {download_jobs.state(repo_id)}")


def test_the_home_page_lays_out_the_papers_models(standin, runs_root):
    from streamlit.testing.v1 import AppTest

    hub.download(TINY)
    at = AppTest.from_file("../run_app.py", default_timeout=120).run()
    assert not at.exception
    big, grid = at.table[1].value, at.table[2].value
    assert list(big.index) == ["BERT-Base, uncased", "BERT-Large, uncased", "BERT-Base, cased", "BERT-Large, cased",
                               "BERT-Base, multilingual cased (104 languages)"]
    assert big.loc["BERT-Base, uncased", "download"] == "about 440 MB" and big.loc["BERT-Base, uncased", "A"] == 12
    assert list(grid.index) == [f"L={L}" for L in (2, 4, 6, 8, 10, 12)]
    assert list(grid.columns) == ["H=128 (A=2)", "H=256 (A=4)", "H=512 (A=8)", "H=768 (A=12)"]
    assert grid.loc["L=2", "H=128 (A=2)"] == "4.4 M · here" and grid.loc["L=4", "H=256 (A=4)"] == "11.3 M · 45.1 MB"


def test_a_download_from_the_sidebar_runs_in_the_background_with_its_progress_and_can_be_cancelled(standin,
                                                                                                      runs_root):
    from bert_explorer.runs import download_jobs

    weights = standin.repo_dir(TINY) / "pytorch_model.bin"
    standin.throttle("pytorch_model.bin", weights.stat().st_size // 30)  # about 30 s: time to watch and cancel
    at = _sidebar_page(be_model_choice=GALLERY, be_hub_choice=TINY)
    assert not at.exception
    (button,) = [b for b in at.sidebar.button if b.key == f"be_download_{TINY}"]
    assert button.label == "Download (about 17.7 MB)"
    button.click().run()
    _wait(TINY, states=("downloading",))
    assert download_jobs.start(TINY) is False  # a second click (another tab) starts no second download
    import time

    deadline = time.time() + 20
    while not (download_jobs.state(TINY).get("done") or 0) and time.time() < deadline:
        time.sleep(0.1)
    at.run()
    assert not at.exception
    bar = [p for p in at.sidebar.get("progress")]
    assert bar and "Downloading google/bert_uncased_L-2_H-128_A-2: " in bar[0].proto.text
    [b for b in at.sidebar.button if b.key == f"be_download_cancel_{TINY}"][0].click().run()
    cancelled = _wait(TINY)
    assert cancelled["state"] == "cancelled" and hub.local_copy(TINY) is None

    standin.clear_faults()
    standin.requests.clear()
    at.run()
    assert any("was cancelled" in w.value for w in at.sidebar.warning)
    [b for b in at.sidebar.button if b.key == f"be_download_{TINY}"][0].click().run()
    assert _wait(TINY)["state"] == "here"
    gets = [r for r in standin.requests if r.method == "GET" and r.filename == "pytorch_model.bin"]
    assert len(gets) == 1 and gets[0].range and gets[0].range.startswith("bytes=")  # went on from the cancel
    at.run()
    assert not at.exception
    assert any("**L** = 2 layers" in m.value for m in at.sidebar.markdown)  # the model is chosen and loaded


def test_classroom_mode_offers_what_is_downloaded_and_says_how_the_teacher_adds_a_model(standin, runs_root,
                                                                                           monkeypatch):
    from streamlit import config as st_config

    hub.download(TINY)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        at = _sidebar_page()
        options = at.sidebar.selectbox(key="be_model_choice").options
        assert "BERT-Tiny (L=2, H=128), uncased (downloaded)" in options and "a local directory…" not in options
        at.sidebar.selectbox(key="be_model_choice").set_value(GALLERY).run()
        at.sidebar.selectbox(key="be_hub_choice").set_value(BASE).run()
        assert not at.exception
        assert not [b for b in at.sidebar.button if b.key.startswith("be_download")]
        assert any(f"The teacher adds it where the server runs: `bert-explorer download {BASE}`" in i.value
                   for i in at.sidebar.info)
    finally:
        st_config.set_option("server.address", before)


def test_the_app_holds_models_up_to_its_memory_budget_and_drops_the_least_recently_used(standin, monkeypatch):
    from bert_explorer.app import state

    folders = [hub.download(r) for r in (BASE, TINY, "google/bert_uncased_L-4_H-256_A-4")]
    one = state.model_bytes(checkpoint.load(folders[0], "BertForPreTraining"))
    monkeypatch.setenv(state.MEMORY_ENV, str(2.5 * one / 1e9))  # room for two of these tiny models
    monkeypatch.setattr(state, "MODELS", state.shared_work.Results(state.memory_budget))
    a = state._load(str(folders[0]), "BertForPreTraining", ())
    assert state._load(str(folders[0]), "BertForPreTraining", ()) is a  # loaded once, shared
    state._load(str(folders[1]), "BertForPreTraining", ())
    state._load(str(folders[0]), "BertForPreTraining", ())  # used again: now the most recent
    state._load(str(folders[2]), "BertForPreTraining", ())
    assert [k[0] for k, _ in state.MODELS.held()] == [str(folders[0]), str(folders[2])]  # folders[1] went
    assert sum(size for _, size in state.MODELS.held()) <= state.memory_budget()


def test_a_background_download_that_fails_says_why_in_one_sentence(standin):
    from bert_explorer.runs import download_jobs

    assert download_jobs.start("hf:nobody/nothing-here") is True
    failed = _wait("nobody/nothing-here")
    assert failed["state"] == "failed"
    assert failed["error"].startswith("there is no model nobody/nothing-here on the Hugging Face Hub")
    assert "\n" not in failed["error"]


def test_a_download_whose_process_died_at_its_start_is_stopped_at_once(tmp_path, monkeypatch):
    """A downloader that ended before it took its lock (killed, or an install broken under it) read "downloading"
    for a minute, every page showing a bar that never moved and no Download button."""
    import subprocess
    import sys

    from bert_explorer.runs import download_jobs

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    started = []

    def spawn(argv, log_file, env=None):  # a process that never takes the lock
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        return started[-1]

    monkeypatch.setattr(download_jobs, "spawn", spawn)
    monkeypatch.setattr(download_jobs, "reap_when_done", lambda proc: None)
    try:
        assert download_jobs.start(TINY) is True
        assert download_jobs.state(TINY)["state"] == "downloading"  # (its process still at its start)
        started[0].kill()
        started[0].wait()
        assert download_jobs.state(TINY)["state"] == "stopped"
        assert download_jobs.start(TINY) is True  # and Download starts it again
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_a_model_of_the_paper_picked_in_the_sidebar_holds_on_every_page(standin, runs_root):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../run_app.py", default_timeout=120).run()
    at.switch_page("pages/4_Masked_word_probe.py").run()
    at.sidebar.selectbox(key="be_model_choice").set_value(GALLERY).run()
    at.sidebar.selectbox(key="be_hub_choice").set_value(TINY).run()
    at.switch_page("pages/5_Next_sentence_probe.py").run()
    assert not at.exception
    assert at.sidebar.selectbox(key="be_model_choice").value == GALLERY
    assert at.sidebar.selectbox(key="be_hub_choice").value == TINY  # not back to BERT-Base, the list's first


def test_the_sidebar_says_when_the_files_of_a_paper_model_are_another_models(standin, runs_root, monkeypatch):
    """A mirror served a small model as BERT-Base: the sidebar said "L = 12, H = 768 ... 110.1 M parameters"
    above the loaded "L = 4 layers". It now says that the files hold another shape."""
    hub.download(BASE)   # the stand-in's BERT-Base is a small random BERT in BERT-Base's layout
    hub.download(TINY)   # its BERT-Tiny has BERT-Tiny's shape
    at = _sidebar_page(be_model_choice=BASE)
    assert not at.exception
    (said,) = [w.value for w in at.sidebar.warning if "The files downloaded as" in w.value]
    config = json.loads((hub.local_copy(BASE) / "config.json").read_text())
    assert said.startswith(f"The files downloaded as BERT-Base, uncased hold L = {config['num_hidden_layers']}, "
                           f"H = {config['hidden_size']}, A = {config['num_attention_heads']}, not the paper's "
                           "L = 12, H = 768, A = 12")
    # files of the shape their name says (the stand-in's BERT-Tiny is smaller than Google's: its entry is made
    # to fit it here) get no warning
    import dataclasses

    served = json.loads((hub.local_copy(TINY) / "config.json").read_text())
    monkeypatch.setitem(hub.CATALOGUE, TINY, dataclasses.replace(
        hub.CATALOGUE[TINY], layers=served["num_hidden_layers"], hidden=served["hidden_size"]))
    at.sidebar.selectbox(key="be_model_choice").set_value(TINY).run()
    assert not at.exception and not [w for w in at.sidebar.warning if "The files downloaded as" in w.value]


def test_bert_base_as_the_hub_ships_it_opens_in_info_export_and_finetune(standin, tmp_path, capsys, runs_root):
    """Its config.json names BertForMaskedLM, which info, export and finetune refused ("unknown architecture")
    though probe read it. It is read as the pre-training model, its heads kept, and exports as transformers
    reads it."""
    from transformers import BertForPreTraining

    hub.download(BASE)
    assert main(["info", "--model", "bert-base-uncased"]) == 0
    assert "unknown architecture" not in capsys.readouterr().err
    loaded = checkpoint.load(BASE)
    assert type(loaded.model).__name__ == "BertForPreTraining"
    out = tmp_path / "exported"
    assert main(["export", "--model", "bert-base-uncased", "--output", str(out)]) == 0
    theirs = BertForPreTraining.from_pretrained(out)  # what we wrote, read by transformers: the same weights
    ours = loaded.model.state_dict()
    assert torch.equal(theirs.state_dict()["bert.encoder.layer.0.attention.self.query.weight"],
                       ours["bert.encoder.layer.0.attention.self.query.weight"])
    run = tmp_path / "ft"
    assert main(["finetune", "--model", "bert-base-uncased", "--train", "tiny:classification", "--output", str(run),
                 "--epochs", "1", "--batch-size", "16", "--device", "cpu", "--precision", "fp32"]) == 0
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_the_users_token_goes_to_the_hub_they_named_and_never_to_the_cdn_a_redirect_names(repos, tmp_path,
                                                                                           monkeypatch):
    """HF_TOKEN was sent on every request, the CDN's too: a mirror's redirect to a host of its choosing got the
    user's token (huggingface_hub drops it there). The Hub named by HF_ENDPOINT still gets it (gated models)."""
    with hub_standin.HubStandin(repos, lfs_redirect=True) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        monkeypatch.setenv("HF_TOKEN", "hf_SECRET_TOKEN_123")
        checkpoint.load("hf:bert-base-uncased", "BertForPreTraining")
        cdn = [r for r in server.requests if r.path.startswith("/_cdn/")]
        hub_side = [r for r in server.requests if not r.path.startswith("/_cdn/")]
    assert cdn and not any(r.authorized for r in cdn)  # model.safetensors fetched from the "CDN" (localhost)
    assert hub_side and all(r.authorized for r in hub_side if r.path != "/api/agent-harnesses")


def test_an_empty_file_in_a_repository_is_downloaded_as_an_empty_file(repos, tmp_path, monkeypatch):
    """A zero-byte tokenizer_config.json stopped every download of its repository with a FileNotFoundError
    traceback (the empty file was never created before its hash was checked)."""
    import shutil

    root = tmp_path / "hub"
    shutil.copytree(repos / BASE, root / "someone/empty-file")
    (root / "someone/empty-file" / "tokenizer_config.json").write_bytes(b"")
    with hub_standin.HubStandin(root) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        folder = hub.open_model("hf:someone/empty-file")
    assert (folder / "tokenizer_config.json").read_bytes() == b"" and (folder / "model.safetensors").stat().st_size


def test_another_kind_of_model_is_refused_by_its_config_before_its_weights_are_fetched(repos, tmp_path,
                                                                                       monkeypatch):
    """A GPT-2 repository's weights (up to 2 GiB) were fetched before its config said it was no BERT, and the
    copy was then kept as whole. Its config.json is read first now: one sentence, no weights, no revision kept."""
    import shutil

    root = tmp_path / "hub"
    shutil.copytree(repos / BASE, root / "someone/gpt")
    config = json.loads((root / "someone/gpt" / "config.json").read_text())
    (root / "someone/gpt" / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with hub_standin.HubStandin(root) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        with pytest.raises(hub.HubError, match="someone/gpt is a 'gpt2' model, not a BERT, so its weights were not "
                                               "fetched"):
            hub.open_model("hf:someone/gpt")
        assert set(server.fetched("someone/gpt")) == {"config.json"}
    assert hub.local_copy("someone/gpt") is None


@pytest.mark.parametrize("field, value", [("hidden_size", 10**9), ("num_hidden_layers", 10**6),
                                          ("vocab_size", 10**12)])
def test_a_config_of_absurd_sizes_is_refused_before_its_weights_are_fetched(repos, tmp_path, monkeypatch, field,
                                                                            value):
    """hidden_size 10^9 was refused only once the weights were fetched (up to 2 GiB), and the copy then counted
    as downloaded: "delete ... and download the model again" fetched the same config again."""
    import shutil

    root = tmp_path / "hub"
    shutil.copytree(repos / TINY, root / "evil/absurd")
    config = json.loads((root / "evil/absurd" / "config.json").read_text())
    (root / "evil/absurd" / "config.json").write_text(json.dumps({**config, field: value}))
    with hub_standin.HubStandin(root) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        with pytest.raises(hub.HubError, match=rf"the config.json of evil/absurd is not a BERT this app can build "
                                               rf"\({field} must be .*\), so its weights were not fetched"):
            hub.open_model("hf:evil/absurd")
        assert set(server.fetched("evil/absurd")) == {"config.json"}
    assert hub.local_copy("evil/absurd") is None
    assert not [p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file() and "blobs" in p.parts]  # none kept


def test_a_config_too_large_for_settings_is_said_as_such_and_not_kept(repos, tmp_path, monkeypatch):
    """A valid config.json padded to 2 MB was said to be "not a JSON object of a model's settings", and its 2 MB
    stayed in the cache's blobs (the docs say nothing a refused server sent is kept)."""
    import shutil

    root = tmp_path / "hub"
    shutil.copytree(repos / TINY, root / "evil/padded")
    config = json.loads((root / "evil/padded" / "config.json").read_text())
    (root / "evil/padded" / "config.json").write_text(json.dumps(config) + " " * 2_000_000)
    with hub_standin.HubStandin(root) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        with pytest.raises(hub.HubError, match=r"^the config.json of evil/padded is 2 MB, more than the 1 MB a "
                                               r"model's settings take, so its weights were not fetched"):
            hub.open_model("hf:evil/padded")
    assert not [p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file() and "blobs" in p.parts]


def test_weights_whose_header_lies_are_refused_at_the_download_and_not_kept(repos, tmp_path, monkeypatch):
    """A model.safetensors whose header declares shapes its bytes do not hold was refused only when the model
    was opened ("give the checkpoint's file as it was written", of a file the user never wrote), and the copy
    counted as downloaded."""
    import shutil
    import struct

    root = tmp_path / "hub"
    shutil.copytree(repos / BASE, root / "evil/lying-header")
    weights = root / "evil/lying-header" / "model.safetensors"
    raw = weights.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"] = [10**6, 10**6]  # its offsets unchanged: the bytes cannot hold it
    text = json.dumps(header).encode()
    weights.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    with hub_standin.HubStandin(root) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "hf-cache")
        with pytest.raises(hub.HubError, match=r"^the server at http://127\.0\.0\.1:\d+ sent evil/lying-header's "
                                               r"model\.safetensors damaged \(.+\), so it was not kept; try again later"):
            hub.download("hf:evil/lying-header")
    assert hub.local_copy("evil/lying-header") is None
    assert not list((tmp_path / "hf-cache").rglob("*.safetensors*")) and not [
        p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file() and p.stat().st_size >= len(raw) // 2]


def test_a_cache_that_cannot_be_a_folder_is_one_sentence(repos, tmp_path, monkeypatch):
    """HF_HOME naming a file was a NotADirectoryError traceback at the first folder made for a download."""
    (tmp_path / "not-a-folder").write_text("mine")
    with hub_standin.HubStandin(repos) as server:
        server.point_client_here(monkeypatch, cache_dir=tmp_path / "not-a-folder" / "hub")
        with pytest.raises(hub.HubError, match="cannot hold google/bert_uncased_L-2_H-128_A-2 .*; point HF_HOME "
                                               r"\(or HF_HUB_CACHE\) at a folder you can write"):
            hub.open_model(f"hf:{TINY}")
    assert (tmp_path / "not-a-folder").read_text() == "mine"


def test_a_downloaded_copy_whose_config_is_broken_says_to_download_it_again(standin, monkeypatch):
    """A broken config.json in the Hugging Face cache was told to "put back the config.json saved with the
    weights", which the user never had; a copy here is never fetched again, so the remedy is to delete it."""
    folder = hub.open_model(f"hf:{TINY}")
    config = folder / "config.json"
    text = config.read_text()
    config.unlink()  # (a link into blobs/: replaced, not written through)
    config.write_text(text.replace("{", "{ broken", 1))
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(f"hf:{TINY}")
    assert str(e.value).endswith(f"; delete {hub.repo_folder(TINY).resolve()} and download the model again")


def test_a_command_says_it_downloads_a_hub_model_before_the_silence_of_the_download(standin, tmp_path, capsys):
    """bert-explorer finetune from a Hub model not downloaded yet said nothing while it downloaded (8 s here,
    minutes for BERT-Base); it says so first now, and not once the copy is here."""
    argv = ["finetune", "--model", f"hf:{TINY}", "--train", "tiny:classification", "--max-train-examples", "20",
            "--epochs", "1", "--max-seq-length", "32"]
    assert main(argv + ["--output", str(tmp_path / "first")]) == 0
    said = f"note: downloading hf:{TINY} from the Hugging Face Hub first (once: it opens offline after)"
    assert said in capsys.readouterr().err
    assert main(argv + ["--output", str(tmp_path / "second")]) == 0
    assert "downloading" not in capsys.readouterr().err


def test_two_downloads_of_one_model_at_once_fetch_its_files_once(standin):
    """The panel's download and a command's, together, each fetched the weights (four times over, with their
    retries): one download of a repository runs at a time now; the second waits, then finds the files whole."""
    import threading

    standin.throttle("pytorch_model.bin", 200_000)  # slow enough for the two to meet
    said, errors = [], []

    def download():
        try:
            hub.download(TINY, progress=lambda done, total, f: said.append(f))
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)

    threads = [threading.Thread(target=download) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and hub.local_copy(TINY) is not None
    assert standin.fetched(TINY).count("pytorch_model.bin") == 1
    assert hub.WAITING in said


def test_a_hub_name_typed_as_a_folder_is_downloaded_in_the_background(standin, runs_root):
    """The folder box's own placeholder offers "bert-base-uncased (downloaded once)": typed there, the model was
    fetched inside the page's run, "Loading the model…" for minutes with no size, progress or Cancel."""
    at = _sidebar_page(be_model_choice="a local directory…", be_model_path=TINY)
    assert not at.exception
    assert not [r for r in standin.requests if r.method == "GET" and r.filename]  # no file fetched by the page
    assert [b for b in at.sidebar.button if b.key == f"be_download_{TINY}"]  # the gallery's Download, offered
    assert any("is not on this machine yet: download it in the sidebar" in i.value for i in at.info)


def test_a_cancel_is_heard_between_tries_of_a_file(standin, monkeypatch):
    """A Cancel pressed while the server had stalled waited for the read's timeout and then for each retry's
    answer (up to three minutes): between two tries it is heard at once."""
    import urllib.error

    tries = []
    real = hub_server.OPENER.open

    def dropped(request, *args, **kwargs):  # the files' requests fail as a stalled line's read does
        if "/resolve/" in request.full_url and not request.full_url.endswith("config.json"):
            tries.append(request.full_url)
            raise urllib.error.URLError("timed out")
        return real(request, *args, **kwargs)

    monkeypatch.setattr(hub_server.OPENER, "open", dropped)
    with pytest.raises(hub.DownloadCancelled, match="was cancelled at pytorch_model.bin"):
        hub.download(TINY, cancel=lambda: len(tries) >= 1)  # pressed during the first try
    assert len(tries) == 1  # not the three retries more


def test_the_sidebar_says_its_download_waits_for_another(standin, runs_root, monkeypatch):
    """The panel drew "Downloading ...: 0 bytes of 193 kB" for as long as a command's download of the same model
    ran: its progress named the wait and the panel never read it."""
    from bert_explorer.runs import download_jobs

    monkeypatch.setattr(download_jobs, "state", lambda repo_id: {"state": "downloading", "done": 0,
                                                                  "total": 193_000, "file": hub.WAITING})
    at = _sidebar_page(be_model_choice=GALLERY, be_hub_choice=TINY)
    assert not at.exception
    (bar,) = at.sidebar.get("progress")
    assert bar.proto.text.startswith(f"Waiting for another download of {TINY} to end"), bar.proto.text


def test_a_command_that_waits_for_another_download_says_so(standin, capsys):
    """`bert-explorer download` beside the app's download of the same model showed "0%| 0.00/185k" and no word
    for 40 s."""
    import threading
    import time

    from bert_explorer import file_lock

    hub.repo_folder(TINY).mkdir(parents=True)
    lock = file_lock.acquire_file(hub.repo_folder(TINY) / ".download.lock", wait=False)  # the app's, running
    threading.Timer(1.5, file_lock.release, args=(lock,)).start()
    t0 = time.time()
    assert main(["download", "--no-progress", TINY]) == 0
    assert time.time() - t0 >= 1.4
    err = capsys.readouterr().err
    assert err.count(f"waiting for another download of {TINY} (the app's or another command's) to end") == 1, err


def test_two_downloads_at_once_each_count_what_the_other_still_fetches(standin, monkeypatch):
    """Two downloads into one cache each found room for itself alone, and together they filled the disk: the room
    asked for counts what the other downloads under way still fetch, and a download that has ended counts nothing."""
    import subprocess
    import sys

    from bert_explorer.processes import process_start

    monkeypatch.setattr(full_disk, "free_bytes", lambda folder: 40_000_000)  # the stand-in's miniature fits alone
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        root = hub.cache_root()
        root.mkdir(parents=True, exist_ok=True)
        (root / hub.DOWNLOADS).write_text(json.dumps([{
            "pid": other.pid, "created": process_start(other.pid), "folder": str(root / "models--someone--big"),
            "files": [["a" * 64, 45_000_000]]}]))
        with pytest.raises(full_disk.DiskFull, match=r"and 45 MB that 1 other download\(s\) into this cache "
                                                     r"still fetch\); free some space"):
            hub.download(TINY)
    finally:
        other.kill()
        other.wait()
    assert hub.download(TINY).is_dir()  # (its process gone, the other download counts nothing)
    assert json.loads((hub.cache_root() / hub.DOWNLOADS).read_text()) == []  # (and this one's note is taken back)


def test_a_disk_that_fills_during_a_download_is_said_in_a_sentence(standin, monkeypatch):
    """The disk filled in the middle of a download: the note of the downloads under way could not be written back
    either, and its OSError replaced the sentence (a 60-line traceback on the command line, "[Errno 28] No space
    left on device" in the app)."""
    import errno

    from bert_explorer import atomic

    writes = []
    real = atomic.write_text

    def full_after_the_first(path, text, *a, **k):
        writes.append(path)
        if len(writes) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text, *a, **k)

    def fetch_fills_the_disk(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hub.atomic, "write_text", full_after_the_first)
    monkeypatch.setattr(hub, "_fetch", fetch_fills_the_disk)
    with pytest.raises(full_disk.DiskFull, match=f"to download {TINY}.*free some space, then download it again"):
        hub.download(TINY)
    assert len(writes) == 2  # the note taken back was tried


def test_a_cancel_is_said_at_once_and_a_cancelled_download_is_not_said_to_start(standin, runs_root, monkeypatch):
    """After Cancel the sidebar showed the bar and its Cancel as if nothing was asked, then "Starting ...": the
    downloader had written "cancelled" but still held its lock for a moment."""
    import os

    from bert_explorer import file_lock
    from bert_explorer.runs import download_jobs

    d = download_jobs.work_dir(TINY)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    assert file_lock.acquire(fd, wait=False)  # a downloader at work
    try:
        download_jobs._write_progress(TINY, state="downloading", done=9_000, total=108_000, file="model.safetensors")
        download_jobs.cancel(TINY)
        assert download_jobs.state(TINY)["cancelling"] is True
        at = _sidebar_page(be_model_choice=GALLERY, be_hub_choice=TINY)
        assert not at.exception
        bars = [p.proto.text for p in at.sidebar.get("progress")]
        assert bars == [f"Cancelling the download of {TINY}…"], bars
        assert not [b for b in at.sidebar.button if b.key == f"be_download_cancel_{TINY}"]
        download_jobs._write_progress(TINY, state="cancelled", error="the download was cancelled", done=12_000)
        assert download_jobs.state(TINY)["state"] == "cancelled"  # said, though its process still ends
    finally:
        file_lock.release(fd)
