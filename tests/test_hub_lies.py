"""A Hub server that lies: what it says is input, checked before it touches the disk.

A mirror named by ``HF_ENDPOINT`` (a documented, popular setting, over plain http too) can answer anything.
Against the stand-in told to lie (``HubStandin.lies``: tests/hub_standin.py) each test checks that a download
is refused in one sentence naming the server, that nothing it sent is kept, and that no file outside the
temporary cache changed: a decoy folder of "user files" next to the cache is hashed before and after.
"""
import hashlib
import re
import shutil
from pathlib import Path

import pytest

import hub_standin
from bert_explorer import checkpoint, hub, hub_server
from bert_explorer.cli import main

pytest.importorskip("transformers")  # the stand-in's weights are written by transformers' BertForPreTraining

BASE = "google-bert/bert-base-uncased"
SERVER = r"the server at http://127\.0\.0\.1:\d+"


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    hub_standin.write_bert_base_layout(root / BASE, seed=1)
    return root


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "hf-cache"


@pytest.fixture
def standin(repos, cache, monkeypatch):
    with hub_standin.HubStandin(repos) as server:
        server.point_client_here(monkeypatch, cache_dir=cache)
        yield server


@pytest.fixture
def decoy(tmp_path):
    """A user's folder beside the cache: a config.json and a dotfile a lying server would like to replace."""
    d = tmp_path / "decoy"
    d.mkdir()
    (d / "config.json").write_text('{"mine": true}\n')
    (d / "bashrc").write_text("alias ll='ls -l'\n")
    (d / "secret.txt").write_text("the user's own words, never a model file\n")
    return d


def _hashes(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (p.is_symlink(), hashlib.sha256(p.read_bytes()).hexdigest()
                                               if p.is_file() and not p.is_symlink() else None)
            for p in sorted(folder.rglob("*"))}


def _refused(match: str, decoy: Path) -> str:
    """Download BERT-Base from the lying server: a one-sentence HubError matching ``match``; the decoy as it was."""
    before = _hashes(decoy)
    with pytest.raises(hub.HubError) as e:
        hub.download(BASE)
    message = str(e.value)
    assert re.search(match, message), message
    assert "\n" not in message and "Traceback" not in message
    assert _hashes(decoy) == before
    assert hub.local_copy(BASE) is None
    return message


def _kept(cache: Path) -> dict:
    return {p.relative_to(cache).as_posix(): p.stat().st_size for p in cache.rglob("*") if p.is_file()} \
        if cache.exists() else {}


@pytest.mark.parametrize("file", ["config.json", "model.safetensors"])  # a plain ETag; an LFS file's X-Linked-Etag
@pytest.mark.parametrize("tag", ['"../../../decoy/bashrc"', 'W/"../../../decoy/config.json"', "../../../decoy/bashrc"])
def test_an_etag_that_names_a_path_outside_the_cache_writes_nothing(standin, cache, decoy, file, tag):
    standin.lies["etag"] = {file: tag}
    _refused(rf"^{SERVER} tags {re.escape(file)} of {BASE} '\.\./\.\./\.\./decoy/\w+(\.json)?', not the file's "
             r"content hash \(40 or 64 hex digits", decoy)
    assert _kept(cache) == {}  # refused while planning: not a byte fetched, not a folder made


def test_a_mirror_whose_etags_are_not_content_hashes_is_refused_by_name(standin, cache, decoy):
    """A real mirror may tag files its own way (nginx: "5f3a-1b2c"); such a tag cannot be told from a lie,
    and a blob under it would not be the one transformers finds, so the download is refused, not renamed."""
    standin.lies["etag"] = {"vocab.txt": '"5f3a2b1c-1b2c"'}
    message = _refused(rf"{SERVER} tags vocab\.txt of {BASE} '5f3a2b1c-1b2c', not the file's content hash", decoy)
    assert message.endswith("download from the Hub itself or a mirror that keeps its ETags (HF_ENDPOINT)")
    assert _kept(cache) == {}


def test_a_revision_that_names_a_path_outside_the_cache_writes_nothing(standin, cache, decoy):
    standin.lies["sha"] = "../../../decoy"
    _refused(rf"^{SERVER} names {BASE}'s revision '\.\./\.\./\.\./decoy', not a commit id \(40 hex digits\), so "
             "nothing was written", decoy)
    assert _kept(cache) == {}
    standin.lies.clear()  # the same server honest again: the download is whole, from the cache's own folder
    snapshot = hub.download(BASE)
    assert snapshot.parent == cache / "models--google-bert--bert-base-uncased" / "snapshots"
    assert re.fullmatch("[0-9a-f]{40}", snapshot.name) and hub.local_copy(BASE) == snapshot


