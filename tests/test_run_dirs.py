"""Run directories through the real CLI: a second run into a non-empty --out is refused unless it resumes or
replaces the first (metrics.jsonl then holds one run's curve), --resume into another task's run or into
nothing is one line, the best model is a hard link to the final one (no copy) and the summary line says what
was written and its size, and --max-eval (by default proportional to --max-train) caps the carved dev split."""
import json
import os
import re

import pytest

from .conftest import FIXTURES, ZH_VOCAB, cli

SST2 = os.path.join(FIXTURES, "finetune", "glue", "SST-2")
MRC_TRIAL = os.path.join(FIXTURES, "mrc", "cmrc2018_trial_cut.json")
COLA = os.path.join(FIXTURES, "finetune", "glue", "CoLA")
FAST = ["--batch-size", "8", "--lr", "1e-3", "--max-length", "32", "--no-progress", "--max-steps", "2"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from bertfam import preset
    from bertfam.modeling import build_model
    from bertfam.tokenization import Tokenizer

    d = str(tmp_path_factory.mktemp("tiny"))
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                 intermediate_size=64, num_hidden_layers=1, max_position_embeddings=64)
    build_model(cfg, seed=0).save_pretrained(d, tokenizer=tok)
    return d


def _sst2(capsys, tiny, out, *extra):
    return cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", os.path.join(SST2, "train.tsv"),
               "--dev", os.path.join(SST2, "dev.tsv"), "--out", out, *FAST, *extra)


def _lines(path) -> int:
    return len(open(path, encoding="utf-8").read().splitlines())


def test_second_run_into_a_run_dir_is_refused_unless_resumed_or_overwritten(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    rc, so, err = _sst2(capsys, tiny, out)
    assert rc == 0, err
    first = _lines(out / "metrics.jsonl")
    rc, so, err = _sst2(capsys, tiny, out)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--out {out}: not empty" in err and "--resume" in err and "--overwrite-output-dir" in err
    assert _lines(out / "metrics.jsonl") == first  # nothing appended
    rc, so, err = _sst2(capsys, tiny, out, "--overwrite-output-dir")
    assert rc == 0, err
    assert _lines(out / "metrics.jsonl") == first  # one run's curve, not two
    rc, so, err = _sst2(capsys, tiny, out, "--resume")  # a finished run resumed: nothing to do, no refusal
    assert rc == 0, err
    rc, _, err = _sst2(capsys, tiny, tiny, "--overwrite-output-dir")  # never removes the model it starts from
    assert rc == 2 and "is the model it starts from" in err
    assert os.path.isfile(os.path.join(tiny, "model.safetensors"))


def test_resume_into_another_tasks_run_or_nothing_is_one_line(tiny, tmp_path, capsys):
    out = tmp_path / "sst2"
    assert _sst2(capsys, tiny, out)[0] == 0
    rc, _, err = cli(capsys, "finetune", "--task", "cola", "--model", tiny, "--train", os.path.join(COLA, "train.tsv"),
                     "--out", out, "--resume", *FAST)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "holds a sst2 run, not cola" in err and "Traceback" not in err
    rc, _, err = _sst2(capsys, tiny, tmp_path / "nosuch", "--resume")
    assert rc == 2 and "--resume: " in err and "not found" in err, err
    rc, _, err = cli(capsys, "pretrain", "--resume", tmp_path / "nosuch", "--no-progress")
    assert rc == 2 and "not found" in err and "--vocab" not in err, err


def test_best_model_is_linked_not_copied_and_the_summary_says_what_was_written(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    rc, so, err = _sst2(capsys, tiny, out)
    assert rc == 0, err
    final, best = out / "model.safetensors", out / "best" / "model.safetensors"
    assert best.is_file() and os.path.samefile(best, final)  # one file on disk, two names
    written = [ln for ln in so.splitlines() if ln.startswith(f"wrote {out} (")]
    assert written and "in all): model " in written[0] and "best/ = the model (linked, no copy)" in written[0]
    assert re.search(r"checkpoints/ step-2 [\d.]+ [KM]B more$", written[0]), written[0]
    from bertfam.training.rundir import disk_usage

    apparent = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    assert disk_usage(out) <= apparent - os.path.getsize(final)  # the best model is not counted (nor stored) twice
    # --final-only: the model alone (best/ is the same file)
    rc, so, err = _sst2(capsys, tiny, tmp_path / "final", "--final-only")
    assert rc == 0 and os.path.samefile(tmp_path / "final" / "best" / "model.safetensors",
                                        tmp_path / "final" / "model.safetensors")
    top = sum(os.path.getsize(p) for p in (tmp_path / "final").iterdir() if p.is_file())
    assert disk_usage(tmp_path / "final") < top + 4096  # best/ adds its small config files only


def test_carved_dev_split_follows_max_train_and_max_eval_caps_it(tiny, tmp_path, capsys):
    train = os.path.join(SST2, "train.tsv")  # 48 examples
    base = ["finetune", "--task", "sst2", "--model", tiny, "--train", train, *FAST]
    rc, _, err = cli(capsys, *base, "--out", tmp_path / "a", "--max-train", "20")
    assert rc == 0, err
    res = json.loads((tmp_path / "a" / "eval_results.json").read_text())
    assert res["n_train"] == 20 and res["n_dev"] == 2  # 10 % of the 20 trained, not 10 % of the file (5)
    rc, _, err = cli(capsys, *base, "--out", tmp_path / "b", "--max-eval", "3",
                     "--dev", os.path.join(SST2, "dev.tsv"))
    assert rc == 0, err
    res = json.loads((tmp_path / "b" / "eval_results.json").read_text())
    assert res["n_dev"] == 3 and "3 of its 24 examples" in res["dev"]


def _mrc(capsys, tiny, out, *extra):
    return cli(capsys, "mrc", "train", "--model", tiny, "--train", MRC_TRIAL, "--out", out, "--max-steps", "2",
               "--batch-size", "8", "--max-length", "64", "--doc-stride", "16", "--eval-limit", "2", *extra)


def test_mrc_train_follows_the_same_run_directory_rules(tiny, tmp_path, capsys):
    out = tmp_path / "mrc"
    rc, so, err = _mrc(capsys, tiny, out)
    assert rc == 0, err
    assert re.search(rf"^wrote {re.escape(str(out))} \([\d.]+ [KMG]?B in all\): model ", so, re.M), so
    first = _lines(out / "metrics.jsonl")
    rc, so, err = _mrc(capsys, tiny, out)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"--out {out}: not empty" in err and "--overwrite-output-dir" in err
    rc, so, err = _mrc(capsys, tiny, out, "--overwrite-output-dir")
    assert rc == 0, err
    assert _lines(out / "metrics.jsonl") == first  # one run's curve, not two
    rc, so, err = _mrc(capsys, tiny, tmp_path / "nosuch", "--resume", str(tmp_path / "nosuch"))
    assert rc == 2 and "nosuch: not found" in err and len(err.strip().splitlines()) == 1, err
