"""The options of a command with --config RUN.json, and their one merge order: defaults < run file < command line.

Every option of such a command is added through its `Flags`, which keeps the option's real default (and
whether it is required) and hands argparse a default of SUPPRESS: after parsing, the namespace holds exactly
what the command line gave, so the merge needs nothing of argparse's internals to tell a given option from a
default. `Flags.fields` generates the options of a run config dataclass's fields (the field gives the
destination, default and kind; a `Flag` adds the range check, help and name), and then `Flags.build` makes
the run config of the merged values.
"""
from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Callable, Optional

DEFAULT_ONLY = "\x00"  # the help of an option that has none: its default alone (argparse skips empty help)
RUN_FILE_HELP = ("run file (JSON or YAML) of option values, keys = option names with underscores "
                 "(e.g. max_steps); options given on the command line override it")
FLAG_ACTIONS = ("store_true", "store_false")


@dataclass(frozen=True)
class Flag:
    """What the command line adds to a dataclass field, which gives the option's destination (its name),
    default and kind: a bool is a flag, a sequence takes one or more values, no default makes it required."""

    type: Optional[Callable[[str], Any]] = None  # a numeric field needs a range check (commands.common)
    help: Optional[str] = None  # %(default)s: the field's default
    name: Optional[str] = None  # the option when not --field-name; a field that is True by default needs one
    metavar: Optional[Any] = None  # a name, or a tuple of names for a fixed number of values
    choices: Optional[tuple] = None
    nargs: Optional[int] = None  # a sequence of exactly this many values (default: one or more)
    required: bool = False  # required although the field has a default (which then means nothing here)


