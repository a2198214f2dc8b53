"""Readers for GLUE / CLUE / NER / K-BERT files: real fixture cuts, bad rows, fuzzing."""
import json
import logging
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from bertfam.data.clue import read_clue, read_kbert_tsv
from bertfam.data.glue import find_task_files, read_glue
from bertfam.data.labelled import read_jsonl, read_tsv
from bertfam.data.ner import read_char_tags, read_cluener, read_kbert_ner, read_ner
from bertfam.errors import DataError

from .conftest import FIXTURES

FT = os.path.join(FIXTURES, "finetune")


def fx(*p):
    return os.path.join(FT, *p)


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return str(p)


# ------------------------------------------------------------------ GLUE
def test_glue_layouts():
    sst = read_glue("sst2", fx("glue", "SST-2", "train.tsv"))
    assert len(sst) == 48 and {e.label for e in sst} <= {"0", "1"} and all(e.text_b is None for e in sst)
    test = read_glue("sst2", fx("glue", "SST-2", "test.tsv"))
    assert len(test) == 8 and all(e.label is None for e in test) and all(e.guid.isdigit() for e in test)
    cola = read_glue("cola", fx("glue", "CoLA", "train.tsv"))  # no header: 4 columns
    assert len(cola) == 24 and cola[0].text_a[0].isupper() and cola[0].label in ("0", "1")
    cola_test = read_glue("cola", fx("glue", "CoLA", "test.tsv"))  # header `index sentence`
    assert len(cola_test) == 6 and cola_test[0].label is None
    sts = read_glue("stsb", fx("glue", "STS-B", "train.tsv"))
    assert all(isinstance(e.label, float) and 0 <= e.label <= 5 for e in sts) and all(e.text_b for e in sts)
    mrpc = read_glue("mrpc", fx("glue", "MRPC", "msr_paraphrase_train.txt"))  # original MSR file, with BOM
    assert len(mrpc) == 16 and all(e.text_b for e in mrpc)
    rte = read_glue("rte", fx("glue", "RTE", "train.tsv"))
    assert {e.label for e in rte} <= {"entailment", "not_entailment"}


def test_glue_mnli_matched_mismatched_and_qqp(tmp_path):
    cols = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
            "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "gold_label"]
    row = ["0", "1", "1e", "fiction", "(x)", "(y)", "(X)", "(Y)", "A man sleeps.", "A person rests.", "entailment",
           "entailment"]
    d = tmp_path / "MNLI"
    d.mkdir()
    (d / "train.tsv").write_text("\t".join(cols) + "\n" + "\t".join(row) + "\n")
    (d / "dev_matched.tsv").write_text("\t".join(cols) + "\n" + "\t".join(row) + "\n")
    (d / "dev_mismatched.tsv").write_text("\t".join(cols) + "\n" + "\t".join(row[:-1] + ["neutral"]) + "\n")
    assert find_task_files(str(tmp_path), "mnli")["dev"].endswith("dev_matched.tsv")
    mm = find_task_files(str(tmp_path), "mnli-mm")["dev"]
    assert mm.endswith("dev_mismatched.tsv") and read_glue("mnli-mm", mm)[0].label == "neutral"
    q = write(tmp_path, "qqp.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\tHow?\tWhy?\t0\n")
    ex = read_glue("qqp", q)[0]
    assert (ex.text_a, ex.text_b, ex.label) == ("How?", "Why?", "0")


def test_glue_bad_rows_reported_with_file_and_line(tmp_path, caplog):
    rows = "sentence\tlabel\ngood one\t1\nthree\tcols\t1\n\t0\nfine\tmaybe\nok again\t0\n"
    p = write(tmp_path, "sst.tsv", rows)
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        ex = read_glue("sst2", p)
    assert [e.text_a for e in ex] == ["good one", "ok again"]
    text = caplog.text
    assert f"{p}:3: wrong column count" in text and f"{p}:4: empty text" in text and f"{p}:5: unknown label" in text
    assert "3 rows skipped" in text


def test_bom_and_crlf_read_like_clean_files(tmp_path):
    clean = "sentence\tlabel\na fine film\t1\na dull film\t0\n"
    p1 = write(tmp_path, "a.tsv", clean)
    p2 = write(tmp_path, "b.tsv", b"\xef\xbb\xbf" + clean.replace("\n", "\r\n").encode())
    a, b = read_glue("sst2", p1), read_glue("sst2", p2)
    assert [(e.text_a, e.label) for e in a] == [(e.text_a, e.label) for e in b]


def test_nothing_usable_is_a_clear_error(tmp_path):
    p = write(tmp_path, "x.tsv", "sentence\tlabel\n\t1\nabc\t7\n")
    with pytest.raises(DataError, match=r"x\.tsv: no usable example \(1 empty text, 1 unknown label\)"):
        read_glue("sst2", p)
    with pytest.raises(DataError, match="file not found"):
        read_glue("sst2", str(tmp_path / "missing.tsv"))
    with pytest.raises(DataError, match="no column 'label'"):
        read_tsv(write(tmp_path, "y.tsv", "a\tb\n1\t2\n"), ["a"], "label", require_label=True)


