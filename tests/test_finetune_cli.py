"""End to end on a tiny random model: `bertfam finetune` -> evaluate -> predict -> reload, for
classification, regression, NER, custom files, the GLUE runner, embeddings and the K-BERT hook."""
import csv
import json
import zipfile
import os

import numpy as np
import pytest
import torch


from .conftest import FIXTURES, ZH_VOCAB, cli, run_cli

FT = os.path.join(FIXTURES, "finetune")
FAST = ["--batch-size", "8", "--lr", "1e-3", "--max-length", "64", "--no-progress"]


def fx(*p):
    return os.path.join(FT, *p)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer, 32-wide random BERT with the bert-base-chinese vocabulary (covers English wordpieces)."""
    from bertfam import preset
    from bertfam.modeling import build_model
    from bertfam.tokenization import Tokenizer

    d = str(tmp_path_factory.mktemp("tiny"))
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                 intermediate_size=64, num_hidden_layers=2, max_position_embeddings=128)
    build_model(cfg, seed=0).save_pretrained(d, tokenizer=tok)
    return d


def test_classification_finetune_evaluate_predict_reload(tiny, tmp_path, capsys):
    out = tmp_path / "sst2"
    rc, so, _ = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", fx("glue", "SST-2", "train.tsv"),
                    "--dev", fx("glue", "SST-2", "dev.tsv"), "--out", out, "--epochs", "2", *FAST)
    assert rc == 0 and "sst2: dev accuracy" in so
    res = json.loads((out / "eval_results.json").read_text())
    assert res["n_train"] == 48 and res["n_dev"] == 24 and 0 <= res["value"] <= 100
    assert (out / "best" / "model.safetensors").is_file() and (out / "dev_predictions.tsv").is_file()
    # the saved directory is the best dev checkpoint: evaluating it reproduces the reported number
    rc, so, _ = cli(capsys, "evaluate", "--model", out, "--data", fx("glue", "SST-2", "dev.tsv"))
    assert rc == 0 and json.loads(so)["value"] == pytest.approx(res["value"])
    assert res["value"] == pytest.approx(res["best_during_training"])
    # GLUE submission format: TASK.tsv with `index<TAB>prediction`, one row per test example, in order
    rc, so, _ = cli(capsys, "predict", "--model", out, "--data", fx("glue", "SST-2", "test.tsv"), "--out", tmp_path / "sub")
    sub = tmp_path / "sub" / "SST-2.tsv"
    assert rc == 0 and sub.is_file()
    rows = list(csv.reader(sub.open(), delimiter="\t"))
    test_idx = [r[0] for r in csv.reader(open(fx("glue", "SST-2", "test.tsv")), delimiter="\t")][1:]
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == test_idx
    assert {r[1] for r in rows[1:]} <= {"0", "1"}
    # reload: the fine-tuned dir is an ordinary model dir with its label list and task
    from bertfam import from_pretrained

    m = from_pretrained(str(out))
    assert m.task == "classification" and m.config.head.labels == ["0", "1"]
    assert m.config.head.finetune.task == "sst2" and m.config.head.finetune.max_length == 64
    info = json.load(open(out / "training_info.json"))  # the run's provenance, beside config.json
    run = info["runs"][-1]
    assert run["command"] == "finetune" and run["task"] == "sst2" and run["steps"] > 0
    assert run["value"] == json.load(open(out / "eval_results.json"))["value"]
    assert "runs" not in (out / "config.json").read_text() and m.config.head.info == info


def test_prediction_rows_are_indexed_from_0(tiny, tmp_path, capsys):
    out = tmp_path / "sst2"
    dev = fx("glue", "SST-2", "dev.tsv")  # no index column: examples are named by source line (2, 3, ...)
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", fx("glue", "SST-2", "train.tsv"),
                     "--dev", dev, "--out", out, "--max-steps", "1", *FAST)
    assert rc == 0, err
    n = json.loads((out / "eval_results.json").read_text())["n_dev"]
    rows = list(csv.reader((out / "dev_predictions.tsv").open(), delimiter="\t"))
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [str(i) for i in range(n)]
    rc, _, err = cli(capsys, "evaluate", "--model", out, "--data", dev, "--out", tmp_path / "ev")
    assert rc == 0, err
    rows = list(csv.reader((tmp_path / "ev" / "predictions.tsv").open(), delimiter="\t"))
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(n)]


def test_max_length_beyond_the_positions(tiny, tmp_path, capsys, caplog):
    """Training refuses it (as pretrain does); evaluate and predict clamp it with a warning (as embed does)."""
    dev = fx("glue", "SST-2", "dev.tsv")
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", fx("glue", "SST-2", "train.tsv"),
                     "--dev", dev, "--out", tmp_path / "x", *FAST, "--max-length", "600")
    assert rc == 2 and err.strip() == "bertfam: error: max_length 600 exceeds the model's 128 positions " \
                                      "(max_position_embeddings 128)"
    assert not (tmp_path / "x").exists()
    out = tmp_path / "sst2"
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", fx("glue", "SST-2", "train.tsv"),
                     "--dev", dev, "--out", out, "--max-steps", "1", *FAST)
    assert rc == 0, err
    rc, so, _ = cli(capsys, "evaluate", "--model", out, "--data", dev)
    ref = json.loads(so)["value"]  # the fine-tuned length, 64: every dev sentence fits either way
    for cmd in (["evaluate", "--model", out, "--data", dev],
                ["predict", "--model", out, "--data", fx("glue", "SST-2", "test.tsv"), "--out", tmp_path / "p"]):
        caplog.clear()
        rc, so, err = cli(capsys, *cmd, "--max-length", "600")
        assert rc == 0, err
        warned = [r.getMessage() for r in caplog.records if "positions" in r.getMessage()]
        assert warned == ["max length 600 is more than the model's 128 positions; using 128"]
    rc, so, _ = cli(capsys, "evaluate", "--model", out, "--data", dev, "--max-length", "600")
    assert json.loads(so)["value"] == pytest.approx(ref)


def test_training_learns_a_separable_task(tiny, tmp_path):
    """A statistical check that fitting works end to end: two keyword classes, chance is 50%."""
    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune

    rows = ["sentence\tlabel"] + [f"{w} {i}\t{1 if w == 'good' else 0}" for i in range(40) for w in ("good", "bad")]
    p = tmp_path / "kw.tsv"
    p.write_text("\n".join(rows) + "\n")
    r = run_finetune(FinetuneRunConfig.from_dict(
        {"task": "sst2", "model": tiny, "train_file": str(p), "out": str(tmp_path / "o"), "epochs": 10,
         "batch_size": 16, "lr": 3e-3, "progress": False, "save_checkpoints": False, "dev_ratio": 0.25}))
    assert r["value"] >= 90.0 and r["n_dev"] == 20


def test_ner_finetune_predict_and_resume_files(tiny, tmp_path, capsys):
    out = tmp_path / "ner"
    rc, so, _ = cli(capsys, "finetune", "--task", "cluener", "--model", tiny, "--train", fx("ner", "cluener_train.json"),
                    "--dev", fx("ner", "cluener_dev.json"), "--out", out, "--epochs", "1",
                    "--layerwise-lr-decay", "0.9", *FAST)
    assert rc == 0
    res = json.loads((out / "eval_results.json").read_text())
    assert set(res["metrics"]) >= {"precision", "recall", "f1"}
    from bertfam import from_pretrained

    labels = from_pretrained(str(out)).config.head.labels
    assert labels[0] == "O" and "B-name" in labels and "I-name" in labels
    rc, so, _ = cli(capsys, "predict", "--model", out, "--data", fx("ner", "cluener_test.json"), "--out", tmp_path / "p")
    lines = [json.loads(l) for l in (tmp_path / "p" / "predictions.jsonl").read_text().splitlines()]
    src = [json.loads(l) for l in open(fx("ner", "cluener_test.json"), encoding="utf-8")]
    assert [l["text"] for l in lines] == [s["text"] for s in src]
    for l in lines:  # CLUENER layout, end inclusive, spans match the text
        for etype, ents in l["label"].items():
            for ent, spans in ents.items():
                assert all(l["text"][s:e + 1] == ent for s, e in spans)


def test_bmes_and_regression_with_carved_dev(tiny, tmp_path):
    from bertfam.runners.finetune import EvaluateConfig, FinetuneRunConfig, run_evaluate, run_finetune

    def train(**kw):
        return FinetuneRunConfig.default_train(epochs=1, progress=False, checkpoints=False, **kw)

    r = run_finetune(FinetuneRunConfig(task="resume", model=tiny, train_file=fx("ner", "resume.bmes"),
                                       out=str(tmp_path / "r"), dev_ratio=0.25, train=train(batch_size=4)))
    assert r["n_dev"] == 2 and "f1" in r["metrics"]
    r = run_finetune(FinetuneRunConfig(task="stsb", model=tiny, train_file=fx("glue", "STS-B", "train.tsv"),
                                       out=str(tmp_path / "s"), train=train(batch_size=8)))
    assert set(r["metrics"]) == {"pearson", "spearman", "corr"}
    e = run_evaluate(EvaluateConfig(model=str(tmp_path / "s"), data=fx("glue", "STS-B", "train.tsv")))
    assert e["n"] == 24


def test_custom_tsv_and_jsonl(tiny, tmp_path, capsys):
    p = tmp_path / "mine.jsonl"
    p.write_text("\n".join(json.dumps({"q": f"问题{i}", "a": f"答案{i}", "y": "对" if i % 2 else "错"},
                                      ensure_ascii=False) for i in range(12)) + "\n", encoding="utf-8")
    rc, so, _ = cli(capsys, "finetune", "--task", "custom", "--format", "jsonl", "--text-cols", "q,a", "--label-col",
                    "y", "--labels", "错,对", "--model", tiny, "--train", p, "--out", tmp_path / "c", "--epochs", "1",
                    *FAST)
    assert rc == 0
    rc, so, _ = cli(capsys, "evaluate", "--model", tmp_path / "c", "--data", p)  # task restored from config
    assert rc == 0 and json.loads(so)["n"] == 12
    t = tmp_path / "k.tsv"  # K-BERT layout, no header: columns by number
    t.write_text("".join(f"{i % 2}\t句子{i}\n" for i in range(10)), encoding="utf-8")
    rc, _, _ = cli(capsys, "finetune", "--task", "custom", "--no-header", "--text-cols", "1", "--label-col", "0",
                   "--model", tiny, "--train", t, "--out", tmp_path / "k", "--max-steps", "2", *FAST)
    assert rc == 0


def test_glue_runner_table(tiny, tmp_path, capsys):
    rc, so, _ = cli(capsys, "glue", "--model", tiny, "--data", fx("glue"), "--out", tmp_path / "g",
                    "--tasks", "sst2,cola,mrpc", "--max-steps", "2", *FAST)
    assert rc == 0
    assert "paper test" in so and "GLUE test server" in so
    for t in ("sst2", "cola", "mrpc"):
        assert any(line.startswith(t) for line in so.splitlines())
    assert (tmp_path / "g" / "submission" / "SST-2.tsv").is_file()
    assert (tmp_path / "g" / "submission" / "CoLA.tsv").is_file()
    with zipfile.ZipFile(tmp_path / "g" / "submission.zip") as z:  # the server takes the TSVs at top level
        assert {"SST-2.tsv", "CoLA.tsv"} <= set(z.namelist())
        assert z.read("SST-2.tsv").decode().startswith("index\tprediction\n1172\t")  # the test file's index
    # a second call with its own budget adds its task; the earlier rows stay, in GLUE's order
    rc, so, _ = cli(capsys, "glue", "--model", tiny, "--data", fx("glue"), "--out", tmp_path / "g",
                    "--tasks", "rte", "--max-steps", "1", *FAST)
    assert rc == 0
    tasks = [r["task"] for r in json.loads((tmp_path / "g" / "results.json").read_text())]
    assert tasks == ["cola", "sst2", "mrpc", "rte"]
    assert [line.split()[0] for line in so.splitlines()[2:6]] == tasks


def test_embed_cli_and_polysemy_api(tiny, tmp_path, capsys):
    inp = tmp_path / "in.txt"
    inp.write_text("我爱北京\n\n今天天气很好 ||| 是的\n", encoding="utf-8")
    rc, so, err = cli(capsys, "embed", "--model", tiny, "--input", inp, "--out", tmp_path / "e")
    assert rc == 2 and "mix of single texts" in err
    inp.write_text("我爱北京\n\n今天天气很好\n", encoding="utf-8")
    rc, so, _ = cli(capsys, "embed", "--model", tiny, "--input", inp, "--out", tmp_path / "e", "--layers=-1,0",
                    "--tokens")
    assert rc == 0
    cls, mean = np.load(tmp_path / "e.cls.npy"), np.load(tmp_path / "e.mean.npy")
    assert cls.shape == (3, 2, 32) and mean.shape == (3, 2, 32)  # one row per line, the blank one included
    toks = [json.loads(l) for l in (tmp_path / "e.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [f["token"] for f in toks[0]["features"]] == ["[CLS]", "我", "爱", "北", "京", "[SEP]"]
    assert [t["line_index"] for t in toks] == [0, 1, 2]
    assert [f["token"] for f in toks[1]["features"]] == ["[CLS]", "[SEP]"]  # a blank line is the empty text
    assert len(toks[0]["features"][0]["layers"]) == 2
    # mean pooling is mask-aware: a text's vector does not depend on the batch's padding
    from bertfam.tasks.embed import cosine, embed_texts, word_vectors
    from bertfam.checkpoint import from_pretrained

    alone = embed_texts(tiny, ["我爱北京"])["mean"][0]
    np.testing.assert_allclose(alone, mean[0, :1], atol=1e-5)
    m = from_pretrained(tiny)
    a = word_vectors(m, "我吃了一个苹果", "苹果")
    b = word_vectors(m, "苹果公司发布了新手机", "苹果")
    assert cosine(a["static"], b["static"]) == pytest.approx(1.0)  # the input-embedding row cannot tell them apart
    assert cosine(a["contextual"], b["contextual"]) < 0.999
    rc, _, err = cli(capsys, "embed", "--model", tiny, "--input", inp, "--out", tmp_path / "x", "--layers", "9")
    assert rc == 2 and "out of range" in err


def test_embed_rows_stay_aligned_with_lines(tiny, tmp_path, capsys, caplog):
    """Blank line: the empty text's vectors; a line that is not UTF-8: reported as file:line and a row of NaN;
    CRLF, a byte-order mark and a vertical tab inside a line do not shift the rows."""
    from bertfam.tasks.embed import embed_texts

    inp = tmp_path / "in.txt"
    inp.write_bytes("\ufeff我爱北京\r\n\r\n".encode() + b"\xff\xfebad\n" + "天气\x0b很好\n".encode())
    rc, _, err = cli(capsys, "embed", "--model", tiny, "--input", inp, "--out", tmp_path / "e", "--tokens")
    assert rc == 0, err
    cls, mean = np.load(tmp_path / "e.cls.npy"), np.load(tmp_path / "e.mean.npy")
    assert cls.shape == mean.shape == (4, 1, 32)
    ref = embed_texts(tiny, ["我爱北京", "", "天气\x0b很好"])
    for got, want in ((cls, ref["cls"]), (mean, ref["mean"])):
        np.testing.assert_allclose(got[[0, 1, 3]], want, atol=1e-5)
        assert np.isnan(got[2]).all() and not np.isnan(got[[0, 1, 3]]).any()
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{inp}:3: not UTF-8 (invalid start byte at byte 0); written as a row of NaN"]
    toks = [json.loads(l) for l in (tmp_path / "e.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [t["line_index"] for t in toks] == [0, 1, 2, 3] and toks[2] == {"line_index": 2, "features": [],
                                                                           "error": "not UTF-8"}
    pairs = tmp_path / "pairs.txt"  # in a file of pairs a blank line is the empty pair
    pairs.write_text("我 ||| 北京\n\n", encoding="utf-8")
    rc, _, err = cli(capsys, "embed", "--model", tiny, "--input", pairs, "--out", tmp_path / "p", "--pooling", "cls")
    assert rc == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "p.cls.npy"), embed_texts(tiny, [("我", "北京"), ("", "")])["cls"],
                               atol=1e-5)
    inp.write_bytes(b"\xff\n\xfe\n")
    rc, _, err = cli(capsys, "embed", "--model", tiny, "--input", inp, "--out", tmp_path / "z")
    assert rc == 2 and "in.txt: no UTF-8 line (2 lines)" in err


def test_bad_input_one_line_exit_2(tiny, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\n\t1\nx\ty\n")
    r = run_cli("finetune", "--task", "sst2", "--model", tiny, "--train", bad, "--out", tmp_path / "o", "--no-progress")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("bertfam: error:")
    assert "bad.tsv: no usable example (1 empty text, 1 unknown label)" in r.stderr


def test_errors_in_process(tiny, tmp_path, capsys):
    rc, _, err = cli(capsys, "finetune", "--task", "nope", "--model", tiny, "--train", "x", "--out", tmp_path)
    assert rc == 2 and "unknown task 'nope'" in err
    rc, _, err = cli(capsys, "evaluate", "--model", tiny, "--data", fx("glue", "SST-2", "dev.tsv"))
    assert rc == 2 and "not fine-tuned by bertfam" in err
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", fx("glue", "SST-2", "test.tsv"),
                     "--out", tmp_path / "u", "--no-progress")
    assert rc == 2 and "no label" in err


class FakeKBert:
    """Stands in for bertfam.knowledge.KBertInputBuilder (contract: encode -> input_ids, token_type_ids,
    position_ids, visible_matrix, source_index). Injects one token after every first character,
    invisible to the other sentence tokens."""

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text, text_pair=None):
        units = list(text)
        ids, src, pos = [self.tok.cls_token_id], [-1], [0]
        for j, u in enumerate(units[:20]):
            ids.append(self.tok.token_to_id(u) or self.tok.unk_token_id)
            src.append(j)
            pos.append(len(pos))
            if j == 0:  # one injected token, soft position continues from its word
                ids.append(self.tok.token_to_id("人"))
                src.append(-1)
                pos.append(pos[-1] + 1)
        ids.append(self.tok.sep_token_id)
        src.append(-1)
        pos.append(pos[-2] + 1)
        T = len(ids)
        vm = torch.ones(T, T, dtype=torch.bool)
        vm[2, :] = False
        vm[:, 2] = False
        vm[2, 1:3] = True
        vm[1, 2] = True
        return {"input_ids": ids, "token_type_ids": [0] * T, "position_ids": pos, "visible_matrix": vm,
                "source_index": src}

    def collate(self, encs):
        T, B = max(len(e["input_ids"]) for e in encs), len(encs)
        out = {"input_ids": torch.zeros(B, T, dtype=torch.long), "token_type_ids": torch.zeros(B, T, dtype=torch.long),
               "position_ids": torch.zeros(B, T, dtype=torch.long), "attention_mask": torch.zeros(B, T, T, dtype=torch.bool)}
        for i, e in enumerate(encs):
            n = len(e["input_ids"])
            out["input_ids"][i, :n] = torch.tensor(e["input_ids"])
            out["position_ids"][i, :n] = torch.tensor(e["position_ids"])
            out["attention_mask"][i, :n, :n] = e["visible_matrix"]
            out["attention_mask"][i, range(n, T), range(n, T)] = True  # padding sees itself only
        return out


def test_kbert_inputs_contract(tiny):
    from bertfam.data.ner import read_kbert_ner
    from bertfam.checkpoint import from_pretrained
    from bertfam.tasks.inputs import InputBuilder, collect_labels
    from bertfam.tasks.table import get_task

    spec = get_task("medical_ner")
    ex = read_kbert_ner(fx("kbert", "medical_ner.tsv"))
    labels = collect_labels(spec, ex)
    m = from_pretrained(tiny, task="token", labels=labels, num_labels=len(labels))
    builder = InputBuilder(m.tokenizer, spec, labels, 64, kbert=FakeKBert(m.tokenizer))
    inputs = builder.build(ex)
    inp = inputs[0]
    assert inp["labels"][2] == -100 and inp["labels"][0] == -100  # injected token and [CLS] carry no label
    assert inp["labels"][1] == labels.index(ex[0].tags[0]) and inp["labels"][3] == labels.index(ex[0].tags[1])
    batch = builder.collate(inputs[:3])
    assert batch["attention_mask"].dim() == 3 and "position_ids" in batch
    out = m(**batch)
    assert torch.isfinite(out.loss)
    preds = builder.label_names(builder.predict(m, inputs[:3]))
    assert [len(p) for p in preds] == [len(e.tokens) for e in ex[:3]]  # injected tokens stripped
    # characters beyond the fake's 20-unit cut are predicted O
    assert all(t == "O" for p, e in zip(preds, ex[:3]) for t in p[20:])


def test_early_stopping_on_dev_metric(tiny, tmp_path):
    """lr 0: the dev metric can never improve, so patience 1 stops at the second evaluation."""
    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune

    train = FinetuneRunConfig.default_train(epochs=3, batch_size=8, lr=0.0, eval_every=1, early_stopping_patience=1,
                                            progress=False, checkpoints=False)
    r = run_finetune(FinetuneRunConfig(task="sst2", model=tiny, train_file=fx("glue", "SST-2", "train.tsv"),
                                       dev=fx("glue", "SST-2", "dev.tsv"), out=str(tmp_path / "e"), train=train))
    assert r["steps"] == 2  # 18 steps without early stopping
    evals = [json.loads(l) for l in (tmp_path / "e" / "metrics.jsonl").read_text().splitlines() if "eval_accuracy" in l]
    assert len(evals) == 2 and evals[0]["eval_accuracy"] == evals[1]["eval_accuracy"]


@pytest.mark.parametrize("n,width,overlap", [(5, 8, 0.5), (40, 8, 0.5), (41, 10, 0.25), (100, 7, 0.0)])
def test_unit_windows_cover_without_splitting_units(n, width, overlap):
    from bertfam.tasks.inputs import unit_windows

    rng = np.random.default_rng(n)
    src = np.repeat(np.arange(n), rng.integers(1, 3, n)).tolist()  # units of 1-2 tokens
    spans = unit_windows(src, width, overlap)
    assert spans[0][0] == 0 and spans[-1][1] == len(src)
    covered = set()
    for a, b in spans:
        assert 0 < b - a <= width
        assert a == 0 or src[a] != src[a - 1]  # starts on a unit's first token
        assert b == len(src) or src[b] != src[b - 1]  # ends after a unit's last token
        covered.update(range(a, b))
    assert covered == set(range(len(src)))
    for (a1, b1), (a2, b2) in zip(spans, spans[1:]):  # windows overlap, or abut without overlap
        assert b1 > a2 if overlap else b1 == a2


def test_long_ner_sentence_is_windowed_and_merged(tiny):
    """A sentence 3x the window gets several windows whose labels align with the gold tags; prediction
    returns one tag per character, each from the window where it has the most context."""
    from bertfam.data.labelled import Example
    from bertfam.checkpoint import from_pretrained
    from bertfam.tasks.inputs import InputBuilder
    from bertfam.tasks.table import get_task

    spec = get_task("cluener")
    labels = ["O", "B-name", "I-name"]
    m = from_pretrained(tiny, task="token", labels=labels, num_labels=3)
    text = list("张三在北京大学读书，李四去了上海。" * 3)
    tags = ["B-name" if c in "张李" else "I-name" if c in "三四" else "O" for c in text]
    builder = InputBuilder(m.tokenizer, spec, labels, 20)
    inputs = builder.build([Example("x", tokens=text, tags=tags),
                            Example("y", tokens=list("王五"), tags=["B-name", "I-name"])])
    wins = [inp for inp in inputs if inp["example"] == 0]
    assert len(wins) >= 3 and all(inp["length"] <= 20 for inp in inputs) and builder.windowed == 1
    builder.build([Example("z", tokens=list("王五"), tags=["B-name", "I-name"])])
    assert builder.windowed == 0  # counts are per build() call: the dev file is not charged with train's windows
    for inp in wins:  # every character in a window carries its own gold tag on its token
        for j, ti in enumerate(inp["first"]):
            if ti >= 0:
                assert labels[inp["labels"][ti]] == tags[j]
    assert set().union(*[{j for j, ti in enumerate(inp["first"]) if ti >= 0} for inp in wins]) == set(range(len(text)))
    preds = builder.predict(m, inputs)
    assert [len(p) for p in preds] == [len(text), 2]
    # merge rule on fake per-window outputs: window w predicts tag id w for all its characters
    fake = [[k] * len(inp["first"]) for k, inp in enumerate(inputs)]
    merged = builder._merge_windows(inputs, fake)
    for j in range(len(text)):
        cands = [(min(inp["first"][j] - 1, inp["length"] - 2 - inp["first"][j]), k)
                 for k, inp in enumerate(wins) if inp["first"][j] >= 0]
        assert merged[0][j] == max(cands, key=lambda c: (c[0], -c[1]))[1]


# ---------------------------------------------------------------------- checkpoint options
def _bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _sst2(capsys, tiny, out, *extra):
    return cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", fx("glue", "SST-2", "train.tsv"),
               "--dev", fx("glue", "SST-2", "dev.tsv"), "--out", out, "--max-steps", "2", *FAST, *extra)


def test_lean_and_final_only_checkpoints(tiny, tmp_path, capsys):
    full, lean, final = tmp_path / "full", tmp_path / "lean", tmp_path / "final"
    assert _sst2(capsys, tiny, full, "--save-every", "1", "--keep-last", "3")[0] == 0
    assert _sst2(capsys, tiny, lean, "--save-every", "1", "--no-optimizer-state")[0] == 0
    assert sorted(os.listdir(full / "checkpoints")) == ["step-1", "step-2"]
    assert sorted(os.listdir(lean / "checkpoints")) == ["step-1", "step-2"]
    assert _bytes(lean / "checkpoints" / "step-2") * 2 < _bytes(full / "checkpoints" / "step-2")
    rc, _, err = _sst2(capsys, tiny, lean, "--resume")
    assert rc == 2 and "without optimizer state" in err and "cannot be resumed" in err, err
    rc, so, _ = _sst2(capsys, tiny, final, "--final-only")
    assert rc == 0 and "sst2: dev accuracy" in so
    assert not (final / "checkpoints").exists()
    assert (final / "model.safetensors").is_file() and (final / "best" / "model.safetensors").is_file()
    rc, _, err = _sst2(capsys, tiny, final, "--final-only", "--save-every", "1")
    assert rc == 2 and "--final-only" in err


def test_kbert_finetune_reports_injected_entities(tiny, tmp_path, capsys, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="bertfam.progress")
    kg = ",".join(os.path.join(FIXTURES, "kbert", f) for f in ("medical.spo", "hownet.spo"))
    rc, _, err = cli(capsys, "finetune", "--task", "medical_ner", "--model", tiny, "--kg", kg, "--train",
                     os.path.join(FIXTURES, "kbert", "medical_ner.tsv"), "--dev-ratio", "0.34", "--out",
                     tmp_path / "k", "--max-steps", "1", "--final-only", *FAST)
    assert rc == 0, err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("K-BERT ")]
    assert [m.split(":")[0] for m in lines] == ["K-BERT train", "K-BERT dev"], lines
    import re

    n = [int(x) for x in re.findall(r"(\d+) (?:sentences|with|entities injected)", lines[0])]
    assert n[0] == 2 and 1 <= n[1] <= n[0] and n[2] >= n[1], lines[0]


def test_freeze_layers_trains_only_the_top(tiny, tmp_path, capsys):
    """--freeze-layers 1: the embeddings and layer 0 come out exactly as they went in, layer 1 and the head
    are trained; more layers than the model has is one line, exit 2."""
    from bertfam import from_pretrained

    out = tmp_path / "frozen"
    train = fx("glue", "SST-2", "train.tsv")
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", train, "--out", out,
                     "--epochs", "1", "--freeze-layers", "1", "--final-only", *FAST)
    assert rc == 0, err
    before, after = from_pretrained(tiny).state_dict(), from_pretrained(str(out)).state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith(("backbone.encoder.layers.1.", "backbone.pooler.")) for k in moved)
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tiny, "--train", train,
                     "--out", tmp_path / "bad", "--freeze-layers", "3", *FAST)
    assert rc == 2 and "freeze_layers=3: the model has 2 distinct encoder layers" in err
