"""Retake the README's screenshots: the app served on 127.0.0.1, driven by Chromium (Playwright).

    python docs/screenshots.py --runs RUNS_FOLDER [--only home,attention] [--out assets/screenshots]

RUNS_FOLDER is given to the app as BERT_EXPLORER_RUNS. The shots of Attributions, Two models and
After fine-tuning need a finished fine-tuning of minilm-mlm-nsp on builtin:bbc-topics in it (with
dev_predictions.json); Nearest neighbours needs the index of minilm-mlm-nsp on bbc at layers 0 and 6
in the cache (`bert-explorer neighbours build --model minilm-mlm-nsp --layer 0,6`), the head map its map
(`bert-explorer head-map build --model minilm-mlm-nsp`). Each page is
brought to the state the README's caption describes, the script waits until Streamlit has finished
running and every plot is drawn, and the window is 1,400 pixels wide (taller where a page shows more;
the two Attention tabs attention_flow and head_map are 1,000 wide).

Each shot is taken on an app server whose environment is what its caption describes, one server at a
time: most on a private one reading RUNS_FOLDER and the cache of this environment; home on one in
classroom mode (BERT_EXPLORER_CLASSROOM=1), opened through the teacher's link, so that Home shows the
teacher's view with "Prepare for class" open; fine_tune_multi_label on one with an empty runs folder of
its own (its run never lands in RUNS_FOLDER, where After fine-tuning and Runs would show it); gallery
and download on one pointed at the tests' stand-in Hub (tests/hub_standin.py), with a Hugging Face
cache and an app cache of their own. The script's temporary folders (the stand-in's repositories and
caches, the multi-label run, its upload) are removed at the end, after a failure too, and what the
servers started (a download under way, a fine-tuning cut short) is ended first.

Each shot is quantised to 64 colours with Pillow (as tests/test_class_browser.py keeps its shots) and kept
as lossless WebP (a quarter smaller than the same pixels as PNG) to keep the repository small. A page that fails stops with a sentence naming it; the others are still taken
(the exit code is 1).
"""
import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTH = 1400
SLOW = 300_000  # ms: a first visit on a shared 2-core CPU loads torch and a model
COLOURS = 64  # what every PNG is quantised to (tests/test_class_browser.py's shots too)
# The classroom server's teacher token (BERT_EXPLORER_TEACHER_TOKEN): home opens the teacher's link with it.
TEACHER_TOKEN = secrets.token_urlsafe(18)
TEMP: Path | None = None  # the script's temporary folder while main() runs: uploads go there

