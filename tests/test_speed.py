"""Estimates a teacher can plan on: this machine's speed is measured here and kept (a busy moment's reading
never replaces an idle one's), the time said before a job is scaled by the share of the CPU it gets now,
and a running job's time left is counted from its own progress."""
import json
import re

import pytest

from bert_explorer.runs.report import seconds_left
from bert_explorer.train import estimate, speed

from shared import needs_model


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A cache of the test's own, a process that has measured nothing yet, and the cores busy at normal
    ("now") and at low priority ("low") that the test sets."""
    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(speed, "_measured_at", {})
    load = {"now": 0.0, "low": 0.0}
    monkeypatch.setattr(speed, "load_now", lambda: load["now"] + load["low"])
    monkeypatch.setattr(speed, "busy_cores", lambda: (load["now"], load["low"]))
    return load


def _readings(*values):
    """A measurement that reads ``values`` in turn, and the list of the times it was called."""
    calls = []

    def measure():
        calls.append(1)
        return values[min(len(calls), len(values)) - 1]
    return measure, calls


def test_a_speed_is_measured_once_and_kept_for_the_next_process(machine):
    measure, calls = _readings(100e9, 40e9)
    assert speed.kept("matmul fp32", measure) == 100e9
    speed._measured_at.clear()  # a new server process
    assert speed.kept("matmul fp32", measure) == 100e9 and len(calls) == 1  # read back, not measured
    kept = json.loads((speed._path()).read_text())[speed.machine_name()]["matmul fp32"]
    assert kept["flop_s"] == 100e9 and kept["idle"] is True


def test_two_estimates_minutes_apart_do_not_swing_with_one_busy_reading(machine, monkeypatch):
    """The estimates issue's fine-tuning: the one-shot bf16 probe read 593 then 48 GFLOP/s and the same job was
    said to take 32 s, then 3 min 10 s. Kept, the first (idle) reading holds; a slower one replaces nothing."""
    monkeypatch.setattr(speed, "_matmul_rate", lambda bf16: next(readings))
    readings = iter([593e9, 48e9, 48e9])
    first = estimate.cpu_flop_s("probe", 768, 1, bf16=True)[0]
    speed._measured_at.clear()
    machine["now"] = 10.0  # busy: a new reading is not even taken
    second = estimate.cpu_flop_s("probe", 768, 1, bf16=True)[0]
    assert first == second == estimate.PROBE_SHARE * 593e9


def test_a_reading_taken_on_a_busy_machine_is_kept_as_an_idle_ones_and_replaced_once_it_is_idle(machine, monkeypatch):
    """A speed measured busy was kept as the idle machine's: an index's "idle" time read 15 min 21 s where 6 min
    27 s was measured idle, and the load was counted twice (in the reading, and again in the share). It is
    divided by the square root of the share a normal-priority job gets now (at most doubled); an idle reading replaces it."""
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    machine["now"] = 1.0  # one core busy: a one-thread job at normal priority gets 2 / (1 + 1) = all of one
    measure, calls = _readings(30e9, 50e9, 20e9)
    assert speed.kept("matmul fp32", measure) == 30e9
    machine["now"] = 2.0  # both busy: 2 / (2 + 1) of a core
    speed._measured_at.clear()
    assert speed.kept("matmul fp32", measure) == 30e9 and len(calls) == 1  # kept, not a reading of a week ago
    speed._path().unlink()
    assert speed.kept("matmul fp32", measure) == pytest.approx(50e9 / (2 / 3) ** 0.5) and len(calls) == 2
    kept = json.loads(speed._path().read_text())[speed.machine_name()]["matmul fp32"]
    assert kept["measured"] == 50e9 and kept["share"] == pytest.approx((2 / 3) ** 0.5, abs=1e-3)
    assert kept["idle"] is False
    speed._path().unlink()
    machine["now"] = 9.0  # a share of 2 / 10: never more than doubled
    assert speed.kept("matmul fp32", measure) == pytest.approx(40e9) and len(calls) == 3
    speed._measured_at.clear()
    machine["now"] = 0.2
    measure, calls = _readings(35e9)  # idle now: measured again, and the idle reading replaces the busy one
    assert speed.kept("matmul fp32", measure) == 35e9 and len(calls) == 1
    speed._measured_at.clear()
    assert speed.kept("matmul fp32", measure) == 35e9 and len(calls) == 1  # an idle reading is not measured again


def test_a_kept_reading_older_than_a_week_is_measured_afresh(machine, monkeypatch):
    measure, calls = _readings(100e9, 70e9)
    speed.kept("matmul fp32", measure)
    later = speed.time.time() + speed.KEEP_S + 1
    monkeypatch.setattr(speed.time, "time", lambda: later)
    speed._measured_at.clear()
    assert speed.kept("matmul fp32", measure) == 70e9 and len(calls) == 2  # a new week's machine, even slower


def test_a_layer_is_timed_for_real_and_kept_by_width_threads_and_precision(machine):
    rate = speed.layer_flop_s("train", 64, 1)
    assert 1e8 < rate < 1e13
    kept = json.loads(speed._path().read_text())[speed.machine_name()]
    assert set(kept) == {"train H=64 I=256 threads=1 fp32"}
    assert speed.layer_flop_s("train", 64, 1) == rate  # read back
    speed.layer_flop_s("forward", 64, 1, bf16=True)
    assert "forward H=64 I=256 threads=1 bf16" in json.loads(speed._path().read_text())[speed.machine_name()]


@pytest.mark.skipif(not hasattr(__import__("os"), "getloadavg"), reason="no load average here")
def test_the_time_said_is_scaled_by_the_share_of_the_cpu_the_job_gets_now(machine, monkeypatch):
    """Measured on 2 cores (speed.py): a one-thread job at nice 10 took 1.19 s beside one busy process at
    nice 0 (1.13 s idle), 13.3 s beside two, 1.92 s beside two at nice 10. The load average said 1.3-1.9 for
    all three; the share follows the priority of the work that keeps the cores busy."""
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    assert speed.said(100, 1) == "about 1 min 40 s (the machine is idle now)"
    machine["now"] = 1.0  # one core busy: a one-thread job still has a core to itself, and the machine is busy
    assert speed.share_now(1) == 1.0 and speed.share_now(2) == pytest.approx(1 / 2)
    assert speed.said(100, 1) == "about 1 min 40 s (the other work now leaves it the cores it uses)"
    assert speed.share_now(2, niced=False) == pytest.approx(2 / 3)  # at normal priority it shares the busy one
    machine["now"] = 2.0  # both cores busy at normal priority: a background job gets the crumbs
    assert speed.said(100, 1) == "about 1 min 40 s on an idle machine, up to 16 min 40 s at the load now"
    assert speed.said(100, 1, niced=False) == "about 1 min 40 s on an idle machine, up to 2 min 30 s at the load now"
    machine["now"], machine["low"] = 0.0, 2.0  # both busy with other background work: shared alike
    assert speed.said(100, 1) == "about 1 min 40 s on an idle machine, up to 2 min 30 s at the load now"
    machine["now"], machine["low"] = 10.0, 0.0
    assert speed.seconds_now(100, 2, niced=False) == pytest.approx(100 * 12 / 2)


def test_the_busy_cores_are_the_cpu_time_the_system_counted(monkeypatch):
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(speed, "_cpu_samples", [])
    monkeypatch.setattr(speed.time, "sleep", lambda s: None)
    # user, nice, system, idle, iowait, irq, softirq, steal: 300 ticks on 2 cores, 120 + 30 of them at
    # normal priority (user, system), 75 at low priority, the rest idle
    readings = iter([[1000, 500, 200, 4000, 10, 0, 0, 0], [1120, 575, 230, 4070, 15, 0, 0, 0]])
    monkeypatch.setattr(speed, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr(speed, "load_now", lambda: 1.5)  # the last minute as busy: the counted share
    normal, low = speed.busy_cores()
    assert normal == pytest.approx(2 * 150 / 300) and low == pytest.approx(2 * 75 / 300)
    # the last minute busier than the half second (a lull in it): the minute's load, shared as the half second's
    # work was (a command read 1.0 busy core at load 5 and said "about 20 s" with no range of a 35-second run)
    monkeypatch.setattr(speed, "_cpu_samples", [])
    readings = iter([[1000, 500, 200, 4000, 10, 0, 0, 0], [1120, 575, 230, 4070, 15, 0, 0, 0]])
    monkeypatch.setattr(speed, "_cpu_times", lambda: next(readings))
    monkeypatch.setattr(speed, "load_now", lambda: 1.8)
    normal, low = speed.busy_cores()
    assert normal == pytest.approx(1.0 + 0.3 * 2 / 3) and low == pytest.approx(0.5 + 0.3 / 3)
    monkeypatch.setattr(speed, "_cpu_times", lambda: None)  # no /proc/stat (or a container shown the host's)
    monkeypatch.setattr(speed, "load_now", lambda: 1.7)
    assert speed.busy_cores() == (1.7, 0.0)


def test_a_first_look_at_a_burst_is_weighed_against_the_last_minute(monkeypatch):
    """A command counts the CPU for half a second before it says a time; a burst of other work in that half
    second (both cores busy) said 5 min 35 s for a job that took 65 s, the last minute's load being about one
    core. Where the load average says less than the first look, the middle of the two is taken; a later look
    within the minute counts from the first, alone."""
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(speed, "_cpu_samples", [])
    monkeypatch.setattr(speed.time, "sleep", lambda s: None)
    monkeypatch.setattr(speed, "load_now", lambda: 1.0)
    clock = iter([100.0, 100.5, 130.0])
    monkeypatch.setattr(speed.time, "monotonic", lambda: next(clock))
    # 100 ticks on 2 cores, all busy at normal priority (the burst), then 30 s later 6,000 more, a quarter busy
    readings = iter([[0, 0, 0, 0, 0, 0, 0, 0], [100, 0, 0, 0, 0, 0, 0, 0], [1600, 0, 0, 4500, 0, 0, 0, 0]])
    monkeypatch.setattr(speed, "_cpu_times", lambda: next(readings))
    normal, low = speed.busy_cores()
    assert normal == pytest.approx((2.0 + 1.0) / 2) and low == 0.0
    # a background job alone beside that: (2 - 1.5) / 1 of the cores, not the tenth of the burst alone
    assert speed.share_now(1, normal) == pytest.approx(0.5)
    normal, low = speed.busy_cores()  # 30 s on: the counted CPU time from the first look, not weighed again
    assert normal == pytest.approx(2 * 1600 / 6100) and low == 0.0


def test_a_run_s_time_left_is_its_own_average_and_counts_down_between_writes(monkeypatch):
    """A pre-training's time left came from its last ten steps (it leapt by half after each evaluation),
    and the page showed it as written, so two pages a minute apart said two times. It is the rate of all
    the steps of this process, and a page takes off the time since the status was written."""
    from streamlit.testing.v1 import AppTest

    from bert_explorer.train.engine import time_left

    monkeypatch.setattr("time.time", lambda: 1000.0)
    assert time_left(970.0, 10, 20) == pytest.approx(60.0)  # 3 s a step, 20 steps to go
    assert time_left(970.0, 0, 20) == pytest.approx(600.0) and time_left(970.0, 10, -1) == 0.0
    monkeypatch.undo()

    def page():
        import time as t

        from bert_explorer.app.runs_view import show_progress
        show_progress({"state": "running", "step": 10, "max_steps": 100, "eta_s": 150, "updated": t.time() - 60})

    at = AppTest.from_function(page).run()
    (bar,) = at.get("progress")
    assert "step 10 of 100 · about 1 min 30 s left" in bar.proto.text

    def later(stopping=False, since=60):
        import time as t

        from bert_explorer.app.runs_view import show_progress
        show_progress({"state": "running", "step": 40, "max_steps": 176, "eta_s": 66, "updated": t.time() - since},
                      stopping=stopping)
    # no step for 100 s: the 66 s said are not counted down to "about 0 s left"
    (bar,) = AppTest.from_function(later, kwargs={"since": 100}).run().get("progress")
    assert bar.proto.text.startswith("running · step 40 of 176 · no new step for 1 min 40 s") and "left" not in \
        bar.proto.text
    # a Stop asked and not yet taken is said at once, with no time left
    (bar,) = AppTest.from_function(later, kwargs={"stopping": True}).run().get("progress")
    assert bar.proto.text == "stopping (a Stop was asked: it saves at its next step) · step 40 of 176"


def test_the_time_left_corrects_itself_from_the_progress_made():
    assert seconds_left(1000.0, 0.25, now=1030.0) == pytest.approx(90.0)   # 30 s for a quarter: 90 s to go
    assert seconds_left(1000.0, 0.5, now=1120.0) == pytest.approx(120.0)   # slower than it first went: more
    assert seconds_left(1000.0, 0.01, now=1030.0) is None                  # too little progress to say
    assert seconds_left(1000.0, 0.5, now=1003.0) is None                   # too early to say
    assert seconds_left(None, 0.5) is None and seconds_left(1000.0, 1.0, now=1100.0) is None
    # 20 s of loading with nothing to show, then 10 % every 2 s: counted from the first progress, 18 s are left
    # (from the start: 49.5 s; a student's bar said 1 min 57 s where the teacher's log said 51 s)
    assert seconds_left(1000.0, 0.1, now=1022.0, since=(1020.0, 0.0)) is None  # too early since the first progress
    assert seconds_left(1000.0, 0.55, now=1030.0, since=(1021.0, 0.1)) == pytest.approx(9.0 * 0.45 / 0.45)


def test_a_job_past_the_time_said_with_no_rate_of_its_own_is_said_so_not_given_0_s():
    """A build at 7 % a minute past its 105 s said "about 0 s left" to every student."""
    import time as clock

    from bert_explorer.runs.report import left_text

    now = clock.time()
    assert seconds_left(now - 200, 0.067, now=now, since=(now - 3, 0.06), said=(now - 200, 105)) is None
    assert seconds_left(now - 50, 0.0, now=now, said=(now - 50, 105)) == pytest.approx(55, abs=1)  # said, less since
    assert left_text(now - 200, 0.067, since=(now - 3, 0.06), said=(now - 200, 105)) == \
        " · longer than the 1 min 45 s said before it started"


def test_a_build_s_progress_keeps_its_first_progress_past_zero(tmp_path, monkeypatch):
    """What report.seconds_left counts the rate from: written once, by the process at work."""
    from bert_explorer.runs import neighbour_jobs as jobs

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "an-entry"
    jobs.write_progress(entry, state="running", fraction=0.0, message="loading the model")
    assert "since" not in jobs.read_progress(entry)
    jobs.write_progress(entry, state="running", fraction=0.1, message="10 %")
    first = jobs.read_progress(entry)["since"]
    assert first[1] == 0.1 and first[0] >= jobs.read_progress(entry)["started"]
    jobs.write_progress(entry, state="running", fraction=0.4, message="40 %")
    assert jobs.read_progress(entry)["since"] == first


def test_a_build_keeps_the_time_it_started_for_its_time_left(tmp_path, monkeypatch):
    from bert_explorer.runs import neighbour_jobs as jobs

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "entry"
    jobs.write_progress(entry, state="running", fraction=0.1, message="a")
    started = jobs.read_progress(entry)["started"]
    jobs.write_progress(entry, state="running", fraction=0.5, message="b")
    assert jobs.read_progress(entry)["started"] == started


def test_a_build_says_the_time_said_at_its_start_until_its_progress_says_more(tmp_path, monkeypatch):
    """A student saw "Preparing Attention's measures for the class" with no time for the first half minute: the
    build loads before its first progress. The time said when it was started, less the time since, stands in
    until the build's own rate can be counted."""
    import time

    from bert_explorer.runs import neighbour_jobs as jobs

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "entry"
    jobs.write_progress(entry, state="starting", fraction=0.0, pid=None, said=[time.time() - 40, 240.0])
    # the starter names the process it started, in a second "starting": that one dropped the time said
    jobs.write_progress(entry, state="starting", fraction=0.0, message="starting the build process…", pid=4194303)
    assert jobs.read_progress(entry)["said"][1] == 240.0
    jobs.write_progress(entry, state="running", fraction=0.0, message="loading the model")  # the builder's own
    p = jobs.read_progress(entry)
    left = seconds_left(p["started"], p["fraction"], since=p.get("since"), said=p["said"])
    assert left == pytest.approx(200, abs=2)
    # once the build's own progress is enough, its own rate: half done in 10 s, 10 s to go
    assert seconds_left(1000.0, 0.5, now=1010.0, since=[1000.0, 0.0], said=[900.0, 600.0]) == pytest.approx(10)
    assert seconds_left(None, 0.0, now=2000.0, said=[900.0, 600.0]) is None  # said, and overdue: no time, never 0 s
    # the page's line gives one time left: the builder's own "this stage about ... left" (for a terminal) goes
    from bert_explorer.app.roles import progress_line

    line = progress_line({"message": "layer 6: 500 of 1,000 tokens (321 tokens/s, this stage about 50 min 56 s left)",
                          "started": time.time() - 60, "fraction": 0.5, "since": [time.time() - 60, 0.0]}, "x")
    assert line.startswith("layer 6: 500 of 1,000 tokens (321 tokens/s) · about 1 min") and line.count("left") == 1
    # a job 5 % done, a minute in, said 6 minutes: its first minute's rate alone (19 min left) is weighed against
    # what was said (5 min left) until it is a fifth done
    own, told = 60 * 0.95 / 0.05, 360.0 - 60.0
    assert seconds_left(1000.0, 0.05, now=1060.0, said=[1000.0, 360.0]) == pytest.approx(0.25 * own + 0.75 * told)
    # past the time said, the job has shown the estimate short: its own rate alone (it gave about half of it)
    assert seconds_left(1000.0, 0.1, now=1120.0, said=[1000.0, 60.0]) == pytest.approx(120 * 0.9 / 0.1)
    # a resumed job weighs from its own part: 15 % done, its part 5 %
    assert seconds_left(1000.0, 0.15, now=1060.0, since=[1000.0, 0.10], said=[1000.0, 360.0]) == \
        pytest.approx(0.25 * (60 * 0.85 / 0.05) + 0.75 * 300.0)


