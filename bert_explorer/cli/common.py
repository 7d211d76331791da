"""What every command shares: how a command ends (its output, its one-line errors, its exit code),
running its work here or in the background, reading input and --config files, settings as flags.

A command is a function ``cmd_x(args) -> int`` that each module adds to the parser in its own
``register(sub)``. A mistake the user can make ends in a :class:`UserError`; :func:`run_command`
is the one place that turns it (and the project's other user-facing errors) into one line on
stderr and an exit code.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
import typing
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import atomic, checkpoint
from ..runs.neighbour_jobs import BuildBusy
from ..checkpoint import CheckpointError
from ..data.corpora import CorpusNote
from ..data.uploads.core import DEFAULT_MAX_BYTES, DataError
from ..data.uploads.decode import decode_bytes
from ..full_disk import CacheNotKept, DiskFull, size_text
from ..train.device import threads_for_free_cores
from ..train.resume import ResumeRefused
from ..runs.lock import RunBusy
from ..runs.background import start_background
from ..runs.run import shown_entries
from ..runs.report import left_text

MODEL_HELP = (f"a checkpoint directory, a short name ({', '.join(checkpoint.SHORT_NAMES)}), a model of the paper "
              "(bert-base-uncased, google/bert_uncased_L-2_H-128_A-2, ...: `bert-explorer models`) or hf:<hub id>")

# Exit codes: a mistake the user can put right (a wrong path, a malformed file, a busy run folder) is 2,
# as argparse's own usage errors; a full disk is 1 (nothing was wrong with the request); Ctrl-C is 130
# (and a run that SIGTERM stopped 143: ``runs.signals.StoppedBySignal.exit_code``).
USER_MISTAKE, DISK_FULL, INTERRUPTED, BROKEN_PIPE = 2, 1, 130, 141


class UserError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""


def refuse_second_text(task, named: bool, remedy: str) -> None:
    """A second text for a model whose run fine-tuned it on one text a time (a sentence's class, a sentence's
    labels, its entities) is refused, as the app offers no box for it: the model never saw a sentence B, and a
    tagger would drop it unsaid. A model from elsewhere names no task (``named`` false) and may read pairs.
    ``remedy``: what to give instead, in the words of where the second text came from."""
    if named and len(task.inputs) == 1:
        raise UserError(f"this model was fine-tuned on {task.in_words or f'a {task.name} task'}, which reads one text "
                        f"at a time: {remedy}")


def flag(setting: str) -> str:
    """A setting's name as the user types it: ``max_steps`` -> ``--max-steps``."""
    return "--" + setting.replace("_", "-")


@contextmanager
def user_errors(*also: type[Exception], typed: tuple | None = None):
    """A bad input file or setting (ValueError, FileNotFoundError, and the ``also`` types a caller
    expects) becomes one sentence for the user (UserError), not a traceback. A refused resume
    names the settings as the flags the user typed; so does a sentence about a setting given as a flag,
    with ``typed`` = (the parsed arguments, the config dataclass): "--batch-size must be ...", not
    "batch_size must be ..." (a setting from a --config file keeps its name there)."""
    try:
        yield
    except ResumeRefused as e:
        raise UserError(e.sentence(flag)) from e
    except (ValueError, FileNotFoundError, *also) as e:
        raise UserError(str(e) if typed is None else as_flags(str(e), *typed)) from e


def as_flags(sentence: str, args, cls) -> str:
    """``sentence`` with each setting of ``cls`` that ``args`` gave as a flag named as that flag."""
    for f, _ in setting_fields(cls):
        if getattr(args, f.name, None) is None:
            continue
        if "_" in f.name:
            sentence = re.sub(rf"(?<![\w-]){re.escape(f.name)}(?!\w)", flag(f.name), sentence)
        else:  # a plain word ("lr", "seed", "corpus"): only as the subject the sentence opens with
            sentence = re.sub(rf"^{re.escape(f.name)}(?= must )", flag(f.name), sentence)
    return sentence


