"""A real browser (Debian Chromium driven by Playwright) opens the app served on 127.0.0.1.

Slow and needs Chromium, so it is marked ``slow``: ``pytest -m slow tests/test_browser.py``.
Set BERT_EXPLORER_SCREENSHOTS=DIR to keep a screenshot of each page.
"""
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from serving import app_served, chromium

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent



@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    if not shutil.which("chromium"):
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    runs = tmp_path_factory.mktemp("runs")  # runs started from the browser never land in ./runs
    with app_served(["streamlit", "run", str(ROOT / "run_app.py"), "--server.address", "127.0.0.1"],
                    {"BERT_EXPLORER_RUNS": str(runs)}) as url:
        yield url


@pytest.fixture(scope="module")
def page():
    pytest.importorskip("playwright.sync_api")
    with chromium() as browser:
        yield browser.new_page(viewport={"width": 1400, "height": 1000})


def _shot(page, name):
    d = os.environ.get("BERT_EXPLORER_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        # Streamlit scrolls inside its own container, so full_page sees one screen: grow the
        # window to show more of the page, then put it back.
        size = page.viewport_size
        page.set_viewport_size({"width": size["width"], "height": 2000})
        time.sleep(1.5)
        page.screenshot(path=str(Path(d) / f"{name}.png"))
        page.set_viewport_size(size)


def test_home_page_renders_in_a_real_browser(app_url, page):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(app_url)
    page.get_by_text("Models you can load").wait_for(timeout=60_000)
    page.get_by_text("Built-in text, no download").wait_for(timeout=30_000)
    time.sleep(1.5)  # let the tables draw
    # the models here, the paper's BERTs and Google's miniatures one download away, the corpora
    assert page.locator("[data-testid='stTable']").count() == 4
    # one menu, the app's own, whose first entry is "Home" (Streamlit's would say "run app")
    assert not page.locator("[data-testid='stSidebarNav']").count()
    links = page.locator("[data-testid='stSidebar'] [data-testid='stPageLink']").all_inner_texts()
    from bert_explorer.app.widgets import MENU

    assert len(links) == len(MENU) and "Home" in links[0] and not any("run app" in t for t in links)
    assert [label for _, label, _ in MENU] == [t.split("\n")[-1].strip() for t in links]  # (icon name, then label)
    assert "Private mode" in page.locator("[data-testid='stSidebar']").inner_text()
    assert not page.locator("[data-testid='stException']").count()
    assert not errors, errors
    _shot(page, "home")


def test_attention_page_draws_bertviz_offline_in_a_real_browser(app_url, page):
    errors, external = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: external.append(r.url) if not r.url.startswith((app_url, "data:", "about:",
                                                                                   "blob:")) else None)
    page.goto(f"{app_url}/Attention")
    head_view = page.frame_locator("iframe").first
    # bertviz writes each token as an SVG <text>; the default sentence A is about a cat on a mat.
    head_view.locator("svg text", has_text="mat").first.wait_for(timeout=120_000)
    tokens = head_view.locator("svg text").evaluate_all("els => els.map(e => e.textContent)")  # SVG: no innerText
    assert "[CLS]" in tokens and "[SEP]" in tokens and "cat" in tokens
    assert head_view.locator("#layer option").count() == 6  # the default model, minilm-mlm-nsp, has 6 layers
    assert not page.locator("[data-testid='stException']").count()
    assert not errors, errors
    assert not external, external  # nothing fetched from outside the app: no CDN
    _shot(page, "attention")