def test_the_command_line_says_the_time_left_as_it_goes(monkeypatch, capsys):
    from bert_explorer.cli import common

    from bert_explorer.runs import report

    now = [1000.0]
    monkeypatch.setattr(common.time, "time", lambda: now[0])
    monkeypatch.setattr(report.time, "time", lambda: now[0])
    say = common.progress_lines()
    now[0] += 20.0
    say(0.25, "a quarter")
    assert capsys.readouterr().err.strip() == "25% a quarter · about 1 min 00 s left"
    # a measurement that says its own time left (from its first segment) gets no second, other figure
    say(0.5, "500 of 1,000 segments (7.0 a second, about 1 min 11 s left)")
    assert capsys.readouterr().err.strip() == "50% 500 of 1,000 segments (7.0 a second, about 1 min 11 s left)"
    # within one 5 % step: a new stage is said, the same stage going on is not
    say(0.64, "training the SAE: step 860 of 976")
    say(0.645, "training the SAE: step 870 of 976")
    say(0.647, "reading every token's features…")
    for n in range(651, 660):  # counting within one 5 % step is no new stage
        say(n / 1000, f"{n} of 1,000 segments (7.0 a second, about 1 min left)")
    said = capsys.readouterr().err.strip().splitlines()
    assert [line.split(" ·")[0].strip() for line in said] == ["64% training the SAE: step 860 of 976",
                                                               "65% reading every token's features…",
                                                               "65% 651 of 1,000 segments (7.0 a second, about 1 min "
                                                               "left)"], said


