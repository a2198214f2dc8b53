"""`bertfam <command>`: parse arguments and call the library, nothing more.

Each feature area registers its sub-commands from a module in `bertfam.commands` (one file per
area, so areas evolve without touching each other). Errors that come from the user's input
(BertfamError, missing files) print one line and exit with code 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .commands.flags import DEFAULT_ONLY
from .errors import BertfamError, TrainingStopped

# order = order in `bertfam --help`
COMMAND_MODULES = ["core", "pretrain", "finetune", "mrc", "distill", "kbert", "serve", "export", "quantize",
                   "multimodal"]


class DefaultsFormatter(argparse.HelpFormatter):
    """--help shows each option's default (as transformers' scripts do), unless its help names it already."""

    def _get_help_string(self, action) -> str:
        text = "" if action.help == DEFAULT_ONLY else (action.help or "")
        d = action.default
        if ("default" in text.lower() or not action.option_strings or d is None or d is argparse.SUPPRESS
                or isinstance(d, bool) or action.nargs == 0 or d == ""):
            return text  # an option of a command with --config has its default in its help already (Flags)
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"

    def _format_action(self, action) -> str:
        # an option with neither help nor a default to show expands to "": argparse then ends its line without
        # the newline, and the next option is printed on the same line ("--model MODEL   --question QUESTION")
        text = super()._format_action(action)
        return text if text.endswith("\n") else text.rstrip() + "\n"


class Parser(argparse.ArgumentParser):
    """One line for a bad command line (the usage block would bury it): `bertfam finetune: error: argument
    --max-steps: ... (bertfam finetune --help lists the options)`, exit code 2; defaults in --help."""

    def __init__(self, *args, **kw):
        kw.setdefault("formatter_class", DefaultsFormatter)
        # what was added, kept in public attributes so that a walk over every command (tests) needs nothing of
        # argparse's internals: every argument (those of groups included) and the sub-commands by name
        self.arguments: list[argparse.Action] = []
        self.commands: dict[str, "Parser"] = {}
        super().__init__(*args, **kw)

    def add_argument(self, *args, **kw):
        if "help" not in kw and args and str(args[0]).startswith("-"):
            kw["help"] = DEFAULT_ONLY  # an option without help still shows its default
        action = super().add_argument(*args, **kw)
        self.arguments.append(action)
        return action

    def add_argument_group(self, *args, **kw):
        return self._recorded(super().add_argument_group(*args, **kw))

    def add_mutually_exclusive_group(self, **kw):
        return self._recorded(super().add_mutually_exclusive_group(**kw))

    def _recorded(self, group):
        """The group, whose arguments are recorded in `arguments` too."""
        add = group.add_argument

        def add_argument(*args, **kw):
            action = add(*args, **kw)
            self.arguments.append(action)
            return action

        group.add_argument = add_argument
        return group

    def add_subparsers(self, **kw):
        action = super().add_subparsers(**kw)
        self.commands = action.choices  # name -> parser, filled as each sub-command's parser is added
        return action

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = Parser(prog="bertfam", description="BERT and its family on one encoder.")
    p.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    p.add_argument("--version", action="version", version=f"bertfam {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMAND_MODULES:  # a listed module that fails to import is a bug: let the ImportError through
        importlib.import_module(f"bertfam.commands.{name}").register(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="bertfam: %(levelname)s: %(message)s")
    # training progress and evaluation lines are the only feedback of a run whose stderr is no terminal
    logging.getLogger("bertfam.progress").setLevel(logging.INFO)
    try:
        rc = args.func(args)
    except BertfamError as e:
        print(f"bertfam: error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as e:
        print(f"bertfam: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    except TrainingStopped as e:  # the trainer saved a checkpoint and said where (one console line)
        import signal

        return 130 if e.signum == signal.SIGINT else 0
    except KeyboardInterrupt:
        print("bertfam: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
