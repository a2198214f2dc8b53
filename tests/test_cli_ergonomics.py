"""The command line reads as a transformers user expects: --version, defaults in --help, a bad option value in
one line, a CSV given for a TSV named as such, a blank `mrc ask` question refused, metrics labelled with their
scale. Parsing and file reading only: no model runs."""
import re

import pytest

from bertfam.cli import build_parser, main

from .conftest import ZH_VOCAB, cli


def test_version(capsys):
    import bertfam

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"bertfam {bertfam.__version__}"


def _help(*cmd) -> str:
    p = build_parser()
    for name in cmd:
        p = p.commands[name]
    return " ".join(p.format_help().split())  # argparse wraps lines: compare on single spaces


def test_help_shows_defaults():
    h = _help("finetune")
    for shown in ("--epochs EPOCHS (default: 3)", "--batch-size BATCH_SIZE (default: 32)", "--lr LR (default: 5e-05)",
                  "--keep-last N checkpoints kept under OUT/checkpoints, oldest removed first (0: all; default 2)"):
        assert shown in h, shown
    assert "(default: False)" not in h and "(default: None)" not in h  # flags and unset options say nothing
    assert "--batch-size BATCH_SIZE (default: 32)" in _help("mrc", "predict")


def test_pretrain_help_shows_its_run_configs_defaults():
    """pretrain's options are generated from PretrainConfig's fields: --help shows its values, and an option
    that has none (--max-steps) says nothing."""
    import dataclasses

    from bertfam.runners.pretrain import PretrainConfig

    d = PretrainConfig.flatten(dataclasses.asdict(PretrainConfig()))
    h = _help("pretrain")
    for shown in (f"--lr LR (default: {d['lr']})", f"--max-seq-len MAX_SEQ_LEN (default: {d['max_seq_len']})",
                  f"--keep-last KEEP_LAST (default: {d['keep_last']})", "--ernie-mix BASIC PHRASE ENTITY probabilities "
                  "of ERNIE's masking levels per sequence (default: " + " ".join(map(str, d["ernie_mix"])) + ")",
                  f"--model-config MODEL_CONFIG preset name or config JSON (default: {d['model_config']})"):
        assert shown in h, shown
    assert "--max-steps MAX_STEPS --batch-size" in h and "\x00" not in h
    assert f"--mask-rate MASK_RATE (default: {d['mask_rate']})" in _help("pretrain-data")


def test_bad_value_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["finetune", "--task", "sst2", "--model", "m", "--train", "t", "--out", "o", "--max-steps", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("bertfam finetune: error: argument --max-steps: must be an integer >= 1, got 0"), err


def test_csv_where_a_tsv_is_expected_says_so(tmp_path, capsys):
    from bertfam import Tokenizer, build_model, preset

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                 num_hidden_layers=1, max_position_embeddings=64)
    build_model(cfg).save_pretrained(str(tmp_path / "m"), tokenizer=tok)
    csv = tmp_path / "train.csv"
    csv.write_text("sentence,label\n很好,1\n很差,0\n", encoding="utf-8")
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tmp_path / "m", "--train", csv,
                     "--out", tmp_path / "o", "--max-length", "32")
    assert rc == 2 and err.count("\n") == 1, err
    assert "expected a tab-separated file (TSV), but the header is separated by ','" in err, err


def test_blank_question_or_passage_for_mrc_ask_is_an_error(capsys, tmp_path):
    for flags, name in ((["--question", " ", "--passage", "北京是首都。"], "--question"),
                        (["--question", "哪里？", "--passage", ""], "--passage")):
        rc, out, err = cli(capsys, "mrc", "ask", "--model", tmp_path, *flags)
        assert rc == 2 and f"{name} is empty" in err and "无答案" not in out, err


def test_mrc_train_summary_table_names_each_f1():
    from bertfam.runners.mrc import summary_table

    t = summary_table({"steps": 40, "train_questions": 100, "train_windows": 130,
                       "last_eval": {"step": 40, "f1": 0.0, "em": 0.0, "questions": 50},
                       "thresholds": {"dev_questions": 200, "dev_f1_before": 0.0, "dev_em_before": 0.0,
                                      "dev_f1": 7.16, "dev_em": 5.0, "null_threshold": 1.5,
                                      "answerable_threshold": 0.3}}, "runs/mrc").splitlines()
    assert t[0] == "mrc train: 40 steps, 100 questions (130 windows); model in runs/mrc"
    assert t[1].split()[-3:] == ["questions", "F1", "EM"]
    assert t[2].startswith("last evaluation (step 40), default thresholds") and t[2].split()[-3:] == ["50", "0.00", "0.00"]
    assert t[4].startswith("tuned thresholds (null 1.5, P(answerable) 0.3)") and t[4].split()[-3:] == [
        "200", "7.16", "5.00"]


# two invocations on one line ("--model MODEL   --question QUESTION"), not an option whose help names another
CROWDED = re.compile(r"^\s*-{1,2}[\w-]+(?: [A-Z_]+)?\s{2,}-{1,2}[\w-]+(?: [A-Z_]+)?(?:\s{2,}|$)")


def test_every_commands_help_renders_with_its_defaults():
    def walk(p):
        yield p
        for sub in p.commands.values():
            yield from walk(sub)

    parsers = list(walk(build_parser()))
    assert len(parsers) > 20
    for p in parsers:
        text = p.format_help()  # a help string argparse cannot expand would raise here
        assert "%(default)" not in text and "==SUPPRESS==" not in text, p.prog
        # each option on a line of its own, also one with neither help nor a default (mrc ask --model, --question)
        crowded = [ln for ln in text.splitlines() if CROWDED.match(ln)]
        assert not crowded, (p.prog, crowded)


def test_options_without_help_or_default_keep_their_own_lines():
    text = build_parser().commands["mrc"].commands["ask"].format_help()
    lines = [ln.strip() for ln in text.splitlines()]
    assert "--model MODEL" in lines and "--question QUESTION" in lines and "--passage PASSAGE" in lines
