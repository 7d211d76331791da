"""A class server the teacher runs and no student can disturb.

Classroom mode is rehearsed on 127.0.0.1 with BERT_EXPLORER_CLASSROOM=1 (as a teacher would on a laptop).
The teacher's link (``?teacher=<token>``) makes a session the teacher's; everyone else is a student. As a
student every page of the app is opened, in a state where work is running or could be started, and every
button drawn is pressed: no process starts and nothing is stopped. The buttons that start or stop work are
found by the app's own registry (``roles.WORK_BUTTONS``), so a new one cannot be missed.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from streamlit.testing.v1 import AppTest

from bert_explorer.app import roles
from bert_explorer.app.widgets import MENU
from bert_explorer.runs import background, neighbour_jobs

PAGES = [path for path, _, _ in MENU]


@pytest.fixture
def classroom(monkeypatch, runs_root, tmp_path):
    """Classroom mode on this machine, a known teacher's token, an empty app cache."""
    monkeypatch.setenv(roles.CLASSROOM_ENV, "1")
    monkeypatch.setenv(roles.TOKEN_ENV, "the-teachers-secret")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    return runs_root


def _page(path: str, teacher: bool = False, **state) -> AppTest:
    at = AppTest.from_file(f"../{path}", default_timeout=180)
    if teacher:
        at.query_params[roles.QUERY] = "the-teachers-secret"
    for k, v in state.items():
        at.session_state[k] = v
    return at.run()


def test_the_teachers_link_makes_the_session_the_teachers_and_leaves_the_address_bar(classroom):
    at = _page("run_app.py", teacher=True)
    assert not at.exception
    assert roles.QUERY not in at.query_params  # a projector shows the URL: the token is gone from it at once
    assert at.session_state[roles.SESSION_KEY] is True
    assert any("Classroom mode, the teacher's view" in i.value for i in at.sidebar.info)
    at.switch_page("pages/4_Masked_word_probe.py").run()  # the role holds on every page of the session
    assert any("Classroom mode, the teacher's view" in i.value for i in at.sidebar.info)

    student = _page("pages/15_Features.py")
    assert roles.SESSION_KEY not in student.session_state
    assert any(i.value.startswith("Classroom mode: ") for i in student.sidebar.info)

    wrong = AppTest.from_file("../pages/15_Features.py", default_timeout=180)
    wrong.query_params[roles.QUERY] = "a-guess"
    wrong.run()
    assert roles.QUERY not in wrong.query_params and roles.SESSION_KEY not in wrong.session_state
    # said in the page itself (a phone's narrow screen hides the sidebar), once: not again on the next page
    (warning,) = wrong.main.warning
    assert warning.value == roles.REFUSED and warning.value.startswith("That teacher's link is not this server's")
    assert not wrong.sidebar.warning
    wrong.switch_page("2_Attention.py").run()  # (relative to the page it opened)
    assert not wrong.exception and roles.REFUSED not in [w.value for w in wrong.warning]


def test_a_page_s_words_for_the_teacher_are_read_after_the_role_is_taken(classroom, monkeypatch):
    """Runs told the teacher what it tells a student (no deleting) when the teacher opened it by its address:
    its intro asked for the role before the menu had taken it from the link or the cookie."""
    delete = "and delete the ones you no longer need"
    assert delete in _page("pages/13_Runs.py", teacher=True).markdown[0].value
    assert delete not in _page("pages/13_Runs.py").markdown[0].value
    monkeypatch.setattr(roles, "browser_cookie", roles.cookie_value)  # a reload of the teacher's browser
    assert delete in _page("pages/13_Runs.py").markdown[0].value


def test_a_student_reads_the_teachers_runs_as_the_class_s(classroom, monkeypatch):
    """A student's Show box said "your runs (1)" of the run the teacher had started."""
    from bert_explorer.runs.run import Run

    Run(classroom / "demo").create({"kind": "pretrain"}, "pretrain").write_status(state="finished")
    student = _page("pages/13_Runs.py")
    assert not student.exception
    assert student.selectbox[0].options == ["the class's runs (1)"]
    assert _page("pages/13_Runs.py", teacher=True).selectbox[0].options == ["your runs (1)"]


