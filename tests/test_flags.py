"""commands.flags: options generated from a run config dataclass's fields, and the one merge order of a command
with --config: the field's default < the run file's value < the command line's. Parsing and merging only:
nothing runs."""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pytest

from bertfam import cli
from bertfam.commands.common import positive_float, positive_int, probability
from bertfam.commands.flags import Flag, Flags
from bertfam.errors import ConfigError
from bertfam.runners.finetune import FinetuneRunConfig
from bertfam.runners.mrc import MRCTrainConfig

from .conftest import ROOT


@dataclass
class Steps:
    lr: float = 5e-5
    progress: bool = True


@dataclass
class Run:
    data: Sequence[str]
    limit: Optional[int] = None
    ratio: float = 0.1
    mode: str = "auto"
    tune: bool = False
    steps: Steps = field(default_factory=lambda: Steps(lr=3e-5))  # the run's own trainer default


TABLE = {"data": Flag(help="input files"), "limit": Flag(positive_int), "ratio": Flag(probability, "share"),
         "mode": Flag(choices=("auto", "fast")), "tune": Flag(help="tune"), "steps.lr": Flag(positive_float),
         "steps.progress": Flag(name="--quiet")}


def _flags() -> Flags:
    flags = Flags(argparse.ArgumentParser(prog="run"), Run)
    flags.fields(TABLE)
    flags.command(lambda args, cfg: cfg)
    return flags


def _run(flags: Flags, argv: list):
    args = flags.parser.parse_args(argv)
    return args.func(args)


# ------------------------------------------------------------------ generated options
def test_a_generated_option_has_its_fields_default_type_and_kind():
    flags = _flags()
    assert flags.defaults == {"data": None, "limit": None, "ratio": 0.1, "mode": "auto", "tune": False,
                              "lr": 3e-5, "progress": True}  # steps.lr: the run's default of steps, not Steps'
    assert flags.options["ratio"].type is probability and flags.options["lr"].type is positive_float
    assert flags.options["mode"].choices == ("auto", "fast")
    assert flags.options["data"].nargs == "+" and flags.required == ["data"]  # no default: required
    assert flags.options["tune"].const is True and flags.options["progress"].option_strings == ["--quiet"]
    cfg = _run(flags, ["--data", "a", "b", "--limit", "3", "--quiet"])
    assert cfg == Run(data=["a", "b"], limit=3, steps=Steps(lr=3e-5, progress=False))


def test_help_shows_the_fields_default_and_what_is_required():
    text = " ".join(_flags().parser.format_help().split())
    assert "--ratio RATIO share (default: 0.1)" in text and "--lr LR (default: 3e-05)" in text
    assert "input files; required (here or in --config)" in text
    assert "(default: False)" not in text and "(default: True)" not in text  # flags say nothing


def test_a_numeric_field_needs_its_range_and_a_true_flag_its_name():
    with pytest.raises(TypeError, match="limit: a numeric option needs Flag"):
        Flags(argparse.ArgumentParser(), Run).fields({"limit": Flag()})
    with pytest.raises(TypeError, match="progress is True by default"):
        Flags(argparse.ArgumentParser(), Run).fields({"steps.progress": Flag()})


def test_the_commands_generated_options_have_their_run_configs_defaults():
    parser = cli.build_parser()
    mrc = parser.parse_args(["mrc", "train", "--model", "m", "--train", "t", "--out", "o"]).func
    train = MRCTrainConfig.default_train()
    assert mrc.defaults["dev_fraction"] == MRCTrainConfig.dev_fraction
    assert (mrc.defaults["epochs"], mrc.defaults["lr"], mrc.defaults["keep_last"]) == (train.epochs, train.lr,
                                                                                         train.keep_last)
    assert mrc.options["train_files"].option_strings == ["--train"]
    ft = parser.parse_args(["finetune", "--task", "sst2", "--model", "m", "--train", "t", "--out", "o"]).func
    assert (ft.defaults["max_length"], ft.defaults["epochs"]) == (FinetuneRunConfig.max_length,
                                                                  FinetuneRunConfig.default_train().epochs)
    assert ft.defaults["early_stopping_patience"] is None and "--early-stopping" in _names(ft)


