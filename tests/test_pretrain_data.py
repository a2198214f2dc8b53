"""Corpus reading, instance builders (NSP / SOP / FULL-SENTENCES), collators, the memmap cache."""
import os

import numpy as np
import pytest
import torch

from bertfam import DataError
from bertfam.data.corpus import CorpusStats, iter_documents, split_sentences
from bertfam.data.instance_cache import InstanceCache, write_cache
from bertfam.objectives import IGNORE, InstanceBuilder, Masker, MaskingConfig, PretrainCollator, mask_static

from .conftest import FIXTURES

CORPUS = os.path.join(FIXTURES, "pretrain", "zh_small.txt")
CLS, SEP, MASK = 2, 3, 4


def _docs(n_docs=40, seed=0):
    """Synthetic tokenized documents; token ids encode (doc, sentence): id = 100 + 1000*doc + 10*sent."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        doc = []
        for s in range(int(rng.integers(3, 9))):
            n = int(rng.integers(4, 15))
            doc.append((np.full(n, 100 + 1000 * d + 10 * s, np.int32), np.ones(n, np.uint8)))
        docs.append(doc)
    return docs


def _origin(tok):
    return (int(tok) - 100) // 1000, (int(tok) - 100) % 1000 // 10


def _segments(ex):
    ids = ex["input_ids"]
    a = ids[1:ex["a_len"] - 1]
    b = ids[ex["a_len"]:-1]
    return a, b


# ------------------------------------------------------------------ corpus
def test_split_sentences_zh_en():
    assert split_sentences("今天天气很好。我们去公园吧！你去吗？“好啊。”他说") == \
        ["今天天气很好。", "我们去公园吧！", "你去吗？", "“好啊。”", "他说"]
    assert split_sentences("It costs 3.5 dollars. Really? Yes!") == ["It costs 3.5 dollars.", "Really?", "Yes!"]


def test_google_layout_and_jsonl(tmp_path):
    docs = list(iter_documents([CORPUS]))
    assert len(docs) == 15
    assert docs[0][0] == "张三在北京大学读书。" and len(docs[0]) == 3
    j = tmp_path / "c.jsonl"
    j.write_text('{"text": "第一句。第二句！"}\n\n{"text": "Another doc. Two sentences."}\n', encoding="utf-8")
    assert list(iter_documents([str(j)])) == [["第一句。", "第二句！"], ["Another doc.", "Two sentences."]]


def test_non_utf8_line_reported_and_skipped(tmp_path, caplog):
    p = tmp_path / "bad.txt"
    p.write_bytes("好的开始。\n".encode() + b"\xff\xfe broken \xc3\x28\n" + "第三行。\n\n下一篇。\n".encode())
    stats = CorpusStats()
    docs = list(iter_documents([str(p)], stats))
    assert docs == [["好的开始。", "第三行。"], ["下一篇。"]]
    assert stats.bad_lines == 1
    assert stats.problems and stats.problems[0].startswith(f"{p}:2: not UTF-8")
    assert f"{p}:2" in caplog.text
    j = tmp_path / "bad.jsonl"
    j.write_text('{"text": "好。"}\n{not json\n{"title": "x"}\n', encoding="utf-8")
    stats = CorpusStats()
    assert list(iter_documents([str(j)], stats)) == [["好。"]]
    assert stats.bad_lines == 2 and "bad.jsonl:2" in stats.problems[0] and "bad.jsonl:3" in stats.problems[1]


def test_long_line_truncated_with_warning(tmp_path, caplog):
    p = tmp_path / "long.txt"
    p.write_text("长" * 500 + "。\n", encoding="utf-8")
    stats = CorpusStats()
    docs = list(iter_documents([str(p)], stats, max_line_chars=100))
    assert docs == [["长" * 100]] and stats.truncated_lines == 1
    assert "truncated to 100" in caplog.text


def test_missing_and_empty_corpus(tmp_path):
    with pytest.raises(DataError, match="nope.txt: corpus file not found"):
        list(iter_documents([str(tmp_path / "nope.txt")]))
    from bertfam import Tokenizer
    from bertfam.objectives import DataConfig, build_instances

    from .conftest import ZH_VOCAB

    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(DataError, match="no usable text"):
        build_instances(DataConfig(corpus=[str(empty)]), Tokenizer.from_vocab(ZH_VOCAB))


# ------------------------------------------------------------------ builders
def test_nsp_balance_and_segments():
    b = InstanceBuilder("nsp", 64, CLS, SEP, short_seq_prob=0.1)
    rng = np.random.default_rng(1)
    inst = [ex for _ in range(5) for ex in b.build(_docs(seed=_), rng)]
    labels = np.array([ex["pair_label"] for ex in inst])
    assert len(inst) > 300 and abs(labels.mean() - 0.5) < 0.07
    for ex in inst:
        assert len(ex["input_ids"]) <= 64 and ex["input_ids"][0] == CLS and ex["input_ids"][-1] == SEP
        a, bb = _segments(ex)
        assert len(a) and len(bb) and ex["input_ids"][ex["a_len"] - 1] == SEP
        da, db = {_origin(t)[0] for t in a}, {_origin(t)[0] for t in bb}
        if ex["pair_label"] == 0:  # true next: same document, B right after A
            assert da == db and len(da) == 1
            assert _origin(a[-1])[1] <= _origin(bb[0])[1]  # (equal: one sentence cut in two)
        else:
            assert da.isdisjoint(db)  # random next comes from another document


def test_sop_balance_and_order():
    b = InstanceBuilder("sop", 64, CLS, SEP)
    rng = np.random.default_rng(2)
    inst = [ex for _ in range(5) for ex in b.build(_docs(seed=_), rng)]
    labels = np.array([ex["pair_label"] for ex in inst])
    assert abs(labels.mean() - 0.5) < 0.07
    for ex in inst:
        a, bb = _segments(ex)
        assert {_origin(t)[0] for t in a} == {_origin(t)[0] for t in bb}  # always one document
        first_a, first_b = _origin(a[0])[1], _origin(bb[0])[1]
        assert (first_a <= first_b) if ex["pair_label"] == 0 else (first_a >= first_b)


def test_full_sentences_packing_crosses_documents():
    docs = _docs(30)
    b = InstanceBuilder("none", 48, CLS, SEP)
    inst = b.build(docs, np.random.default_rng(0))
    lengths = [len(ex["input_ids"]) for ex in inst]
    assert max(lengths) <= 48
    assert all(n >= 48 - 15 for n in lengths[:-1])  # filled up to the longest sentence that did not fit
    assert np.mean(lengths[:-1]) > 0.85 * 48
    crossing = 0
    body = []
    for ex in inst:
        ids = ex["input_ids"][1:-1]
        assert ex["pair_label"] == -1 and ex["a_len"] == 0
        inner_sep = np.flatnonzero(ids == SEP)
        for k in inner_sep:  # a separator sits exactly at a document boundary
            assert _origin(ids[k - 1])[0] + 1 == _origin(ids[k + 1])[0]
        crossing += len({_origin(t)[0] for t in ids if t != SEP}) > 1
        body += [t for t in ids if t != SEP]
    assert crossing >= len(inst) // 3  # documents average ~1.2 sequences here
    expected = [int(t) for d in docs for s in d for t in s[0]]
    assert body == expected  # every token used once, in corpus order


# ------------------------------------------------------------------ collators
def _masker():
    return Masker(MaskingConfig("token"), 2000, MASK, [0, 1, 2, 3, 4])


def test_dynamic_masking_differs_across_epochs_static_is_fixed():
    inst = InstanceBuilder("nsp", 64, CLS, SEP).build(_docs(), np.random.default_rng(0))[:16]
    coll = PretrainCollator(_masker(), 0, pair=True)
    torch.manual_seed(0)
    e1, e2 = coll(inst), coll(inst)  # the same instances in two epochs
    assert not torch.equal(e1["labels"], e2["labels"])
    torch.manual_seed(0)
    assert torch.equal(coll(inst)["labels"], e1["labels"])  # reproducible from torch's (checkpointed) RNG
    static = mask_static(inst, _masker(), seed=5)
    s1, s2 = coll(static), coll(static)
    assert torch.equal(s1["labels"], s2["labels"]) and torch.equal(s1["input_ids"], s2["input_ids"])
    b = s1
    assert b["input_ids"].shape == b["labels"].shape == b["token_type_ids"].shape
    assert torch.equal(b["masked_positions"], b["labels"].ne(IGNORE))
    assert b["pair_labels"].tolist() == [ex["pair_label"] for ex in inst]
    i = 0  # token types: 0 up to and including the first [SEP], 1 after it
    n, a = len(inst[i]["input_ids"]), inst[i]["a_len"]
    assert b["token_type_ids"][i, :a].eq(0).all() and b["token_type_ids"][i, a:n].eq(1).all()
    assert b["attention_mask"][i, :n].eq(1).all() and b["attention_mask"][i, n:].eq(0).all()


def test_memmap_cache_round_trip(tmp_path):
    inst = InstanceBuilder("sop", 64, CLS, SEP).build(_docs(), np.random.default_rng(0))
    static = mask_static(inst, _masker(), seed=1)
    items = [("train", ex) for ex in static[:-5]] + [("eval", ex) for ex in static[-5:]]
    meta = write_cache(str(tmp_path / "cache"), iter(items), {"pair": "sop"}, static=True)
    assert meta["counts"] == {"train": len(static) - 5, "eval": 5}
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary left
    c = InstanceCache(str(tmp_path / "cache"), "train")
    assert isinstance(c.arrays["tokens"], np.memmap) and len(c) == len(static) - 5
    for i in (0, 7, len(c) - 1):
        got, want = c[i], static[i]
        for k in ("input_ids", "labels", "flags"):
            assert np.array_equal(got[k], want[k]), k
        assert got["a_len"] == want["a_len"] and got["pair_label"] == want["pair_label"]
    ev = InstanceCache(str(tmp_path / "cache"), "eval")
    assert np.array_equal(ev[4]["input_ids"], static[-1]["input_ids"])
