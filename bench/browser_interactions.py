"""From a user's action to the page drawn, in a real browser (Chromium via Playwright).

Starts the app on a free port (127.0.0.1, an empty runs folder), opens Home in Chromium (the
server's very first page: it imports torch and loads the default model), then opens every other
page of the menu once, by clicking its menu entry (each page's first visit, with the server warm
from Home), and then times what a user does on a page that is already open:

    cloze          Masked word probe: a new sentence with a [MASK] (typed, Enter)
    nsp pair       Next sentence probe: a new sentence B (typed, Ctrl+Enter)
    head           Attention, Heatmap tab: another head picked in the list
    tab            Attention: another tab clicked (each tab in turn)
    next step      Inside one layer: the Next button
    long input     Attention with a 446-token input and Max tokens 512: the input typed (Ctrl+Enter)
    window move    the same input: bertviz's 128-token window moved one step (the slider, arrow key)

"Drawn" means: Streamlit's script state is no longer "running", the element that the action
changes shows its new content (the bar chart of the new [MASK], the heatmap titled with the new
head, the step's heading, a new bertviz document with its SVG text), every plotly chart on the
page has its SVG, and two animation frames have passed. Each row also says how much of that time
came before the script finished (the server's share, as the browser's timeline sees it) and how
much after (drawing).

    python bench/browser_interactions.py [--rounds 2] [--repeats 3] [--only cloze head ...]
    python bench/browser_interactions.py --model base --runs /tmp/bench-runs   # BERT-Base, a real runs folder

``--model base|large`` serves BERT-Base or BERT-Large with random weights of the real shapes from a
Hugging Face cache made by ``bench/hub_shapes.py`` (``--hub-home``), picked in the sidebar as a user
picks a downloaded model (its first load is timed). Each interaction starts a new browser session on
Home, picks the round's model there and opens its page from the menu (a URL typed into the browser is
a new session, which shows the default model). ``--fresh-cache`` starts each round from an empty disk
cache (a machine's very first visits); what the server starts by itself in the background (a model's
quality measurement) is stopped after the first visit that started it. ``--runs DIR`` starts every round from a copy of
that runs folder (``bench/runs_folder.py`` makes one) instead of an empty one. Three more interactions
time the heavier pages: a new 128-token sentence on Attention (bertviz drawn), a new sentence on Two
models, and Attributions' default example (and one of about 128 tokens). The server's peak memory
(VmHWM) is printed at the end of each round.
    python bench/browser_interactions.py --only first --fresh-cache [--prepare] [--model base]   # before/after class
    python bench/browser_interactions.py --profile-server /tmp/server.txt   # py-spy, if installed
    python bench/browser_interactions.py --trace /tmp/trace.zip            # Playwright's trace
    python bench/browser_interactions.py --cpu-profile /tmp/att.cpuprofile --only attention128  # the browser's CPU

Every round starts a fresh server and a fresh browser profile; first visits are measured once
per round, interactions ``--repeats`` times per round; the table gives medians over all of them.
The browser runs on the same machine as the server, so on a 2-core CPU the figures include
their competition for it. Targets: warm interactions within 1 s, a long input's
window move within 2 s, every first visit within 3 s (except the server's very first page).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from classroom_load import ARGS, ROOT, _free_port  # noqa: E402

sys.path.insert(0, str(ROOT))
from bert_explorer.app.widgets import MENU  # noqa: E402

LONG_TOKENS = 446  # two paragraphs of a BBC article: the long input a review once timed

# Installed once per app element (a page opened from the menu may draw a new one): notes when
# Streamlit's script state goes to "running" and back.
WATCH = """() => {
  window.__be = window.__be || {running: null, done: null};
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || window.__beApp === app) return;
  window.__beApp = app;
  new MutationObserver(() => {
    const now = performance.now();
    if (app.getAttribute('data-test-script-state') === 'running') { window.__be.running = window.__be.running ?? now; window.__be.done = null; }
    else if (window.__be.running !== null) { window.__be.done = now; }
  }).observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
}"""
MARK = "() => { window.__be = {start: performance.now(), running: null, done: null}; }"
SETTLED = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') === 'running') return false;
  if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
  if (document.querySelector('[data-testid="stSkeleton"]')) return false;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) if (!plot.querySelector('.main-svg')) return false;
  return true;
}"""
FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
SERVER_SHARE = "() => window.__be && window.__be.done !== null ? window.__be.done - window.__be.start : null"


