"""Every numeric option of every sub-command is range-checked by argparse: an out-of-range value gives the
one `error:` line naming the option (exit code 2), never a traceback. Parsing only: nothing runs."""
import argparse

import pytest

from bertfam import cli
from bertfam.commands.common import NumberRange
from bertfam.commands.flags import Flags

PARSER = cli.build_parser()


def _commands(parser, prefix=()):
    """(argv prefix, parser) of the root and of every sub-command, recursively (cli.Parser.commands)."""
    yield prefix, parser
    seen = set()
    for name, sub in parser.commands.items():
        if id(sub) not in seen:  # aliases map to the same parser
            seen.add(id(sub))
            yield from _commands(sub, prefix + (name,))


COMMANDS = list(_commands(PARSER))
OPTIONS = [(prefix, parser, a) for prefix, parser in COMMANDS for a in parser.arguments
           if a.option_strings and a.type is not None]
RANGED = [o for o in OPTIONS if isinstance(o[2].type, NumberRange)]


def outside(t: NumberRange) -> list[str]:
    """Values just outside the range (as typed on a command line): what the tests feed the option."""
    def fmt(v) -> str:
        return str(int(v)) if float(v).is_integer() else str(v)

    bad = []
    if t.lo is not None:
        step = 0 if t.lo_open else (1 if t.kind is int else 0.5)
        bad += [fmt(t.lo - step)] + (["-5"] if -5 < t.lo - step else [])
    if t.hi is not None:
        bad.append(fmt(t.hi + (0 if t.hi_open else (1 if t.kind is int else 0.5))))
    return bad + (["inf", "nan"] if t.kind is float else ["1.5"])


def _id(o) -> str:
    prefix, _, action = o
    return " ".join(prefix) + " " + action.option_strings[-1]


def _inside(t: NumberRange) -> str:
    for v in ("1", "0.5", "3"):
        try:
            t(v)
            return v
        except argparse.ArgumentTypeError:
            pass
    raise AssertionError(f"no sample value inside {t}")


def _argv(prefix, action, bad: str) -> list:
    opt = action.option_strings[-1]
    n = action.nargs if isinstance(action.nargs, int) else 1
    if n == 1:
        return [*prefix, f"{opt}={bad}"]  # `=`: a value like -inf is not taken for an option
    return [*prefix, opt, *[_inside(action.type)] * (n - 1), bad]


def _parse_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        PARSER.parse_args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    return err


def test_every_numeric_option_is_range_checked():
    plain = [_id(o) for o in OPTIONS if o[2].type in (int, float)]
    assert plain == [], f"numeric options without a range check: {plain}"
    assert len(RANGED) > 100  # the walk found the sub-commands' options, not just the root's


@pytest.mark.parametrize("option", RANGED, ids=_id)
def test_out_of_range_value_is_one_usage_error(capsys, option):
    prefix, parser, action = option
    names = "/".join(action.option_strings)
    for bad in outside(action.type):
        err = _parse_error(capsys, _argv(prefix, action, bad))
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err  # one line: no usage block burying it
        assert lines[0].startswith(f"{parser.prog}: error: argument {names}: "), err
        assert lines[0].endswith(f"({parser.prog} --help lists the options)"), err


def _default(parser, action):
    """The option's default; a command with --config keeps it in its Flags (argparse's is SUPPRESS)."""
    run = parser.get_default("func")
    return run.defaults[action.dest] if isinstance(run, Flags) else action.default


@pytest.mark.parametrize("option", RANGED, ids=_id)
def test_defaults_are_in_range(option):
    _, parser, action = option
    default = _default(parser, action)
    if default not in (None, argparse.SUPPRESS):
        values = default if isinstance(default, (list, tuple)) else [default]
        assert all(action.type.contains(v) for v in values), default


@pytest.mark.parametrize("argv", [
    ["finetune", "--save-every", "0", "--warmup-ratio", "0", "--seed", "0", "--eval-every", "0"],
    ["mrc", "predict", "--doc-stride", "0", "--max-length", "8"],
    ["pretrain", "--warmup-ratio", "1", "--keep-last", "0", "--max-grad-norm", "0", "--ernie-mix", "0", "0", "1"],
    ["distill", "--epochs-intermediate", "0", "--augment-p", "1"],
    ["serve", "--port", "65535", "--batch-wait-ms", "0"],
    ["kbert", "show", "--max-length", "3", "--max-entities", "0"],
])
def test_boundary_values_are_accepted(capsys, argv):
    try:
        PARSER.parse_args(argv)
    except SystemExit:  # most commands still miss their required options, which is not what is tested
        pass
    err = capsys.readouterr().err
    assert "error: argument" not in err, err


@pytest.mark.parametrize("prefix", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "bertfam")
def test_help_of_every_command(capsys, prefix):
    with pytest.raises(SystemExit) as e:
        PARSER.parse_args([*prefix, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ")


# ------------------------------------------------------------------ checks across options (one line, exit 2)
def _main_error(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bertfam: error: ") and "Traceback" not in err, err
    return err


def test_serve_window_overlap_must_be_smaller(capsys, tmp_path):
    err = _main_error(capsys, ["serve", "--model", str(tmp_path), "--mrc-max-length", "64",
                               "--mrc-doc-stride", "64"])
    assert "--mrc-doc-stride 64 must be smaller than --mrc-max-length 64" in err


def test_multimodal_finetune_window_overlap_must_be_smaller(capsys, tmp_path):
    err = _main_error(capsys, ["multimodal", "finetune", "--modality", "speech", "--task", "qa", "--features",
                               str(tmp_path), "--out", str(tmp_path / "o"), "--max-length", "64",
                               "--doc-stride", "100"])
    assert "--doc-stride 100 must be smaller than --max-length 64" in err


def test_distill_needs_a_stage_that_trains(capsys, tmp_path):
    err = _main_error(capsys, ["distill", "--teacher", str(tmp_path), "--out", str(tmp_path / "o"), "--task",
                               "sst2", "--train", str(tmp_path / "t.tsv"), "--epochs-intermediate", "0",
                               "--epochs-prediction", "0"])
    assert "both 0" in err


def test_require_smaller_ignores_unset_options():
    from bertfam.commands.common import check_window
    from bertfam.errors import ConfigError

    check_window(argparse.Namespace(max_length=None, doc_stride=500))  # the model's own window: not known here
    check_window(argparse.Namespace(max_length=64, doc_stride=63))
    with pytest.raises(ConfigError, match="--doc-stride 100 must be smaller than --max-length 64"):
        check_window(argparse.Namespace(max_length=64, doc_stride=100))


def test_embed_max_length_beyond_the_positions_is_clamped(capsys, caplog, tmp_path):
    import numpy as np

    from bertfam import build_model, preset
    from bertfam.tokenization.tokenizer import Tokenizer, bert_wordpiece

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "weather", "is", "nice"]
    tok = Tokenizer(bert_wordpiece({w: i for i, w in enumerate(words)}))
    cfg = preset("bert-tiny", vocab_size=len(words), num_hidden_layers=1, max_position_embeddings=16)
    build_model(cfg, seed=0).save_pretrained(str(tmp_path / "m"), tokenizer=tok)
    (tmp_path / "in.txt").write_text("the weather is nice " * 10 + "\nnice\n")
    out = str(tmp_path / "e")
    assert cli.main(["embed", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "in.txt"), "--out", out,
                     "--max-length", "100", "--pooling", "cls"]) == 0
    assert np.load(out + ".cls.npy").shape[:2] == (2, 1)
    assert "more than the model's 16 positions; using 16" in caplog.text