def test_the_model_picked_holds_when_the_menu_opens_another_page(app_url, page):
    """Pick explorer-mini on Home, open the Masked word probe from the menu: the page runs on
    explorer-mini (4 layers), not on the default model (6); back on Home, a reload keeps it."""
    page.goto(app_url)
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.get_by_text("L = 6 layers", exact=False).wait_for(timeout=120_000)
    sidebar.locator("[data-testid='stSelectbox']").first.click()
    page.get_by_role("option", name="explorer-mini", exact=True).click()
    sidebar.get_by_text("L = 4 layers", exact=False).wait_for(timeout=120_000)
    sidebar.locator("[data-testid='stPageLink']", has_text="Masked word probe").click()
    page.get_by_role("heading", name="Masked word probe").wait_for(timeout=120_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    assert _picked(sidebar) == "explorer-mini"
    assert "L = 4 layers" in sidebar.inner_text()
    sidebar.locator("[data-testid='stPageLink']", has_text="Home").click()
    page.get_by_text("Models you can load").wait_for(timeout=60_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    assert _picked(sidebar) == "explorer-mini"
    # and a reload (a new session) keeps it: the address holds it
    page.wait_for_function("() => location.search.includes('be_model_choice=explorer-mini')", timeout=60_000)
    page.reload()
    sidebar.get_by_text("L = 4 layers", exact=False).wait_for(timeout=120_000)
    assert _picked(sidebar) == "explorer-mini"


def test_a_grid_built_in_the_ablation_studio_survives_a_reload(app_url, page):
    """Build my own, 2,000 pre-training steps, every combination: a reload (a new session) put the page back on
    the shipped recipe. The choices are in the address now, which the reload keeps (tests/test_ablation.py checks
    what a session reads from an address, a lying one too)."""
    page.goto(f"{app_url}/Ablation_studio")
    page.get_by_text("1. Choose a grid").wait_for(timeout=120_000)
    page.get_by_test_id("stRadioGroup").get_by_text("Build my own").click()
    steps = page.get_by_label("Pre-training steps")
    steps.wait_for(timeout=60_000)
    steps.fill("2000")
    steps.press("Enter")
    page.wait_for_function("() => location.search.includes('abl_steps=2000')", timeout=60_000)
    page.get_by_test_id("stRadioGroup").get_by_text("product", exact=True).click()
    page.wait_for_function("() => location.search.includes('abl_grid=product')", timeout=60_000)
    page.reload()
    page.get_by_label("Pre-training steps").wait_for(timeout=120_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    assert page.get_by_label("Pre-training steps").input_value() == "2000"
    assert page.get_by_role("radio", name="product").is_checked()
    assert page.get_by_role("radio", name="Build my own").is_checked()
    _shot(page, "ablation_grid_after_reload")


def test_pretrain_settings_survive_a_reload_even_at_a_boxs_least_value(app_url, page):
    """1 step and 1 sequence a batch (each box's least value): a reload put Pre-train back on 1,000 steps and 32,
    as it did every setting. The settings are in the address now, the page's defaults left out of it."""
    page.goto(f"{app_url}/Pre-train")
    steps, batch = page.get_by_role("spinbutton", name="Steps", exact=True), page.get_by_role("spinbutton", name="Batch (sequences)")
    steps.wait_for(timeout=120_000)
    for box, key in ((steps, "pt_steps"), (batch, "pt_batch")):
        box.fill("1")
        box.press("Enter")
        page.wait_for_function(f"() => new URLSearchParams(location.search).get('{key}') === '1'", timeout=60_000)
    page.reload()
    page.get_by_role("spinbutton", name="Steps", exact=True).wait_for(timeout=120_000)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    assert page.get_by_role("spinbutton", name="Steps", exact=True).input_value() == "1"
    assert page.get_by_role("spinbutton", name="Batch (sequences)").input_value() == "1"
    assert "Runs with: 1 step of 1 sequence of 128 WordPieces" in page.locator("[data-testid='stMain']").inner_text()
    steps = page.get_by_role("spinbutton", name="Steps", exact=True)
    steps.fill("1000")  # the page's default: out of the address again
    steps.press("Enter")
    page.wait_for_function("() => !new URLSearchParams(location.search).has('pt_steps')", timeout=60_000)
    _shot(page, "pretrain_settings_after_reload")


def test_two_models_b_follows_model_a_through_models_without_a_default(app_url, page):
    """minilm-mlm-nsp (B: minilm, what it was pre-trained from), then minilm and explorer-mini, then minilm-mlm-nsp
    again: in a browser B kept minilm for minilm itself, then stayed empty for minilm-mlm-nsp, whose page said it
    "names no model it was pre-trained from" (the empty box the browser sent won over the next A's default)."""
    page.goto(f"{app_url}/Two_models")
    main, sidebar = page.locator("[data-testid='stMain']"), page.locator("[data-testid='stSidebar']")
    b = main.get_by_role("combobox", name="Model B", exact=True)
    seen = []
    for a in ("minilm-mlm-nsp", "minilm", "explorer-mini", "minilm-mlm-nsp"):
        if _picked(sidebar) != a:
            sidebar.locator("[data-testid='stSelectbox']").first.click()
            page.get_by_role("option", name=a, exact=True).click()
        time.sleep(1)
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
        seen.append((a, b.input_value()))
    assert seen == [("minilm-mlm-nsp", "minilm (the model that A was pre-trained from)"), ("minilm", ""),
                    ("explorer-mini", ""), ("minilm-mlm-nsp", "minilm (the model that A was pre-trained from)")]
    assert "names no model it was pre-trained from" not in main.inner_text()


def _picked(sidebar) -> str:
    """The model the sidebar's list shows as chosen (a searchable list keeps it in its input)."""
    return sidebar.locator("[data-testid='stSelectbox']").first.locator("input").input_value()


PAGES = sorted(p.stem for p in (ROOT / "pages").glob("[0-9]*_*.py"))


@pytest.mark.parametrize("stem", PAGES)
def test_every_page_renders_without_an_error(app_url, page, stem):
    """Each page opens, says what it is (its title), draws, and shows no exception."""
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    url_path = stem.split("_", 1)[1]  # "2_Attention" -> /Attention
    page.goto(f"{app_url}/{url_path}")
    page.locator("h1").first.wait_for(timeout=120_000)
    # Wait until the script has finished: Streamlit shows a "running" status widget meanwhile.
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180_000)
    time.sleep(2)  # plots and grids draw after the script ends
    assert not page.locator("[data-testid='stException']").count(), page.locator("[data-testid='stException']").first.inner_text()
    assert not errors, errors
    _shot(page, stem.split("_", 1)[1].lower())


def test_fine_tune_a_csv_uploaded_through_the_browser(app_url, page, tmp_path):
    """The one-click promise: upload a CSV with the file picker, press Fine-tune, see dev metrics."""
    rows = ["text,label"] + [f"the {w} was {'great' if i % 2 else 'awful'} today,{'pos' if i % 2 else 'neg'}"
                             for i, w in enumerate(["film", "meal", "trip", "show", "book", "song"] * 10)]
    csv = tmp_path / "reviews.csv"
    csv.write_text("\n".join(rows) + "\n")
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{app_url}/Fine-tune")
    page.locator("[data-testid='stFileUploader'] input[type='file']").set_input_files(str(csv))
    page.get_by_text("Detected task").first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Fine-tune").click()
    page.get_by_text("dev accuracy").first.wait_for(timeout=300_000)  # the run finished and its metrics show
    assert not page.locator("[data-testid='stException']").count()
    assert not errors, errors
    _shot(page, "fine-tune")


def test_downloaded_bertviz_view_draws_offline_and_saves_an_svg(page, tmp_path):
    """The standalone HTML of a bertviz view, opened from disk with every network request refused,
    draws its SVG; its *Save SVG* button saves the drawing as a real SVG file."""
    import xml.etree.ElementTree as ET

    from bert_explorer.analysis.attention.heads import attention_maps
    from bert_explorer.analysis.attention.bertviz_offline import render
    from bert_explorer.checkpoint import load

    result = attention_maps(load("minilm-mlm-nsp", "BertForPreTraining"), "the cat sat on the mat .")
    for view in ("head", "model"):
        path = tmp_path / f"{view}.html"
        path.write_text(render(result, view).html, encoding="utf-8")
        refused = []

        def refuse(route):
            refused.append(route.request.url)
            route.abort()

        page.route(re.compile(r"^(https?|wss?)://"), refuse)
        page.goto(path.as_uri())
        page.locator("#vis svg").first.wait_for(timeout=30_000)
        texts = page.locator("#vis svg text").evaluate_all("els => els.map(e => e.textContent)")
        assert "cat" in texts and "[CLS]" in texts or view == "model"
        with page.expect_download() as download:
            page.get_by_role("button", name="Save SVG").click()
        svg = ET.parse(download.value.path()).getroot()
        assert svg.tag == "{http://www.w3.org/2000/svg}svg"
        assert re.fullmatch(r"-?[0-9.]+( -?[0-9.]+){3}", svg.get("viewBox", "")), svg.get("viewBox")  # 4 numbers
        drawn = [el for el in svg.iter() if el.tag.endswith(("line", "path", "rect", "text"))]
        assert len(drawn) > 20
        assert not refused, refused
        page.unroute(re.compile(r"^(https?|wss?)://"))