def machine() -> str:
    flags = set()
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    wanted = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8"]
    have = " ".join(f for f in wanted if f in flags) or "none of " + " ".join(wanted)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} cores; CPU flags: {have}; load average (1, 5, 15 min): {load}"


class Timer:
    """Times one action on ``page``: ``done`` is a JavaScript predicate for "the action's result is
    on screen"; the page must also have settled (SETTLED) and drawn two frames."""

    def __init__(self, page):
        self.page = page

    def __call__(self, action, done: str, timeout_s: float = 300) -> tuple[float, float | None]:
        page = self.page
        page.evaluate(WATCH)
        page.evaluate(MARK)
        t = time.perf_counter()
        action()
        page.wait_for_function(f"() => ({SETTLED})() && ({done})()", timeout=timeout_s * 1000, polling=30)
        page.evaluate(FRAMES)
        took = time.perf_counter() - t
        server = page.evaluate(SERVER_SHARE)
        return took, None if server is None else server / 1000


def text_in(selector: str, text: str) -> str:
    """JS predicate: some element matching ``selector`` contains ``text``."""
    import json
    return (f"() => [...document.querySelectorAll({json.dumps(selector)})]"
            f".some(e => (e.textContent || '').includes({json.dumps(text)}))")


def new_frame_drawn(index: int) -> str:
    """JS predicate: the ``index``-th iframe holds a document not marked by ``mark_frames`` whose
    bertviz SVG has its tokens written."""
    return (f"() => {{ const f = document.querySelectorAll('iframe')[{index}];"
            "  const d = f && f.contentDocument; const w = f && f.contentWindow;"
            "  return Boolean(d && w && !w.__beOld && d.querySelector('#vis svg text')); }")


MARK_FRAMES = "() => document.querySelectorAll('iframe').forEach(f => { if (f.contentWindow) f.contentWindow.__beOld = true; })"


def visible_in_tab(label: str, what: str) -> str:
    """JS predicate: the tab panel of ``label`` is shown and holds ``what`` (plotly or bertviz)."""
    import json
    inner = ("p.querySelector('.js-plotly-plot .main-svg')" if what == "plot" else
             "(() => { const f = p.querySelector('iframe'); return f && f.contentDocument && "
             "f.contentDocument.querySelector('#vis svg text'); })()")
    return (f"() => {{ const tabs = [...document.querySelectorAll('[role=tab]')];"
            f"  const tab = tabs.find(t => t.textContent.trim() === {json.dumps(label)});"
            "  if (!tab || tab.getAttribute('aria-selected') !== 'true') return false;"
            "  const p = document.getElementById(tab.getAttribute('aria-controls'));"
            f"  return Boolean(p && p.offsetParent !== null && {inner}); }}")


def model_label(model: str) -> str | None:
    """The sidebar's label of the model a round uses (None: the default model)."""
    if model == "default":
        return None
    from hub_shapes import SHAPES

    from bert_explorer import hub
    return f"{hub.CATALOGUE[SHAPES[model]].title} (downloaded)"


def stop_background_jobs(server_pid: int | None) -> None:
    """End the jobs the server started in the background (a model's quality measurement starts by
    itself on the Masked word probe's first visit: about 18 min of one core for BERT-Base), so that
    the rows after it time the pages, not their competition with it. Each is said as it is stopped."""
    import psutil

    if server_pid is None:
        return
    for child in psutil.Process(server_pid).children(recursive=True):
        try:
            print(f"  (stopped a background job of the server: {' '.join(child.cmdline()[1:4])} …)", flush=True)
            child.terminate()
        except psutil.Error:
            pass