# The page has settled: the script is not running, no skeleton, every plotly chart drawn
# (bench/browser_interactions.py's check).
SETTLED = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app || app.getAttribute('data-test-script-state') === 'running') return false;
  if (document.querySelector('[data-testid="stStatusWidget"]')) return false;
  if (document.querySelector('[data-testid="stSkeleton"]')) return false;
  if (document.querySelector('[data-testid="stSpinner"]')) return false;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) if (!plot.querySelector('.main-svg')) return false;
  return true;
}"""


class ShotFailed(Exception):
    pass


def settle(page, timeout=SLOW, pause=2.0):
    """Wait until Streamlit has finished running and drawn, then a moment for grids and iframes."""
    time.sleep(0.8)  # a click's rerun may not have started yet
    page.wait_for_function(SETTLED, timeout=timeout)
    time.sleep(pause)
    page.wait_for_function(SETTLED, timeout=timeout)


def check(page, name):
    """No exception box on the page."""
    exc = page.locator("[data-testid='stException']")
    if exc.count():
        raise ShotFailed(f"the {name} page shows an exception: {exc.first.inner_text()[:300]}")


def shoot(page, out: Path, name: str, height: int = 1000, at=None, width: int = WIDTH):
    """Save out/NAME.webp at ``width`` × height; ``at`` (a locator) is scrolled to the top first."""
    check(page, name)
    page.set_viewport_size({"width": width, "height": height})
    time.sleep(1.5)
    if at is not None:
        # to the top, then back by Streamlit's fixed header so that the element is not under it
        at.first.evaluate("""e => { e.scrollIntoView({block: 'start'});
            let p = e.parentElement;
            while (p && !(p.scrollHeight > p.clientHeight && getComputedStyle(p).overflowY !== 'visible')) p = p.parentElement;
            if (p) p.scrollBy(0, -70); }""")
        time.sleep(1.0)
    shot, path = out / f"{name}.png", out / f"{name}.webp"
    page.screenshot(path=str(shot))
    page.set_viewport_size({"width": WIDTH, "height": 1000})
    keep_small(shot, path)
    print(f"{name}.webp: {path.stat().st_size / 1024:.0f} KB", flush=True)


def keep_small(shot: Path, path: Path) -> None:
    """The screenshot ``shot`` as ``path``: 64 colours, lossless WebP where ``path`` ends in .webp (else PNG);
    ``shot`` is removed when it is another file."""
    from PIL import Image  # a dependency of streamlit

    small = Image.open(shot).convert("RGB").quantize(colors=COLOURS)
    if path.suffix == ".webp":
        small.convert("RGB").save(path, "WEBP", lossless=True, quality=100, method=6)
    else:
        small.save(path, optimize=True)
    if shot != path:
        shot.unlink()


def visit(page, base, path, heading):
    page.goto(f"{base}/{path}")
    try:
        page.locator("h1", has_text=heading).first.wait_for(timeout=SLOW)
    except Exception as e:
        raise ShotFailed(f"the page /{path} showed no heading “{heading}” within {SLOW // 1000} s") from e
    settle(page)


# ----- one function per screenshot: bring the page to the README's state -----------------------

def home(page, base, out):
    """The teacher's view of Home in classroom mode (the classroom server): opened through the teacher's
    link, so "Prepare for class" is drawn, and open, as it is for the teacher of a class."""
    visit(page, base, f"?teacher={TEACHER_TOKEN}", "BERT Explorer")
    try:
        page.get_by_text("Classroom mode, the teacher's view").first.wait_for(timeout=60_000)
        page.get_by_text("What is prepared", exact=False).first.wait_for(timeout=SLOW)
    except Exception as e:
        raise ShotFailed("Home shows no teacher's view with the Prepare for class panel open (the sidebar should say "
                         "\"Classroom mode, the teacher's view\")") from e
    settle(page)
    shoot(page, out, "home", 1300)


def inside_one_layer(page, base, out):
    visit(page, base, "Inside_one_layer", "Inside one layer")
    for _ in range(3):  # step 1 → step 4, the mask
        page.get_by_role("button", name="Next ▶").click()
        settle(page)
    page.get_by_text("Step 4 of").first.wait_for(timeout=SLOW)
    shoot(page, out, "inside_one_layer", 1300)


def _bertviz_drawn(page, frame_index):
    frame = page.frame_locator("iframe").nth(frame_index)
    frame.locator("svg text", has_text="[CLS]").first.wait_for(timeout=SLOW)
    time.sleep(2)


def attention(page, base, out):
    visit(page, base, "Attention", "Attention")
    _bertviz_drawn(page, 0)
    shoot(page, out, "attention", 1300)


def attention_model_view(page, base, out):
    visit(page, base, "Attention", "Attention")
    page.get_by_role("tab", name="Model view").click()
    settle(page)
    frames = page.locator("iframe")
    # the model view is the visible iframe of the "Model view" tab
    panel = page.locator("[role='tabpanel']:visible")
    panel.locator("iframe").first.wait_for(timeout=SLOW)
    idx = next(i for i in range(frames.count()) if frames.nth(i).is_visible())
    page.frame_locator("iframe").nth(idx).locator("svg").first.wait_for(timeout=SLOW)
    time.sleep(3)
    shoot(page, out, "attention_model_view", 1620)


def _attention_tab(page, base, out, tab: str, ready, name: str, height: int, top: str):
    """One tab of the Attention page, once ``ready(page)`` returns, from ``top`` (a text) down, 1,000 px wide."""
    visit(page, base, "Attention", "Attention")
    page.get_by_role("tab", name=tab).click()
    settle(page)
    ready(page)
    shoot(page, out, name, height, at=page.get_by_text(top), width=1000)


def attention_flow(page, base, out):
    _attention_tab(page, base, out, "Rollout and flow",
                   lambda page: page.get_by_text("max-flows on this model").first.wait_for(timeout=SLOW),
                   "attention_flow", 1900, "Attention rollout and attention flow")


def _map_drawn(page):
    """The head map itself: the open tab's two plots (by layer, by behaviour), drawn. The tab's explanation
    is there with or without a map, so only the plots say it was built."""
    plots = page.locator("[role='tabpanel']:visible .js-plotly-plot", has_text="heads, coloured by")
    try:
        plots.nth(1).locator(".main-svg").first.wait_for(timeout=30_000)  # the page has settled: not long
    except Exception as e:
        raise ShotFailed("the Head map tab draws no map of minilm-mlm-nsp: its map is not in the cache; build it with "
                         "`bert-explorer head-map build --model minilm-mlm-nsp`") from e
    settle(page)


def head_map(page, base, out):
    """Needs the head map of minilm-mlm-nsp in the cache (`bert-explorer head-map build --model minilm-mlm-nsp`)."""
    _attention_tab(page, base, out, "Head map", _map_drawn, "head_map", 1180, "Each dot is one head of this model")


def attributions(page, base, out):
    visit(page, base, "Attributions", "Attributions")
    page.get_by_text("fine-tuned classifier", exact=True).click()
    settle(page)
    page.get_by_text("Predicted").first.wait_for(timeout=SLOW)
    settle(page)
    # from the run picked down to the chart: the page's introduction is in the other shots
    shoot(page, out, "attributions", 1350, at=page.get_by_text("Fine-tuning run", exact=True))


def masked_word_probe(page, base, out):
    visit(page, base, "Masked_word_probe", "Masked word probe")
    shoot(page, out, "masked_word_probe", 1600)


def next_sentence_probe(page, base, out):
    visit(page, base, "Next_sentence_probe", "Next")
    shoot(page, out, "next_sentence_probe", 1560)


def nearest_neighbours(page, base, out):
    visit(page, base, "Nearest_neighbours", "Nearest neighbours")
    if page.get_by_text("No index of", exact=False).count() or page.get_by_text("Building the index").count():
        raise ShotFailed("the Nearest neighbours page has no finished index of layer 6 of minilm-mlm-nsp on bbc: "
                         "run `bert-explorer neighbours build --model minilm-mlm-nsp --layer 0,6` first")
    box = page.get_by_role("checkbox", name="Compare with the other layer")
    box.wait_for(timeout=SLOW)
    box.check(force=True)
    settle(page)
    shoot(page, out, "nearest_neighbours", 1500)


def two_models(page, base, out):
    visit(page, base, "Two_models", "Two models")
    page.locator(".js-plotly-plot").first.wait_for(timeout=SLOW)
    settle(page)
    # from the choice of model B down to the CKA plot and the grid of head distances
    shoot(page, out, "two_models", 1700, at=page.get_by_text("Model B", exact=True))


def probing(page, base, out):
    visit(page, base, "What_each_layer_knows", "What each layer knows")
    run = page.get_by_role("button", name="Run the probes")
    if run.count():
        run.click()
        settle(page, timeout=900_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=SLOW)
    settle(page)
    shoot(page, out, "probing", 1500)


def fine_tune(page, base, out):
    visit(page, base, "Fine-tune", "Fine-tune")
    page.get_by_text("Built-in dataset", exact=True).click()
    settle(page)
    page.locator(".js-plotly-plot").first.wait_for(timeout=SLOW)  # the run's curves, under "3. Run and dev results"
    settle(page)
    shoot(page, out, "fine-tune", 1450, at=page.get_by_role("heading", name="1. Data"))


def fine_tune_multi_label(page, base, out):
    """A multi-label CSV uploaded (label sets joined by ';'), fine-tuned with the page's settings but
    10 epochs (the paper's 3 leave this small set's sigmoids near 0.5)."""
    import csv

    from bert_explorer.data.tiny_tasks import make_tiny

    upload = TEMP / "sentences-multi-label.csv"
    with open(upload, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "labels"])
        w.writerows([ex["text"], ";".join(ex["labels"])] for ex in make_tiny("multi-label", n=400, seed=3).examples)
    visit(page, base, "Fine-tune", "Fine-tune")
    page.locator("summary", has_text="Advanced settings").first.click()
    epochs = page.locator("input[aria-label='Epochs']").first
    epochs.wait_for(state="visible", timeout=SLOW)
    epochs.fill("10")
    epochs.press("Enter")
    settle(page)
    page.locator("input[type='file']").first.set_input_files(str(upload))
    page.get_by_text("Detected task", exact=False).first.wait_for(timeout=SLOW)
    settle(page)
    page.get_by_role("button", name="Fine-tune", exact=True).click()
    page.get_by_text("dev micro-F1", exact=False).first.wait_for(timeout=10 * SLOW)
    settle(page)
    page.get_by_label("Text", exact=True).first.fill("we saw Anna in a red car in Berlin")
    page.keyboard.press("Enter")
    settle(page)
    shoot(page, out, "fine_tune_multi_label", 1500, at=page.get_by_role("heading", name="3. Run and dev results"))


def after_fine_tuning(page, base, out):
    visit(page, base, "After_fine_tuning", "After fine-tuning")
    # the radio "Show": the wrong answers, the most confident first
    page.get_by_text("the most confident first", exact=False).first.click()
    settle(page)
    page.get_by_text("The most confident mistakes").first.wait_for(timeout=SLOW)
    shoot(page, out, "after_fine_tuning", 1640, at=page.get_by_role("heading", name="1. The dev set"))
    section = page.get_by_role("heading", name="3. What fine-tuning changed inside")
    section.wait_for(timeout=SLOW)
    # the comparison runs on request (it loads the pre-trained model beside the fine-tuned one)
    compare = page.get_by_role("button", name="Compare before and after fine-tuning")
    if compare.count():
        compare.click()
        settle(page)
        page.get_by_text("How well C separates the gold answers").first.wait_for(timeout=SLOW)
    settle(page)
    shoot(page, out, "after_fine_tuning_inside", 1380, at=section)


def runs(page, base, out):
    visit(page, base, "Runs", "Runs")
    shoot(page, out, "runs", 1100)


def ablation_studio(page, base, out):
    visit(page, base, "Ablation_studio", "Ablation studio")
    shoot(page, out, "ablation_studio", 1300)
    # the shipped cpu-small report, measured by the team, is an expander at the top of the page
    shipped = page.locator("[data-testid='stExpander'] summary", has_text="shipped recipe cpu-small")
    try:
        shipped.first.wait_for(timeout=60_000)
    except Exception as e:
        raise ShotFailed("the Ablation studio page shows no expander of the shipped recipe cpu-small") from e
    shipped.first.click()
    settle(page)
    shoot(page, out, "ablation_results", 1600, at=shipped)


def gallery(page, base, out):
    """Home's gallery of the paper's BERTs (BERT-Tiny downloaded before, from the stand-in Hub)."""
    visit(page, base, "", "BERT Explorer")
    heading = page.get_by_role("heading", name="The paper's BERTs, one download away")
    heading.wait_for(timeout=SLOW)
    shoot(page, out, "gallery", 860, at=heading)


def download(page, base, out):
    """BERT-Base chosen in the sidebar's gallery and its download under way (the stand-in serves slowly)."""
    visit(page, base, "Masked_word_probe", "Masked word probe")
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("combobox").first.click()
    page.get_by_role("option", name="the paper's BERTs (Hugging Face Hub)…").click()
    settle(page)
    sidebar.get_by_role("button", name="Download (about 440 MB)").click()
    sidebar.get_by_text("Downloading google-bert/bert-base-uncased:").wait_for(timeout=SLOW)
    time.sleep(6)  # a few seconds of progress, and its rate
    shoot(page, out, "download", 1260)


