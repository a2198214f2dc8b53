"""The cli's list of command modules: every listed module exists and registers, none is left out, and a
listed module that cannot be imported fails loudly instead of silently dropping its commands."""
import os
import pkgutil
import sys

import pytest

import bertfam.commands
from bertfam import cli

HELPERS = {"common", "flags"}  # shared argument helpers and the --config options, no sub-commands of their own


def test_every_command_module_is_listed_and_registers():
    here = {m.name for m in pkgutil.iter_modules([os.path.dirname(bertfam.commands.__file__)])}
    assert set(cli.COMMAND_MODULES) == here - HELPERS
    assert len(cli.COMMAND_MODULES) == len(set(cli.COMMAND_MODULES))
    cli.build_parser()


def test_missing_command_module_is_an_error(monkeypatch):
    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "no_such_area"])
    with pytest.raises(ModuleNotFoundError, match="bertfam.commands.no_such_area"):
        cli.build_parser()


def test_command_module_that_fails_to_import_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "bertfam.commands.serve", None)  # its import now raises ImportError
    with pytest.raises(ImportError, match="bertfam.commands.serve"):
        cli.build_parser()