def run_command(args, interrupted: str = "interrupted") -> int:
    """Run the parsed command ``args.func(args)`` and return its exit code. The errors a user can
    meet end with one line on stderr and exit code 2 (1 for a full disk), never a traceback;
    ``interrupted`` is what Ctrl-C says."""
    _one_line_cache_warnings()
    try:
        return args.func(args)
    except (UserError, CheckpointError, RunBusy, BuildBusy) as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return USER_MISTAKE
    except DiskFull as e:
        print(f"bert-explorer: error: {e}", file=sys.stderr)
        return DISK_FULL
    except KeyboardInterrupt as e:
        # a run stopped by a signal says where and how it goes on (runs/signals.py), and exits as the signal
        # would have ended it: 130 for Ctrl-C, 143 for SIGTERM
        print(f"bert-explorer: {e if str(e) else interrupted}", file=sys.stderr)
        return getattr(e, "exit_code", INTERRUPTED)
    except BrokenPipeError:
        # the reader stopped reading (`bert-explorer models | head -4`): no traceback, and none at exit either
        # when Python flushes stdout into the closed pipe; the code a shell gives a process SIGPIPE ends
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


def _one_line_cache_warnings() -> None:
    """A result that the disk cache could not keep (a full disk) is one line on stderr, like an
    error, and a corpus file read as UTF-16 or Latin-1 a note, not Python's file-and-line warning format;
    other warnings are left as they are."""
    shown_before = warnings.showwarning
    if getattr(shown_before, "one_line", False):
        return

    said: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, CacheNotKept):
            print(f"bert-explorer: warning: {message}", file=sys.stderr)
        elif issubclass(category, CorpusNote):  # how a corpus was read (its encoding, files left out): a note
            if str(message) not in said:  # (once: the estimate reads the file, then the run: it was said twice)
                said.add(str(message))
                print(f"note: {message}", file=sys.stderr)
        else:
            shown_before(message, category, filename, lineno, file, line)

    show.one_line = True
    warnings.showwarning = show


def print_json(result) -> None:
    """A command's result on stdout, as indented JSON (what scripts read)."""
    print(json.dumps(result, indent=2))


def progress_lines():
    """A line on stderr every 5 %, and where a new stage begins, with the time left from the progress so far (what
    a background build's log keeps: a stage begun between two of its 5 % steps was not said, and the teacher's
    panel read "training ... about 20 s left" for the minute and a half the next stage took)."""
    last, started = [-1, None], time.time()

    def say(fraction: float, message: str) -> None:
        # a stage is the words before its counts ("training the SAE: step 860 of 976", "reading every token's
        # features…"); "412 of 1,000 segments" is counting, not a stage (a line at each call)
        step, stage = int(fraction * 20), re.match(r"[^\d:(]*", message).group().strip(" ….")
        if step != last[0] or stage != last[1]:
            last[0], last[1] = step, stage
            # a measurement that says its own time left (counted from its first item, not from the start-up)
            # is not given a second one
            left = "" if " left" in message else left_text(started, fraction)
            print(f"{fraction:4.0%} {message}{left}", file=sys.stderr, flush=True)
    return say


def run_alone(register, command: str, argv: list[str] | None = None, interrupted: str = "interrupted") -> int:
    """``python -m bert_explorer.cli.<module> ...``: one command (added by ``register``) on its own, as a
    background build runs it, with the CLI's handling of user errors (one line, exit 2)."""
    parser = argparse.ArgumentParser(prog=f"bert-explorer {command}")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args([command, *(sys.argv[1:] if argv is None else argv)])
    return run_command(args, interrupted)


def run_or_background(args, work: Callable[[], Any], show: Callable[[Any], None] = print_json,
                      start: Callable[[], None] | None = None) -> int:
    """Do a command's work here, or, when it has ``start`` and ``--background`` was given, start
    it as its own process and return at once (``start`` says where it runs).

    ``work()`` returns the result, which ``show`` prints (JSON by default). Bad input met by
    either becomes a :class:`UserError`, and so does a folder that a live process already works in.
    Work done here uses the CPU threads of the cores that are free (``device.threads_for_free_cores``;
    a run's log says how many)."""
    if start is not None and args.background:
        with user_errors(RuntimeError):  # start_background refuses a folder in use with a RuntimeError
            start()
        return 0
    with user_errors(), threads_for_free_cores():
        result = work()
    show(result)
    return 0