SHOTS = {f.__name__: f for f in (home, inside_one_layer, attention, attention_model_view, attention_flow,
                                  head_map, attributions,
                                  masked_word_probe, next_sentence_probe, two_models, probing, fine_tune,
                                  fine_tune_multi_label, after_fine_tuning, runs, ablation_studio, nearest_neighbours, gallery, download)}
# The server each shot needs, when not the plain one (private mode, RUNS_FOLDER, this environment's cache):
# home is the teacher's view in classroom mode; the multi-label fine-tuning makes its run in an empty runs
# folder of its own, so that After fine-tuning and Runs show RUNS_FOLDER's run alone; gallery and download
# read the Hugging Face Hub, served by the tests' stand-in (tests/hub_standin.py) with caches of its own:
# BERT-Tiny downloaded before the shots, BERT-Base (tiny random weights in its layout) served slowly.
SERVER_OF = {"home": "classroom", "fine_tune_multi_label": "own runs", "gallery": "hub", "download": "hub"}


def stand_in_hub(folder: Path):
    """A stand-in Hub for the gallery shots and the environment that points the app at it (its Hugging Face
    cache and app cache are in ``folder``, so the other servers' caches are never touched)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import hub_standin

    hub_standin.write_bert_base_layout(folder / "repos" / "google-bert/bert-base-uncased", hidden=256, layers=4,
                                       heads=4, intermediate=1024)
    hub_standin.write_miniature_layout(folder / "repos" / "google/bert_uncased_L-2_H-128_A-2", hidden=128,
                                       heads=2, intermediate=512)
    server = hub_standin.HubStandin(folder / "repos").start()
    env = {"HF_ENDPOINT": server.endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(folder / "cache"),
           "BERT_EXPLORER_CACHE": str(folder / "app-cache")}
    try:
        # in a process of its own: this one's environment (which huggingface_hub reads at import) stays as it was
        subprocess.run([sys.executable, "-c", "from bert_explorer import hub; "
                        "hub.download('google/bert_uncased_L-2_H-128_A-2')"],
                       cwd=ROOT, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
    except BaseException:
        server.stop()
        raise
    server.throttle("model.safetensors", 60_000)  # bytes a second: the bar moves for minutes
    return server, env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def end_children(pid: int) -> None:
    """End what the app server ``pid`` started and left going (a download under way, a fine-tuning cut
    short): processes of their own session, which outlive the server and would write into folders about
    to be removed."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=15)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=15)