# ------------------------------------------------------------------ CLUE / K-BERT
def test_clue_tasks():
    tn = read_clue("tnews", fx("clue", "tnews.json"))
    assert len(tn) == 30 and all(e.label.startswith("1") and len(e.label) == 3 for e in tn)
    oc = read_clue("ocnli", fx("clue", "ocnli.json"))
    assert all(e.text_b and e.label in ("entailment", "neutral", "contradiction") for e in oc)
    csl = read_clue("csl", fx("clue", "csl.json"))
    with open(fx("clue", "csl.json"), encoding="utf-8") as f:
        raw = [json.loads(line) for line in f if line.strip()]
    assert [e.text_a for e in csl] == ["；".join(r["keyword"]) for r in raw]  # the keyword list, joined
    assert [e.text_b for e in csl] == [r["abst"] for r in raw] and all(len(e.text_b) > 20 for e in csl)
    for f in ("cluewsc_train.json", "cluewsc_dev.json"):  # target as repr string / as object
        wsc = read_clue("cluewsc", fx("clue", f))
        assert len(wsc) == 6 and all("[" in e.text_a and "<" in e.text_a for e in wsc)
    ep = read_clue("eprstmt", fx("clue", "eprstmt.json"))
    assert {e.label for e in ep} <= {"Positive", "Negative"}
    kb = read_kbert_tsv(fx("kbert", "chnsenticorp.tsv"))
    assert len(kb) == 16 and {e.label for e in kb} <= {"0", "1"}