def test_a_reload_or_a_second_tab_of_the_teachers_browser_stays_the_teachers(classroom, monkeypatch):
    """The teacher's browser keeps a cookie derived from the token; a new session of it (a reload, a second
    tab) reads it back. A cookie derived from another token (a server started since) is no teacher's."""
    first = _page("run_app.py", teacher=True)
    (script,) = [h for h in first.get("html") if roles.COOKIE in h.proto.body]
    assert f"{roles.COOKIE}={roles.cookie_value()}" in script.proto.body and "the-teachers-secret" not in script.proto.body
    monkeypatch.setattr(roles, "browser_cookie", roles.cookie_value)  # what the browser sends after a reload
    again = _page("pages/2_Attention.py")
    assert again.session_state[roles.SESSION_KEY] is True
    monkeypatch.setattr(roles, "browser_cookie", lambda: "0" * 64)
    assert roles.SESSION_KEY not in _page("pages/2_Attention.py").session_state
    # the teacher's browser opening a stale link (last lesson's) stays the teacher's, the sentence not shown
    monkeypatch.setattr(roles, "browser_cookie", roles.cookie_value)
    stale = AppTest.from_file("../pages/2_Attention.py", default_timeout=180)
    stale.query_params[roles.QUERY] = "last-lessons-token"
    stale.run()
    assert stale.session_state[roles.SESSION_KEY] is True
    assert roles.REFUSED not in [w.value for w in stale.warning]