@contextlib.contextmanager
def app_server(env: dict, port: int):
    """The app served on 127.0.0.1:``port`` in ``env``; yields its address, and ends it and what it started."""
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "run_app.py", "--server.headless", "true",
                               "--server.address", "127.0.0.1", "--server.port", str(port),
                               "--browser.gatherUsageStats", "false"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise ShotFailed(f"the app did not start on port {port} within 120 s")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        end_children(server.pid)
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


class RunsLink:
    """The pages name the runs folder as it was given: shown as "runs" (a link made for the script's run,
    pointed at each server's runs folder and removed after) when the repository has no runs folder of its
    own, so no host path is pictured."""

    def __init__(self):
        self.link = ROOT / "runs"
        self.ours = not self.link.exists() and not self.link.is_symlink()

    def name(self, folder: Path) -> str:
        """What to give the app as BERT_EXPLORER_RUNS for ``folder``."""
        if not self.ours:
            print(f"note: {self.link} exists, so the pages show the runs folder's full path {folder}", flush=True)
            return str(folder)
        if self.link.is_symlink():
            self.link.unlink()
        self.link.symlink_to(folder, target_is_directory=True)
        return "runs"

    def remove(self) -> None:
        if self.ours and self.link.is_symlink():
            self.link.unlink()