def start_run(kind: str, config: dict, args, said: str) -> None:
    """Start ``bert-explorer <kind>`` as a background run in ``args.output`` (the run system's
    launcher, resuming when ``args.resume``), then print ``said``, formatted with the run's
    ``path`` and ``pid``."""
    run = start_background(kind, config, args.output, resume=getattr(args, "resume", False))
    pid = run.status().get("pid")
    print(said.format(path=run.path, pid=pid))
    # (it said where and no more: how to follow it and how to stop it, on stderr, where notes go)
    print(f"note: follow it in {run.path / 'log.txt'} or on the app's Runs page; `kill {pid}` stops it as the app's "
          "Stop does (at its next step, saved to resume from)", file=sys.stderr)


def new_folder(path: str, what: str) -> Path:
    """``--output`` for a folder that a command writes as a whole (an exported model), as an absolute
    path: the folder is put in place in one rename, which would take away whatever it held, so it must
    be new or empty, as a run's folder must (``runs.run.new_run_refusal``). The folder the user is in
    is refused even when empty: it would be swapped for another under their shell."""
    given = Path(path)
    if given.is_symlink() or (given.exists() and not given.is_dir()):
        raise UserError(f"--output {path} is {'a link' if given.is_symlink() else 'a file'}, not a folder; "
                        f"give a new or empty folder for {what}")
    # (abspath, not resolve: "." and ".." get a name of their own to make a temporary sibling of)
    full = Path(os.path.abspath(given))
    if full == Path.cwd():
        raise UserError(f"--output {path} is the folder you are in; name a new folder for {what}, "
                        "for example --output my-bert")
    if given.is_dir() and (held := sorted(given.iterdir())):
        raise UserError(f"--output {path} already holds files ({shown_entries(held, given)}); choose a new or "
                        f"empty folder for {what}, so that nothing in it is overwritten")
    return full


@contextmanager
def came_in_meanwhile(path: str, what: str) -> Iterator[None]:
    """Around the write of a :func:`new_folder`: files put into the folder after it was checked (while the
    model loaded) keep it from being taken, said in one sentence; nothing is written there."""
    try:
        yield
    except FileExistsError:
        raise UserError(f"--output {path} received files while {what} was being written; they are kept and "
                        f"nothing was written: choose a new or empty folder") from None


def output_file_args(parser: argparse.ArgumentParser, help: str, required: bool = False) -> None:
    """``--output FILE`` (``help`` says what goes into it) and ``--overwrite``, which a file already there
    needs before it is replaced (:func:`check_output_file`)."""
    parser.add_argument("--output", required=required,
                        help=f"{help}; a file already there is replaced only with --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace the --output file if it exists")


def check_output_file(path: str | None, overwrite: bool) -> None:
    """Before a command's work: may its ``--output`` ``path`` (if given) be written? A folder, or a path
    through a file, is refused, and so is a file already there unless ``overwrite``: it may be anything
    the user made, not an earlier result of this command."""
    if not path:
        return
    out = Path(path)
    if out.is_dir():
        raise UserError(f"--output {path} is a folder; --output names the file to write, so give a new file name "
                        "(one inside that folder, say)")
    above = next(p for p in out.parents if p.exists())  # ("." or "/" at the latest)
    if not above.is_dir():
        raise UserError(f"--output {path} lies under {above}, which is a file, not a folder; give a file name in a "
                        "folder")
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise UserError(f"--output {path} exists already; pass --overwrite to replace it, or give another file name")


@contextmanager
def write_output(path: str | Path, newline: str | None = None):
    """Write a command's output file as a whole or not at all (``atomic.replacing``): an error
    leaves no half-written file, and an older ``path`` stays. The command has checked ``path`` before
    its work (:func:`check_output_file`); a folder made there since is still one sentence."""
    check_output_file(str(path), overwrite=True)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic.replacing(out) as tmp, tmp.open("w", encoding="utf-8", newline=newline) as f:
        yield f