def _running_sae(root: Path) -> Path:
    """An SAE training in progress as the pages see it (a live pid, "running", half-way)."""
    from bert_explorer import checkpoint
    from bert_explorer.analysis.features import build as fb

    path = fb.entry_path(checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining"), fb.FeatureSettings(layer=2))
    neighbour_jobs.write_progress(path, state="starting", fraction=0.5, message="training the SAE: step 400 of "
                                  "800 (vital, 1,000,020 tokens)", started=time.time() - 60, pid=os.getpid())
    (neighbour_jobs.work_dir(path) / neighbour_jobs.LESSON_FILE).write_text('{"lesson": "Features of layer 2"}')
    return path


@pytest.fixture
def no_work(monkeypatch):
    """Records every process started and every stop or cancel asked, instead of doing it."""
    from bert_explorer.analysis.features import build as fb
    from bert_explorer.runs import download_jobs
    from bert_explorer.runs.run import Run

    done = []
    real_popen = subprocess.Popen
    # the standard library's own `uname -p`, run once a process and kept: not work a page starts (a test of
    # this file run alone met it here; after other tests it was done already)
    __import__("platform").processor()

    def popen(argv, *a, **k):
        done.append(("process", argv))
        return real_popen([sys.executable, "-c", "pass"], *a, **{**k, "env": None})

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setattr(fb, "request_stop", lambda path: done.append(("stop SAE", path)))
    monkeypatch.setattr(Run, "request_stop", lambda self: done.append(("stop run", self.path)))
    monkeypatch.setattr(download_jobs, "cancel", lambda repo: done.append(("cancel download", repo)))
    return done


@pytest.mark.parametrize("path", PAGES)
def test_a_student_pressing_every_button_of_a_page_starts_and_stops_nothing(classroom, no_work, path):
    _running_sae(classroom)
    at = _page(path, sae_layer=2)
    assert not at.exception, at.exception
    pressed = set()
    for _ in range(3):  # a press may draw other buttons: press those too
        buttons = [b for b in at.button if b.key not in pressed and not b.disabled]
        if not buttons:
            break
        for b in buttons:
            pressed.add(b.key)
            b.click().run()
            assert not at.exception, (b.key, at.exception)
    assert no_work == [], no_work
    assert not pressed & roles.WORK_BUTTONS, pressed & roles.WORK_BUTTONS  # none of them was one of those


def test_a_student_is_offered_no_stop_of_a_running_run(classroom, no_work, monkeypatch):
    """The Runs page and Two models have a Stop beside a running run (the teacher's): a student sees the run and
    no button that stops it; the teacher sees it."""
    from bert_explorer.analysis.comparison import candidates
    from bert_explorer.runs.run import Run

    run = Run(classroom / "tune").create(candidates.SHORT_FINETUNE, "finetune")
    run.write_status(state="running", pid=os.getpid(), step=3, max_steps=40)
    student = _page("pages/13_Runs.py")
    assert not student.exception and "runs_stop" not in {b.key for b in student.button}
    assert "runs_stop" in {b.key for b in _page("pages/13_Runs.py", teacher=True).button}
    two = _page("pages/7_Two_models.py", be_model_choice="minilm-mlm-nsp")
    assert not two.exception and any(i.value.startswith("A fine-tuning of minilm-mlm-nsp is running") for i in two.info)
    assert "two_stop" not in {b.key for b in two.button} and not run.stop_requested() and no_work == []


def test_the_registry_holds_every_button_that_starts_or_stops_work():
    """Every `.button(` in the pages and the app's helpers whose label or key speaks of work goes through
    ``work_button``: found by reading the source, so a new Stop or Build cannot be added beside it."""
    import ast
    import re

    work = re.compile(r"(start|stop|cancel|resume|build|train|measure|finetune|fine-tune|delete|download|prepare)",
                      re.I)
    root = Path(__file__).resolve().parents[1]
    found = []
    for f in [*root.glob("pages/*.py"), root / "run_app.py", *root.glob("bert_explorer/app/*.py")]:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "button":
                text = " ".join(ast.unparse(a) for a in [*node.args, *(k.value for k in node.keywords
                                                                        if k.arg in ("key", "label"))])
                if work.search(text):
                    found.append(f"{f.name}:{node.lineno}: {text[:80]}")
    assert found == [], found  # (work_button's own `.button(label, key=key)` names no work)


def test_the_teacher_sees_the_cancel_and_a_student_a_sentence_in_the_lessons_words(classroom, no_work):
    path = _running_sae(classroom)
    student = _page("pages/15_Features.py", sae_layer=2)
    assert "sae_cancel" not in {b.key for b in student.button}
    bar = student.get("progress")[0].proto.text
    # not the builder's line, not "vital"; the time left once the progress says it
    assert re.fullmatch(r"Preparing Features of layer 2 for the class( · about [0-9hmins ]+ left)?", bar), bar

    teacher = _page("pages/15_Features.py", teacher=True, sae_layer=2)
    assert "training the SAE: step 400" in teacher.get("progress")[0].proto.text
    teacher.button(key="sae_cancel").click().run()
    assert no_work == [("stop SAE", path)]


def test_a_student_reads_the_time_said_for_a_build_before_its_first_progress(classroom, no_work):
    """A build that loads before it reports (Clark's measures: half a minute) showed a student no time at all."""
    path = _running_sae(classroom)
    neighbour_jobs.write_progress(path, state="starting", fraction=0.0, message="loading", pid=os.getpid(),
                                  said=[time.time() - 20, 260.0])  # as start_build writes it: said 260 s, 20 s ago
    bar = _page("pages/15_Features.py", sae_layer=2).get("progress")[0].proto.text
    assert re.fullmatch(r"Preparing Features of layer 2 for the class · about (3 min 59 s|4 min 00 s) left", bar), bar


def test_a_students_visit_to_the_masked_word_probe_starts_no_measurement(classroom, no_work, monkeypatch):
    from bert_explorer.analysis.probes import pretraining_tasks

    monkeypatch.setattr(pretraining_tasks, "stored_evaluation", lambda loaded: None)  # as a downloaded BERT
    student = _page("pages/4_Masked_word_probe.py")
    assert not student.exception
    assert any(i.value == "Its measurement on held-out text is not prepared for this model yet; your teacher "
               "can prepare it before class with Home's Prepare for class (the build quality)." for i in student.info)
    assert no_work == []
    teacher = _page("pages/4_Masked_word_probe.py", teacher=True)
    assert no_work == []  # nor the teacher's visit: only the button
    teacher.button(key="mlm_measure").click().run()
    assert [w for w, argv in no_work] == ["process"] and "bert_explorer.cli.quality" in no_work[0][1]


def test_a_busy_server_is_one_sentence_in_the_lessons_words(classroom):
    _running_sae(classroom)
    (busy,) = neighbour_jobs.preparing()
    assert busy["lesson"] == "Features of layer 2" and 50 < busy["seconds_left"] < 70  # half-way after a minute
    at = _page("pages/9_Nearest_neighbours.py")
    assert any(c.value == "The server is preparing Features of layer 2 for the class: about 1 min left."
               or c.value.startswith("The server is preparing Features of layer 2 for the class: about ")
               for c in at.caption), [c.value for c in at.caption]
    assert not any("vital" in c.value or "step 400" in c.value for c in [*at.caption, *at.info])


def test_whoever_may_start_a_build_hears_of_the_one_running_beside_it(classroom, no_work):
    """A second visitor was offered a second SAE training with no word of the one running on the server."""
    _running_sae(classroom)
    teacher = _page("pages/15_Features.py", teacher=True, sae_layer=3)
    assert not teacher.exception
    assert any(c.value.startswith("Running on this server now: Features of layer 2, about ") and
               "shares the CPU" in c.value for c in teacher.caption), [c.value for c in teacher.caption]
    assert no_work == []
    # the Home page's Prepare for class says it too (a terminal's build showed as not started, offered again)
    home = _page("run_app.py", teacher=True)
    assert not home.exception
    assert any(c.value.startswith("Running on this server now: Features of layer 2, about ") for c in home.caption)


def test_a_student_hears_of_the_teachers_preparation_before_its_first_build(classroom):
    """The teacher pressed Prepare: for its first half minute (a process starting, the first visits) no build was
    running, and a student's page said only "not prepared; your teacher can prepare it"."""
    import json

    from bert_explorer.analysis import lesson

    (lesson._work() / "started.json").write_text(json.dumps({"pid": os.getpid(), "models": ["minilm-mlm-nsp"],
                                                             "builds": ["index", "sae"], "started": time.time()}))
    at = _page("pages/9_Nearest_neighbours.py")
    assert any(c.value.startswith("The server is preparing the class (index, sae of minilm-mlm-nsp)")
               for c in at.caption), [c.value for c in at.caption]
    # and the index, one of its builds, is said to be on its way, not left for the teacher to prepare
    said = [i.value for i in at.info if "is not prepared for this model yet" in i.value]
    assert said and all(i.endswith("your teacher's preparation, running now, builds it in its turn; where it is in "
                                   "the queue is said once the preparation has read its models.") for i in said), said


def _preparing_seven_builds(head_map_seconds: float = 600.0) -> list:
    """The teacher's preparation running (this process), its plan of seven builds of minilm-mlm-nsp at the first,
    the quality measurement, half-way after a minute; the index is the fifth."""
    import json

    from bert_explorer.analysis import lesson

    (lesson._work() / "started.json").write_text(json.dumps({"pid": os.getpid(), "models": ["minilm-mlm-nsp"],
                                                             "builds": list(lesson.BUILDS), "started": time.time()}))
    from bert_explorer import checkpoint
    from bert_explorer.analysis.neighbours import index as nbb

    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining")
    opening = nbb.opening_layer(loaded)  # the page's layer: its index the fifth, the other layer's the sixth
    cache = Path(os.environ["BERT_EXPLORER_CACHE"])
    plan = [("quality", "the measurement of how well this model guesses", 100.0, cache / "q"),
            ("sae", "Features of layer 3", 300.0, cache / "s"),
            ("head-map", "Attention's head map", head_map_seconds, cache / "h"),
            ("clark", "Attention's measurement", 240.0, cache / "c"),
            ("index", f"the nearest-neighbour index of layer {opening}", 240.0, nbb.index_path(loaded, "bbc", opening)),
            ("index", "the nearest-neighbour index of another layer", 240.0,
             nbb.index_path(loaded, "bbc", 1 if opening == 0 else 0)),
            ("probes", "the probes of What each layer knows", 500.0, cache / "p")]
    builds = [lesson.Build(key, words, path, lambda: False, (), [], seconds) for key, words, seconds, path in plan]
    neighbour_jobs.write_progress(builds[0].path, state="starting", fraction=0.5, message="half", pid=os.getpid(),
                                  started=time.time() - 60)
    lesson.write_plan([("minilm-mlm-nsp", b) for b in builds], 0)
    return builds


def test_a_student_is_told_where_their_build_is_in_the_teachers_queue(classroom):
    """A student's page said the preparation builds it "in its turn; look again in a few minutes" beside the busy
    line of another build ("about 1 min 13 s left"), while theirs was 24 minutes away."""
    _preparing_seven_builds()
    at = _page("pages/9_Nearest_neighbours.py")
    said = [i.value for i in at.info if "is not prepared for this model yet" in i.value]
    assert said and all(re.search(r"your teacher's preparation builds it in its turn, the 5th of 7 builds \(it is at "
                                  r"the 1st, the measurement of how well this model guesses\); the 4 builds before it "
                                  r"are said to take about 20 min 0\d s\.$", i) for i in said), said


def test_where_a_time_of_the_queue_is_not_known_the_place_alone_is_said(classroom):
    builds = _preparing_seven_builds(head_map_seconds=0.0)  # the head map's estimate not known
    at = _page("pages/9_Nearest_neighbours.py")
    said = [i.value for i in at.info if "is not prepared for this model yet" in i.value]
    assert said and all(i.endswith("your teacher's preparation builds it in its turn, the 5th of 7 builds (it is at "
                                   "the 1st, the measurement of how well this model guesses).") for i in said), said
    # and once the preparation is at it, it is said to be built now (no time of its own yet: none said)
    from bert_explorer.analysis import lesson

    lesson.write_plan([("minilm-mlm-nsp", b) for b in builds], 4)
    at.run()
    said = [i.value for i in at.info if "is not prepared for this model yet" in i.value]
    assert said and all(i.endswith("your teacher's preparation is building it now (build 5 of 7).") for i in said), said
    # past it (it ended without it): for the teacher to prepare again, not said to be on its way
    lesson.write_plan([("minilm-mlm-nsp", b) for b in builds], 7)
    at.run()
    said = [i.value for i in at.info if "is not prepared for this model yet" in i.value]
    assert said and all(i.endswith("your teacher can prepare it before class with Home's Prepare for class (the build "
                                   "index).") for i in said), said


def test_background_processes_run_below_the_class(tmp_path):
    proc = background.spawn([sys.executable, "-c", "import time; time.sleep(5)"], tmp_path / "log.txt")
    try:
        deadline = time.time() + 10
        while psutil.Process(proc.pid).name() == "nice" and time.time() < deadline:
            time.sleep(0.05)  # `nice` has set the priority and is about to become the process
        assert psutil.Process(proc.pid).nice() == background.NICE == 10
        assert psutil.Process(proc.pid).cmdline()[:2] == [sys.executable, "-c"]  # `nice` became the process
        # where Linux schedules sessions as groups, the process's own session is at nice 10 too: its nice
        # alone weighs only inside that session (it got half a core beside another session's busy work)
        group = Path(f"/proc/{proc.pid}/autogroup")
        if group.exists():
            assert group.read_text().split()[-2:] == ["nice", "10"], group.read_text()
            assert group.read_text() != Path("/proc/self/autogroup").read_text()  # a session of its own
    finally:
        proc.kill()
        proc.wait()


def test_a_process_started_by_a_niced_one_runs_at_nice_10_not_below(tmp_path):
    """`nice -n 10` adds to the caller's own priority: a build that a preparation at nice 10 started ran at 19. A
    background process now runs at nice 10 whatever its starter's (and never above it)."""
    code = ("import os, sys; sys.path.insert(0, %r); from bert_explorer.runs import background; "
            "p = background.spawn([sys.executable, '-c', 'import os; print(os.nice(0))'], %r); p.wait()")
    log = tmp_path / "log.txt"
    subprocess.run(["nice", "-n", "10", sys.executable, "-c", code % (str(Path.cwd().parent), str(log))],
                   check=True, timeout=60)
    assert log.read_text().split()[-1] == "10"


SPAWN_THREE = """
import sys, time
from pathlib import Path
from bert_explorer.runs import background
jobs = [background.spawn(["sleep", "5"], sys.argv[1]) for _ in range(3)]
print(" ".join(Path(f"/proc/{j.pid}/autogroup").read_text().split()[-1] for j in jobs))
for j in jobs:
    j.kill()
"""


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists() or not shutil.which("setpriv") or os.geteuid() != 0,
                    reason="needs Linux's autogroup, and root to start a process as an ordinary user")
