"""benchmarks/mrc_vs_transformers.py trains two MRC models for minutes, so it is not part of the suite; this
smoke test runs it for 3 steps on a tiny model and the MRC fixtures so that it cannot rot in between."""
import json
import os
import subprocess
import sys

from bertfam import HeadConfig, Tokenizer, build_model, preset

from .conftest import FIXTURES, ZH_VOCAB

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MRC = os.path.join(FIXTURES, "mrc")


def test_mrc_vs_transformers_smoke(tmp_path):
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    m = build_model(preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                           head=HeadConfig(task=None)), seed=0)
    m.tokenizer = tok
    m.save_pretrained(str(tmp_path / "base"))
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "mrc_vs_transformers.py"), "--base", str(tmp_path / "base"),
           "--train", os.path.join(MRC, "robust_demo_dev_cut.json"), "--dev", os.path.join(MRC, "checklist_demo_cut.json"),
           "--demo", os.path.join(MRC, "checklist_demo_cut.json"), "--steps", "3", "--batch-size", "4",
           "--max-length", "96", "--doc-stride", "32", "--threads", "1", "--out", str(tmp_path / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.load(open(tmp_path / "out" / "mrc_vs_transformers.json"))
    assert res["baseline"]["dev"] == 50.0  # the fixture: 4 of 8 questions unanswerable
    for eng, rules in (("bertfam", ("both", "null")), ("transformers", ("null",))):
        assert res[eng]["train_s"] > 0 and res[eng]["windows"] > 8
        for rule in rules:
            for split in ("dev", "demo"):
                s = res[eng][rule][split]
                assert s["all"]["n"] == 8 and 0 <= s["all"]["F1"] <= 100
            # thresholds are tuned on dev: never below declining everything there
            assert res[eng][rule]["dev"]["all"]["F1"] >= res["baseline"]["dev"]
    assert all(0 <= res[e]["forced"][s] <= 100 for e in ("bertfam", "transformers") for s in ("dev", "demo"))
    assert (tmp_path / "out" / "hf-model" / "config.json").exists()
    md = (tmp_path / "out" / "mrc_vs_transformers.md").read_text()
    assert md.count("| bertfam |") == 2 and md.count("| transformers |") == 1
