"""`bertfam upgrade`: files written by older versions (a checkpoint's head.extra, a run's flat or retired-field
pretrain_config.json, a run file with a retired field; a multimodal run config with its own seed) rewritten into
the current format; loading one of the first three without upgrading is one ConfigError line naming the file and
the command (the last reads as it is upgraded: its seed is a trainer field's name). No training runs."""
import dataclasses
import json
import os
import shutil

import pytest

import bertfam
from bertfam import HeadConfig, ModelConfig, Tokenizer, build_model, preset
from bertfam.checkpoint import load_config
from bertfam.config import (TRAINING_INFO_FILE, CustomTaskSettings, FinetuneSettings, MRCSettings,
                            read_training_info)
from bertfam.errors import ConfigError
from bertfam.runners.pretrain import PretrainConfig

from .conftest import ROOT, ZH_VOCAB, cli

SHIPPED = f"{ROOT}/models/mrc-zh-e5small-l12"


def _span_cfg(**head) -> ModelConfig:
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    return preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                  head=HeadConfig(task="span", **head))


def _old_style(cfg: ModelConfig, extra: dict) -> dict:
    """config.json as bertfam wrote it before the typed settings."""
    d = cfg.to_dict()
    for k in ("mrc", "finetune", "label_descriptions"):
        d["head"].pop(k)
    d["head"]["extra"] = extra
    return d


def _old_dir(tmp_path, cfg: ModelConfig, extra: dict, name: str = "m"):
    """A saved model (tokenizer included) whose config.json is then written in the old layout."""
    d = tmp_path / name
    build_model(cfg, seed=0).save_pretrained(str(d), tokenizer=Tokenizer.from_vocab(ZH_VOCAB))
    (d / "config.json").write_text(json.dumps(_old_style(cfg, extra)))
    return d


def _upgrade(capsys, *paths) -> list[str]:
    rc, out, err = cli(capsys, "upgrade", *paths)
    assert rc == 0, err
    return out.splitlines()


# ------------------------------------------------------------------ checkpoints: head.extra
def test_old_span_extra_is_upgraded_into_typed_fields_with_the_same_values(tmp_path, capsys):
    extra = {"use_title": False, "max_length": 256, "doc_stride": 96, "null_threshold": 2.5,
             "answerable_threshold": 0.9, "max_answer_length": 48, "thresholds_tuned_on": "dev.json",
             "tuned_dev_f1": 53.3, "demo_seen_qids": ["a", "b"]}
    d = _old_dir(tmp_path, _span_cfg(), extra)
    cpath = d / "config.json"
    rc, _, err = cli(capsys, "info", d)  # not upgraded: one line naming the file and the command, exit 2
    assert rc == 2 and err == (f"bertfam: error: {cpath}: written by an older version (head.extra); run: bertfam "
                               f"upgrade {d}\n"), err
    with pytest.raises(ConfigError, match="run: bertfam upgrade"):
        bertfam.from_pretrained(str(d))

    assert _upgrade(capsys, d) == [f"{cpath}: head.extra moved to head.mrc, training_info.json"]
    cfg = bertfam.from_pretrained(str(d)).config
    assert cfg.head.mrc == MRCSettings(max_length=256, doc_stride=96, use_title=False, null_threshold=2.5,
                                       answerable_threshold=0.9, max_answer_length=48)
    assert cfg.head.info == {"thresholds_tuned_on": "dev.json", "tuned_dev_f1": 53.3, "demo_seen_qids": ["a", "b"]}
    assert "extra" not in json.loads(cpath.read_text())["head"] and cfg.head.finetune is None
    before = cpath.read_bytes(), (d / TRAINING_INFO_FILE).read_bytes()
    assert _upgrade(capsys, d) == [f"{cpath}: up to date"]  # twice: nothing left to do, nothing rewritten
    assert (cpath.read_bytes(), (d / TRAINING_INFO_FILE).read_bytes()) == before


def test_old_finetune_extra_is_upgraded_into_finetune_settings(tmp_path, capsys):
    base = preset("bert-tiny", vocab_size=Tokenizer.from_vocab(ZH_VOCAB).vocab_size, num_hidden_layers=1,
                  head=HeadConfig(task="classification", labels=["a", "b"]))
    cases = {  # a custom task; a GLUE task (no custom part); a token-kind custom task that recorded "custom": {}
        "custom": ({"task": "custom", "kind": "pair", "max_length": 64, "kg": ["kg.spo"],
                    "custom": {"format": "jsonl", "text_cols": ["q", "a"], "label_col": "y", "header": True}},
                   FinetuneSettings(task="custom", kind="pair", max_length=64, kg=["kg.spo"],
                                    custom=CustomTaskSettings("jsonl", ["q", "a"], "y", True))),
        "glue": ({"task": "sst2", "kind": "single", "max_length": 128, "kg": None}, FinetuneSettings("sst2")),
        "token": ({"task": "custom", "kind": "token", "max_length": 32, "kg": None, "custom": {}},
                  FinetuneSettings(task="custom", kind="token", max_length=32)),
    }
    dirs = {name: _old_dir(tmp_path, base, extra, name) for name, (extra, _) in cases.items()}
    lines = _upgrade(capsys, *dirs.values())
    assert lines == [f"{d / 'config.json'}: head.extra moved to head.finetune" for d in dirs.values()]
    for name, (_, expected) in cases.items():
        cfg, _ = load_config(str(dirs[name]))
        assert cfg.head.finetune == expected and cfg.head.info == {}, name


