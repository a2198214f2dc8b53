"""The options every training command shares: --config RUN.json (a run file; the command line wins),
--threads and --grad-accum, and that their values reach the trainer's TrainConfig. Each run stops where
the trainer checks its config, before the first step."""
import json
import os

import pytest
import torch

from bertfam import cli
from bertfam.commands.flags import Flags
from bertfam.training import TrainConfig

from .conftest import FIXTURES, ZH_VOCAB
from .test_option_ranges import COMMANDS

TRAINING = {("pretrain",), ("finetune",), ("glue",), ("mrc", "train"), ("distill",), ("multimodal", "pretrain"),
            ("multimodal", "finetune")}
MM_VOCAB = os.path.join(FIXTURES, "multimodal", "vocab.txt")


def _options(parser) -> set:
    return {s for a in parser.arguments for s in a.option_strings}


def test_every_training_command_has_config_threads_and_grad_accum():
    training = {prefix: parser for prefix, parser in COMMANDS if "--lr" in _options(parser)}
    assert set(training) == TRAINING  # a new command with --lr is a training command: it belongs here
    for prefix, parser in training.items():
        assert {"--config", "--threads", "--grad-accum"} <= _options(parser), prefix
        assert isinstance(parser.get_default("func"), Flags), prefix


# ------------------------------------------------------------------ errors in a run file: one line, exit 2
BAD_FILES = {
    "key": ({"max_steps": 2, "bogus_option": 1}, "unknown field(s) bogus_option"),
    "range": ({"grad_accum": 0}, "grad_accum: must be an integer >= 1, got 0"),
    "type": ({"threads": "many"}, "threads: expected an integer >= 1, got 'many'"),
    "list": ({"lr": [0.1]}, "lr: expected a single value, got [0.1]"),
    "choice": ({"precision": "fp8"}, "precision: 'fp8' is not one of auto, fp32, bf16, fp16"),
}
BAD_CASES = [(p, c) for p in sorted(TRAINING) for c in BAD_FILES
             if c != "choice" or "--precision" in _options(dict(COMMANDS)[p])]


@pytest.mark.parametrize("prefix, case", BAD_CASES, ids=[f"{' '.join(p)}-{c}" for p, c in BAD_CASES])
def test_bad_run_file_is_one_line(capsys, tmp_path, prefix, case):
    content, message = BAD_FILES[case]
    run = tmp_path / "run.json"
    run.write_text(json.dumps(content))
    assert cli.main([*prefix, "--config", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"bertfam: error: {run}: {message}"), err


def test_bad_yaml_value_and_flag(capsys, tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("max_steps: -3\n")
    assert cli.main(["finetune", "--config", str(run)]) == 2
    assert f"{run}: max_steps: must be an integer >= 1, got -3" in capsys.readouterr().err
    run.write_text("no_progress: 1\n")
    assert cli.main(["finetune", "--config", str(run)]) == 2
    assert f"{run}: no_progress: expected true or false, got 1" in capsys.readouterr().err


def test_a_flag_by_its_name_or_by_its_destination(tmp_path):
    from bertfam.cli import build_parser

    parser = build_parser()
    for content, expected in (({"no_optimizer_state": True}, False), ({"no_optimizer_state": False}, True),
                              ({"save_optimizer_state": False}, False)):  # as a saved pretrain_config.json
        (tmp_path / "run.json").write_text(json.dumps(content))
        args = parser.parse_args(["distill", "--teacher", "t", "--out", "o", "--corpus", "c.txt", "--config",
                                  str(tmp_path / "run.json")])
        args.func.merge(args)
        assert args.save_optimizer_state is expected, content


def test_required_options_may_come_from_the_run_file(capsys, tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"task": "sst2", "model": "m"}))
    with pytest.raises(SystemExit) as e:  # what neither gives is a usage error, as argparse's own
        cli.main(["finetune", "--config", str(run), "--out", "o"])
    assert e.value.code == 2
    assert "the following arguments are required: --train" in capsys.readouterr().err.splitlines()[-1]


