"""A class of 30 with three hostile students: does everyone still get an answer?

Starts the app in classroom mode (`streamlit run run_app.py --server.address 0.0.0.0`) and, after a
first session has loaded the model, opens ``--clients`` sessions at once on the masked-word page,
``--repeats`` times, while ``--hostile`` sessions (three by default) do what a student's script can:

* one sends Streamlit's ``clear_cache`` message in a loop (what the menu's "Clear cache" sends);
* one PUTs 150 MB files to its session's upload address in a loop (no page of it shows an uploader);
* one asks for the largest inputs the limits allow, each new so that no cache answers it: Tokens and
  embeddings § 5 with as many sentences as it takes, each cut to 128 WordPieces; an attribution of
  the longest input the server explains; a sentence with as many [MASK]s as allowed.

The timed classes start only once every hostile session has done all it does at least once (a
`clear_cache`, a finished PUT, each largest input computed), and they go on attacking throughout; the
summary counts each action. With ``--clozes`` every student of a class sends a cloze of their own (no
cache answers it) instead of opening the page's shared example.

Each class session is timed from its request until the server says the page's script finished. The
server process's memory (its resident set, children included) is sampled every 0.2 s throughout.
Like classroom_load.py it speaks Streamlit's websocket protocol, no browser.

    python bench/hostile_class.py --clients 30 --repeats 3 [--clozes]
    python bench/hub_shapes.py /tmp/bench-hub base
    HF_HOME=/tmp/bench-hub HF_HUB_OFFLINE=1 python bench/hostile_class.py --clozes --model "BERT-Base, uncased (downloaded)"
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import psutil

from classroom_load import ROOT, _free_port, _one_session, _start_server, _wait_for_port

sys.path.insert(0, str(ROOT / "tests"))
from serving import put_file  # noqa: E402  (the tests' client: a PUT as a script sends it, XSRF cookie included)

UPLOAD_BYTES = 150 * 1024 * 1024


async def _ws(port: int):
    import websockets

    return await websockets.connect(f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"],
                                    max_size=None, open_timeout=600)


async def _run(ws, page: str, widgets: list | None = None) -> tuple[list, str]:
    """Run ``page`` with ``widgets`` (WidgetState protos) set; (the elements it drew, its session id)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    back = BackMsg()
    back.rerun_script.query_string, back.rerun_script.page_name = "", page
    for w in widgets or []:
        back.rerun_script.widget_states.widgets.append(w)
    await ws.send(back.SerializeToString())
    drawn, session = [], ""
    while True:
        msg = ForwardMsg()
        msg.ParseFromString(await asyncio.wait_for(ws.recv(), timeout=900))
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            session = msg.new_session.initialize.session_id
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            drawn.append(msg.delta.new_element)
        elif kind == "script_finished":
            return drawn, session