def test_clue_bad_rows(tmp_path, caplog):
    lines = [{"sentence": "好", "label": "101"}, "{not json", {"sentence": "", "label": "101"},
             {"sentence": "坏", "label": "999"}, [1, 2], {"sentence": "又好", "label": 102}]
    p = write(tmp_path, "t.json", "\n".join(l if isinstance(l, str) else json.dumps(l) for l in lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        ex = read_clue("tnews", p)
    assert [(e.text_a, e.label) for e in ex] == [("好", "101"), ("又好", "102")]
    assert f"{p}:2: bad JSON" in caplog.text and f"{p}:4: unknown label" in caplog.text
    wsc = write(tmp_path, "w.json", json.dumps({"text": "他来了", "label": "true", "target": {
        "span1_index": 0, "span1_text": "她", "span2_index": 0, "span2_text": "他"}}) + "\n")
    with pytest.raises(DataError, match="1 bad target"):
        read_clue("cluewsc", wsc)


def test_custom_jsonl_and_tsv(tmp_path):
    p = write(tmp_path, "c.jsonl", '{"q": "a", "d": "b", "y": "yes"}\n{"q": "c", "d": "d", "y": "no"}\n')
    ex = read_jsonl(p, ["q", "d"], "y", labels=["no", "yes"])
    assert [(e.text_a, e.text_b, e.label) for e in ex] == [("a", "b", "yes"), ("c", "d", "no")]
    t = write(tmp_path, "c.tsv", "x\t1\t0.5\ny\t0\t2\n")
    ex = read_tsv(t, ["0"], "2", header=False, regression=True)
    assert [e.label for e in ex] == [0.5, 2.0]


# ------------------------------------------------------------------ NER
def test_cluener_spans_end_inclusive():
    ex = read_cluener(fx("ner", "cluener_train.json"))
    assert len(ex) == 40
    for e in ex:
        assert len(e.tokens) == len(e.tags)
    dev = read_cluener(fx("ner", "cluener_dev.json"))  # pretty-printed objects back to back, as shipped
    assert len(dev) == 12
    test = read_cluener(fx("ner", "cluener_test.json"))
    assert all(e.tags is None for e in test)


def test_cluener_entity_round_trip(tmp_path):
    line = {"text": "浙商银行叶老桂", "label": {"company": {"浙商银行": [[0, 3]]}, "name": {"叶老桂": [[4, 6]]}}}
    e = read_cluener(write(tmp_path, "n.json", json.dumps(line, ensure_ascii=False) + "\n"))[0]
    assert e.tags == ["B-company", "I-company", "I-company", "I-company", "B-name", "I-name", "I-name"]


def test_cluener_bad_spans(tmp_path, caplog):
    rows = [{"text": "浙商银行", "label": {"company": {"浙商银行": [[0, 4]]}}},  # past the end
            {"text": "浙商银行", "label": {"company": {"浙商": [[1, 2]]}}},  # text mismatch
            {"text": "浙商银行", "label": {"company": {"浙商": [[0, 1]]}, "org": {"商银": [[1, 2]]}}},  # overlap
            {"text": "浙商银行", "label": {"company": {"浙商银行": [[0, 3]]}}}]
    p = write(tmp_path, "b.json", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        ex = read_cluener(p)
    assert len(ex) == 1 and "3 bad span" in caplog.text and f"{p}:2: bad span" in caplog.text


def test_char_tag_files():
    msra = read_char_tags(fx("ner", "msra.bio"))
    assert len(msra) == 12 and all(len(e.tokens) == len(e.tags) for e in msra)
    res = read_char_tags(fx("ner", "resume.bmes"))
    assert len(res) == 8 and any(t.startswith("M-") for e in res for t in e.tags)
    med = read_kbert_ner(fx("kbert", "medical_ner.tsv"))
    assert len(med) == 8 and all(len(e.tokens) == len(e.tags) for e in med)
    assert read_ner(fx("ner", "msra.bio"))[0].tokens == msra[0].tokens  # format detection


def test_char_tag_bad_sentences(tmp_path, caplog):
    data = "中 B-LOC\r\n国 I-LOC\r\n\r\n坏 O extra\r\n句 O\r\n\r\n好 O\r\n的 X-\r\n\r\n人 O\r\n"
    p = write(tmp_path, "s.bio", data)
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        ex = read_char_tags(p)
    assert [e.tokens for e in ex] == [["中", "国"], ["人"]]
    assert f"{p}:4: wrong column count" in caplog.text and f"{p}:8: unknown label" in caplog.text


def test_kbert_ner_mismatched_counts(tmp_path, caplog):
    p = write(tmp_path, "m.tsv", "text_a\tlabel\n头 痛\tB-Symptom I-Symptom\n发 热 了\tO O\n\tO\n")
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        ex = read_kbert_ner(p)
    assert len(ex) == 1 and f"{p}:3: token/tag count mismatch: 3 tokens, 2 tags" in caplog.text
    with pytest.raises(DataError, match="no usable example"):
        read_kbert_ner(write(tmp_path, "m2.tsv", "text_a\tlabel\n发 热\tO\n"))


# ------------------------------------------------------------------ fuzzing
READERS = [
    (lambda p: read_glue("sst2", p), fx("glue", "SST-2", "train.tsv")),
    (lambda p: read_glue("cola", p), fx("glue", "CoLA", "train.tsv")),
    (lambda p: read_glue("stsb", p), fx("glue", "STS-B", "train.tsv")),
    (lambda p: read_glue("mrpc", p), fx("glue", "MRPC", "msr_paraphrase_train.txt")),
    (lambda p: read_clue("tnews", p), fx("clue", "tnews.json")),
    (lambda p: read_clue("cluewsc", p), fx("clue", "cluewsc_train.json")),
    (lambda p: read_clue("csl", p), fx("clue", "csl.json")),
    (read_cluener, fx("ner", "cluener_train.json")),
    (read_cluener, fx("ner", "cluener_dev.json")),
    (read_char_tags, fx("ner", "resume.bmes")),
    (read_kbert_ner, fx("kbert", "medical_ner.tsv")),
    (read_kbert_tsv, fx("kbert", "chnsenticorp.tsv")),
    (read_ner, fx("ner", "msra.bio")),
]
NASTY = [b"\t", b"\n", b"\r\n", b"{", b"}", b"[", b"]", b'"', b"\xef\xbb\xbf", b"\xff", b"\x00", b" ", b"-1",
         b"B-", b"[[0, 99]]", b"\xe4\xb8", b"1e999", b"NaN", b"null"]


def mutate(data: bytes, rnd: random.Random, n: int) -> bytes:
    b = bytearray(data)
    for _ in range(n):
        op, i = rnd.randrange(4), rnd.randrange(len(b) + 1)
        if op == 0 and b:  # delete a run
            del b[i:i + rnd.randrange(1, 20)]
        elif op == 1:  # insert a nasty token
            b[i:i] = rnd.choice(NASTY)
        elif op == 2 and b:  # flip a byte
            b[min(i, len(b) - 1)] = rnd.randrange(256)
        else:  # duplicate a chunk
            b[i:i] = b[i:i + rnd.randrange(1, 50)]
    return bytes(b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, len(READERS) - 1), seed=st.integers(0, 2 ** 32 - 1), n=st.integers(1, 30))
def test_fuzz_readers_only_raise_data_error(tmp_path, which, seed, n):
    reader, src = READERS[which]
    with open(src, "rb") as f:
        data = mutate(f.read(), random.Random(seed), n)
    p = tmp_path / ("fuzz" + os.path.splitext(src)[1])
    p.write_bytes(data)
    log = logging.getLogger("bertfam")
    level = log.level
    log.setLevel(logging.ERROR)  # thousands of skipped-row warnings are expected here
    try:
        ex = reader(str(p))
    except DataError:
        return
    finally:
        log.setLevel(level)
    assert ex and all(e.text for e in ex)
    for e in ex:
        if e.tags is not None:
            assert len(e.tags) == len(e.tokens)
