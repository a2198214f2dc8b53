"""recipes/mrc_named_examples.py: the named examples a release is held to, its pass rule, a run on a tiny model
and on the shipped one (which must keep passing the examples it passes today)."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
SCRIPT = os.path.join(ROOT, "recipes", "mrc_named_examples.py")
# the examples the shipped model passes (recipes/mrc_named_examples.py models/mrc-zh-e5small-l12): a new
# release may add to them, never lose one
SHIPPED_PASSES = {"hand-0", "hand-1", "hand-2", "hand-3", "hand-4", "readme", "api-schema", "web-page", "france",
                  "short-factoid", "other-university", "other-capital"}


def _module():
    spec = importlib.util.spec_from_file_location("mrc_named_examples", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_the_examples_are_read_from_the_page_and_the_demo():
    m = _module()
    ex = dict(m.examples())
    assert ex["web-page"]["passage"].startswith("北京，简称“京”，是中华人民共和国的首都")
    assert ex["seed-guava"]["question"] == "番石榴汁热量" and ex["seed-guava"]["title"].startswith("番石榴汁的热量")
    assert ex["other-university"]["expect"] is None and ex["readme"]["expect"] == "北京"
    assert len(ex) == 13 and SHIPPED_PASSES < set(ex)


@pytest.mark.parametrize("answer,expect,ok", [
    ("北京", "北京", True), ("北京市", "北京", True), (None, "北京", False), ("北京是中华人民共和国的首都", "北京", False),
    ("6300公里", "约6300公里", True), ("番石榴性温", "一个番石榴所含的脂肪约0.9克重或84卡路里", False),
    (None, None, True), ("1911年", None, False),
])
def test_pass_rule(answer, expect, ok):
    assert _module().passes(answer, expect) is ok


def test_runs_on_a_model_and_needs_one(tmp_path):
    import bertfam
    from bertfam import HeadConfig, Tokenizer, preset
    from bertfam.config import MRCSettings

    from .conftest import ZH_VOCAB

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", mrc=MRCSettings(max_length=128, doc_stride=64)))
    d = tmp_path / "span"
    bertfam.build_model(cfg, seed=0).save_pretrained(str(d), tokenizer=tok)
    r = subprocess.run([sys.executable, SCRIPT, str(d)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [x for x in r.stdout.splitlines() if x.strip().startswith(("PASS", "FAIL"))]
    assert len(rows) == 13 and r.stdout.strip().endswith("pass")
    none = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=300)
    assert none.returncode == 2 and "Usage" in none.stderr
    missing = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "nothing")], capture_output=True, text=True,
                             timeout=300)
    assert missing.returncode == 2 and "model directory not found" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_the_shipped_model_keeps_passing_what_it_passes():
    m = _module()
    from bertfam.runners.demo import shipped_model_dir

    d = shipped_model_dir()
    assert d is not None
    got = {name for name, ok, _ in m.run(d) if ok}
    assert SHIPPED_PASSES <= got, f"lost: {sorted(SHIPPED_PASSES - got)}"
