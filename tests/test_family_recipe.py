"""The family-comparison recipe (recipes/family_compare.py): its data split, staging, table and chart, and one
tiny end-to-end run on the fixtures (pre-train, fine-tune with two seeds, table into a doc, resume), so the
recipe behind docs/results.md cannot silently rot."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import FIXTURES, ROOT

sys.path.insert(0, os.path.join(ROOT, "recipes"))
import family_compare as fc  # noqa: E402

SCRIPT = os.path.join(ROOT, "recipes", "family_compare.py")


def _shared(root):
    """The folder layout the recipe reads, made of the test fixtures."""
    def put(src, rel):
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(FIXTURES, src), dst)

    put("pretrain/zh_small.txt", "corpus/zh/clue_corpus_small_sample/a.txt")
    put("pretrain/zh_small.txt", "corpus/zh/zhwiki_sample/wiki_00")
    put("vocab/bert-base-chinese-vocab.txt", "vocab/bert-base-chinese-vocab.txt")
    put("finetune/kbert/chnsenticorp.tsv", "kbert/datasets/chnsenticorp/train.tsv")
    put("finetune/kbert/chnsenticorp.tsv", "kbert/datasets/chnsenticorp/dev.tsv")
    put("finetune/clue/tnews.json", "clue/tnews/train.json")
    put("finetune/ner/cluener_train.json", "ner/cluener2020/train.json")
    put("finetune/ner/cluener_dev.json", "ner/cluener2020/dev.json")
    return root


def test_tnews_split_is_seeded_and_lossless(tmp_path):
    src = os.path.join(FIXTURES, "finetune", "clue", "tnews.json")
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        fc.split_lines(src, str(d / "train.json"), str(d / "dev.json"), n_dev=5000, seed=42)
    lines = [l for l in open(src, encoding="utf-8") if l.strip()]
    train, dev = (open(a / f, encoding="utf-8").readlines() for f in ("train.json", "dev.json"))
    assert len(dev) == len(lines) // 5  # capped at a fifth of a small file
    assert sorted(train + dev) == sorted(lines)
    assert open(b / "dev.json", encoding="utf-8").readlines() == dev  # same seed, same split


def test_stage_data_copies_what_the_recipe_reads(tmp_path):
    shared = _shared(tmp_path / "shared")
    mrc = tmp_path / "mrc"
    mrc.mkdir()
    for f in ("train.json", "dev_checklist_like.json"):
        shutil.copyfile(os.path.join(FIXTURES, "mrc", "robust_demo_dev_cut.json"), mrc / f)
    fc.stage_data(str(shared), str(mrc), str(tmp_path / "staged"))
    st = tmp_path / "staged"
    for rel in fc.STAGED:
        assert (st / "shared" / rel).exists(), rel
    assert (st / "mrc" / "dev_checklist_like.json").is_file()
    assert (st / "site" / "jieba" / "dict.txt").is_file() and (st / "site" / "seqeval" / "__init__.py").is_file()
    assert not (st / "site" / "jieba" / "lac_small").exists()  # the paddle model the recipe never uses


def _fake_results():
    def cell(*v):
        return {"values": list(v), "mean": sum(v) / len(v), "min": min(v), "max": max(v)}

    b = fc.Budget()
    rows = {"bert": {"tasks": {"chnsenticorp": cell(80.0, 84.0), "mrc": cell(52.2, 53.0)},
                     "pretrain": {"eval_mlm_loss": 6.5, "eval_mlm_acc": 0.12}},
            "e5-small": {"tasks": {"chnsenticorp": cell(90.0), "mrc": cell(55.0)}, "pretrain": {}}}
    return {"budget": b.__dict__, "rows": rows}, b


def test_table_shows_mean_and_seed_range(tmp_path):
    results, b = _fake_results()
    t = fc.table(results, b)
    assert "| bert | token masking + NSP | 6.50 / 12.0 % | 82.0 (80.0–84.0) | 52.6 (52.2–53.0) |" in t
    assert "| e5-small | multilingual-e5-small (first 6 of 12 layers)" in t and "| 90.0 | 55.0 |" in t
    doc = tmp_path / "results.md"
    doc.write_text(f"# results\n\n{fc.BEGIN}\nold\n{fc.END}\n\nafter\n", encoding="utf-8")
    fc.replace_section(str(doc), t)
    text = doc.read_text(encoding="utf-8")
    assert "old" not in text and t in text and text.endswith("after\n")
    doc.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        fc.replace_section(str(doc), t)


def test_recipe_end_to_end_on_fixtures_and_resumes(tmp_path):
    shared = _shared(tmp_path / "shared")
    doc = tmp_path / "results.md"
    doc.write_text(f"{fc.BEGIN}\n{fc.END}\n", encoding="utf-8")
    run = tmp_path / "run"
    cmd = [sys.executable, SCRIPT, "--shared", str(shared), "--run", str(run), "--shape", "bert-tiny",
           "--objectives", "albert", "--tasks", "chnsenticorp", "--no-reference", "--pretrain-steps", "2",
           "--finetune-steps", "2", "--seeds", "1", "2", "--doc", str(doc), "--chart", str(tmp_path / "c.png"),
           "--threads", "1"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)
    cfg = json.load(open(run / "configs" / "albert.json"))
    assert cfg["family"] == "albert" and cfg["embedding_size"] == 128 and cfg["num_hidden_groups"] == 1
    saved = json.load(open(run / "pretrain" / "albert" / "config.json"))
    assert saved["model"]["embedding_size"] == 128 if "model" in saved else saved["embedding_size"] == 128
    res = json.load(open(run / "results.json"))
    cell = res["rows"]["albert"]["tasks"]["chnsenticorp"]
    assert len(cell["values"]) == 2 and all(0 <= v <= 100 for v in cell["values"])
    assert "| albert | token masking + SOP" in doc.read_text(encoding="utf-8")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    n_commands = len(open(run / "commands.log").readlines())
    assert n_commands == 3  # one pre-training, two fine-tuning runs
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)  # everything done: nothing re-runs
    assert len(open(run / "commands.log").readlines()) == n_commands