class Flags:
    """The options of one command with --config, added through it (as through the parser: `add_argument`,
    `add_argument_group`, `add_mutually_exclusive_group`, or `fields` of its run config `config`), and the
    command function (`command`) that merges them before it runs."""

    def __init__(self, parser: argparse.ArgumentParser, config: Optional[type] = None):
        self.parser, self.config, self.func = parser, config, None
        self.options: dict[str, argparse.Action] = {}  # dest -> the action argparse made
        self.defaults: dict[str, Any] = {}  # dest -> what the option means unset (SUPPRESS: no value at all)
        self.required: list[str] = []
        self.groups: list[tuple[list[str], bool]] = []  # exclusive groups: (member dests, one required)
        self.names: dict[str, str] = {}  # option name with underscores -> dest
        self.paths: dict[str, tuple[str, ...]] = {}  # dest -> the config field it sets ("lr" -> train.lr)

    # ------------------------------------------------------------------ adding options
    def add_argument(self, *names, **kw) -> argparse.Action:
        return self._add(self.parser, names, kw)

    def add_argument_group(self, *args, **kw) -> "_Group":
        return _Group(self, self.parser.add_argument_group(*args, **kw))

    def add_mutually_exclusive_group(self, required: bool = False) -> "_Group":
        """A group whose options exclude each other; `required`: one must be given, here or in the run file."""
        members: list[str] = []
        self.groups.append((members, required))
        return _Group(self, self.parser.add_mutually_exclusive_group(), members)

    def fields(self, table: dict[str, Flag]) -> None:
        """The options of `config`'s fields named in `table`, in its order ("train.lr": field lr of the
        nested dataclass `train`, whose default is `config`'s default of it)."""
        _add_fields(self, self, table)

    def _add(self, target, names, kw, members: Optional[list] = None) -> argparse.Action:
        if not names or not str(names[0]).startswith("-"):  # a positional is always given: argparse's own
            return target.add_argument(*names, **kw)
        flag = kw.get("action") in FLAG_ACTIONS
        default = kw.pop("default", kw.get("action") == "store_false" if flag else None)
        required = kw.pop("required", False)
        kw["help"] = _help(kw.get("help"), default, flag, required)
        action = target.add_argument(*names, default=argparse.SUPPRESS, **kw)
        dest = action.dest
        if dest in self.options:
            raise ValueError(f"{self.parser.prog}: two options set {dest}")
        self.options[dest], self.defaults[dest] = action, default
        self.names.update({_key(o): dest for o in names})
        if required:
            self.required.append(dest)
        if members is not None:
            members.append(dest)
        return action

    @property
    def keys(self) -> dict[str, str]:
        """A run file's key -> dest: an option's name (no_optimizer_state: true) or, over it, its destination
        (save_optimizer_state: false, as saved run configs hold it)."""
        return {**self.names, **{dest: dest for dest in self.options}}

    def command(self, func: Callable) -> None:
        """Add --config (last, after every other option) and make this the parser's command function: it
        merges the options, then calls func(args), or func(args, the run config) when there is a `config`."""
        self.parser.add_argument("--config", default=argparse.SUPPRESS, metavar="RUN.json", help=RUN_FILE_HELP)
        self.func = func
        self.parser.set_defaults(func=self)

    def __call__(self, args) -> int:
        self.merge(args)
        return self.func(args) if self.config is None else self.func(args, self.build(args))

    # ------------------------------------------------------------------ merging
    def merge(self, args) -> dict:
        """Set every option in `args`: its default, over that `base`'s value, over that the run file's, over
        that the command line's; then what is required must be there. Returns what the run file and the
        command line gave, by destination."""
        given = {dest: getattr(args, dest) for dest in self.options if hasattr(args, dest)}
        path = getattr(args, "config", None)
        from_file = self.read(path) if path else {}
        for members, _ in self.groups:  # an option of an exclusive group on the command line replaces the file's
            if given.keys() & set(members):
                from_file = {k: v for k, v in from_file.items() if k not in members}
        defaults = {dest: d for dest, d in self.defaults.items() if d is not argparse.SUPPRESS}
        explicit = {**from_file, **given}
        for dest, v in {**defaults, **self.base(explicit), **explicit}.items():
            setattr(args, dest, v)
        self.check_required(args, path)
        return explicit

    def base(self, explicit: dict) -> dict:
        """Values by destination that come between the defaults and the run file, given what the run file and
        the command line set (`explicit`): none here; a resumed run's own config in `bertfam pretrain`."""
        return {}

    def load(self, path: str) -> dict:
        """The file's mapping (a subclass may rewrite it into option keys first)."""
        from ..config import read_run_file

        return read_run_file(path)

    def read(self, path: str) -> dict:
        """The file's values by destination, converted and range-checked as the same options on the command
        line are (ConfigError `PATH: KEY: what is wrong` otherwise)."""
        from ..errors import ConfigError

        keys = self.keys
        d = {str(k).replace("-", "_"): v for k, v in self.load(path).items()}
        unknown = sorted(k for k in d if k not in keys)
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {', '.join(unknown)} (keys are the options of "
                              f"`{self.parser.prog}` with underscores, e.g. max_steps)")
        out = {}
        for k, v in d.items():
            a = self.options[keys[k]]
            try:
                v = _file_value(a, v)
            except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
                raise ConfigError(f"{path}: {k}: {e}") from None
            if a.nargs == 0 and k != a.dest:  # a flag by its name: true gives it, false leaves it out
                v = a.const if v else None
            if v is not None:  # null: the option's default
                out[a.dest] = v
        return out

    def check_required(self, args, path) -> None:
        from ..errors import ConfigError

        missing = [self._name(d) for d in self.required if getattr(args, d, None) is None]
        if missing:
            self.parser.error(f"the following arguments are required: {', '.join(missing)}")
        for members, required in self.groups:
            have = [self._name(d) for d in members if getattr(args, d, None) is not None]
            if len(have) > 1:  # only a run file can set two: argparse refuses them on one command line
                raise ConfigError(f"{path}: {' and '.join(have)} exclude each other")
            if required and not have:
                self.parser.error(f"one of the arguments {' '.join(map(self._name, members))} is required")

    def _name(self, dest: str) -> str:
        return self.options[dest].option_strings[-1]

    # ------------------------------------------------------------------ the run config
    def build(self, args, start=None):
        """The run config of the merged options: each generated field set from its option, the others at
        `config`'s defaults (a nested dataclass: its default with the options' fields replaced), or at
        `start`'s values when given (a config of the same type: a resumed run's)."""
        own, nested = {}, {}
        for dest, path in self.paths.items():
            if len(path) == 1:
                own[path[0]] = getattr(args, dest)
            else:
                nested.setdefault(path[0], {})[path[1]] = getattr(args, dest)
        for name, values in nested.items():
            inner = _field_default(self.config, name) if start is None else getattr(start, name)
            own[name] = dataclasses.replace(inner, **values)
        return self.config(**own) if start is None else dataclasses.replace(start, **own)


class _Group:
    """An argument group (or exclusive group) of a Flags: its options are the Flags' too."""

    def __init__(self, flags: Flags, group, members: Optional[list] = None):
        self.flags, self.group, self.members = flags, group, members

    def add_argument(self, *names, **kw) -> argparse.Action:
        return self.flags._add(self.group, names, kw, self.members)

    def fields(self, table: dict[str, Flag]) -> None:
        _add_fields(self.flags, self, table)


