"""benchmarks/pretrain_throughput.py (MLM + NSP pre-training, bertfam vs transformers, each side in its own
worker process) trains for minutes on the CLUECorpusSmall sample; this smoke test runs two steps of bert-tiny
on a small corpus written here, with the test vocabulary, so that the script and its worker protocol cannot
rot in between."""
import json
import os
import subprocess
import sys

from .conftest import FIXTURES, ZH_VOCAB

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_pretrain_throughput_smoke(tmp_path):
    sentences = [json.loads(line)["sentence"] for line in open(os.path.join(FIXTURES, "finetune", "clue", "tnews.json"),
                                                               encoding="utf-8") if line.strip()]
    docs = ["\n".join(sentences[i:i + 4]) for i in range(0, len(sentences) - 3, 4)]  # documents of 4 sentences
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    out = tmp_path / "result.json"
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "pretrain_throughput.py"), "--corpus", str(corpus),
           "--vocab", ZH_VOCAB, "--preset", "bert-tiny", "--seq-len", "32", "--batch-size", "2", "--steps", "2",
           "--warmup", "1", "--threads", "1", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    for side in ("bertfam", "transformers"):
        run, = res["runs"][side]
        assert run["side"] == side and run["tokens_per_s"] > 0 and run["peak_rss_mb"] > 0
    assert res["throughput_ratio"] > 0 and "ratio bertfam / transformers" in r.stdout
