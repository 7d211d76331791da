"""The Pre-train page's time-lapse follows a run while it is active.

While a run is active the browser reruns only the page's fragments (every 2-3 s), never the
whole page; the time-lapse used to be drawn once, outside any fragment, so it kept saying
"needs saved checkpoints" long after the run had written one. These tests do what the
browser does: draw the page once, let the run write a checkpoint, then rerun the fragments.
"""
import os
import time

from streamlit.testing.v1 import AppTest

from bert_explorer.tokenizer import SPECIAL_TOKENS
from bert_explorer.runs.run import Run
from shared import rerun_fragments, save_tiny_bert

WORDS = ["the", "government", "said", "would", "rise", "next", "year", ".", "ball", "is", "red"]


def write_checkpoint(run_dir, step):
    """A tiny BertForPreTraining saved where a pre-training run saves its step-N checkpoint."""
    return save_tiny_bert(run_dir / "checkpoints" / f"step-{step}", SPECIAL_TOKENS + WORDS, seed=step)


def active_run(root):
    """A pre-training run that is 'running' in this (live) process, at step 150 of 1000."""
    run = Run(root / "live").create({"size": "L2-H128", "max_steps": 1000, "save_every": 200}, "pretrain")
    run.write_status(state="running", pid=os.getpid(), started=time.time(), step=150, max_steps=1000)
    assert run.is_active()
    return run


def _timelapse_frames(at):
    import json
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        if "attention at each checkpoint" in ((spec.get("layout") or {}).get("title") or {}).get("text", ""):
            return [s["label"] for s in spec["layout"]["sliders"][0]["steps"]] if spec["layout"].get("sliders") \
                else ["one frame"]
    return None


def test_timelapse_sees_a_checkpoint_written_while_the_page_is_open(runs_root):
    run = active_run(runs_root)
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    assert not at.exception
    assert any("needs saved checkpoints; the run writes one every 200 steps" in i.value for i in at.info)
    assert _timelapse_frames(at) is None

    write_checkpoint(run.path, 200)                      # the run saves at step 200 ...
    run.write_status(step=270)                           # ... and goes on
    rerun_fragments(at)
    assert not at.exception
    assert not any("needs saved checkpoints" in i.value for i in at.info)
    assert _timelapse_frames(at) == ["one frame"]        # the step-200 checkpoint is in the time-lapse

    write_checkpoint(run.path, 400)
    rerun_fragments(at)
    assert not at.exception
    assert _timelapse_frames(at) == ["step 200", "step 400"]


def test_no_redraw_while_nothing_changed(runs_root):
    run = active_run(runs_root)
    write_checkpoint(run.path, 200)
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    assert _timelapse_frames(at) == ["one frame"]
    rerun_fragments(at)                                  # no new checkpoint: only the fragments redraw
    assert not at.exception
    assert _timelapse_frames(at) is None and not at.get("text_input")


def test_a_run_saving_at_every_step_is_not_said_to_save_every_1_steps(runs_root):
    run = Run(runs_root / "each").create({"size": "L2-H128", "max_steps": 10, "save_every": 1}, "pretrain")
    run.write_status(state="running", pid=os.getpid(), started=time.time(), step=0, max_steps=10)
    at = AppTest.from_file("../pages/10_Pre-train.py", default_timeout=120).run()
    assert any("the run writes one at every step and at the end" in i.value for i in at.info)