def _text(drawn: list, key: str, value: str):
    """The WidgetState that sets the text box whose key is ``key`` to ``value``."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    for e in drawn:
        kind = e.WhichOneof("type")
        if kind in ("text_area", "text_input") and getattr(e, kind).id.endswith(key):
            w = WidgetState()
            w.id, w.string_value = getattr(e, kind).id, value
            return w
    raise LookupError(f"no text box {key} on the page")


async def clear_caches(port: int, stop: asyncio.Event, counts: dict) -> None:
    from streamlit.proto.BackMsg_pb2 import BackMsg

    ws = await _ws(port)
    await _run(ws, "Masked_word_probe")
    back = BackMsg()
    back.clear_cache = True
    while not stop.is_set():
        await ws.send(back.SerializeToString())
        counts["clear_cache"] = counts.get("clear_cache", 0) + 1
        await asyncio.sleep(0.2)
    await ws.close()


async def put_uploads(port: int, stop: asyncio.Event, counts: dict) -> None:
    ws = await _ws(port)
    _, session = await _run(ws, "Masked_word_probe")
    data = os.urandom(1024) * (UPLOAD_BYTES // 1024)
    while not stop.is_set():
        status = await asyncio.to_thread(put_file, port, session, str(uuid.uuid4()), data)
        counts[f"PUT {status}"] = counts.get(f"PUT {status}", 0) + 1
    await ws.close()


async def largest_inputs(port: int, stop: asyncio.Event, counts: dict) -> None:
    from bert_explorer import checkpoint, limits

    lim = limits.for_config(checkpoint.inspect(checkpoint.resolve(checkpoint.DEFAULT_MODEL)))
    ws = await _ws(port)
    tokens, _ = await _run(ws, "Tokens_and_embeddings")
    attributions, _ = await _run(ws, "Attributions")
    masked, _ = await _run(ws, "Masked_word_probe")
    def tally(what: str, drawn: list) -> None:
        # an input over a limit would be refused with one sentence and cost nothing: that would not test it
        refused = any(e.WhichOneof("type") == "alert" and ("more than this server" in e.alert.body or
                                                           "explains at most" in e.alert.body) for e in drawn)
        key = f"{what} ({'refused' if refused else 'computed'})"
        counts[key] = counts.get(key, 0) + 1

    k = 0
    while not stop.is_set():
        k += 1
        # every sentence long enough to be cut to 128 WordPieces; a new number each time: no cache answers
        lines = "\n".join(f"bank {k} {i} " + "river " * 140 for i in range(lim.compared))
        drawn, _ = await _run(ws, "Tokens_and_embeddings", [_text(tokens, "emb_ctx_sentences", lines)])
        tally("§ 5 at its limit", drawn)
        words = " ".join(["river"] * (lim.attribution_tokens - 4) + [str(k)])[: limits.CHARS - 8]
        drawn, _ = await _run(ws, "Attributions", [_text(attributions, "attr_mlm_text", f"{words} [MASK]")])
        tally("attribution at its limit", drawn)
        drawn, _ = await _run(ws, "Masked_word_probe", [_text(masked, "mlm_text", f"{k} " + "[MASK] " * lim.masks)])
        tally("masks at their limit", drawn)
    await ws.close()


CLOZE_WORDS = ("river", "school", "money", "music", "water", "city", "king", "car", "book", "game")


def _choice(drawn: list, key: str, label: str):
    """The WidgetState that picks the option shown as ``label`` in the select box whose key is ``key``."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    for e in drawn:
        if e.WhichOneof("type") == "selectbox" and e.selectbox.id.endswith(key):
            w = WidgetState()
            w.id, w.string_value = e.selectbox.id, label
            return w
    raise LookupError(f"no select box {key} on the page")


async def _cloze_session(port: int, i: int, model: str | None = None) -> tuple[float, bool, bool]:
    """One student who types a cloze of their own (``i`` makes it new) into the Masked word probe, on the
    model shown as ``model`` in the sidebar (None: the default): timed from the sending of the cloze until
    the script finished. (seconds, no exception, classroom mode shown)."""
    ws = await _ws(port)
    drawn, _ = await _run(ws, "Masked_word_probe")
    picked = [_choice(drawn, "be_model_choice", model)] if model else []
    if picked:
        drawn, _ = await _run(ws, "Masked_word_probe", picked)
    cloze = f"the {CLOZE_WORDS[i % len(CLOZE_WORDS)]} number {i} was [MASK] than the one before ."
    t0 = time.perf_counter()
    drawn, _ = await _run(ws, "Masked_word_probe", [*picked, _text(drawn, "mlm_text", cloze)])
    took = time.perf_counter() - t0
    await ws.close()
    ok = not any(e.WhichOneof("type") == "exception" for e in drawn)
    shown = any(e.WhichOneof("type") == "alert" and "Classroom mode" in e.alert.body for e in drawn)
    return took, ok, shown


ATTACKS = {"clear_cache": ("clear_cache",), "PUT": ("PUT",),
           "largest inputs": ("§ 5 at its limit", "attribution at its limit", "masks at their limit")}


def _attacked(counts: dict, hostile: int) -> bool:
    """Has every hostile session done each of its actions at least once?"""
    wanted = [w for name in list(ATTACKS)[:hostile] for w in ATTACKS[name]]
    return all(any(k.startswith(w) for k in counts) for w in wanted)