def first_visits(page, base: str, timer: Timer, results: dict, label: str | None = None,
                 server_pid: int | None = None) -> None:
    t = time.perf_counter()
    page.goto(base, timeout=600_000)
    page.evaluate(WATCH)
    page.wait_for_function(f"() => ({SETTLED})() && ({text_in('h1', 'BERT Explorer')})()", timeout=600_000, polling=30)
    page.evaluate(FRAMES)
    results.setdefault("server's first page: Home", []).append((time.perf_counter() - t, None))
    if label:
        pick_model(page, timer, results, label)
    sidebar = page.locator("[data-testid='stSidebar']")
    for path, label, _ in MENU[1:]:
        link = sidebar.locator("[data-testid='stPageLink']", has_text=label).first
        before = page.locator("h1").first.text_content(timeout=60_000)
        results.setdefault(f"first visit: {label}", []).append(timer(
            link.click, f"() => {{ const h = document.querySelector('h1'); return h && h.textContent !== {before!r}; }}"))
        stop_background_jobs(server_pid)


# The model a round uses: each interaction starts a new browser session (a fresh page's widgets) and picks
# it in the sidebar as a user does; a URL typed into the browser would be a new session with the default.
ROUND = {"model": None}


def open_page(page, base: str, label: str) -> None:
    """A new session on Home, the round's model picked in the sidebar (untimed: it is loaded already),
    then the page ``label`` opened by its menu link, which keeps the session and so the model."""
    page.goto(base, timeout=600_000)
    page.evaluate(WATCH)
    page.wait_for_function(f"() => ({SETTLED})() && ({text_in('h1', 'BERT Explorer')})()", timeout=600_000, polling=30)
    if ROUND["model"]:
        pick_model(page, Timer(page), {}, ROUND["model"])
        page.wait_for_function(SETTLED, timeout=600_000)
    page.locator("[data-testid='stSidebar'] [data-testid='stPageLink']", has_text=label).first.click()
    page.wait_for_function(f"() => ({SETTLED})() && ({text_in('h1', label)})()", timeout=600_000, polling=30)
    if ROUND["model"]:  # the page says which model it shows: the one picked
        picker = page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").first
        shown = picker.text_content() + " " + " ".join(picker.locator("input").evaluate_all("es => es.map(e => e.value)"))
        assert ROUND["model"].split(" (")[0] in shown, f"{label} shows {shown!r}, not {ROUND['model']!r}"