def test_jobs_started_together_by_an_ordinary_user_all_run_below_the_class():
    """Without privileges the kernel takes one autogroup write in 100 ms from the whole machine: of three jobs
    started together the second and third stayed at normal priority, beside the class."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c"]
    if subprocess.run([*as_nobody, "import bert_explorer.runs.background"], capture_output=True,
                      timeout=60).returncode != 0:
        pytest.skip("an ordinary user cannot read this checkout or its Python (a clone in a private folder)")
    done = subprocess.run([*as_nobody, SPAWN_THREE, os.devnull], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10", "10", "10"]


def test_serve_prints_the_teachers_link(monkeypatch, capsys):
    from bert_explorer.app import serve

    monkeypatch.setenv(roles.TOKEN_ENV, "tok")
    monkeypatch.setattr(roles, "_announced", [])
    monkeypatch.setattr(serve.cli, "main", lambda *a, **k: None)
    serve.main(["--server.address", "10.1.2.3", "--server.port=8600"])
    err = capsys.readouterr().err
    assert "the teacher's link is http://10.1.2.3:8600/?teacher=tok" in err
    monkeypatch.setattr(roles, "_announced", [])
    serve.main(["--help"])  # the options' help serves nothing: no link
    assert "teacher's link" not in capsys.readouterr().err


def test_serve_gives_no_link_to_a_port_another_program_holds_and_none_on_this_machine_alone(monkeypatch, capsys):
    """The link was printed for port 8642, then Streamlit failed: "Port 8642 is not available", and a teacher
    could have handed out a link to another program. On 127.0.0.1 (every page on, no roles) it said a link too."""
    import socket

    from bert_explorer.app import serve

    monkeypatch.setenv(roles.TOKEN_ENV, "tok")
    monkeypatch.delenv(roles.CLASSROOM_ENV, raising=False)
    started = []
    monkeypatch.setattr(serve.cli, "main", lambda argv, **k: started.append(argv))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setattr(roles, "_announced", [])
        with pytest.raises(SystemExit) as e:
            serve.main(["--server.address", "127.0.0.1", f"--server.port={port}"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.strip() == (
            f"BERT Explorer: port {port} of 127.0.0.1 is in use by another program, so the app was not started; "
            f"choose another with --server.port, e.g. --server.port {port + 1}")
        assert not started and "teacher's link" not in err
    serve.main(["--server.address", "127.0.0.1"])  # private: no link; the port Streamlit would take, given to it
    assert "teacher's link" not in capsys.readouterr().err
    assert started[0][started[0].index("--server.port") + 1].isdigit()


def test_serve_reads_the_port_and_address_as_streamlit_will_take_them(monkeypatch, capsys, tmp_path):
    """A port in the user's ~/.streamlit/config.toml (or STREAMLIT_SERVER_PORT) was replaced by 8501; an address
    0.0.0.0 there was taken for the server's, while Streamlit reads the app's own file beside its script after the
    user's (127.0.0.1 wins): a teacher's link was printed for a server only this machine could reach."""
    from bert_explorer.app import serve

    home = tmp_path / "home"
    (home / ".streamlit").mkdir(parents=True)
    (home / ".streamlit" / "config.toml").write_text('[server]\naddress = "0.0.0.0"\nport = 9000\n')
    monkeypatch.setattr(serve.Path, "home", lambda: home)
    monkeypatch.chdir(tmp_path)  # (not the checkout)
    monkeypatch.setenv(roles.TOKEN_ENV, "tok")
    monkeypatch.delenv(roles.CLASSROOM_ENV, raising=False)
    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS", raising=False)
    monkeypatch.delenv("STREAMLIT_SERVER_PORT", raising=False)
    monkeypatch.setattr(roles, "_announced", [])
    monkeypatch.setattr(serve, "_free", lambda host, port: True)
    started = []
    monkeypatch.setattr(serve.cli, "main", lambda argv, **k: started.append(argv))
    serve.main([])
    assert "--server.port" not in started[0]  # theirs, 9000, left to Streamlit
    assert "teacher's link" not in capsys.readouterr().err  # the app's own 127.0.0.1 is what Streamlit serves
    monkeypatch.setenv("STREAMLIT_SERVER_ADDRESS", "0.0.0.0")  # (the environment beats every file)
    serve.main([])
    assert "--server.port" not in started[1] and "--server.address" not in started[1]
    assert f"the teacher's link is http://{serve.socket.gethostname()}:9000/?teacher=tok" in capsys.readouterr().err
    for port in ("abc", "99999"):  # (the link was printed, then Streamlit's usage or a traceback)
        with pytest.raises(SystemExit) as e:
            serve.main(["--server.port", port])
        assert e.value.code == 2
        assert capsys.readouterr().err.startswith(f"BERT Explorer: port {port} is no port, so the app was not started")


def test_the_prepare_panel_on_home_is_the_teachers_and_starts_prepare_class(classroom, no_work):
    student = _page("run_app.py")
    assert "Prepare for class" not in [e.label for e in student.expander]
    teacher = _page("run_app.py", teacher=True)
    assert "Prepare for class" in [e.label for e in teacher.expander]
    # minilm-mlm-nsp came with its own evaluation, which every student sees: no build is chosen for it
    assert teacher.multiselect(key="prep_builds").value == []
    assert teacher.dataframe[-1].value.loc["minilm-mlm-nsp", "quality"] == "its own"
    from bert_explorer.analysis import lesson  # the panel's columns in the order `prepare-class --status` prints them
    assert list(teacher.dataframe[-1].value.columns) == ["first visits", *lesson.BUILDS]
    # (a quality build ticked here is left out for it: the Masked word probe's button measures it all the same)
    teacher.multiselect(key="prep_builds").set_value(["head-map"]).run()
    (shown,) = [m.value for m in teacher.markdown if m.value.startswith(
        "First the first-visit work of the ") and "; then **1** build(s) to run, **about " in m.value]
    told = re.search(r"\*\*(about .*?)\*\* for the builds", shown).group(1)
    teacher.button(key="prep_start").click().run()
    assert not teacher.exception
    (what, argv), = no_work
    # the preparation quotes at its end the time the teacher was shown, not one it makes a moment later
    assert what == "process" and argv[argv.index("prepare-class") + 1:-1] == [
        "--model", "minilm-mlm-nsp", "--builds", "head-map", "--said", told, "--started"]
    assert abs(float(argv[-1]) - time.time()) < 60  # when the teacher pressed: the last line counts from it


def test_the_prepare_panel_chooses_no_build_the_model_has_already(classroom, no_work, monkeypatch):
    """Once the quality measure was built, the panel kept choosing it and then said "no build to run"."""
    from bert_explorer.analysis.probes import quality

    monkeypatch.setattr(quality, "stored", lambda path: {"top1": 0.5})
    teacher = _page("run_app.py", teacher=True)
    assert not teacher.exception
    assert teacher.multiselect(key="prep_builds").value == []
    assert any(re.match(r"First the first-visit work of the \d+ page\(s\) not kept yet: about [^;]+; no build to run",
                        m.value) for m in teacher.markdown)


def test_the_prepare_panel_says_which_first_visits_are_kept(classroom, no_work, monkeypatch):
    """The panel said "about 20 s" of first visits even when every one was kept, and its table of what is
    prepared had no word of them: it counts the first visits not kept, and the table says how many are."""
    from bert_explorer import checkpoint, disk_cache
    from bert_explorer.analysis import lesson

    def work(kind):
        return lambda loaded: disk_cache.kept_json(kind, loaded, lambda: {"x": 1}, what="a test's result")
    monkeypatch.setattr(lesson, "_declared", lambda: [("Attention", "one", work("test-one")),
                                                       ("Two models", "two", work("test-two"))])
    teacher = _page("run_app.py", teacher=True)
    assert teacher.dataframe[-1].value.loc["minilm-mlm-nsp", "first visits"] == "0 of 2"
    assert any(m.value.startswith("First the first-visit work of the 2 page(s) not kept yet: about ")
               for m in teacher.markdown)
    loaded = checkpoint.load("minilm-mlm-nsp", "BertForPreTraining")
    lesson._declared()[0][2](loaded)  # one page visited
    assert lesson.first_visits_left(loaded) == [("Two models", "two")]
    teacher = _page("run_app.py", teacher=True)
    assert teacher.dataframe[-1].value.loc["minilm-mlm-nsp", "first visits"] == "1 of 2"
    lesson._declared()[1][2](loaded)
    teacher = _page("run_app.py", teacher=True)
    assert teacher.dataframe[-1].value.loc["minilm-mlm-nsp", "first visits"] == "✓"
    assert any(m.value.startswith("The pages' first-visit work is kept already for this model; no build to run")
               for m in teacher.markdown)


def test_the_prepare_panel_offers_every_model_a_lesson_may_use(classroom, no_work, monkeypatch, tmp_path):
    """The panel offered only the sidebar's model and the default: a teacher who downloaded BERT-Base for the
    lesson could not prepare it from Home. It offers the shipped models and the downloaded BERTs."""
    from bert_explorer import checkpoint, hub

    monkeypatch.setattr(hub, "cached_berts", lambda: {"google-bert/bert-base-uncased": tmp_path})
    teacher = _page("run_app.py", teacher=True)
    assert not teacher.exception
    offered = teacher.multiselect(key="prep_models").options
    shipped = [n for n, (locate, _) in checkpoint.SHORT_NAMES.items() if locate() is not None]
    assert set(shipped) >= {"minilm-mlm-nsp", "explorer-mini"} and set(shipped) <= set(offered)
    assert f"{hub.CATALOGUE['google-bert/bert-base-uncased'].title} (downloaded)" in offered
    assert teacher.multiselect(key="prep_models").value == ["minilm-mlm-nsp"]  # the sidebar's model, chosen


def test_the_prepare_panel_says_how_the_last_preparation_ended(classroom, no_work):
    """When a preparation ended, the panel went back to its choices with no word of it: it now says its end."""
    import json

    from bert_explorer.analysis import lesson

    d = lesson._work()
    (d / "started.json").write_text(json.dumps({"pid": 4194303, "models": ["minilm-mlm-nsp"], "builds": ["quality"]}))
    (d / "log.txt").write_text("preparing 1 model(s): first each page's first-visit work …\n"
                               "prepared in 1 min 20 s: the first visits 15 s, the builds 1 min 05 s (said before: "
                               "about 1 min 11 s (the machine is idle now); load 0.9 on 2 cores)\n")
    teacher = _page("run_app.py", teacher=True)
    assert not teacher.exception
    assert [s.value for s in teacher.success] == [
        "The last preparation (minilm-mlm-nsp): prepared in 1 min 20 s: the first visits 15 s, the builds 1 min 05 s "
        "(said before: about 1 min 11 s (the machine is idle now); load 0.9 on 2 cores)"]


def test_a_stopped_fine_tuning_offers_resume_to_the_teacher_only(classroom, no_work):
    """A stopped run with a checkpoint: the teacher's Fine-tune page shows Resume, a student's neither
    shows it nor the Hub data set's download (the set-up section is the teacher's)."""
    from bert_explorer.runs.run import Run

    run = Run(classroom / "finetune-stopped").create({"model": "minilm-mlm-nsp", "train": "tiny:classification"},
                                                     "finetune")
    run.write_status(state="stopped", step=3)
    ckpt = run.path / "checkpoints" / "step-3"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"")
    (ckpt / "training_state.pt").write_bytes(b"")
    student = _page("pages/11_Fine-tune.py", ft_watch="finetune-stopped")
    assert not student.exception
    keys = {b.key for b in student.button}
    assert "ft_resume" not in keys and "ft_hub_fetch" not in keys
    teacher = _page("pages/11_Fine-tune.py", teacher=True, ft_watch="finetune-stopped")
    assert not teacher.exception and "ft_resume" in {b.key for b in teacher.button}
    assert no_work == []