async def _memory(pid: int, stop: asyncio.Event, peak: list) -> None:
    server = psutil.Process(pid)
    while not stop.is_set():
        try:
            rss = server.memory_info().rss + sum(c.memory_info().rss for c in server.children(recursive=True))
        except psutil.Error:
            return
        peak[0] = max(peak[0], rss)
        await asyncio.sleep(0.2)


async def main_async(clients: int, hostile: int, repeats: int, clozes: bool = False, model: str | None = None) -> None:
    port, runs = _free_port(), tempfile.mkdtemp(prefix="hostile-runs-")
    server = _start_server("0.0.0.0", port, runs)
    stop, counts, peak = asyncio.Event(), {}, [0]
    try:
        await _wait_for_port(port)
        cold = await _one_session(port, "Masked_word_probe")
        watcher = asyncio.create_task(_memory(server.pid, stop, peak))
        quiet = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            await asyncio.gather(*(_one_session(port, "Masked_word_probe") for _ in range(clients)))
            quiet.append(time.perf_counter() - t0)
        quiet_peak = peak[0]
        attackers = [asyncio.create_task(f(port, stop, counts))
                     for f in (clear_caches, put_uploads, largest_inputs)[:hostile]]
        t_attack = time.perf_counter()
        while not _attacked(counts, hostile) and time.perf_counter() - t_attack < 900:
            await asyncio.sleep(0.5)  # every attack has been made once before a class is timed
        ready_after = time.perf_counter() - t_attack
        before = dict(counts)
        walls, results = [], []
        for r in range(repeats):
            t0 = time.perf_counter()
            results += await asyncio.gather(*(_cloze_session(port, r * clients + i, model) if clozes
                                              else _one_session(port, "Masked_word_probe") for i in range(clients)))
            walls.append(time.perf_counter() - t0)
        during = {k: v - before.get(k, 0) for k, v in counts.items()}
        stop.set()
        for task in (*attackers, watcher):
            try:
                await asyncio.wait_for(task, 900)
            except Exception as e:  # noqa: BLE001  (a hostile session may die: say so)
                counts[f"{type(e).__name__}"] = counts.get(type(e).__name__, 0) + 1
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(runs, ignore_errors=True)
    times = sorted(t for t, _, _ in results)
    print(f"server on 0.0.0.0 (classroom mode), {os.cpu_count()} CPU cores, masked-word page, model "
          f"{model or 'minilm-mlm-nsp'}; "
          f"first session (cold) {cold[0]:.1f} s")
    print(f"{clients} at once, no attack: all answered within {statistics.median(quiet):.2f} s (median of {repeats}: "
          f"{', '.join(f'{w:.2f}' for w in quiet)}); server memory peak {quiet_peak / 1e9:.2f} GB")
    print(f"{clients} {'students each sending a cloze of their own' if clozes else 'at once'} beside {hostile} "
          f"hostile sessions: median {statistics.median(times):.2f} s, slowest "
          f"{times[-1]:.2f} s; all answered within {statistics.median(walls):.2f} s (median of {repeats}: "
          f"{', '.join(f'{w:.2f}' for w in walls)}); every page finished without an exception: "
          f"{all(ok for _, ok, _ in results)}")
    print(f"server memory peak throughout (resident, with its children): {peak[0] / 1e9:.2f} GB")
    print(f"the attack was under way in full after {ready_after:.0f} s: " +
          ", ".join(f"{k} × {v}" for k, v in sorted(before.items())))
    print("what the hostile sessions did while the classes were timed: " +
          ", ".join(f"{k} × {v}" for k, v in sorted(during.items()) if v) +
          "; in all: " + ", ".join(f"{k} × {v}" for k, v in sorted(counts.items())))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=30)
    ap.add_argument("--hostile", type=int, default=3, choices=range(0, 4))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clozes", action="store_true", help="each student sends a cloze of their own")
    ap.add_argument("--model", help="with --clozes: the sidebar's label of the model every student picks, e.g. "
                                    "'BERT-Base, uncased (downloaded)' (bench/hub_shapes.py makes one, HF_HOME)")
    args = ap.parse_args()
    asyncio.run(main_async(args.clients, args.hostile, args.repeats, args.clozes, args.model))


if __name__ == "__main__":
    main()