def cloze(page, base, timer, results, repeats):
    open_page(page, base, "Masked word probe")
    page.get_by_text("Layer by layer").wait_for(timeout=300_000)
    sentences = [("the [MASK] sat on the mat .", 2), ("he drank a cup of hot [MASK] .", 7)]
    box = page.get_by_role("textbox", name="Sentence (write [MASK] where a word is hidden)")
    for i in range(repeats):
        text, position = sentences[i % 2]
        box.fill(text + " " * (i // 2))
        results.setdefault("cloze (Masked word probe)", []).append(
            timer(lambda: box.press("Enter"), text_in(".js-plotly-plot .gtitle", f"[MASK] at position {position}")))


def nsp_pair(page, base, timer, results, repeats):
    open_page(page, base, "Next sentence probe")
    page.locator("[data-testid='stMetricValue']").first.wait_for(timeout=300_000)
    box = page.get_by_role("textbox", name="Sentence B", exact=True)
    bs = ["prices rose again in the shops .", "the team won the cup final on sunday ."]
    for i in range(repeats):
        old = page.locator("[data-testid='stMetricValue']").first.text_content()
        box.fill(bs[i % 2] + " " * (i // 2))
        # the answer is a new P(IsNext), or (if equal by chance) at least a finished new run
        results.setdefault("next-sentence pair", []).append(timer(
            lambda: box.press("Control+Enter"),
            f"() => window.__be.done !== null || document.querySelector('[data-testid=\"stMetricValue\"]').textContent !== {old!r}"))


def attention(page, base, timer, results, repeats):
    open_page(page, base, "Attention")
    page.frame_locator("iframe").first.locator("svg text").first.wait_for(timeout=300_000)
    page.get_by_role("tab", name="Heatmap").click()
    page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=60_000)
    for i in range(repeats):
        head = 2 + i % 3
        page.locator('[data-testid="stSelectbox"]').filter(has_text="Head").first.click()
        option = page.get_by_role("option", name=str(head), exact=True)
        results.setdefault("head change (Attention, heatmap)", []).append(timer(
            option.click, text_in(".js-plotly-plot .gtitle", f"Layer 1, head {head}:")))
    # the tabs with a drawing, as the page names them (an older app called "Rollout and flow" "Rollout")
    drawings = {"Head view": "frame", "Model view": "frame", "Heatmap": "plot", "Head behaviours": "plot",
                "Rollout and flow": "plot", "Rollout": "plot", "Switch a head off": "plot"}
    present = [t.strip() for t in page.get_by_role("tab").all_text_contents()]
    tabs = [(label, drawings[label]) for label in present if label in drawings]
    for i in range(repeats):
        for label, what in tabs:
            tab = page.get_by_role("tab", name=label)
            results.setdefault("tab switch (Attention)", []).append(timer(tab.click, visible_in_tab(label, what)))


def next_step(page, base, timer, results, repeats):
    from bert_explorer.analysis.attention.layer_steps import STEPS

    open_page(page, base, "Inside one layer")
    page.get_by_text(f"Step 1 of {len(STEPS)}").wait_for(timeout=300_000)
    step = 1
    for i in range(repeats):
        if step == len(STEPS):
            page.get_by_role("button", name="◀ Previous").click()  # (untimed) back, to go forward again
            step -= 1
            page.get_by_text(f"Step {step} of {len(STEPS)}").wait_for(timeout=60_000)
        step += 1
        button = page.get_by_role("button", name="Next ▶")
        results.setdefault("Next (Inside one layer)", []).append(timer(
            button.click, text_in("h3", f"Step {step} of {len(STEPS)}: {STEPS[step - 1]}")))


def long_input(page, base, timer, results, repeats):
    from page_interactions import long_text

    open_page(page, base, "Attention")
    page.frame_locator("iframe").first.locator("svg text").first.wait_for(timeout=300_000)
    slider = page.get_by_role("slider").first
    slider.focus()
    slider.press("End")  # Max tokens: 512
    page.wait_for_function(SETTLED, timeout=120_000)
    a, b = long_text(LONG_TOKENS)
    page.get_by_role("textbox", name="Sentence B (optional)").fill(b)
    box = page.get_by_role("textbox", name="Sentence A", exact=True)
    box.fill(a)
    page.evaluate(MARK_FRAMES)
    results.setdefault(f"long input typed ({LONG_TOKENS} tokens)", []).append(timer(
        lambda: box.press("Control+Enter"), f"() => ({text_in('p', 'bertviz draws tokens 0')})() && ({new_frame_drawn(0)})()"))
    window = page.get_by_role("slider", name="bertviz draws the tokens from position")
    start = 0
    for i in range(repeats):
        window.focus()
        start += 16
        page.evaluate(MARK_FRAMES)
        results.setdefault("window move (long input)", []).append(timer(
            lambda: window.press("ArrowRight"),
            f"() => ({text_in('p', f'bertviz draws tokens {start}–')})() && ({new_frame_drawn(0)})()"))


def attention_sentence(page, base, timer, results, repeats):
    """A new sentence of about 128 WordPieces on Attention, until bertviz's head view has drawn it."""
    from page_interactions import long_text

    open_page(page, base, "Attention")
    page.frame_locator("iframe").first.locator("svg text").first.wait_for(timeout=600_000)
    for i in range(repeats):
        a, b = long_text(124)
        b = f"{b} it was day {i + 1} ."  # a new input each time (an unchanged one is not run again)
        page.get_by_role("textbox", name="Sentence B (optional)").fill(b)
        box = page.get_by_role("textbox", name="Sentence A", exact=True)
        box.fill(a)
        page.evaluate(MARK_FRAMES)
        results.setdefault("new 128-token sentence (Attention, bertviz)", []).append(timer(
            lambda: box.press("Control+Enter"), new_frame_drawn(0), timeout_s=600))


def two_models(page, base, timer, results, repeats):
    """A new sentence for Two models' attention maps (both models run on it). A downloaded model has
    no fine-tuning of its own in the runs folder to be model B: B is then the model itself, which
    costs what a fine-tuned copy of it would (both run)."""
    open_page(page, base, "Two models side by side")
    if ROUND["model"]:
        page.locator('[data-testid="stSelectbox"]').filter(has_text="Model B").first.click()
        page.keyboard.type("model A itself")
        option = page.get_by_role("option", name="(model A itself: every difference is 0)")
        results.setdefault("model B chosen (Two models: 64 sentences through both)", []).append(timer(
            lambda: option.click(timeout=30_000), "() => window.__be.done !== null", timeout_s=300))
    box = page.get_by_role("textbox", name="Sentence for the maps")
    box.wait_for(timeout=600_000)
    page.wait_for_function(SETTLED, timeout=600_000)
    texts = ["the dog chased the ball across the park .", "prices rose again in the shops ."]
    for i in range(repeats):
        text = texts[i % 2] + " " * (i // 2)
        box.fill(text)
        results.setdefault("new sentence (Two models)", []).append(timer(
            lambda: box.press("Enter"), "() => window.__be.done !== null", timeout_s=600))


def attributions(page, base, timer, results, repeats):
    """Attributions' default example opened afresh (default steps), then a sentence of about 128 tokens."""
    from page_interactions import long_text

    # A first visit computes the default example (its row, where first visits ran this round); a later
    # visit reads it back (the server keeps it, in memory and on disk), so it is timed only without them.
    if "first visit: Attributions" in results:
        open_page(page, base, "Attributions")
    else:
        open_page(page, base, "Masked word probe")
        link = page.locator("[data-testid='stSidebar'] [data-testid='stPageLink']", has_text="Attributions").first
        results.setdefault("default example (Attributions)", []).append(timer(
            link.click, text_in(".js-plotly-plot .gtitle", "attribution"), timeout_s=600))
    page.wait_for_function(SETTLED, timeout=600_000)
    a, _ = long_text(126)
    words = a.split()
    box = page.get_by_role("textbox", name="Sentence (the first [MASK] is explained)")
    box.fill(" ".join(words[:len(words) // 2] + ["[MASK]"] + words[len(words) // 2 + 1:]))
    results.setdefault("about 128 tokens (Attributions)", []).append(timer(
        lambda: box.press("Enter"), "() => window.__be.done !== null", timeout_s=900))


INTERACTIONS = {"cloze": cloze, "nsp": nsp_pair, "attention": attention, "next": next_step, "long": long_input,
                "attention128": attention_sentence, "two": two_models, "attributions": attributions}


def server_env(runs: str, hub_home: str | None = None, cache: str | None = None) -> dict:
    env = {**os.environ, "BERT_EXPLORER_RUNS": runs}
    if cache:
        env["BERT_EXPLORER_CACHE"] = cache
    if hub_home:
        env.update(HF_HOME=hub_home, HF_HUB_OFFLINE="1")
    return env


def prepare(model: str, env: dict, results: dict) -> None:
    """``bert-explorer prepare-class`` for the round's model (its pages' first visits, no long build),
    as a teacher runs it before class, into the cache the server will use; its time is a row."""
    from hub_shapes import SHAPES

    name = SHAPES[model] if model != "default" else "minilm-mlm-nsp"
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "prepare-class", "--model", name, "--builds"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    for line in out.stderr.splitlines():
        print(f"  prepare-class: {line}", flush=True)
    if out.returncode:
        raise SystemExit(f"prepare-class failed: {out.stderr.strip().splitlines()[-1:]}")
    results.setdefault("prepare-class (before the server)", []).append((time.perf_counter() - t, None))


def start_server(port: int, runs: str, hub_home: str | None = None, cache: str | None = None) -> subprocess.Popen:
    env = server_env(runs, hub_home, cache)
    return subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "run_app.py"),
                             "--server.address", "127.0.0.1", "--server.port", str(port),
                             "--server.headless", "true", "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def write_cpu_profile(profile: dict, path: str, top: int = 12) -> None:
    """Save Chromium's CPU profile (open it in Chrome's DevTools, Performance) and print where the
    browser's time went: self time by script, then by function. This is how hidden tabs' plotly charts
    were found to cost the Attention page seconds."""
    import collections
    import json

    Path(path).write_text(json.dumps(profile))
    nodes = {n["id"]: n["callFrame"] for n in profile["nodes"]}
    by_script, by_function = collections.Counter(), collections.Counter()
    for sample, delta in zip(profile["samples"], profile["timeDeltas"]):
        frame = nodes[sample]
        script = frame["url"].rsplit("/", 1)[-1] or "(the browser itself)"
        if frame["functionName"] != "(idle)":  # waiting is not work
            by_script[script] += delta / 1000
        by_function[f"{frame['functionName'] or '(anonymous)'} in {script}"] += delta / 1000
    print(f"browser CPU profile: {path} ({sum(by_script.values()) / 1000:.1f} s of work sampled)")
    for name, counts in (("script", by_script), ("function", by_function)):
        for what, ms in counts.most_common(top):
            print(f"  {ms:8.0f} ms  {name}: {what}")


def peak_memory_gb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in GB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    return float("nan")


def pick_model(page, timer, results, label: str) -> None:
    """Choose ``label`` in the sidebar's model picker, as a user does; timed until the page has settled
    with it (the model's first load, from the disk cache)."""
    page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox']").first.click()
    page.keyboard.type(label.split(" (")[0])  # a long list draws only the options in view: filter it first
    option = page.get_by_role("option", name=label)
    results.setdefault(f"model's first load: {label}", []).append(timer(
        option.click, "() => window.__be.done !== null", timeout_s=900))


def one_round(args, results: dict, round_no: int) -> None:
    from playwright.sync_api import sync_playwright

    port, runs = _free_port(), tempfile.mkdtemp(prefix="bench-runs-")
    if args.runs:  # a copy with the files' times (the runs' stored results stay valid), fresh each round
        shutil.rmtree(runs)
        shutil.copytree(args.runs, runs, symlinks=True)
    hub_home = None
    if args.model != "default":
        from hub_shapes import make
        make(Path(args.hub_home), args.model)
        hub_home = args.hub_home
    cache = tempfile.mkdtemp(prefix="bench-cache-") if args.fresh_cache else None
    if args.prepare:
        prepare(args.model, server_env(runs, hub_home, cache), results)
    server = start_server(port, runs, hub_home, cache)
    ROUND["model"] = model_label(args.model)
    spy = None
    if args.profile_server and round_no == 0:
        spy = subprocess.Popen([args.py_spy, "record", "--pid", str(server.pid), "--rate", "50", "--format", "raw",
                                "--output", args.profile_server, "--nonblocking"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", args=ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            if args.trace and round_no == 0:
                context.tracing.start(screenshots=False, snapshots=False)
            page = context.new_page()
            page.set_default_timeout(300_000)
            timer = Timer(page)
            for _ in range(240):  # the server takes a few seconds to listen
                try:
                    page.goto(base + "/_stcore/health", timeout=5_000)
                    break
                except Exception:
                    time.sleep(0.5)
            if "first" in args.only:
                first_visits(page, base, timer, results, model_label(args.model),
                             None if args.keep_background_jobs else server.pid)
            profiler = None
            if args.cpu_profile and round_no == 0:  # the browser's own CPU time, by script and function
                profiler = context.new_cdp_session(page)
                profiler.send("Profiler.enable")
                profiler.send("Profiler.setSamplingInterval", {"interval": 500})
                profiler.send("Profiler.start")
            for name in args.only:
                if name in INTERACTIONS:
                    try:  # one row that cannot be timed (an app without that page or widget) loses only itself
                        INTERACTIONS[name](page, base, timer, results, args.repeats)
                    except Exception as e:  # noqa: BLE001 - said, and the round goes on
                        print(f"  {name}: not measured ({type(e).__name__}: {str(e).splitlines()[0][:200]})",
                              flush=True)
            if profiler is not None:
                write_cpu_profile(profiler.send("Profiler.stop")["profile"], args.cpu_profile)
            if args.trace and round_no == 0:
                context.tracing.stop(path=args.trace)
            browser.close()
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        results.setdefault("server's peak memory (GB)", []).append((peak_memory_gb(server.pid), None))
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(runs, ignore_errors=True)
        if cache:
            shutil.rmtree(cache, ignore_errors=True)


# The budgets for the default model (BERT-Large gets 3 times each); None: reported, no budget.
TARGETS = {"window move": 2.0, "server's first page": None, "long input typed": None, "server's peak memory": 2.5,
           "first visit": 3.0, "model's first load": 10.0, "new 128-token sentence": 2.0, "new sentence": 5.0,
           "default example": 10.0, "about 128 tokens": None, "model B chosen": None, "prepare-class": None}


class Said(list):
    """A row's measurements, each printed as it comes (a long round shows where it is)."""

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def append(self, item) -> None:
        super().append(item)
        print(f"  {self.what}: {item[0]:.2f}", flush=True)


class Results(dict):
    def setdefault(self, what, default=None):
        if what not in self:
            self[what] = Said(what)
        return self[what]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2, help="fresh servers (first visits are measured once each)")
    p.add_argument("--repeats", type=int, default=3, help="each interaction, per round")
    p.add_argument("--only", nargs="+", default=["first", *INTERACTIONS], choices=["first", *INTERACTIONS])
    p.add_argument("--trace", help="write Playwright's trace of the first round here (.zip)")
    p.add_argument("--cpu-profile", help="write Chromium's CPU profile of the first round's interactions here "
                                          "(.cpuprofile) and print where the browser's time went")
    p.add_argument("--profile-server", help="py-spy the server during the first round into this file")
    p.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    p.add_argument("--model", choices=["default", "base", "large"], default="default",
                   help="the default model, or BERT-Base / BERT-Large with random weights (bench/hub_shapes.py)")
    p.add_argument("--hub-home", default=os.path.join(tempfile.gettempdir(), "bench-hub"),
                   help="the Hugging Face cache the random BERT-Base/Large are made in (kept between runs)")
    p.add_argument("--runs", help="start each round from a copy of this runs folder (bench/runs_folder.py)")
    p.add_argument("--fresh-cache", action="store_true",
                   help="each round starts with an empty disk cache (a machine's very first visits); by default the "
                        "user's cache is used, as a server that has run on this machine before finds it")
    p.add_argument("--prepare", action="store_true",
                   help="run `bert-explorer prepare-class` for the model (first visits only) before each round's "
                        "server starts, as a teacher does before class (with --fresh-cache: prepared, not warmed)")
    p.add_argument("--keep-background-jobs", action="store_true",
                   help="leave running what the server starts by itself (a model's quality measurement); by "
                        "default each is stopped after the first visit that started it")
    args = p.parse_args()
    if args.prepare:  # a prepared class: every first visit within 2 s (ready before the bell)
        TARGETS["first visit"] = 2.0
    print(machine())
    results: dict[str, list] = Results()
    for r in range(args.rounds):
        one_round(args, results, r)
    print(f"{args.rounds} rounds (fresh server each), {args.repeats} repeats of each interaction per round; medians")
    print(f"{'what':<44}{'n':>3}{'median s':>10}{'max s':>8}{'script done s':>15}{'target':>8}")
    for what, runs in results.items():
        took = [t for t, _ in runs]
        server = [s for _, s in runs if s is not None]
        target = TARGETS.get(what.split(" (")[0].split(":")[0], 1.0)
        unit = "GB" if "memory" in what else "s"
        mark = "" if target is None else f"{'≤' if statistics.median(took) <= target else '>'}{target:g} {unit}"
        print(f"{what:<44}{len(took):>3}{statistics.median(took):>10.2f}{max(took):>8.2f}"
              f"{(statistics.median(server) if server else float('nan')):>15.2f}{mark:>8}")
    print(machine().split("; ")[-1] + " (after)")


if __name__ == "__main__":
    main()