def write_json(path: str | Path, data: dict, ensure_ascii: bool = True) -> None:
    """A result as a JSON file, written as a whole (see :func:`write_output`)."""
    with write_output(path) as f:
        f.write(json.dumps(data, indent=1, ensure_ascii=ensure_ascii) + "\n")


def whole(low: int, high: int):
    """An argparse type: a whole number from ``low`` to ``high``, else one sentence (a batch of 0 or -3 was
    taken, and the features written)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low:,} to {high:,}, got {value:,}")
        return value
    return parse


def number(low: float, high: float, *, open_low: bool = False, open_high: bool = False):
    """An argparse type: a number from ``low`` to ``high`` (either end left out where ``open_*``), else one
    sentence (an L2 of -1 ended in an IndexError; a test fraction of 1.5 in a sentence about too few articles)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (low < value if open_low else low <= value) or not (value < high if open_high else value <= high) \
                or value != value:
            shown = lambda x: f"{x:,.0f}" if x == int(x) else f"{x:g}"  # noqa: E731  (1,000,000, not 1e+06)
            raise argparse.ArgumentTypeError(f"expected a number {'above' if open_low else 'from'} {shown(low)} "
                                             f"{'and below' if open_high else 'to'} {shown(high)}, got {text}")
        return value
    return parse


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated integers such as ``-1,-2`` or ``0,6``."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like -1,-2, got {text!r}")
    if not values:  # (--layers= wrote every token's features as an empty list, and exited 0)
        raise argparse.ArgumentTypeError("expected one or more comma-separated integers like -1,-2, got none")
    return values


def read_lines(path: str) -> list[str]:
    """The non-blank lines of a text file of examples, read as fine-tuning reads an upload
    (``uploads.decode.decode_bytes``): UTF-8, UTF-16 with or without its byte-order mark, else
    Latin-1; how it was read, when not as UTF-8, is a note on stderr."""
    p = Path(path)
    if p.is_dir():  # (it said "does not exist" of /etc)
        raise UserError(f"input file {path} is a folder; give a file of examples")
    if not p.is_file():
        raise UserError(f"input file {path} does not exist")
    if p.stat().st_size > DEFAULT_MAX_BYTES:  # (read whole into memory: bounded as an upload is, before it is read)
        raise UserError(f"input file {path} is {size_text(p.stat().st_size)}, more than the "
                        f"{size_text(DEFAULT_MAX_BYTES)} a file of examples may be here; split it into smaller files")
    try:
        text, notes = decode_bytes(p.read_bytes(), path, hint="give a text file with one example per line")
    except DataError as e:
        raise UserError(str(e)) from e
    for note in notes:  # (the UTF-16 note names the file; the Latin-1 one is written for an upload's page)
        print(f"note: {note}" if path in note else f"note: {path}: {note}", file=sys.stderr)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise UserError(f"{path} is empty; write one example per line (a pair as 'A ||| B')")
    return lines