def main() -> int:
    global TEMP
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="the runs folder the app reads (BERT_EXPLORER_RUNS)")
    ap.add_argument("--out", default=str(ROOT / "assets" / "screenshots"), help="where the PNGs go")
    ap.add_argument("--only", default="", help=f"comma-separated shots, of: {', '.join(SHOTS)}")
    ap.add_argument("--port", type=int, default=0, help="the app's port (default: a free one)")
    args = ap.parse_args()
    chosen = [s for s in args.only.split(",") if s] or list(SHOTS)
    if unknown := [s for s in chosen if s not in SHOTS]:
        sys.exit(f"Unknown shot(s) {', '.join(unknown)}: choose from {', '.join(SHOTS)}.")
    if not Path(args.runs).is_dir():
        sys.exit(f"The runs folder {args.runs} does not exist: give --runs a folder holding the fine-tuning run.")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        sys.exit("Debian chromium is not installed: apt-get install chromium.")
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the shots by server, the servers in the order their first shot was asked for
    groups: dict[str, list[str]] = {}
    for name in chosen:
        groups.setdefault(SERVER_OF.get(name, "plain"), []).append(name)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill ends through the finally below: no folder left
    TEMP = Path(tempfile.mkdtemp(prefix="bert-explorer-shots-"))
    runs_link, failed = RunsLink(), []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            for kind, names in groups.items():
                runs = Path(args.runs).resolve()
                if kind == "own runs":
                    runs = TEMP / "runs"
                    runs.mkdir()
                env, hub_server = {**os.environ, "BERT_EXPLORER_RUNS": runs_link.name(runs)}, None
                try:
                    if kind == "classroom":
                        env.update(BERT_EXPLORER_CLASSROOM="1", BERT_EXPLORER_TEACHER_TOKEN=TEACHER_TOKEN)
                    elif kind == "hub":
                        hub_server, hub_env = stand_in_hub(TEMP / "hub")
                        env.update(hub_env)
                    with app_server(env, args.port or free_port()) as base:
                        for name in names:
                            # a page of its own (Playwright gives each a fresh context: no cookie of another shot)
                            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
                            errors = []
                            page.on("pageerror", lambda e: errors.append(str(e)))
                            started = time.time()
                            try:
                                SHOTS[name](page, base, out)
                                if errors:
                                    print(f"  note: the {name} page logged JavaScript errors: {errors[:3]}", flush=True)
                            except Exception as e:  # one page's failure must not stop the others
                                failed.append(name)
                                print(f"FAILED {name}: {str(e).splitlines()[0][:400]}", flush=True)
                            finally:
                                print(f"  ({name}: {time.time() - started:.0f} s)", flush=True)
                                page.close()
                except Exception as e:  # a server that did not start: its shots fail, the others are still taken
                    failed.extend(n for n in names if n not in failed)
                    print(f"FAILED {', '.join(names)}: {str(e).splitlines()[0][:400]}", flush=True)
                finally:
                    if hub_server is not None:
                        hub_server.stop()
            browser.close()
    finally:
        runs_link.remove()
        shutil.rmtree(TEMP, ignore_errors=True)
    if failed:
        print(f"{len(failed)} shot(s) failed: {', '.join(failed)}. Re-run them with --only {','.join(failed)}.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