def _names(flags: Flags) -> set:
    return {o for a in flags.options.values() for o in a.option_strings}


# ------------------------------------------------------------------ defaults < run file < command line
@pytest.fixture
def run_file(tmp_path):
    def write(content: dict) -> str:
        path = tmp_path / "run.json"
        path.write_text(json.dumps(content))
        return str(path)
    return write


def test_run_file_beats_the_default_and_the_command_line_beats_the_run_file(run_file):
    path = run_file({"ratio": 0.5, "lr": 0.01, "limit": 4, "data": ["f"]})
    cfg = _run(_flags(), ["--config", path, "--lr", "3e-5"])  # given explicitly, though it is the default
    assert (cfg.ratio, cfg.limit, cfg.data) == (0.5, 4, ["f"])  # the file's over the defaults
    assert cfg.steps.lr == 3e-5  # the command line's over the file's
    assert cfg.mode == "auto" and cfg.steps.progress is True  # in neither: the defaults


def test_a_flag_left_out_does_not_override_the_run_file(run_file):
    for content, expected in (({"tune": True, "quiet": True}, (True, False)),  # by the flags' names
                              ({"progress": False}, (False, False)),  # by the field, as a saved config has it
                              ({"quiet": False}, (False, True))):  # false: the flag not given, the default
        cfg = _run(_flags(), ["--data", "a", "--config", run_file(content)])
        assert (cfg.tune, cfg.steps.progress) == expected, content


def test_mrc_train_merges_in_one_order(run_file):
    path = run_file({"train": ["from_file.json"], "epochs": 5, "lr": 0.01, "eval_limit": 7, "no_title": True})
    args = cli.build_parser().parse_args(["mrc", "train", "--model", "m", "--out", "o", "--config", path,
                                          "--lr", "1e-4", "--eval-limit", "500"])
    args.func.merge(args)
    cfg = args.func.build(args)
    assert isinstance(cfg, MRCTrainConfig) and cfg.train_files == ["from_file.json"]
    assert (cfg.train.epochs, cfg.use_title) == (5, False)  # the run file's
    assert (cfg.train.lr, cfg.eval_limit) == (1e-4, 500)  # the command line's, 500 being the default too
    assert (cfg.train.batch_size, cfg.train.keep_last, cfg.dev_fraction) == (16, 1, 0.1)  # mrc train's defaults
    assert cfg.train.group_by_length is True  # a trainer default with no option keeps the run's own


def test_finetune_run_file_and_command_line_reach_the_finetune_run_config(run_file):
    path = run_file({"task": "sst2", "model": "m", "train": "t.tsv", "max_length": 64, "freeze_layers": 2,
                     "no_group_by_length": True, "early_stopping": 3, "keep_last": 0})
    args = cli.build_parser().parse_args(["finetune", "--out", "o", "--config", path, "--freeze-layers", "1"])
    args.func.merge(args)
    cfg = args.func.build(args)
    assert isinstance(cfg, FinetuneRunConfig) and cfg.train_file == "t.tsv"  # --train: the file, not cfg.train
    assert (cfg.task, cfg.model, cfg.out, cfg.dev) == ("sst2", "m", "o", None)
    assert (cfg.max_length, cfg.freeze_layers, cfg.train.early_stopping_patience) == (64, 1, 3)
    assert (cfg.train.group_by_length, cfg.train.keep_last, cfg.train.epochs) == (False, 0, 3)


