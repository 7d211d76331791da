"""One student must not take the class down: every typed size is bounded by its cost before work
starts, heavy work is cached and runs one request at a time, and a model that failed to load is
offered to nobody else.

Each page test gives the input a hostile student gave (2,000 lines, 600 masks, a 510-token input)
with the expensive call patched to fail if it is reached: the test pays none of the cost, and on code
without the limit it fails."""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

from bert_explorer import checkpoint, limits, shared_work
from bert_explorer.analysis import embeddings as emb
from bert_explorer.analysis.attributions import integrated_gradients as ig
from bert_explorer.analysis.attributions.reliability import step_schedule
from bert_explorer.analysis.probes import pretraining_tasks
from bert_explorer.model import BertConfig

ROOT = Path(__file__).resolve().parent.parent


def _page(name: str) -> AppTest:
    return AppTest.from_file(str(ROOT / "pages" / name), default_timeout=120)


def _never(what: str):
    """A stand-in for an expensive call that fails if reached."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"{what} was reached: the input should have been refused before any work")
    return refuse


def _said(at) -> str:
    return " ".join(str(e.value) for e in [*at.info, *at.warning, *at.error])


# ----- the limits follow the model ------------------------------------------------------------------------
def _config(L, H, A):
    return BertConfig(vocab_size=30522, hidden_size=H, num_layers=L, num_heads=A, intermediate_size=4 * H)


def test_limits_shrink_as_the_model_grows_and_keep_the_worst_input_within_the_budget():
    mini, base, large = (limits.for_config(_config(*s)) for s in ((6, 384, 12), (12, 768, 12), (24, 1024, 16)))
    assert mini.forward_tokens > base.forward_tokens > large.forward_tokens
    assert mini.token_steps > base.token_steps > large.token_steps
    assert large.attention_tokens < 512 <= mini.attention_tokens  # BERT-Large's maps of 512 would pass 300 MB
    for lim, (L, H, A) in ((mini, (6, 384, 12)), (base, (12, 768, 12)), (large, (24, 1024, 16))):
        budget = limits.SECONDS * limits.CPU_FLOP_S
        per_token = limits.forward_flops(L, H, 4 * H, limits.TYPICAL_TOKENS)
        assert lim.forward_tokens * per_token <= budget
        assert lim.compared * limits.TYPICAL_TOKENS * per_token <= budget   # § 5's sentences, cut to 128 pieces
        assert lim.token_steps * limits.IG_PASS * per_token <= budget
        assert 4 * L * A * lim.attention_tokens ** 2 <= limits.MEMORY      # every layer's and head's map


def test_the_attribution_schedule_never_spends_more_than_its_budget():
    for tokens in (1, 7, 12, 75, 300, 512):
        for start in (10, 50, 300):
            kept = ig.affordable(step_schedule(start, 400), tokens, 5871)
            assert sum(kept) * tokens <= 5871 and kept[0] >= min(start, limits.MIN_IG_STEPS)
    assert ig.affordable([50, 100, 200, 400], 12, None) == [50, 100, 200, 400]  # no bound: as asked
    assert ig.affordable([50, 100, 200, 400], 12, 12 * 160) == [50, 100]
    with pytest.raises(limits.TooLarge, match="shorten it"):
        ig.affordable([50], 512, 512 * 9)


# ----- the pages refuse before paying ----------------------------------------------------------------------
def test_tokens_page_refuses_2000_sentences_to_compare_before_running_the_model(monkeypatch):
    at = _page("1_Tokens_and_embeddings.py").run()
    monkeypatch.setattr(emb, "contextual_similarity", _never("the pairwise comparison"))
    # set_value: what a client sends over the websocket, past the browser's own max_chars check
    at.text_area(key="emb_ctx_sentences").set_value("\n".join(f"bank {i}" for i in range(2000))).run()
    assert not at.exception
    lim = limits.for_config(checkpoint.inspect(checkpoint.resolve(checkpoint.DEFAULT_MODEL)))
    assert f"2,000 sentences to compare: more than this server takes at once with this model (at most " \
           f"{lim.compared}" in _said(at)


def test_tokens_page_refuses_2000_words_and_2000_sentences_on_the_map(monkeypatch):
    at = _page("1_Tokens_and_embeddings.py").run()
    monkeypatch.setattr(emb, "static_word_vectors", _never("the word map"))
    at.text_area(key="emb_words").set_value(" ".join(f"w{i}" for i in range(2000))).run()
    assert not at.exception and "2,000 words: more than this server takes at once" in _said(at)
    monkeypatch.undo()
    at.radio(key="emb_proj_source").set_value("one word in several sentences").run()
    monkeypatch.setattr(emb, "word_in_context", _never("the map of one word in context"))
    at.text_area(key="emb_proj_sentences").set_value("\n".join(f"bank {i}" for i in range(2000))).run()
    assert not at.exception and "2,000 sentences: more than this server takes at once" in _said(at)


def test_masked_word_page_refuses_600_masks_before_running_the_model(monkeypatch):
    at = _page("4_Masked_word_probe.py").run()
    monkeypatch.setattr(pretraining_tasks, "mlm_top_k", _never("the masked-word prediction"))
    at.text_input(key="mlm_text").set_value("[MASK] " * 600).run()  # as a client sends it, past max_chars
    assert not at.exception
    # the page reads the box's first 2,000 characters (app/keep.py): 285 masks; the sentence says what to do
    assert "285 [MASK]s: more than this server takes at once" in _said(at) and not at.get("plotly_chart")
    assert re.search(r"hide at most \d+ words at a time", _said(at))


def test_next_sentence_page_refuses_a_table_of_a_thousand_pairs(monkeypatch):
    import pandas as pd

    monkeypatch.setattr(pretraining_tasks, "nsp_probability", _never("the next-sentence head"))
    at = _page("5_Next_sentence_probe.py")
    at.session_state["nsp_a"] = ""  # the single pair off: only the table would reach the model
    at.run()
    big = pd.DataFrame({"pair": ["real"] * 1000, "A": ["a sentence ."] * 1000, "B": ["another one ."] * 1000})
    # what a client sends as the data editor's edits: a thousand added rows
    at.session_state["nsp_table"] = {"edited_rows": {}, "added_rows": big.to_dict("records"), "deleted_rows": []}
    at.run()
    assert not at.exception and "pairs: more than this server takes at once" in _said(at)


def test_next_sentence_page_bounds_the_wordpieces_its_table_makes_the_model_read(monkeypatch):
    """The table's bound counted 2 x 128 WordPieces a pair, while each pair may reach 512: 50 pairs of up to 2,000
    characters each side are 25,600 WordPieces for minilm-mlm-nsp, past the 17,614 of its 10 s (for BERT-Base,
    8 pairs of 512 took about 19 s by the same arithmetic)."""
    import pandas as pd

    monkeypatch.setattr(pretraining_tasks, "nsp_probability", _never("the next-sentence head"))
    at = _page("5_Next_sentence_probe.py")
    at.session_state["nsp_a"] = ""
    at.run()
    long = "word " * 390  # (1,950 characters: within the pair's 4,000)
    rows = pd.DataFrame({"pair": ["real"] * 44, "A": [long] * 44, "B": [long] * 44})  # (50 with the 6 shown)
    at.session_state["nsp_table"] = {"edited_rows": {}, "added_rows": rows.to_dict("records"), "deleted_rows": []}
    at.run()
    assert not at.exception and "WordPieces to score (the rows, each padded to the longest pair): more than" in _said(at)


def test_attributions_page_refuses_a_510_token_input_before_integrating(monkeypatch):
    at = _page("6_Attributions.py").run()
    monkeypatch.setattr(ig, "integrated_gradients", _never("Integrated Gradients"))
    monkeypatch.setattr(limits, "CPU_FLOP_S", limits.CPU_FLOP_S / 50)  # the limit patched down: 510 tokens exceed it
    at.slider(key="attr_steps").set_value(300)
    at.text_input(key="attr_mlm_text").input("a " * 508 + "[MASK]").run()
    assert not at.exception
    assert "The input has 511 WordPieces: one attribution explains at most" in _said(at)


def _attributions_allowing_20_steps(monkeypatch, pieces: int):
    """The Attributions page, its server budget allowing 20 integration steps for a text of ``pieces`` WordPieces,
    with an integration that is reliable at once (f(x) - f(x') = 1, delta 0); and the list of the steps each call
    ran."""
    import dataclasses

    calls = []

    def fake(model, f, inputs, baselines, n_steps):
        calls.append(n_steps)
        return [torch.linspace(0, 1, inputs["input_ids"].shape[1])] * 3, 1.0, 0.0, 0.0

    real = limits.for_config
    monkeypatch.setattr(ig, "integrated_gradients", fake)
    monkeypatch.setattr(limits, "for_config", lambda config: dataclasses.replace(real(config),
                                                                                 token_steps=pieces * 20))
    return _page("6_Attributions.py").run(), calls


def test_steps_cut_below_the_slider_by_the_budget_are_said_even_when_reliable(monkeypatch):
    """The slider said 50, the server's budget allowed 20 for this text and the result was reliable with
    them: "steps used 20" with no word of why was a setting silently replaced."""
    text = "the cost of [MASK] rose again ."  # 9 WordPieces with [CLS] and [SEP]
    at, calls = _attributions_allowing_20_steps(monkeypatch, pieces=9)
    at.text_input(key="attr_mlm_text").input(text).run()
    assert not at.exception and calls[-1] == 20
    (said,) = [c.value for c in at.caption if "server spends at most" in c.value]
    assert "allows 20 integration steps in all, so it ran 20 steps, not the 50 set above" in said


def test_slider_values_above_the_budget_run_the_attribution_once(monkeypatch):
    """With a text the budget allows 20 steps for, each slider value above them (300, 290, ...) was a new
    cache key: seconds of CPU per move for the same 20 steps. The cache keys on the steps run; the caption
    still says what was set and what ran."""
    text = "the price of [MASK] fell once more ."  # 10 WordPieces with [CLS] and [SEP]
    at, calls = _attributions_allowing_20_steps(monkeypatch, pieces=10)
    at.slider(key="attr_steps").set_value(300)
    at.text_input(key="attr_mlm_text").input(text).run()
    assert not at.exception and calls[-1] == 20
    ran = len(calls)
    at.slider(key="attr_steps").set_value(290).run()
    assert not at.exception and len(calls) == ran  # the same 20 steps: read back, not integrated again
    (said,) = [c.value for c in at.caption if "server spends at most" in c.value]
    assert "allows 20 integration steps in all, so it ran 20 steps, not the 290 set above" in said
    assert {m.label: m.value for m in at.metric}["steps used"] == "20"


def test_a_heavy_request_behind_another_waits_its_turn_and_is_answered(monkeypatch):
    """A second student's probes (or a double click) behind a running one ended in "AttributeError: module
    'bert_explorer.shared_work' has no attribute 'wait_sentence'": the queue's own sentence was gone, and every
    page whose heavy work waits its turn broke on the first wait."""
    import threading

    from bert_explorer import shared_work

    def fake(model, f, inputs, baselines, n_steps):  # reliable at once: f(x) - f(x') = 1, delta 0
        return [torch.linspace(0, 1, inputs["input_ids"].shape[1])] * 3, 1.0, 0.0, 0.0

    monkeypatch.setattr(ig, "integrated_gradients", fake)
    monkeypatch.setattr(shared_work, "WAIT_REPORT_S", 0.2)
    running, release = threading.Event(), threading.Event()

    def another_request():
        with shared_work.HEAVY.turn():
            running.set()
            release.wait(30)

    holder = threading.Thread(target=another_request)
    holder.start()
    running.wait(10)
    threading.Timer(1.5, release.set).start()
    try:
        at = _page("6_Attributions.py").run()
        at.text_input(key="attr_mlm_text").input("a queue of [MASK] at the door .").run()
    finally:
        release.set()
        holder.join(10)
    assert not at.exception, at.exception
    assert at.metric  # answered once its turn came
    assert shared_work.wait_sentence(2, 0.0).startswith("Waiting for the server: 2 heavy requests ahead of yours")


def test_an_attribution_is_computed_once_for_every_session(monkeypatch):
    calls = []

    def fake(model, f, inputs, baselines, n_steps):  # reliable at once: f(x) - f(x') = 1, delta 0
        T = inputs["input_ids"].shape[1]
        calls.append((T, n_steps))
        return [torch.linspace(0, 1, T)] * 3, 1.0, 0.0, 0.0

    monkeypatch.setattr(ig, "integrated_gradients", fake)
    text = "the price of [MASK] went up again ."  # 10 WordPieces with [CLS] and [SEP]
    for _ in range(2):  # two students, the same sentence
        at = _page("6_Attributions.py").run()
        at.text_input(key="attr_mlm_text").input(text).run()
        assert not at.exception and at.metric
    # (the page's example, drawn first, is computed here too unless an earlier test computed it)
    assert [c for c in calls if c[0] == 10] == [(10, 50)]


# ----- heavy work: one at a time, its place in the queue shown ---------------------------------------------
def test_heavy_work_runs_one_request_at_a_time_and_each_waiter_hears_its_place(monkeypatch):
    monkeypatch.setattr(shared_work, "WAIT_REPORT_S", 0.02)
    queue = shared_work.Queue(at_once=1)
    running, most, heard = [0], [0], {}
    lock = threading.Lock()
    inside = threading.Event()

    def work(i):
        with queue.turn(lambda ahead: heard.setdefault(i, []).append(ahead)):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            inside.set()
            time.sleep(0.15)
            with lock:
                running[0] -= 1

    first = threading.Thread(target=work, args=(0,))
    first.start()
    inside.wait(5)
    others = [threading.Thread(target=work, args=(i,)) for i in (1, 2)]
    for t in others:
        t.start()
        time.sleep(0.05)  # in this order
    for t in [first, *others]:
        t.join(10)
    assert most[0] == 1
    assert 0 not in heard and heard[1][0] == 1 and heard[2][0] == 2  # one ahead (running), then two ahead


def test_two_sessions_asking_the_same_heavy_result_share_one_computation(monkeypatch):
    from bert_explorer.app.state import by_weights

    calls = []
    started = threading.Event()

    @by_weights(0, heavy=True)
    def slow(x):
        calls.append(x)
        started.set()
        time.sleep(0.2)
        return {"x": x}

    out = []
    threads = [threading.Thread(target=lambda: out.append(slow(7))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert calls == [7] and out == [{"x": 7}] * 3
    out[0]["x"] = 8  # each caller has its own copy
    assert slow(7) == {"x": 7}


def test_kept_results_are_bounded_in_bytes_least_recently_used_first():
    store = shared_work.Results(lambda: 1000)  # bytes
    for k in range(5):
        store.get_or_compute(("g", k), lambda k=k: b"x" * 300)
    assert store.size() <= 1000 and len(store) == 3
    hits = []
    store.get_or_compute(("g", 0), lambda: hits.append(0) or b"x" * 300)  # dropped: computed again
    assert hits == [0]


def test_shared_results_count_the_arrays_they_hold_and_the_heavy_queue_runs_on_any_setting(monkeypatch):
    """Eight shared 40 MB arrays were kept under a 1 MB budget and counted as 0 bytes (the Attention page keeps its
    maps shared, 75 MB each); BERT_EXPLORER_HEAVY_AT_ONCE=0.5 let no heavy request run at all."""
    import numpy as np

    store = shared_work.Results(lambda: 100_000)  # bytes
    for k in range(8):
        store.get_or_compute(("maps", k), lambda: {"attentions": [np.zeros((100, 100), np.float32)]}, shared=True,
                             max_entries=8, group="maps")
    assert store.size() <= 100_000 and len(store) == 2  # 40,000 bytes each
    for setting in ("0.5", "inf", "nan", "-3"):
        monkeypatch.setenv(shared_work.AT_ONCE_ENV, setting)
        assert shared_work.Queue().at_once == 1, setting


def test_a_browser_s_clear_cache_message_does_not_empty_the_class_s_results():
    calls = []
    key = ("test", "clear-cache")
    shared_work.RESULTS.get_or_compute(key, lambda: calls.append(1) or 42)
    st.cache_data.clear()      # what Streamlit does on a client's clear_cache message
    st.cache_resource.clear()
    assert shared_work.RESULTS.get_or_compute(key, lambda: calls.append(1) or 42) == 42 and calls == [1]


# ----- a model that failed to load ---------------------------------------------------------------------------
def test_a_model_that_failed_to_load_is_listed_to_nobody_else(runs_root, monkeypatch):
    broken = runs_root / "huge" / "checkpoints" / "step-1"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 10 ** 6,
                                                    "hidden_size": 64, "num_attention_heads": 2,
                                                    "intermediate_size": 128, "vocab_size": 100}))
    (broken.parent.parent / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
    monkeypatch.setattr(checkpoint, "new_model", _never("building the model"))
    first = _page("4_Masked_word_probe.py").run()
    box = first.sidebar.selectbox(key="be_model_choice")
    assert "huge · step 1" in box.options
    box.set_value(str(broken)).run()
    assert not first.exception and [i for i in first.info if "config.json" in i.value]  # this student reads why
    second = _page("4_Masked_word_probe.py").run()
    assert not second.exception
    assert "huge · step 1" not in second.sidebar.selectbox(key="be_model_choice").options
    # rewritten (a fixed config), it is offered again
    cfg = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 2}) + " ")
    third = _page("4_Masked_word_probe.py").run()
    assert "huge · step 1" in third.sidebar.selectbox(key="be_model_choice").options


def test_the_cli_prints_the_limits_the_pages_enforce_without_downloading(capsys):
    import json as json_

    from bert_explorer.cli import main

    assert main(["limits", "--model", "minilm-mlm-nsp", "bert-base-uncased", "--json"]) == 0
    table = json_.loads(capsys.readouterr().out)
    mini = limits.for_config(checkpoint.inspect(checkpoint.resolve("minilm-mlm-nsp")))
    assert table["minilm-mlm-nsp"]["token_steps"] == mini.token_steps
    assert table["bert-base-uncased"]["compared"] == limits.for_config(_config(12, 768, 12)).compared
    assert table["bert-base-uncased"]["attribution_tokens"] < table["minilm-mlm-nsp"]["attribution_tokens"]


# ----- each limit lets its bound through and refuses one more ------------------------------------------------
def test_check_takes_the_bound_and_refuses_one_more_for_every_limit():
    lim = limits.for_config(checkpoint.inspect(checkpoint.resolve(checkpoint.DEFAULT_MODEL)))
    for what, bound in lim.rows():
        limits.check(bound, bound, what)
        with pytest.raises(limits.TooLarge, match=f"{bound + 1:,} {re.escape(what)}: more than this server takes"):
            limits.check(bound + 1, bound, what)


class Reached(Exception):
    """The expensive call was reached: the input was let through."""


def _words(n):
    return " ".join(f"w{i}" for i in range(n))


def _lines(n):
    return "\n".join(f"the bank {i} ." for i in range(n))


LIMITED = [  # page, the limit, the expensive call, how the input of n is typed
    ("1_Tokens_and_embeddings.py", "words", (emb, "static_word_vectors"), lambda at, n: at.text_area(
        key="emb_words").set_value(_words(n))),
    ("1_Tokens_and_embeddings.py", "map_sentences", (emb, "word_in_context"), lambda at, n: at.text_area(
        key="emb_proj_sentences").set_value(_lines(n))),
    ("1_Tokens_and_embeddings.py", "compared", (emb, "contextual_similarity"), lambda at, n: at.text_area(
        key="emb_ctx_sentences").set_value(_lines(n))),
    ("4_Masked_word_probe.py", "masks", (pretraining_tasks, "mlm_top_k"), lambda at, n: at.text_input(
        key="mlm_text").set_value("a [MASK] " * n)),
]


@pytest.mark.parametrize("page, field, call, type_in", LIMITED, ids=[f"{p[:-3]}-{f}" for p, f, _, _ in LIMITED])
def test_each_page_limit_lets_its_bound_through_and_refuses_one_more(page, field, call, type_in, monkeypatch):
    bound = getattr(limits.for_config(checkpoint.inspect(checkpoint.resolve(checkpoint.DEFAULT_MODEL))), field)
    for n, let_through in ((bound, True), (bound + 1, False)):
        at = _page(page)
        if field == "map_sentences":
            at.session_state["emb_proj_source"] = "one word in several sentences"
        at.run()
        reached = []

        def reach(*args, **kwargs):
            reached.append(n)
            raise Reached()  # (the page stops here: the work itself is not the point)
        monkeypatch.setattr(*call, reach)
        type_in(at, n)
        at.run()
        assert bool(reached) == let_through, (n, bound, _said(at)[:200])
        assert ("more than this server takes at once" in _said(at)) == (not let_through)
        monkeypatch.undo()


def test_an_attribution_of_a_long_input_holds_no_more_memory_than_a_request_may():
    """limits.MEMORY is what one request may hold beyond the loaded model: Integrated Gradients of a
    400-WordPiece input (its backward pass keeps every layer's activations) stays within it, measured as
    the process's resident memory, sampled while it runs."""
    import psutil

    from bert_explorer.analysis.attributions import integrated_gradients as ig

    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining")
    text = " ".join(["the bank raised interest rates again ."] * 56) + " the [MASK] ."
    proc, stop = psutil.Process(), threading.Event()
    base = proc.memory_info().rss
    peak = [base]

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = ig.explain_masked_word(loaded, text, n_steps=limits.MIN_IG_STEPS)
    finally:
        stop.set()
        watcher.join()
    assert len(result.tokens) > 390
    assert peak[0] - base <= limits.MEMORY, f"{(peak[0] - base) / 1e6:.0f} MB"


def test_an_attribution_cut_to_the_servers_budget_says_what_it_ran(monkeypatch):
    """The caption of a schedule cut to the budget said "it tried 50 → 100 → 200" beside "steps used: 50":
    it names the schedule it may take, then what it ran. It said so also when 50 steps were reliable and no
    doubling was ever needed: only a cut that stopped a doubling is said."""
    delta = {"value": 0.5}  # f(x) - f(x') = 1: a delta of 0.5 is unreliable, the schedule would double

    def fake(model, f, inputs, baselines, n_steps):
        T = inputs["input_ids"].shape[1]
        return [torch.linspace(0, 1, T)] * 3, 1.0, 0.0, delta["value"]

    monkeypatch.setattr(ig, "integrated_gradients", fake)
    monkeypatch.setattr(limits, "CPU_FLOP_S", limits.CPU_FLOP_S / 2)  # about 160 steps for 18 WordPieces: 50 → 100
    at = _page("6_Attributions.py").run()
    text = "the price of [MASK] went up again , said the bank on monday ."
    at.text_input(key="attr_mlm_text").input(text).run()
    assert not at.exception and at.metric
    said = [c.value for c in at.caption if "integration steps in all" in c.value]
    assert said and re.search(r"so it ran 50( → \d+)* steps, not the 50( → \d+)+ asked for \(fewer steps leave a "
                              r"larger convergence delta; a shorter text allows more\)\.$", said[0]), said
    delta["value"] = 0.0  # reliable at the first 50 steps: the budget cut nothing
    at.text_input(key="attr_mlm_text").input(text + " ").run()
    assert not at.exception and at.metric
    assert not [c.value for c in at.caption if "integration steps in all" in c.value]


# ----- a pasted text longer than its box -------------------------------------------------------------
def test_no_text_box_leaves_its_bound_to_the_browser():
    """Streamlit's max_chars is the browser's: a paste longer than it is dropped without a word (the box
    stays empty, the page answers "write a sentence"). Every box bounded by the page passes its bound to
    kept_widget or text_box (app/keep.py), which read the first max_chars characters and say so."""
    import ast

    leaving = []
    for path in sorted([*ROOT.glob("pages/*.py"), ROOT / "run_app.py", *ROOT.glob("bert_explorer/app/*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and any(k.arg == "max_chars" for k in node.keywords) \
                    and ast.unparse(node.func) not in ("kept_widget", "text_box"):
                leaving.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert leaving == []


def test_a_paste_longer_than_its_box_is_read_in_part_and_said_and_kept_whole():
    pasted = "the price of [MASK] rose again on monday , said the bank . " + "it was a quiet day . " * 100
    pasted += "the second [MASK] comes after the first 2,000 characters . "
    pasted += "x" * (10_000 - len(pasted))
    assert len(pasted) == 10_000 and pasted.index("[MASK]", 20) > limits.CHARS
    at = _page("4_Masked_word_probe.py").run()
    at.text_input(key="mlm_text").input(pasted)
    at.text_input(key="mlm_demo_text").input("the quick brown fox " * 150).run()
    assert not at.exception
    said = [w.value for w in at.warning if "characters" in w.value]
    assert any(s.startswith("Sentence holds 10,000 characters; this box reads at most 2,000") for s in said), said
    assert any(s.startswith("Sentence to corrupt holds 3,000 characters") for s in said), said  # (both said
    # "Sentence holds": a student could not tell which box)
    # the first 2,000 characters were read: a bar chart for their one [MASK], none for the one past them
    assert len([c for c in at.get("plotly_chart") if "[MASK] at position" in c.proto.spec]) == 1
    assert len(at.session_state["mlm_text"]) == 10_000  # nothing the student typed is lost


def test_a_mask_only_past_the_bound_is_named_as_cut_off():
    """Cut to its first 2,000 characters, a text whose [MASK]s all lie past them has none to fill; the
    warning says why, rather than leaving "the text has no [MASK] token" unexplained."""
    pasted = "it was a quiet day . " * 100 + "the price of [MASK] rose again ."
    at = _page("4_Masked_word_probe.py").run()
    at.text_input(key="mlm_text").input(pasted).run()
    assert not at.exception
    said = [w.value for w in at.warning if "characters" in w.value]
    assert any("reads only its first 2,000. Every [MASK] in it lies past them." in s for s in said), said
    # Attributions said it twice: that warning, then "the text has no [MASK] token" under it
    at = _page("6_Attributions.py").run()
    at.text_input(key="attr_mlm_text").input(pasted).run()
    assert not at.exception
    assert [w.value for w in at.warning if "lies past them" in w.value] and not [
        i.value for i in at.info if "has no [MASK] token" in i.value]
    # a box that reads no [MASK] says nothing of one ("Word to explain ... Every [MASK] in it lies past them")
    at.text_input(key="attr_mlm_word").input(pasted).run()
    (word,) = [w.value for w in at.warning if w.value.startswith("Word to explain holds")]
    assert "[MASK]" not in word