def _load_json_config(path: str | None) -> dict:
    if not path:
        return {}
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {path} does not exist")
    if p.stat().st_size > 1_000_000:
        raise UserError(f"config file {path} is over 1 MB, far more than settings take; give the JSON file of "
                        "the settings (a run's training_args.json, for example)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"config file {path} is not valid JSON (line {e.lineno}: {e.msg})") from e
    except RecursionError:
        raise UserError(f"config file {path} nests too deeply to be settings; give a JSON object of settings, "
                        'such as {"max_steps": 1000}') from None
    except UnicodeDecodeError:
        raise UserError(f"config file {path} is not UTF-8 text; save it as UTF-8 JSON") from None
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a JSON object of settings")
    return data


def _setting_help(f, default_said: str | None = None) -> str:
    """A setting's --help: the sentence written beside its field (``bert_explorer.setting``) and
    its default (or ``default_said``, where the default is not the field's). argparse formats help with
    %, so a percent sign in the sentence is doubled."""
    text = f.metadata.get("help", "").replace("%", "%%")
    if default_said:
        text += f" {default_said}"
    elif f.default is not dataclasses.MISSING and f.default is not None:
        shown = {True: "on", False: "off"}.get(f.default, f.default) if isinstance(f.default, bool) else f.default
        text += f" Default: {shown}."
    return text


def setting_fields(cls) -> list[tuple[dataclasses.Field, object]]:
    """The settings of a config dataclass with their types, a nested settings dataclass (the
    masking of pre-training) opened into its own fields: the flat names that flags and
    --config files use."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += setting_fields(hints[f.name])
        else:
            out.append((f, hints[f.name]))
    return out


def dataclass_args(parser: argparse.ArgumentParser, cls, only=None, default_said: str | None = None,
                   helps: dict[str, str] | None = None) -> None:
    """One --flag per config setting (or per setting named in ``only``), its help the field's own sentence
    and its default (``default_said`` instead, where the command's default is another; ``helps``, the sentence
    of a setting that means another thing in this command); flags left out fall back to the config file, then
    the default."""
    for f, hint in setting_fields(cls):
        if only is not None and f.name not in only:
            continue
        name, said = flag(f.name), _setting_help(f, default_said)
        if helps and f.name in helps:
            said = f"{helps[f.name]} {default_said or ''}".strip()
        if hint is bool:
            parser.add_argument(name, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=said)
            continue
        if typing.get_origin(hint) is list:
            parser.add_argument(name, dest=f.name, default=None, help=said + " Comma-separated numbers.",
                                type=lambda t: [float(x) for x in t.split(",") if x.strip()])
            continue
        options = typing.get_args(hint) or (hint,)  # X | None -> (X, NoneType)
        base = next((t for t in (str, float, int) if t in options), None)
        if base is None:  # e.g. a list of sentences or of [layer, head] pairs: only the --config file sets it
            continue
        if base is int and (zero := f.metadata.get("zero_is")):  # 0 as on the page: the setting's None, given
            parser.add_argument(name, dest=f.name, type=_zero_is_unset(zero), default=None, help=f"{said} 0: {zero}.")
            continue
        parser.add_argument(name, dest=f.name, type=base, default=None, help=said)


UNSET = "unset"  # a flag given as 0 where 0 means the setting's None ("all"): given, so it beats a --config file's


def _zero_is_unset(zero: str):
    """An argparse type: 0 (``zero``: what it means) or a whole number above it (a negative one was told "at least
    1", of a flag whose help says 0 is taken)."""
    def parse(text: str):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"expected 0 ({zero}) or a whole number above it, got {value}")
        return UNSET if value == 0 else value
    return parse


def given_settings(args, cls) -> dict:
    """The settings the user gave: the --config file, overridden by the flags typed (a flag left
    out is None, so the dataclass's defaults are not mistaken for a choice)."""
    data = _load_json_config(args.config)
    data.pop("kind", None)
    for f, _ in setting_fields(cls):
        v = getattr(args, f.name, None)
        if v is not None:
            data[f.name] = None if v == UNSET else v
    return data


def config_from(args, cls):
    """The config dataclass ``cls`` of the settings given (see :func:`given_settings`); a misspelt
    or out-of-range setting is one sentence."""
    # A resumed run may have been written by an earlier version: its old keys are only warned about.
    with user_errors(TypeError, typed=(args, cls)):
        return cls.from_dict(given_settings(args, cls), strict=not getattr(args, "resume", False))


def model_builder_main(argv: list[str] | None, prog: str, description: str, build) -> int:
    """The command line of a background builder that a page (or preparing a class) starts for one model:
    ``--model NAME``, then ``build(NAME)``, its mistakes one sentence (``run_command``)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--model", required=True)
    args = parser.parse_args(argv)

    def run(a) -> int:
        with user_errors():
            build(a.model)
        return 0
    args.func = run
    return run_command(args)
