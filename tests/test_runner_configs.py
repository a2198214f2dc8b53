"""Each job of runners/ runs from one typed config (issue #28): the fine-tuning, GLUE, evaluate, predict, demo and
multimodal configs round-trip through JSON, a bad field is one ConfigError line, and the commands build the
same configs from their options. No model is trained or loaded."""
import dataclasses
import json

import pytest

from bertfam import cli as bertfam_cli
from bertfam.config import CustomTaskSettings
from bertfam.errors import ConfigError
from bertfam.runners.demo import DemoConfig
from bertfam.runners.finetune import (EvaluateConfig, FinetuneOptions, FinetuneRunConfig, GlueRunConfig,
                                      PredictConfig, run_finetune)
from bertfam.runners.multimodal import MultimodalFinetuneConfig, MultimodalPretrainConfig, MultimodalRunConfig

from .conftest import cli


def _json(d: dict) -> dict:
    return json.loads(json.dumps(d))


def _custom_run() -> FinetuneRunConfig:
    return FinetuneRunConfig(task="custom", model="m", train_file="t.jsonl", out="o", dev="d.jsonl", kind="pair",
                             custom=CustomTaskSettings(format="jsonl", text_cols=["q", "a"], label_col="y"),
                             labels=["no", "yes"], kg=["a.spo"], max_length=64,
                             train=FinetuneRunConfig.default_train(lr=3e-5, checkpoints=False))


@pytest.mark.parametrize("cfg", [
    _custom_run(),
    FinetuneRunConfig(task="sst2", model="m", train_file="t.tsv", out="o"),
    GlueRunConfig(model="m", data="glue", out="o", tasks=["sst2", "rte"], freeze_layers=1),
    MultimodalPretrainConfig(modality="image", features="f", out="o", mask_rate=0.3,
                             train=MultimodalPretrainConfig.default_train(seed=7)),
    MultimodalFinetuneConfig(modality="speech", task="qa", features="f", out="o", doc_stride=16),
], ids=lambda c: type(c).__name__)
def test_a_run_config_round_trips_through_json(cfg):
    back = type(cfg).from_dict(_json(cfg.to_dict()), source="run.json")
    assert back == cfg and back.to_dict() == cfg.to_dict()


@pytest.mark.parametrize("cfg", [
    EvaluateConfig(model="m", data="d.tsv", task="sst2", out="o", kg=["a.spo"], max_length=32, int8=True),
    PredictConfig(model="m", data="d.tsv", out="o", batch_size=8),
    DemoConfig(model="m", rows=3, int8=True),
], ids=lambda c: type(c).__name__)
def test_a_job_config_round_trips_through_json(cfg):
    assert type(cfg)(**_json(dataclasses.asdict(cfg))) == cfg


@pytest.mark.parametrize("d,message", [
    ({"max_lenght": 64}, "run.json: unknown field(s) max_lenght"),
    ({"train": {"lr": 1e-3, "lrate": 2}}, "run.json: unknown field(s) train.lrate"),
    ({"custom": {"format": "tsv", "cols": ["a"]}}, "custom: unknown field(s) cols"),
    ({"custom": {"format": "tsv", "text_cols": "a"}}, "custom.text_cols must be a list, got 'a'"),
], ids=["field", "trainer field", "custom field", "custom type"])
def test_a_bad_finetune_field_is_one_config_error_line(d, message):
    base = {"task": "custom", "model": "m", "train_file": "t.tsv", "out": "o"}
    with pytest.raises(ConfigError) as e:
        FinetuneRunConfig.from_dict({**base, **d}, source="run.json")
    assert str(e.value) == message and "\n" not in str(e.value)


def test_a_missing_field_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"^glue.json: missing field\(s\) data, out$"):
        GlueRunConfig.from_dict({"model": "m", "epochs": 1}, source="glue.json")