@needs_model("minilm-mlm-nsp")
def test_evaluate_pretraining_says_its_time_before_and_its_progress_while_it_measures(tmp_path, monkeypatch, capsys):
    """It printed nothing for 13 minutes on a busy machine before its one line."""
    from bert_explorer.cli import main

    from bert_explorer.train import speed

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    # a burst of other work just ended: the last minute's load average still says 2.6, the cores say idle (the
    # line said "(the machine is idle now) (load 2.6 on 2 cores)": the figure beside it is the one it read)
    monkeypatch.setattr(speed, "load_now", lambda: 2.6)
    monkeypatch.setattr(speed, "busy_cores", lambda: (0.1, 0.0))
    assert main(["evaluate-pretraining", "--model", "minilm-mlm-nsp", "--sequences", "40"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^measuring 40 held-out sequences: about .+ \(the machine is idle now\) \(0\.1 of \d+ cores "
                     r"busy\)$", err, re.M), err
    assert re.search(r"^100% 40 of 40 held-out sequences", err, re.M) or re.search(r"% \d+ of 40 held-out", err), err
    # its figures beside chance and their sampling error (the random BERT-Base said "NSP 47.0 %" alone)
    assert re.search(r"MLM \d+\.\d% ± \d+\.\d points of [\d,]+ masked WordPieces, NSP \d+\.\d% ± \d+\.\d points "
                     r"\(chance 50 %(; not told apart from chance on so few)?\) on 40 sequences", err), err


def test_the_sampling_error_of_an_accuracy_is_the_normal_approximation():
    from bert_explorer.analysis.probes.quality import margin_95

    assert margin_95(0.5, 100) == pytest.approx(0.098, abs=1e-3)   # the issue's ±10 points on 100 pairs
    assert margin_95(0.5, 10_000) == pytest.approx(0.0098, abs=1e-4)
    assert 0 < margin_95(0.0, 3597) < 0.001                          # a random model's 0 % is not exactly certain


def test_a_speed_file_that_is_not_ours_is_measured_again(machine):
    speed._path().parent.mkdir(parents=True, exist_ok=True)
    for text in ("[1, 2]", json.dumps({speed.machine_name(): {"matmul fp32": {"flop_s": "fast"}}}),
                 json.dumps({speed.machine_name(): ["x"]}), "not json"):
        speed._path().write_text(text)
        speed._measured_at.clear()
        measure, calls = _readings(80e9)
        assert speed.kept("matmul fp32", measure) == 80e9 and len(calls) == 1


def test_a_time_said_near_idle_is_the_idle_figure_a_headline_shows(monkeypatch):
    """The Ablation studio's headline said ~49 min 54 s (idle) above "about 50 min 40 s (the other work now
    leaves it the cores it uses)": within a tenth, the figure said is the idle one."""
    from bert_explorer.train import speed

    monkeypatch.setattr(speed, "seconds_now", lambda idle, threads, load=None, niced=True: idle * 1.05)
    assert speed.said(2994.0, 1, load=1.0) == "about 49 min 54 s (the other work now leaves it the cores it uses)"
    assert speed.said(2994.0, 1, load=0.1) == "about 49 min 54 s (the machine is idle now)"


def test_other_work_is_the_systems_busy_cores_less_this_processs_own(monkeypatch):
    """What a run logs beside its speed: over 2 s on 2 cores, both busy (user 300 + system 100 ticks of 400), this
    process 1 s of CPU (0.5 core): other work kept 1.5 cores busy."""
    from collections import namedtuple

    from bert_explorer.train import speed

    T = namedtuple("T", "user system children_user children_system elapsed")
    clock, stat, own = [100.0], [[0, 0, 0, 0, 0, 0, 0, 0]], [T(0.0, 0.0, 0, 0, 0)]
    monkeypatch.setattr(speed.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(speed, "_cpu_times", lambda: list(stat[0]))
    monkeypatch.setattr(speed.os, "times", lambda: own[0])
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    work = speed.OtherWork()
    clock[0] += 0.5
    assert work.sample() is None  # under a second: nothing said, and the interval goes on adding up
    clock[0] += 1.5
    stat[0] = [300, 0, 100, 0, 0, 0, 0, 0]
    own[0] = T(0.8, 0.2, 0, 0, 0)
    assert work.sample() == 1.5


def test_a_preparation_does_not_count_its_own_work_as_the_load_its_builds_will_share(monkeypatch):
    """prepare-class read its own first visits (a core busy for a minute, then idle while it waits) as the other
    work its builds would share: a build of 12.7 s was said 127 s, and took 19 s."""
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(speed, "_cpu_samples", [])
    monkeypatch.setattr(speed.time, "sleep", lambda s: None)
    monkeypatch.setattr(speed, "load_now", lambda: 0.0)
    monkeypatch.setattr(speed, "niced_here", lambda: False)
    clock = iter([100.0, 110.0, 110.0, 110.0])
    monkeypatch.setattr(speed.time, "monotonic", lambda: next(clock))
    own = iter([50.0, 60.0, 60.0])  # this process: 10 CPU seconds in the 10 s, one core
    monkeypatch.setattr(speed, "_own_cpu", lambda: next(own))
    # both cores busy at normal priority over the 10 s: this process's core and one other process's
    readings = iter([[0, 0, 0, 0, 0, 0, 0, 0], [2000, 0, 0, 0, 0, 0, 0, 0], [2000, 0, 0, 0, 0, 0, 0, 0]])
    monkeypatch.setattr(speed, "_cpu_times", lambda: next(readings))
    assert speed.busy_cores(without_own=True) == (pytest.approx(1.0), 0.0)
    assert speed.busy_cores() == (pytest.approx(2.0), 0.0)  # (a page's: the server's own work is the class's)


def test_a_one_thread_reading_counts_the_cpu_time_it_got_not_the_wall_clock(machine, monkeypatch):
    """A run at low priority measured its layer's speed beside six busy cores: it got a tenth of the wall clock's
    time, the reading was divided by a share guessed at 0.85, and the run said 2 h 01 min of a job that takes
    about 12 min on the idle machine. One thread's reading counts the CPU time the thread got, and is kept as it
    is; several threads' (which wait on each other) the wall clock's, corrected as before."""
    import time as clock

    assert speed._seconds(lambda: clock.sleep(0.3), 1) < 0.05  # waiting for the CPU costs the thread nothing
    assert speed._seconds(lambda: clock.sleep(0.3), 2) >= 0.3
    monkeypatch.setattr(speed.os, "cpu_count", lambda: 2)
    machine["now"] = 6.0  # every core busy
    measure, calls = _readings(7e9)
    assert speed.kept("train H=128 I=512 threads=1 fp32", measure, cpu_timed=True) == 7e9  # not divided by a guess
    kept = json.loads(speed._path().read_text())[speed.machine_name()]["train H=128 I=512 threads=1 fp32"]
    assert kept["idle"] is False  # measured again once the machine is idle
    recorded = []
    monkeypatch.setattr(speed, "kept", lambda key, measure, **how: recorded.append((key, how)) or 1e9)
    speed.layer_flop_s("train", 128, 1)
    speed.layer_flop_s("train", 128, 2)
    speed.matmul_flop_s()
    assert [how.get("cpu_timed") for _, how in recorded] == [True, False, True]


def test_a_coarse_thread_clock_falls_back_to_the_wall_clock(monkeypatch):
    """Windows' thread clock ticks every 15.6 ms: a product of 11 ms read 0 s of CPU (a division by zero, or a
    speed far too high)."""
    import time as clock

    monkeypatch.setattr(speed, "FINE_THREAD_CLOCK", False)
    assert speed._seconds(lambda: clock.sleep(0.2), 1) >= 0.2


def test_a_time_said_takes_the_load_and_the_priority_by_name():
    """`head-map build` and `attention-measures build` passed niced_here() third, where said() reads the load: at
    load 4-5 on 2 cores they said "(the machine is idle now)"."""
    with pytest.raises(TypeError):
        speed.said(10.0, 1, False)
    assert "idle" in speed.said(10.0, 1, load=0.0, niced=False)