def _help(text: Optional[str], default, flag: bool, required: bool) -> str:
    """The option's help with its real default written in (argparse's default is about to be SUPPRESS)."""
    text = "" if text in (None, DEFAULT_ONLY) else text
    # a sequence as the command line gives it, one value after another (an empty one: no default to show)
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
    shown = shown.replace("%", "%%")
    text = text.replace("%(default)s", shown)
    if (default is not None and default is not argparse.SUPPRESS and not isinstance(default, bool) and not flag
            and shown and "default" not in text.lower()):
        text = (text + " " if text else "") + f"(default: {shown})"
    if required:
        text = (text + "; " if text else "") + "required (here or in --config)"
    return text or DEFAULT_ONLY  # argparse leaves out an empty help: this one shows as nothing


def _key(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


# ------------------------------------------------------------------ options of dataclass fields
def _add_fields(flags: Flags, target, table: dict[str, Flag]) -> None:
    if flags.config is None:
        raise TypeError(f"{flags.parser.prog}: Flags(parser, config) generates the options of config's fields")
    for key, spec in table.items():
        path = tuple(key.split("."))
        hint, default = _field_kind(flags.config, path)
        names, kw = _argument(path[-1], hint, default, spec)
        target.add_argument(*names, **kw)
        flags.paths[path[-1]] = path


def _field_kind(cls: type, path: tuple) -> tuple[Any, Any]:
    """(type hint, default) of field path[0] of `cls`, or of field path[1] of its nested dataclass."""
    hints = typing.get_type_hints(cls)
    if len(path) == 1:
        f = {f.name: f for f in dataclasses.fields(cls)}[path[0]]
        return hints[path[0]], _default(f)
    parent = _field_default(cls, path[0])
    return typing.get_type_hints(type(parent))[path[1]], getattr(parent, path[1])


def _field_default(cls: type, name: str):
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return _default(f)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def _argument(field: str, hint, default, spec: Flag) -> tuple[tuple[str], dict]:
    """add_argument's (names, keyword arguments) for a field."""
    name = spec.name or "--" + field.replace("_", "-")
    kw: dict[str, Any] = {"dest": field, "help": spec.help}
    if default is dataclasses.MISSING or spec.required:
        kw["required"] = True
    else:
        kw["default"] = default
    hint = _not_optional(hint)
    if hint is bool:  # a flag turns the default over, so one that is True by default needs a name saying so
        if default is True and spec.name is None:
            raise TypeError(f"{field} is True by default: give its flag a name (e.g. --no-{field.replace('_', '-')})")
        return (name,), {**kw, "action": "store_false" if default else "store_true"}
    if typing.get_origin(hint) in (list, tuple, collections.abc.Sequence) or hint in (list, tuple):
        kw["nargs"] = spec.nargs or "+"
        hint = (typing.get_args(hint) or (str,))[0]
    if hint in (int, float) and spec.type is None:  # every numeric option is range-checked (test_option_ranges)
        raise TypeError(f"{field}: a numeric option needs Flag(type=...) with its range")
    kw.update({k: v for k, v in (("type", spec.type), ("choices", spec.choices)) if v is not None})
    if spec.metavar or spec.name:  # a renamed option shows its own name, not the field's
        kw["metavar"] = spec.metavar or _key(spec.name).upper()
    return (name,), kw


def _not_optional(hint):
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _file_value(action, v):
    """A run-file value through the option's own type and choices (the file holds JSON values, not text)."""
    if v is None:
        return None
    if action.nargs == 0:  # a flag (store_true / store_false): the file gives its destination's value
        if not isinstance(v, bool):
            raise TypeError(f"expected true or false, got {v!r}")
        return v
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        items = v if isinstance(v, list) else [v]
        if isinstance(action.nargs, int) and len(items) != action.nargs:
            raise ValueError(f"expected a list of {action.nargs} values, got {v!r}")
        if action.nargs == "+" and not items:
            raise ValueError("expected at least one value")
        return [_one_value(action, x) for x in items]
    return _one_value(action, v)


def _one_value(action, v):
    if isinstance(v, (bool, list, dict)):
        raise TypeError(f"expected a single value, got {v!r}")
    x = action.type(str(v)) if action.type is not None else str(v)
    if action.choices is not None and x not in action.choices:
        raise ValueError(f"{x!r} is not one of {', '.join(map(str, action.choices))}")
    return x
