"""The command line: the ``bert-explorer`` parser, to which each module of this package adds its
commands (``register(sub)``), in the order ``--help`` lists them."""
from __future__ import annotations

import argparse
import importlib.metadata

from . import (ablation, after_finetuning, analysis, attention_flow, attention_measures, attribute, export, features,
               head_map, inventory, neighbours, prepare_class, probe, training)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes are one sentence: a number it could not read printed the whole usage
    first (35 lines for ``pretrain``), while the checks of a value it read said one line."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, with an unknown option said by the command it was given to (it was said by the top
        parser: "see `bert-explorer --help`", which lists no command's options)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed) -> argparse.ArgumentParser:
        """The deepest (sub)command ``parsed`` chose: ``features train``'s parser for `features train ...`."""
        parser = self
        while True:
            group = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            name = getattr(parsed, group.dest, None) if group is not None and group.dest else None
            if name not in (group.choices if group is not None else {}):
                return parser
            parser = group.choices[name]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="bert-explorer",
                                description="BERT Explorer from the command line: training, the probes, "
                                            "attributions and the analyses of the app's pages (what Tokens and "
                                            "embeddings and Inside one layer show is the library's: docs/explore.md).")
    p.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}",
                   help="print the installed version of bert-explorer and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for commands in (export, training, probe, attribute, ablation, analysis, attention_flow, attention_measures,
                     head_map, after_finetuning, neighbours, features, inventory, prepare_class):
        commands.register(sub)
    return p


def installed_version() -> str:
    """The version of the installed package (what pip reports); the source's own where it runs uninstalled."""
    try:
        return importlib.metadata.version("bert-explorer")
    except importlib.metadata.PackageNotFoundError:
        from .. import __version__
        return __version__
