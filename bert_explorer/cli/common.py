"""What every command shares: the one-line user error, reading --config files, settings as options."""
from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""


@contextmanager
def user_errors():
    """A bad input file or setting (ValueError, FileNotFoundError) becomes one sentence for the
    user (UserError), not a traceback."""
    try:
        yield
    except (ValueError, FileNotFoundError) as e:
        raise UserError(str(e)) from e


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like -1,-2, got {text!r}")


def _read_lines(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"input file {path} does not exist")
    raw = p.read_bytes()
    if b"\x00" in raw[:4096]:
        raise UserError(f"{path} looks like a binary file; give a UTF-8 text file with one example per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
        print(f"note: {path} is not valid UTF-8; read it as Latin-1", file=sys.stderr)
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
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"config file {path} is not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a JSON object of settings")
    return data


def _setting_help(f) -> str:
    """A setting's --help: the sentence written beside its field (``train/configs.setting``) and
    its default. argparse formats help with %, so a percent sign in the sentence is doubled."""
    import dataclasses

    text = f.metadata.get("help", "").replace("%", "%%")
    if f.default is not dataclasses.MISSING and f.default is not None:
        shown = {True: "on", False: "off"}.get(f.default, f.default) if isinstance(f.default, bool) else f.default
        text += f" Default: {shown}."
    return text


def _dataclass_args(parser: argparse.ArgumentParser, cls) -> None:
    """One --flag per config field, its help the field's own sentence; flags left out fall back to
    the config file, then the default."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        if hints[f.name] is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=_setting_help(f))
            continue
        if typing.get_origin(hints[f.name]) is list:
            parser.add_argument(flag, dest=f.name, default=None, help=_setting_help(f) + " Comma-separated numbers.",
                                type=lambda t: [float(x) for x in t.split(",") if x.strip()])
            continue
        options = typing.get_args(hints[f.name]) or (hints[f.name],)  # X | None -> (X, NoneType)
        base = next((t for t in (str, float, int) if t in options), None)
        if base is None:  # e.g. a list of sentences or of [layer, head] pairs: only the --config file sets it
            continue
        parser.add_argument(flag, dest=f.name, type=base, default=None, help=_setting_help(f))


def _given_settings(args, cls) -> dict:
    """The settings the user gave: the --config file, overridden by the flags typed (a flag left
    out is None, so the dataclass's defaults are not mistaken for a choice)."""
    import dataclasses

    data = _load_json_config(args.config)
    data.pop("kind", None)
    for f in dataclasses.fields(cls):
        v = getattr(args, f.name, None)
        if v is not None:
            data[f.name] = v
    return data


def _config_from(args, cls):
    try:  # a resumed run may have been written by an earlier version: its old keys are only warned about
        return cls.from_dict(_given_settings(args, cls), strict=not getattr(args, "resume", False))
    except (TypeError, ValueError) as e:
        raise UserError(str(e)) from e


def _flag(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def _start_background(kind: str, config: dict, output, resume: bool = False):
    """Launch a background run; a directory that a live process already works in is one line."""
    from ..runs.background import start_background

    try:
        return start_background(kind, config, output, resume=resume)
    except RuntimeError as e:
        raise UserError(str(e)) from e
