"""End-to-end pre-training: smoke run -> from_pretrained, kill-and-resume equality, torchrun (2 ranks, gloo),
the static cache path, plotting, and bad input through the CLI."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

import bertfam

from .conftest import FIXTURES, ROOT, cli

CORPUS = os.path.join(FIXTURES, "pretrain", "zh_small.txt")
WORKER = os.path.join(FIXTURES, "pretrain", "ddp_worker.py")
CRASH_AFTER = os.path.join(FIXTURES, "pretrain", "crash_after.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A vocabulary of the fixture's characters and a very small model config (fast on CPU)."""
    from bertfam.data.corpus import iter_documents

    d = tmp_path_factory.mktemp("tiny")
    chars = sorted({c for doc in iter_documents([CORPUS]) for s in doc for c in s.lower() if not c.isspace()})
    words = ["python", "is", "a", "popular", "programming", "language", "many", "the", "##s", "##ing", "##er"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + words
    (d / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    cfg = {"bertfam_config_version": 1, "family": "bert", "vocab_size": len(vocab), "hidden_size": 32,
           "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
    (d / "model.json").write_text(json.dumps(cfg), encoding="utf-8")
    return d


def _args(tiny, out, *extra):
    return ["pretrain", "--model-config", tiny / "model.json", "--vocab", tiny / "vocab.txt", "--corpus", CORPUS,
            "--out", out, "--max-seq-len", "32", "--batch-size", "4", "--lr", "1e-3", "--log-every", "1",
            "--eval-every-doc", "5", "--no-progress", "--threads", "1", *extra]


def _weights(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


def test_smoke_ernie_sop_then_from_pretrained_and_plot(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    rc, stdout, err = cli(capsys, *_args(tiny, out, "--objective", "ernie", "--pair", "sop", "--max-steps", "3"))
    assert rc == 0, err
    assert "pre-trained 3 steps" in stdout
    m = bertfam.from_pretrained(str(out))
    assert m.task == "pretraining" and m.config.head.pair_objective == "sop" and m.tokenizer is not None
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in recs if "loss" in x]
    ev = [x for x in recs if "eval_mlm_acc" in x]
    assert [x["step"] for x in train] == [1, 2, 3] and all("mlm_acc" in x and "pair_acc" in x for x in train)
    assert ev and {"eval_mlm_ppl", "eval_pair_acc"} <= set(ev[-1])
    ids = m.tokenizer("张三在北京大学读书。")["input_ids"]
    assert m(input_ids=ids).logits.shape[-1] == m.config.vocab_size
    rc, _, err = cli(capsys, "plot", out)
    assert rc == 0, err
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    # continued pre-training from the run (--init), RoBERTa objective: MLM only, new pair-less head
    rc, _, err = cli(capsys, *_args(tiny, tmp_path / "cont", "--init", out, "--objective", "roberta",
                                    "--max-steps", "1"))
    assert rc == 0, err
    c = bertfam.from_pretrained(str(tmp_path / "cont"))
    assert c.config.head.pair_objective is None
    w0, w1 = _weights(out), _weights(tmp_path / "cont")
    key = "backbone.embeddings.word.weight"
    assert (w0[key] - w1[key]).abs().max() < 0.01  # started from the --init weights, not a fresh init
    assert "pair.classifier.weight" in w0 and "pair.classifier.weight" not in w1


def test_kill_and_resume_gives_identical_weights(tiny, tmp_path, capsys):
    common = ("--objective", "bert", "--masking", "wwm", "--max-steps", "6", "--save-every", "2", "--seed", "7")
    full = tmp_path / "full"
    rc, _, err = cli(capsys, *_args(tiny, full, *common))
    assert rc == 0, err
    part = tmp_path / "part"
    r = subprocess.run([sys.executable, CRASH_AFTER, "4", *map(str, _args(tiny, part, *common))],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=600)
    assert r.returncode == 137, (r.returncode, r.stderr)  # hard-killed right after checkpoint step-4
    assert (part / "checkpoints" / "step-4").is_dir() and not (part / "model.safetensors").exists()
    run_cfg = part / "pretrain_config.json"  # as older versions wrote it, with a retired field: upgraded first
    run_cfg.write_text(json.dumps({**json.loads(run_cfg.read_text()), "stop_after_step": 4}), encoding="utf-8")
    rc, _, err = cli(capsys, "pretrain", "--resume", part, "--no-progress", "--threads", "1")
    assert rc == 2 and err.strip().endswith(f"run: bertfam upgrade {part}"), err
    assert cli(capsys, "upgrade", part)[0] == 0
    rc, _, err = cli(capsys, "pretrain", "--resume", part, "--no-progress", "--threads", "1")
    assert rc == 0, err
    a, b = _weights(full), _weights(part)
    assert a.keys() == b.keys()
    diff = [k for k in a if not torch.equal(a[k], b[k])]
    assert not diff, f"weights differ after resume: {diff[:3]}"
    steps = [json.loads(x)["step"] for x in (part / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == [1, 2, 3, 4, 5, 6]  # steps 1-4 before the kill, 5-6 after resuming


def test_resuming_a_finished_run_changes_nothing(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    rc, _, err = cli(capsys, *_args(tiny, out, "--objective", "roberta", "--max-steps", "3", "--save-every", "1",
                                    "--keep-last", "2"))
    assert rc == 0, err
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {p.parts[1] for p in before if p.parts[0] == "checkpoints"} == {"step-2", "step-3"}
    rc, stdout, err = cli(capsys, "pretrain", "--resume", out, "--no-progress", "--threads", "1")
    assert rc == 0, err
    assert stdout.strip() == f"{out}: already complete (step 3 of 3); nothing changed"
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after.keys() == before.keys() and all(after[k] == before[k] for k in before)  # no step-4, no rotation


def test_saved_run_config_nested_upgraded_flat_and_as_run_file(tiny, tmp_path, capsys):
    from bertfam.runners.pretrain import PretrainConfig

    out = tmp_path / "run"
    rc, _, err = cli(capsys, *_args(tiny, out, "--objective", "roberta", "--max-steps", "2", "--save-every", "1"))
    assert rc == 0, err
    saved = json.loads((out / "pretrain_config.json").read_text())
    assert saved["train"]["out_dir"] == str(out) and saved["train"]["lr"] == 1e-3  # the trainer's fields, nested
    assert "lr" not in saved and "out" not in saved and saved["objective"] == "roberta"
    flat = PretrainConfig.flatten(saved)  # the layout older versions wrote: every field at the top level
    assert flat["out"] == str(out) and flat["max_steps"] == 2 and "train" not in flat
    assert PretrainConfig.from_dict(flat) == PretrainConfig.from_dict(saved)
    (out / "pretrain_config.json").write_text(json.dumps(flat), encoding="utf-8")
    resume = ("pretrain", "--resume", out / "checkpoints" / "step-2", "--max-steps", "3", "--no-progress",
              "--threads", "1")  # an old flat file, found from a checkpoint: refused until upgraded
    rc, _, err = cli(capsys, *resume)
    assert rc == 2 and err.strip().endswith(f"run: bertfam upgrade {out}"), err
    assert cli(capsys, "upgrade", out)[0] == 0
    rc, stdout, err = cli(capsys, *resume)
    assert rc == 0, err
    assert "pre-trained 3 steps" in stdout and f"model in {out}" in stdout
    resumed = json.loads((out / "pretrain_config.json").read_text())
    assert resumed["train"]["max_steps"] == 3 and resumed["train"]["out_dir"] == str(out)
    # a saved run config is a run file too: its train section gives the options of the same names; the run it
    # records is not resumed (resume is --resume's)
    assert resumed["resume"] == str(out / "checkpoints" / "step-2")
    other = tmp_path / "other"
    rc, stdout, err = cli(capsys, "pretrain", "--config", out / "pretrain_config.json", "--out", other,
                          "--max-steps", "1", "--threads", "1")
    assert rc == 0, err
    again = json.loads((other / "pretrain_config.json").read_text())
    assert again["train"] == {**resumed["train"], "out_dir": str(other), "max_steps": 1}
    assert {**again, "train": None} == {**resumed, "train": None, "resume": None}


def test_lean_checkpoint_options(tiny, tmp_path, capsys):
    lean = tmp_path / "lean"
    rc, _, err = cli(capsys, *_args(tiny, lean, "--objective", "roberta", "--max-steps", "2", "--save-every", "1",
                                    "--no-optimizer-state"))
    assert rc == 0, err
    full = tmp_path / "full"
    rc, _, err = cli(capsys, *_args(tiny, full, "--objective", "roberta", "--max-steps", "2", "--save-every", "1"))
    assert rc == 0, err

    def size(d):
        return sum(p.stat().st_size for p in (d / "checkpoints").rglob("*") if p.is_file())
    assert 0 < size(lean) < size(full) / 2  # no AdamW moments
    rc, _, err = cli(capsys, "pretrain", "--resume", lean, "--max-steps", "3", "--no-progress", "--threads", "1")
    assert rc == 2 and "optimizer state" in err  # a lean checkpoint cannot be resumed exactly
    only = tmp_path / "only"
    rc, _, err = cli(capsys, *_args(tiny, only, "--objective", "roberta", "--max-steps", "2", "--final-only"))
    assert rc == 0, err
    assert (only / "model.safetensors").exists() and not (only / "checkpoints").exists()


def test_torchrun_two_ranks_identical_weights(tiny, tmp_path):
    out, sums = tmp_path / "ddp", tmp_path / "sums"
    cfg = {"model_config": str(tiny / "model.json"), "vocab": str(tiny / "vocab.txt"), "corpus": [CORPUS],
           "out": str(out), "objective": "albert", "max_seq_len": 32, "batch_size": 4, "max_steps": 3, "lr": 1e-3,
           "log_every": 1, "eval_every_doc": 5, "progress": False, "save_every": 2}
    (tmp_path / "run.json").write_text(json.dumps(cfg), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    with socket.socket() as sk:  # a free port: other test runs may use torchrun at the same time
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                        str(port), WORKER, str(tmp_path / "run.json"), str(sums)], capture_output=True, text=True,
                       env=env, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    s0, s1 = (sums / "rank-0.txt").read_text().split(), (sums / "rank-1.txt").read_text().split()
    assert s0 == s1 and s0[1] == "3"  # same weights on both ranks after 3 steps
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert steps == [1, 2, 3]  # one writer: every step logged once
    ckpts = sorted(os.listdir(out / "checkpoints"))
    assert ckpts == ["step-2", "step-3"] and not [f for f in os.listdir(out) if f.startswith(".")]


def test_static_cache_pipeline(tiny, tmp_path, capsys):
    cache = tmp_path / "cache"
    rc, _, err = cli(capsys, "pretrain-data", "--objective", "albert", "--vocab", tiny / "vocab.txt", "--corpus", CORPUS,
                "--out", cache, "--max-seq-len", "32", "--dupe-factor", "2", "--eval-every-doc", "5")
    assert rc == 0, err
    meta = json.loads((cache / "meta.json").read_text())
    assert meta["static"] and meta["pair"] == "sop" and meta["counts"]["eval"] > 0
    from bertfam.data.instance_cache import InstanceCache

    c = InstanceCache(str(cache))
    assert all((c[i]["labels"] != -100).any() for i in range(len(c)))
    rc, _, err = cli(capsys, "pretrain", "--model-config", tiny / "model.json", "--data", cache, "--objective",
                     "albert", "--out", tmp_path / "run", "--max-seq-len", "32", "--batch-size", "4", "--max-steps",
                     "2", "--no-progress")
    assert rc == 0, err
    assert bertfam.from_pretrained(str(tmp_path / "run")).config.head.pair_objective == "sop"


def test_bad_input_gives_one_line_errors(tiny, tmp_path, capsys, caplog):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    (tmp_path / "run.yaml").write_text("max_steps: 1\nbogus_option: 3\n", encoding="utf-8")
    (tmp_path / "old.yaml").write_text("stop_after_step: 4\n", encoding="utf-8")
    cases = [
        (("--config", tmp_path / "run.yaml"), "run.yaml: unknown field(s) bogus_option"),
        (("--config", tmp_path / "old.yaml"), "old.yaml: written by an older version (retired field(s) "
                                              "stop_after_step); run: bertfam upgrade"),  # a retired field
        (("--corpus", empty), "no usable text"),
        (("--corpus", tmp_path / "missing.txt"), "missing.txt: corpus file not found"),
        (("--max-seq-len", "512"), "max_seq_len 512 exceeds the model's 64 positions"),
        (("--objective", "ernie", "--ernie-mix", "0", "0", "0"), "ernie_mix must be three non-negative weights"),
    ]
    for extra, msg in cases:
        rc, _, err = cli(capsys, *_args(tiny, tmp_path / "x", "--max-steps", "1"), *extra)  # later options win
        assert rc == 2, (extra, err)
        assert msg in err and len(err.strip().splitlines()) == 1, err
    bad = tmp_path / "bad.txt"
    bad.write_bytes(open(CORPUS, "rb").read() + b"\n\xff\xfe\xfd broken line\n")
    rc, _, err = cli(capsys, *_args(tiny, tmp_path / "y", "--corpus", bad, "--max-steps", "1"))
    assert rc == 0, err
    assert "bad.txt:31: not UTF-8 (byte 0), line skipped" in caplog.text
