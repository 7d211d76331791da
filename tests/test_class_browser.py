"""The class server in a real browser (Debian Chromium driven by Playwright), classroom mode rehearsed on
127.0.0.1: the teacher's link leaves the address bar, and a reload or a second tab of the teacher's browser
stays the teacher's, while another browser is a student's.

Slow and needs Chromium: ``pytest -m slow tests/test_class_browser.py``. Set BERT_EXPLORER_SCREENSHOTS=DIR to
keep the student's page while the server prepares an SAE (the README's screenshot).
"""
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from serving import app_served, chromium

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
TOKEN = "rehearsal-token-1234"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not shutil.which("chromium"):
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    cache = tmp_path_factory.mktemp("cache")
    env = {"BERT_EXPLORER_RUNS": str(tmp_path_factory.mktemp("runs")), "BERT_EXPLORER_CACHE": str(cache),
           "BERT_EXPLORER_CLASSROOM": "1", "BERT_EXPLORER_TEACHER_TOKEN": TOKEN}
    log = tmp_path_factory.mktemp("log") / "server.txt"
    with app_served(["bert_explorer.app.serve"], env, log) as url:
        yield {"url": url, "cache": cache, "log": log}


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("playwright.sync_api")
    with chromium() as b:
        yield b


def _sidebar_mode(page) -> str:
    page.wait_for_selector("text=Classroom mode", timeout=90_000)
    return page.locator("[data-testid=stSidebar]").inner_text()


def test_the_teachers_browser_keeps_the_role_and_a_students_has_none(server, browser):
    assert f"the teacher's link is {server['url']}/?teacher={TOKEN}" in server["log"].read_text()
    teacher = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = teacher.new_page()
    tab.goto(f"{server['url']}/?teacher={TOKEN}")
    assert "Classroom mode, the teacher's view" in _sidebar_mode(tab)
    deadline = time.time() + 10
    while "teacher=" in tab.url and time.time() < deadline:
        time.sleep(0.2)
    assert "teacher=" not in tab.url  # off the address bar, which a projector shows
    tab.reload()
    assert "Classroom mode, the teacher's view" in _sidebar_mode(tab)  # a reload stays the teacher's
    second = teacher.new_page()
    second.goto(f"{server['url']}/Features")
    assert "Classroom mode, the teacher's view" in _sidebar_mode(second)  # so does a second tab

    tab.get_by_role("button", name="Prepare", exact=True).wait_for(timeout=60_000)
    _keep(tab, "prepare_class.webp")

    student = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    student.goto(server["url"])
    text = _sidebar_mode(student)
    assert "teacher's view" not in text and "The teacher starts and prepares work" in text


def test_a_students_page_while_the_server_prepares_an_sae(server, browser):
    from bert_explorer import checkpoint, disk_cache
    from bert_explorer.analysis.features import build as fb
    from bert_explorer.runs import neighbour_jobs

    kept = os.environ.get("BERT_EXPLORER_CACHE")  # (the session's own cache, put back after: tests after this one
    os.environ["BERT_EXPLORER_CACHE"] = str(server["cache"])  # wrote into ~/.cache when it was deleted)
    try:
        loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining")
        path = fb.entry_path(loaded, fb.FeatureSettings(layer=fb.default_layer(loaded)))
        work = neighbour_jobs.work_dir(path)
        work.mkdir(parents=True, exist_ok=True)
        neighbour_jobs.write_progress(path, state="starting", fraction=0.4, message="training the SAE: step 320 of 800",
                                      started=time.time() - 160, pid=os.getpid())
        (work / neighbour_jobs.LESSON_FILE).write_text(json.dumps({"lesson": f"Features of layer {fb.default_layer(loaded)}"}))
        assert disk_cache.work_root() == work.parent
    finally:
        if kept is None:
            del os.environ["BERT_EXPLORER_CACHE"]
        else:
            os.environ["BERT_EXPLORER_CACHE"] = kept
    page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    page.goto(f"{server['url']}/Features")
    page.wait_for_selector("text=Preparing Features of layer", timeout=120_000)
    main = page.locator("[data-testid=stMain]").inner_text()
    assert "step 320" not in main and "Cancel" not in main
    _keep(page, "student_while_preparing.webp")


def _keep(page, name: str) -> None:
    """A screenshot in BERT_EXPLORER_SCREENSHOTS (when set), in 64 colours as lossless WebP: a small file for the
    README (docs/screenshots.py's keep_small)."""
    shots = os.environ.get("BERT_EXPLORER_SCREENSHOTS")
    if shots:
        import runpy

        Path(shots).mkdir(parents=True, exist_ok=True)
        time.sleep(1.0)
        shot = Path(shots) / f"{Path(name).stem}.png"
        page.screenshot(path=str(shot))
        keep_small = runpy.run_path(str(Path(__file__).resolve().parents[1] / "docs" / "screenshots.py"))["keep_small"]
        keep_small(shot, shot.with_suffix(".webp"))