def test_finetune_and_glue_share_one_set_of_options():
    """GLUE fine-tunes each task with its own FinetuneOptions fields: the names, types and defaults are one."""
    shared = {f.name for f in dataclasses.fields(FinetuneOptions)}
    assert shared <= {f.name for f in dataclasses.fields(FinetuneRunConfig)}
    assert shared <= {f.name for f in dataclasses.fields(GlueRunConfig)}
    assert FinetuneRunConfig.default_train() == GlueRunConfig.default_train() == FinetuneOptions.default_train()


def test_a_custom_setting_on_a_table_task_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "o"
    cfg = dataclasses.replace(_custom_run(), task="sst2", out=str(out))
    with pytest.raises(ConfigError, match="custom, kind and labels are for task custom, not sst2"):
        run_finetune(cfg)
    cfg = dataclasses.replace(_custom_run(), custom=None, kind=None, out=str(out))
    with pytest.raises(ConfigError, match=r"custom task: give one or two text columns \(--text-cols a\[,b\]\)"):
        run_finetune(cfg)
    assert not out.exists()


def _built(argv: list):
    args = bertfam_cli.build_parser().parse_args(argv)
    args.func.merge(args)
    return args, args.func.build(args)


def test_the_finetune_command_builds_the_run_config():
    from bertfam.commands.finetune import _run_config

    args, cfg = _built(["finetune", "--task", "custom", "--model", "m", "--train", "t.jsonl", "--out", "o",
                        "--format", "jsonl", "--text-cols", "q,a", "--label-col", "y", "--labels", "no,yes",
                        "--kg", "a.spo", "--max-length", "64", "--lr", "3e-5", "--final-only"])
    assert _run_config(args, cfg) == dataclasses.replace(_custom_run(), dev=None, kind=None)
    args, cfg = _built(["glue", "--model", "m", "--data", "glue", "--out", "o", "--freeze-layers", "1"])
    assert cfg == GlueRunConfig(model="m", data="glue", out="o", freeze_layers=1)


def test_custom_columns_are_checked_in_the_options_words(capsys):
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", "m", "--train", "t", "--out", "o",
                     "--text-cols", "a")
    assert rc == 2 and err == "bertfam: error: --text-cols is for --task custom\n", err
    rc, _, err = cli(capsys, "finetune", "--task", "custom", "--model", "m", "--train", "t", "--out", "o")
    assert rc == 2 and err == "bertfam: error: --task custom needs --text-cols (and --label-col)\n", err


# ------------------------------------------------------------------ multimodal: one seed, train.seed
def test_the_multimodal_runs_have_one_seed():
    import inspect

    from bertfam.multimodal.finetune import finetune_multimodal
    from bertfam.multimodal.pretrain import pretrain_multimodal
    from bertfam.multimodal.runs import default_train

    assert "seed" not in {f.name for f in dataclasses.fields(MultimodalRunConfig)}
    for fn in (pretrain_multimodal, finetune_multimodal):  # the library runs: train.seed only
        assert "seed" not in inspect.signature(fn).parameters
    assert default_train().seed == MultimodalPretrainConfig(modality="image", features="f", out="o").train.seed
    cfg = MultimodalPretrainConfig(modality="image", features="f", out="o")
    assert cfg.train.seed == 0 and "seed" not in cfg.run_kwargs()  # 0: the runs' seed before it was train.seed
    args, cfg = _built(["multimodal", "finetune", "--modality", "image", "--task", "classify", "--features", "f",
                        "--out", "o", "--seed", "5"])
    assert cfg.train.seed == 5 and cfg.run_kwargs()["train"].seed == 5


def test_an_old_nested_multimodal_config_reads_its_seed_as_the_trainers():
    """A mapping an older to_dict() wrote ({"seed": 3, ..., "train": {"seed": 42}}): the run's seed, which the
    command line gave the trainer too, is train.seed (bertfam upgrade rewrites the file so)."""
    old = MultimodalPretrainConfig(modality="image", features="f", out="o").to_dict()
    old["seed"], old["train"]["seed"] = 3, 42
    assert MultimodalPretrainConfig.from_dict(old).train.seed == 3