def test_distill_sources_exclude_each_other(capsys, tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"teacher": "t", "out": "o", "corpus": ["c.txt"], "task": "sst2"}))
    assert cli.main(["distill", "--config", str(run)]) == 2
    assert f"{run}: --corpus and --task exclude each other" in capsys.readouterr().err


# ------------------------------------------------------------------ values reach the trainer
class Stop(Exception):
    """Raised where the trainer validates its config: the run ends before any step."""


@pytest.fixture
def trainer_config(monkeypatch):
    """The TrainConfig the command built, and the thread counts it set."""
    seen = {"threads": []}

    def validate(cfg):
        seen["cfg"] = cfg
        raise Stop

    monkeypatch.setattr(TrainConfig, "validate", validate)
    monkeypatch.setattr(torch, "set_num_threads", seen["threads"].append)
    return seen


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 1-layer, 16-wide random BERT with the Chinese vocabulary, a 2-class head, and a model config."""
    from bertfam import HeadConfig, build_model, preset
    from bertfam.tokenization import Tokenizer

    d = tmp_path_factory.mktemp("tiny")
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    kw = dict(hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
              max_position_embeddings=128)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, **kw)
    build_model(cfg.replace(head=HeadConfig(task="classification", num_labels=2, labels=["0", "1"])),
                seed=0).save_pretrained(str(d / "m"), tokenizer=tok)
    cfg.save(str(d / "model.json"))
    (d / "mm.json").write_text(json.dumps({**cfg.replace(vocab_size=60).to_dict(), "head": {}}))
    return d


def _image_set(path, labels: bool = False) -> str:
    from bertfam.multimodal.synthetic import make_image_set

    make_image_set(str(path), n=8, dim=8)
    rows = [json.loads(line) for line in open(path / "manifest.jsonl")]
    for i, r in enumerate(rows):
        if labels:
            r["label"] = "ab"[i % 2]
    (path / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _argv(prefix, tiny, tmp_path) -> list:
    """Each training command on tiny inputs; its required options other than --out come from the run file."""
    sst = os.path.join(FIXTURES, "kbert", "chnsenticorp.tsv")
    m, out = str(tiny / "m"), str(tmp_path / "out")
    if prefix == ("finetune",):
        return ["finetune", "--out", out]
    if prefix == ("glue",):
        return ["glue", "--model", m, "--data", os.path.join(FIXTURES, "finetune", "glue"), "--tasks", "sst2",
                "--out", out]
    if prefix == ("mrc", "train"):
        return ["mrc", "train", "--model", m, "--train", os.path.join(FIXTURES, "mrc", "cmrc2018_trial_cut.json"),
                "--max-length", "64", "--doc-stride", "16", "--out", out]
    if prefix == ("distill",):
        return ["distill", "--teacher", m, "--student-config", str(tiny / "model.json"), "--task", "chnsenticorp",
                "--train", sst, "--max-length", "32", "--out", out]
    if prefix == ("pretrain",):
        return ["pretrain", "--corpus", os.path.join(FIXTURES, "pretrain", "zh_small.txt"), "--vocab", ZH_VOCAB,
                "--model-config", str(tiny / "model.json"), "--max-seq-len", "64", "--out", out]
    mm = ["--vocab", MM_VOCAB, "--model-config", str(tiny / "mm.json"), "--max-length", "16", "--out", out]
    if prefix == ("multimodal", "pretrain"):
        return ["multimodal", "pretrain", "--modality", "image", "--features", _image_set(tmp_path / "img"), *mm]
    return ["multimodal", "finetune", "--modality", "image", "--task", "classify", "--features",
            _image_set(tmp_path / "img", labels=True), *mm]


@pytest.mark.parametrize("prefix", sorted(TRAINING), ids=" ".join)
def test_run_file_values_reach_the_trainer_and_the_command_line_wins(tmp_path, tiny, trainer_config, prefix):
    run = {"grad_accum": 3, "batch_size": 4, "max_steps": 7, "threads": 1, "no_optimizer_state": True}
    if prefix == ("finetune",):  # required options from the file too
        run.update(task="chnsenticorp", model=str(tiny / "m"), train=os.path.join(FIXTURES, "kbert",
                                                                                 "chnsenticorp.tsv"))
    (tmp_path / "run.json").write_text(json.dumps(run))
    with pytest.raises(Stop):
        cli.main([*_argv(prefix, tiny, tmp_path), "--config", str(tmp_path / "run.json"), "--batch-size", "5"])
    cfg = trainer_config["cfg"]
    assert (cfg.grad_accum, cfg.batch_size, cfg.max_steps, cfg.save_optimizer_state) == (3, 5, 7, False)
    assert trainer_config["threads"] == [1]


@pytest.mark.parametrize("prefix", [("finetune",), ("distill",), ("multimodal", "pretrain")], ids=" ".join)
def test_grad_accum_and_threads_on_the_command_line(tmp_path, tiny, trainer_config, prefix):
    argv = _argv(prefix, tiny, tmp_path)
    if prefix == ("finetune",):
        argv += ["--task", "chnsenticorp", "--model", str(tiny / "m"), "--train",
                 os.path.join(FIXTURES, "kbert", "chnsenticorp.tsv")]
    with pytest.raises(Stop):
        cli.main([*argv, "--grad-accum", "2", "--threads", "1", "--max-steps", "3"])
    assert trainer_config["cfg"].grad_accum == 2 and trainer_config["threads"] == [1]


def test_pretrain_modality_hands_the_run_file_to_multimodal(tmp_path, tiny, trainer_config):
    (tmp_path / "run.json").write_text(json.dumps({"modality": "image", "features": _image_set(tmp_path / "img"),
                                                   "grad_accum": 3, "threads": 1}))
    with pytest.raises(Stop):
        cli.main(["pretrain", "--config", str(tmp_path / "run.json"), "--vocab", MM_VOCAB, "--model-config",
                  str(tiny / "mm.json"), "--max-seq-len", "16", "--max-steps", "2", "--out", str(tmp_path / "o")])
    assert trainer_config["cfg"].grad_accum == 3 and trainer_config["threads"] == [1]


# ------------------------------------------------------------------ multimodal: --config is a run file
def test_multimodal_run_file_and_command_line(monkeypatch, tmp_path):
    import bertfam.multimodal.pretrain as mp

    seen = {}
    monkeypatch.setattr(mp, "pretrain_multimodal", lambda *a, **kw: seen.update(kw) or {})
    (tmp_path / "run.json").write_text(json.dumps({"model_config": "bert-mini", "lr": 0.01, "mask_rate": 0.3,
                                                   "sample_rate": 8000}))
    argv = ["multimodal", "pretrain", "--modality", "image", "--features", "f", "--out", "o"]
    assert cli.main([*argv, "--config", str(tmp_path / "run.json"), "--lr", "0.02", "--seed", "7"]) == 0
    assert seen["config"] == "bert-mini" and seen["mask_rate"] == 0.3 and seen["audio"].sample_rate == 8000
    assert seen["train"].lr == 0.02  # the command line's over the run file's
    assert "seed" not in seen and seen["train"].seed == 7 and seen["train"].epochs == 10  # the multimodal defaults


@pytest.mark.parametrize("prefix", [("multimodal", "pretrain"), ("multimodal", "finetune"), ("pretrain",),
                                    ("pretrain-data",)], ids=" ".join)
def test_a_bad_run_file_value_of_a_generated_option_is_one_line(capsys, tmp_path, prefix):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"mask_rate": 1.5} if "finetune" not in prefix else {"doc_stride": -1}))
    assert cli.main([*prefix, "--config", str(run)]) == 2
    err = capsys.readouterr().err
    message = "doc_stride: must be an integer >= 0, got -1" if "finetune" in prefix else \
        "mask_rate: must be a number in (0, 1), got 1.5"
    assert err == f"bertfam: error: {run}: {message}\n", err


@pytest.mark.parametrize("value", ["bert-tiny", "mm.json"])
def test_multimodal_config_is_a_run_file_never_a_model_config(capsys, tmp_path, tiny, value):
    """--config once also took a model config (a preset name or config JSON); it is a run file only."""
    spec = value if value == "bert-tiny" else str(tiny / value)
    assert cli.main(["multimodal", "pretrain", "--modality", "image", "--features", "f", "--out", "o",
                     "--config", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bertfam: error: {spec}: "), err