def test_a_cache_entry_that_points_outside_the_cache_is_not_opened(cache, decoy, monkeypatch):
    """A refs/main written by an older version from a lying server's revision: never followed."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    (decoy / "model.safetensors").write_bytes(b"not a model")
    (decoy / "vocab.txt").write_text("[PAD]\n")
    refs = cache / "models--google-bert--bert-base-uncased" / "refs"
    refs.mkdir(parents=True)
    (refs.parent / "snapshots").mkdir()
    (refs / "main").write_text("../../../decoy")
    assert (refs.parent / "snapshots" / "../../../decoy" / "config.json").is_file()  # the path it would open
    assert hub.local_copy(BASE) is None and BASE not in hub.cached_berts()


@pytest.mark.parametrize("file", ["config.json", "model.safetensors"])
def test_a_server_that_sends_more_than_it_announced_is_stopped_and_nothing_kept(standin, cache, decoy, file):
    standin.lies.update(size={file: 1000}, stream=64 << 20)
    _refused(rf"^{SERVER} sent more of {re.escape(file)} of {BASE} than the 1 kB it announced, so it was stopped "
             "and nothing of it kept", decoy)
    kept = _kept(cache)
    assert not [p for p in kept if p.endswith(".incomplete")], kept
    real = {f: (standin.repo_dir(BASE) / f).stat().st_size for f in hub_standin.HubStandin(standin.root).files(BASE)}
    assert all(size <= max(real.values()) for size in kept.values())  # only the honest files before it
    (get,) = [r for r in standin.requests if r.method == "GET" and r.filename == file]
    assert get.sent < 16 << 20  # the client stopped reading; the server's writes ended in its socket buffers


def test_a_size_that_is_not_a_number_or_beyond_any_bert_is_refused_before_a_byte(standin, cache, decoy):
    standin.lies["size"] = {"vocab.txt": 10 ** 12}
    _refused(rf"^{SERVER} says vocab\.txt of {BASE} is 1,000 GB, more than the 33\.6 MB such a file of a BERT can "
             "be, so it was not fetched", decoy)
    standin.lies["size"] = {"model.safetensors": "12e3"}
    _refused(rf"^{SERVER} gave model\.safetensors of {BASE} the size '12e3', not a number of bytes", decoy)
    assert _kept(cache) == {}


def test_other_bytes_under_a_true_etag_never_become_the_blob(standin, cache, decoy):
    """Bytes of the announced length that are not the file (a proxy's error page, a mix of two versions):
    their hash is not the ETag, so they are not kept under it."""
    weights = (standin.repo_dir(BASE) / "model.safetensors").read_bytes()
    standin.lies["body"] = {"model.safetensors": bytes(len(weights))}
    _refused(rf"^the bytes of model\.safetensors of {BASE} that {SERVER} sent are not the file its ETag names \(their "
             "hash differs\), so nothing of it was kept", decoy)
    assert not [p for p in _kept(cache) if "incomplete" in p or p.endswith(hashlib.sha256(weights).hexdigest())]


def test_a_file_that_ends_before_its_announced_size_is_fetched_once_and_kept_or_refused(standin, cache, decoy):
    """A HEAD announced 5 kB more than the file holds: each try fetched the whole file, asked for the rest (416),
    deleted it and fetched it again, then said "stopped at 0 bytes ... run the same again ... what was fetched is
    kept", which repeated the same for ever. The file ends where it ends: its bytes are kept when they are the file
    the ETag names, else refused in a sentence that does not send the user round again."""
    weights = standin.repo_dir(BASE) / "model.safetensors"
    size = weights.stat().st_size
    standin.lies["head_size"] = {"model.safetensors": size + 5000}
    snapshot = hub.download(BASE)
    assert (snapshot / "model.safetensors").read_bytes() == weights.read_bytes()
    whole = [r for r in standin.requests if r.method == "GET" and r.filename == "model.safetensors" and not r.range]
    assert len(whole) == 1  # fetched once
    standin.requests.clear()
    hub.download(BASE)  # and not again: the blob kept is the file its ETag names
    assert not [r for r in standin.requests if r.method == "GET" and r.filename == "model.safetensors"]
    # the same, with other bytes than the file (a proxy's page of the same length): refused, and nothing kept
    shutil.rmtree(cache)
    standin.requests.clear()
    standin.lies["body"] = {"model.safetensors": bytes(size)}
    message = _refused(rf"^{SERVER} announced [\d.]+ kB for model\.safetensors of {BASE}, but the file it sends ends "
                       r"at [\d.]+ kB and is not the file its ETag names, so nothing of it was kept", decoy)
    assert "run the same again" not in message
    assert not [p for p in _kept(cache) if p.endswith(".incomplete")]
    assert len([r for r in standin.requests if r.method == "GET" and r.filename == "model.safetensors"]) == 1


def test_a_dropped_connection_goes_on_and_a_resume_from_the_wrong_byte_is_refused(standin, cache, decoy):
    weights = standin.repo_dir(BASE) / "model.safetensors"
    standin.drop_after("model.safetensors", weights.stat().st_size // 2, times=None)  # every answer cut
    message = _refused(r"^the download of model\.safetensors from google-bert/bert-base-uncased stopped at "
                       r"[\d.]+ kB of [\d.]+ kB \(.+\); run the same again to go on from there", decoy)
    assert "\n" not in message
    (part,) = [p for p in _kept(cache) if p.endswith(".incomplete")]
    assert part.startswith("models--google-bert--bert-base-uncased/blobs/")  # kept inside the cache, to go on from
    standin.clear_faults()
    standin.lies["range_from_zero"] = {"model.safetensors"}  # 206 with the first bytes again, and says so
    _refused(rf"^{SERVER} answered a request for model\.safetensors of {BASE} from byte \d+ with 'bytes 0-\d+/\d+', "
             "another part, so nothing of it was written", decoy)
    standin.lies.clear()
    standin.requests.clear()
    snapshot = hub.download(BASE)
    assert (snapshot / "model.safetensors").read_bytes() == weights.read_bytes()
    (get,) = [r for r in standin.requests if r.method == "GET" and r.filename == "model.safetensors"]
    assert get.range == f"bytes={weights.stat().st_size // 2}-"  # went on from the bytes kept


def test_a_part_of_a_file_that_changed_since_is_removed_not_left_to_pile_up(standin, cache, decoy):
    """A file whose ETag changed between two tries (a new commit, a mirror) left each try's part behind,
    never resumed, counted as the model's bytes here. The next download removes it; a part another tool may
    be filling now (written in the last minutes) is left alone."""
    import os
    import time

    weights = standin.repo_dir(BASE) / "model.safetensors"
    standin.lies["etag"] = {"model.safetensors": "a" * 64}  # the file as an earlier commit named it
    standin.drop_after("model.safetensors", weights.stat().st_size // 2, times=None)
    _refused(r"stopped at [\d.]+ kB of [\d.]+ kB", decoy)
    blobs = cache / "models--google-bert--bert-base-uncased" / "blobs"
    old = blobs / ("a" * 64 + ".incomplete")
    assert old.stat().st_size == weights.stat().st_size // 2
    fresh = blobs / ("b" * 64 + ".incomplete")  # another tool's download of another version, running now
    fresh.write_bytes(b"x" * 10)
    foreign = blobs / ("d" * 64 + ".incomplete")  # another tool's, interrupted long ago (huggingface-cli's)
    foreign.write_bytes(b"y" * 10)
    for part in (old, foreign):
        os.utime(part, (time.time() - hub.STALE_PART_S - 1,) * 2)
    standin.lies.clear()
    standin.clear_faults()
    hub.download(BASE)
    assert not old.exists() and fresh.exists() and foreign.exists()  # only this app's own stale part goes
    whole = sum(p.stat().st_size for p in standin.repo_dir(BASE).iterdir() if p.is_file())
    assert hub.bytes_here(BASE) <= whole + 20


def test_a_revision_already_in_the_cache_is_not_rewritten_by_another_servers_files(standin, cache, decoy):
    """A snapshot another tool left (its config.json linked to its own blob, no vocabulary yet) under the commit a
    mirror names: the download linked the mirror's config.json over it. One revision's file is one file: it is
    refused, and the link left as it was."""
    sha = "1" * 40
    folder = cache / "models--google-bert--bert-base-uncased"
    theirs = folder / "blobs" / ("c" * 64)
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"model_type": "bert", "theirs": true}')
    link = folder / "snapshots" / sha / "config.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(f"../../blobs/{theirs.name}")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(sha)
    standin.lies["sha"] = sha
    _refused(rf"^the Hugging Face cache holds config\.json of revision 111111111111 as another file than "
             rf"{SERVER} sends for it, so nothing of it was changed", decoy)
    assert link.resolve() == theirs.resolve() and '"theirs": true' in link.read_text()


def test_a_redirect_to_a_file_on_this_machine_is_refused(standin, cache, decoy):
    secret = (decoy / "secret.txt").read_bytes()
    standin.lies["location"] = {"model.safetensors": (decoy / "secret.txt").as_uri()}
    _refused(rf"^{SERVER} sent model\.safetensors of {BASE} to 'file://[^']+', not a web address", decoy)
    assert not any(secret in p.read_bytes() for p in cache.rglob("*") if p.is_file())


@pytest.mark.parametrize("bad", ["a\x00/b", "a\x1b[31m/b", "bert\u2010base-uncased", "caf\u00e9/bert", "a/ b",
                                 "owner--x/bert", "bert.git", "-bert/x", "a" * 97])
def test_ids_outside_the_hubs_own_rule_are_refused_in_one_sentence_everywhere(bad, capsys, standin):
    """huggingface_hub's validate_repo_id is the rule (ASCII only here); nothing is asked of any server."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if bad.isascii():
        with pytest.raises(HFValidationError):
            validate_repo_id(bad)
    with pytest.raises(hub.HubError, match=r"is not a Hugging Face model id; write it as owner/name in letters"):
        hub.canonical(bad)
    assert hub.local_copy(bad) is None and hub.bytes_here(bad) == 0
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.resolve("hf:" + bad)
    assert "\n" not in str(e.value) and "\x00" not in str(e.value) and "\x1b" not in str(e.value)
    assert main(["download", "--no-progress", "--", bad]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is not a Hugging Face model id" in err
    assert standin.requests == []


def test_every_id_the_hubs_rule_accepts_is_accepted():
    from huggingface_hub.utils import validate_repo_id

    for good in ("bert", "google-bert/bert-base-uncased", "google/bert_uncased_L-2_H-128_A-2", "a.b/c_d-e",
                 "x" * 96, "1/2", "Org.Name/Model.v2"):
        validate_repo_id(good)
        assert hub.canonical(good) == good


def test_a_typed_id_with_a_control_character_is_one_sentence_in_the_sidebar(runs_root):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file("../pages/4_Masked_word_probe.py", default_timeout=120)
    at.session_state["be_model_choice"] = "the paper's BERTs (Hugging Face Hub)…"
    at.session_state["be_hub_choice"] = "another hub id…"
    at.session_state["be_hub_id"] = "a\x00/b"
    at.run()
    assert not at.exception
    (error,) = at.sidebar.error
    assert "is not a Hugging Face model id" in error.value and "\n" not in error.value


def test_a_typo_of_a_papers_name_is_answered_with_the_name(standin, capsys):
    assert main(["download", "bert-base-uncase", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("bert-explorer: error: there is no model bert-base-uncase on the Hugging Face Hub (or it is "
                   "private); did you mean bert-base-uncased?")  # one line: no empty progress bar before it
    with pytest.raises(checkpoint.CheckpointError, match=r"no model called 'bert-large-uncase' here; did you mean "
                                                         r"bert-large-uncased\?"):
        checkpoint.resolve("bert-large-uncase")
    assert main(["download", "nobody/no-such-bert"]) == 2  # with a progress bar asked for: still one line
    assert capsys.readouterr().err.strip().endswith(
        "check the name, e.g. google-bert/bert-base-uncased, or list the paper's BERTs with `bert-explorer models`")


def test_the_models_list_says_what_part_of_a_download_is_here(standin, capsys):
    weights = standin.repo_dir("google-bert/bert-base-uncased") / "model.safetensors"
    standin.drop_after("model.safetensors", weights.stat().st_size // 2, times=None)
    with pytest.raises(hub.HubError):
        hub.download(BASE)
    assert main(["models"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith(BASE + " ")][0]
    assert re.search(r"partly here, [\d.]+ kB of about 440 MB", line), line


def test_a_busy_or_failing_server_is_not_said_to_refuse_and_the_part_fetched_is_said_kept(monkeypatch):
    """A 500 or a 429 mid-file read "the Hugging Face Hub refused ... (HTTP 500)", of a mirror too, without its
    Retry-After or a word that the part fetched is kept (it is, and the next try goes on from there); a server
    that answered with a hundred headers read "cannot be reached ... where there is internet"."""
    import email.message
    import http.client
    import urllib.error

    from bert_explorer import hub_server

    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example:8080")
    headers = email.message.Message()
    headers["Retry-After"] = "30"
    busy = hub_server.failed(urllib.error.HTTPError("u", 429, "Too Many", headers, None), "a/b", "the file model.safetensors")
    assert str(busy) == ("the server at mirror.example:8080 (HF_ENDPOINT) answered HTTP 429 (too many requests) when "
                         "the file model.safetensors of a/b was asked for; try again in 30 s: what was fetched is "
                         "kept, and the next try goes on from there")
    failing = hub_server.failed(urllib.error.HTTPError("u", 500, "Error", email.message.Message(), None), "a/b", "the model")
    assert "answered HTTP 500 (a server error)" in str(failing) and "try again later" in str(failing)
    # the first request, about the model, fetched nothing: nothing is said kept
    assert "what was fetched is kept" not in str(failing)
    odd = hub_server.failed(http.client.HTTPException("got more than 100 headers"), "a/b", "the model")
    assert "answered the request for the model of a/b in a way that could not be read (got more than 100 " \
           "headers)" in str(odd) and "where there is internet" not in str(odd)


def test_a_refusal_names_the_server_that_refused_and_a_remedy_that_helps(monkeypatch):
    """A CDN's 404 after the mirror's redirect read "the Hugging Face Hub refused the file ... (HTTP 404); try
    again later"; BERT-Large cased, picked from the app's own list on a mirror without it, "did you mean
    google-bert/bert-large-uncased?"."""
    import email.message
    import urllib.error

    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example:8080")
    cdn = hub_server.failed(urllib.error.HTTPError("http://cdn.example:9000/a/b/x", 404, "Not Found",
                                             email.message.Message(), None), "a/b", "the file model.safetensors")
    assert str(cdn) == ("the server at cdn.example:9000 (where mirror.example:8080 sent the request) refused the file "
                        "model.safetensors of a/b (HTTP 404); check HF_ENDPOINT")
    large = hub_server.failed(urllib.error.HTTPError("http://mirror.example:8080/api/models/x", 404, "Not Found",
                                               email.message.Message(), None), "google-bert/bert-large-cased",
                        "the model")
    assert str(large) == ("the server at mirror.example:8080 (HF_ENDPOINT) keeps no model google-bert/bert-large-cased, "
                          "one of the paper's BERTs on the Hugging Face Hub; point HF_ENDPOINT at a server that keeps "
                          "it, or unset it to ask the Hub")
    # a 401 of a public model with a token sent: the token is why, not the model (nor "try again later")
    monkeypatch.delenv("HF_ENDPOINT")
    monkeypatch.setenv("HF_TOKEN", "hf_expired")
    unauthorised = hub_server.failed(urllib.error.HTTPError("https://huggingface.co/api/models/x", 401, "Unauthorized",
                                                      email.message.Message(), None), "google-bert/bert-base-uncased",
                               "the model")
    assert str(unauthorised).startswith("the Hugging Face Hub refused google-bert/bert-base-uncased (HTTP 401, not "
                                        "authorised): the token sent (HF_TOKEN") and "unset HF_TOKEN" in str(unauthorised)


def test_a_file_whose_server_cannot_be_reached_says_why_in_words(standin, cache, decoy, monkeypatch):
    """"stopped at 0 bytes of 182 kB (<urlopen error [Errno 111] Connection refused>)": the library's own text."""
    import urllib.error

    real = hub_server.OPENER.open

    def refused(request, *args, **kwargs):
        if request.full_url.endswith("model.safetensors"):
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        return real(request, *args, **kwargs)

    monkeypatch.setattr(hub_server.OPENER, "open", refused)
    message = _refused(r"stopped at 0 bytes of [\d.]+ kB \(\[Errno 111\] Connection refused\)", decoy)
    assert "urlopen" not in message


def test_a_server_that_drips_its_answers_is_given_up_within_a_deadline(standin, cache, decoy, monkeypatch):
    """A mirror that sends its file list a byte every 29 s never met a read timeout (30 s a read): the
    download waited without end and said nothing. An answer must be whole within ANSWER_DEADLINE_S."""
    import time

    monkeypatch.setattr(hub_server, "ANSWER_DEADLINE_S", 1.0)
    standin.lies["drip"] = 20  # bytes a second: the repository's answer (hundreds of bytes) takes tens of seconds
    t = time.monotonic()
    _refused(rf"^{SERVER} did not finish answering about {BASE} within 1 s \(its bytes come too slowly\), so "
             "nothing more was asked of it; try again later, or check HF_ENDPOINT", decoy)
    assert time.monotonic() - t < 10
    assert not _kept(cache)