def test_pretrain_run_file_and_command_line_reach_pretrain_config(run_file):
    from bertfam.runners.pretrain import PretrainConfig

    path = run_file({"corpus": "c.txt", "max_seq_len": 64, "lr": 0.01, "no_progress": True, "ernie_mix": [0, 0, 1]})
    args = cli.build_parser().parse_args(["pretrain", "--config", path, "--lr", "3e-4", "--out", "o"])
    args.func.merge(args)
    pc = args.func.build(args)
    assert isinstance(pc, PretrainConfig) and (pc.corpus, pc.max_seq_len, pc.ernie_mix) == (["c.txt"], 64, [0, 0, 1])
    assert (pc.train.lr, pc.out, pc.train.progress) == (3e-4, "o", False)  # the command line's over the file's
    assert (pc.train.warmup_ratio, pc.mask_rate) == (PretrainConfig.TRAIN_DEFAULTS["warmup_ratio"],
                                                     PretrainConfig.mask_rate)  # pretrain's own defaults


def _saved_run(tmp_path, pc) -> str:
    run = tmp_path / "run"
    run.mkdir()
    (run / "pretrain_config.json").write_text(json.dumps(pc.to_dict()))
    return str(run)


def test_a_resumed_runs_own_config_comes_between_the_defaults_and_the_run_file(tmp_path, run_file):
    from bertfam.runners.pretrain import PretrainConfig

    saved = PretrainConfig(corpus=["c.txt"], max_seq_len=32, mask_rate=0.2,
                           train=PretrainConfig.default_train(out_dir="runs/a", lr=0.005, group_by_length=True))
    run = _saved_run(tmp_path, saved)
    path = run_file({"mask_rate": 0.3})
    args = cli.build_parser().parse_args(["pretrain", "--resume", run, "--config", path, "--lr", "1e-3"])
    args.func.merge(args)
    pc = args.func.build(args)
    assert (pc.max_seq_len, pc.out, pc.corpus) == (32, "runs/a", ["c.txt"])  # the resumed run's
    assert pc.train.group_by_length is True  # a field without an option keeps the resumed run's value
    assert (pc.mask_rate, pc.train.lr, pc.resume) == (0.3, 1e-3, run)  # the run file's, the command line's


def test_an_old_format_saved_run_config_says_to_upgrade(tmp_path, capsys):
    from bertfam.runners.pretrain import PretrainConfig

    run = _saved_run(tmp_path, PretrainConfig())
    cfg = os.path.join(run, "pretrain_config.json")
    with open(cfg, "w") as f:  # as older versions wrote it: flat, with a retired testing field
        json.dump({**PretrainConfig.flatten(PretrainConfig().to_dict()), "stop_after_step": 4}, f)
    assert cli.main(["pretrain", "--resume", run]) == 2
    assert capsys.readouterr().err == (f"bertfam: error: {cfg}: written by an older version (retired field(s) "
                                       f"stop_after_step); run: bertfam upgrade {run}\n")


# ------------------------------------------------------------------ a bad value in the run file
@pytest.mark.parametrize("content, message", [
    ({"ratio": 2}, "ratio: must be a number in [0, 1], got 2"),
    ({"tune": "yes"}, "tune: expected true or false, got 'yes'"),
    ({"mode": "slow"}, "mode: 'slow' is not one of auto, fast"),
    ({"ratios": 0.2}, "unknown field(s) ratios"),
])
def test_bad_run_file_value_is_a_config_error_naming_the_field(run_file, content, message):
    path = run_file(content)
    with pytest.raises(ConfigError) as e:
        _run(_flags(), ["--data", "a", "--config", path])
    assert str(e.value).startswith(f"{path}: {message}") and "\n" not in str(e.value)


def test_bad_run_file_value_of_a_command_is_one_line(capsys, run_file):
    path = run_file({"dev_fraction": 1.5, "model": "m", "train": ["t"], "out": "o"})
    assert cli.main(["mrc", "train", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err == f"bertfam: error: {path}: dev_fraction: must be a number in [0, 1), got 1.5\n"


def test_no_command_reads_argparse_internals():
    """The merge tells a given option from a default by the SUPPRESS defaults alone."""
    for d, _, files in os.walk(os.path.join(ROOT, "bertfam")):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(d, f), encoding="utf-8") as fh:
                    text = fh.read()
                for private in ("._actions", "._group_actions", "._mutually_exclusive_groups"):
                    assert private not in text, f"{f}: {private}"