def test_an_upgraded_finetuned_directory_evaluates_with_its_recorded_length(tmp_path, capsys):
    from bertfam.runners.finetune import EvaluateConfig, _load_finetuned, task_from_config

    cfg = preset("bert-tiny", vocab_size=Tokenizer.from_vocab(ZH_VOCAB).vocab_size,
                 head=HeadConfig(task="classification", labels=["0", "1"]))
    d = _old_dir(tmp_path, cfg, {"task": "sst2", "kind": "single", "max_length": 40, "kg": None})
    _upgrade(capsys, d)
    model, spec, builder = _load_finetuned(EvaluateConfig(model=str(d), data="unread.tsv"))
    assert spec.name == "sst2" and task_from_config(model.config).name == "sst2" and builder.max_length == 40


def test_an_old_copy_of_the_shipped_model_upgrades_to_the_same_config(tmp_path, capsys):
    """The shipped model's config.json as it was before (head.extra, no training_info.json): after upgrading,
    the same typed settings and the same info."""
    old = tmp_path / "old"
    shutil.copytree(SHIPPED, old, ignore=shutil.ignore_patterns("model.safetensors", TRAINING_INFO_FILE, "verifier*"))
    new = load_config(SHIPPED)[0]
    (old / "config.json").write_text(json.dumps(_old_style(new, {**dataclasses.asdict(new.head.mrc),
                                                                **read_training_info(SHIPPED)})))
    _upgrade(capsys, old)
    back = load_config(str(old))[0]
    assert back == new and back.head.info == new.head.info and back.to_dict() == new.to_dict()
    assert read_training_info(str(old)) == read_training_info(SHIPPED)


def test_upgrading_keeps_the_training_info_already_beside_it(tmp_path, capsys):
    d = _old_dir(tmp_path, _span_cfg(), {"tuned_dev_f1": 1.0, "note": "old"})
    (d / TRAINING_INFO_FILE).write_text(json.dumps({"tuned_dev_f1": 2.0}))
    _upgrade(capsys, d)
    assert read_training_info(str(d)) == {"tuned_dev_f1": 2.0, "note": "old"}  # the newer file's value wins


def test_a_bad_value_in_the_old_extra_is_one_line_naming_the_field(tmp_path, capsys):
    d = _old_dir(tmp_path, _span_cfg(), {"max_length": "256"})
    rc, _, err = cli(capsys, "upgrade", d)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{d / 'config.json'}: head.mrc.max_length must be an integer" in err and "old head.extra" in err
    assert "extra" in json.loads((d / "config.json").read_text())["head"]  # left as it was


def test_shipped_and_hugging_face_configs_are_up_to_date(tmp_path, capsys):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    assert _upgrade(capsys, hf) == [f"{hf / 'config.json'}: up to date"]
    lines = _upgrade(capsys, SHIPPED)  # nothing shipped needs the upgrade (the command changes nothing there)
    assert lines and all(line.endswith(": up to date") for line in lines), lines


# ------------------------------------------------------------------ run configs
def _run_dir(tmp_path, d: dict):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    (run / "pretrain_config.json").write_text(json.dumps(d))
    return run


def test_an_old_saved_run_config_is_upgraded_and_then_resumes(tmp_path, capsys):
    pc = PretrainConfig(corpus=["c.txt"], max_seq_len=32, train=PretrainConfig.default_train(out_dir="runs/a",
                                                                                          max_steps=5))
    flat = {**PretrainConfig.flatten(pc.to_dict()), "stop_after_step": 4}  # as older versions wrote it
    run = _run_dir(tmp_path, flat)
    path = run / "pretrain_config.json"
    rc, _, err = cli(capsys, "pretrain", "--resume", run / "checkpoints" / "step-2")
    assert rc == 2 and err == (f"bertfam: error: {path}: written by an older version (retired field(s) "
                               f"stop_after_step); run: bertfam upgrade {run}\n"), err

    assert _upgrade(capsys, run) == [f"{path}: removed retired field(s) stop_after_step; nested the trainer's "
                                     "fields in a train section"]
    assert json.loads(path.read_text()) == pc.to_dict()  # the nested layout the run writes
    args = bertfam.cli.build_parser().parse_args(["pretrain", "--resume", str(run)])
    args.func.merge(args)
    assert args.func.build(args).to_dict() == dataclasses.replace(pc, resume=str(run)).to_dict()
    assert _upgrade(capsys, run) == [f"{path}: up to date"]


def test_a_flat_saved_run_config_is_nested(tmp_path, capsys):
    pc = PretrainConfig(objective="roberta")
    run = _run_dir(tmp_path, PretrainConfig.flatten(pc.to_dict()))
    rc, _, err = cli(capsys, "pretrain", "--resume", run)
    assert rc == 2 and "no train section" in err and f"run: bertfam upgrade {run}" in err, err
    assert _upgrade(capsys, run) == [f"{run / 'pretrain_config.json'}: nested the trainer's fields in a train "
                                     "section"]
    assert json.loads((run / "pretrain_config.json").read_text()) == pc.to_dict()


@pytest.mark.parametrize("name", ["run.json", "run.yaml"])
def test_a_run_file_with_a_retired_field(tmp_path, capsys, name):
    path = tmp_path / name
    content = {"max_steps": 4, "stop_after_step": 2}
    path.write_text(json.dumps(content) if name.endswith(".json") else "max_steps: 4\nstop_after_step: 2\n")
    rc, _, err = cli(capsys, "pretrain", "--config", path)
    assert rc == 2 and err == (f"bertfam: error: {path}: written by an older version (retired field(s) "
                               f"stop_after_step); run: bertfam upgrade {path}\n"), err
    assert _upgrade(capsys, path) == [f"{path}: removed retired field(s) stop_after_step"]
    from bertfam.config import read_run_file

    assert read_run_file(str(path)) == {"max_steps": 4}
    assert _upgrade(capsys, path) == [f"{path}: up to date"]


@pytest.mark.parametrize("name", ["mm.json", "mm.yaml"])
def test_a_multimodal_run_config_with_its_own_seed_has_it_moved_into_train(tmp_path, capsys, name):
    """An older multimodal run config (to_dict(): the run's fields + train) had a seed of its own beside
    train.seed; the run's seed, which `--seed` gave the trainer too, becomes train.seed, the one seed."""
    import yaml

    from bertfam.config import read_run_file
    from bertfam.runners.multimodal import MultimodalPretrainConfig

    new = MultimodalPretrainConfig(modality="image", features="f", out="o",
                                   train=MultimodalPretrainConfig.default_train(seed=3, max_steps=5))
    old = new.to_dict()
    old["train"]["seed"] = 42  # TrainConfig's default: a library run's trainer seed before
    old = {**old, "seed": 3}
    path = tmp_path / name
    path.write_text(json.dumps(old) if name.endswith(".json") else yaml.safe_dump(old))
    assert _upgrade(capsys, path) == [f"{path}: moved seed into train.seed"]
    assert read_run_file(str(path)) == new.to_dict()
    assert MultimodalPretrainConfig.from_dict(read_run_file(str(path)), source=str(path)) == new
    assert _upgrade(capsys, path) == [f"{path}: up to date"]


def test_a_flat_run_files_seed_is_the_seed_option_and_up_to_date(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"seed": 7, "lr": 0.01}))  # `multimodal pretrain --config`: --seed is train.seed
    assert _upgrade(capsys, path) == [f"{path}: up to date"]
    assert json.loads(path.read_text()) == {"seed": 7, "lr": 0.01}


def test_upgraded_files_are_written_atomically_with_the_umask(tmp_path, capsys):
    d = _old_dir(tmp_path, _span_cfg(), {"note": "x"})
    old = os.umask(0o027)
    try:
        _upgrade(capsys, d)
    finally:
        os.umask(old)
    for name in ("config.json", TRAINING_INFO_FILE):
        assert (d / name).stat().st_mode & 0o777 == 0o640, name
    assert not [p for p in os.listdir(d) if p.endswith(".tmp")]  # no temporary file left behind


def test_a_path_that_is_not_a_model_or_run_is_one_line_and_nothing_changes(tmp_path, capsys):
    d = _old_dir(tmp_path, _span_cfg(), {"note": "x"})
    empty = tmp_path / "empty"
    empty.mkdir()
    before = (d / "config.json").read_bytes()
    for bad, message in ((empty, "no config.json or pretrain_config.json under it"), (tmp_path / "gone", "not found")):
        rc, _, err = cli(capsys, "upgrade", d, bad)
        assert rc == 2 and err == f"bertfam: error: {bad}: {message}" + err.split(message, 1)[1], err
        assert err.count("\n") == 1 and (d / "config.json").read_bytes() == before  # checked before rewriting
