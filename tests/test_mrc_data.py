"""MRC readers (repair counts, per-record reports, several files) and windows with exact offsets."""
import json
import os

import pytest

from bertfam import DataError, Tokenizer
from bertfam.data.mrc import MRCAnswer, MRCExample, find_answer, read_many, read_mrc, split_examples, write_squad
from bertfam.data.mrc_windows import build_windows, collate_windows, label_span

from .conftest import FIXTURES, ZH_VOCAB

MRC = os.path.join(FIXTURES, "mrc")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_vocab(ZH_VOCAB)


def _write(tmp_path, obj, name="d.json"):
    p = tmp_path / name
    p.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return str(p)


# ------------------------------------------------------------------ readers
def test_fixtures_read_with_repair_counts():
    ex, rep = read_mrc(os.path.join(MRC, "robust_demo_dev_cut.json"))
    # DuReader-robust writes answer_start = -1: every answer is found by search, 3 occur twice or more
    assert (rep.kept, rep.answers_exact, rep.answers_repaired, rep.answers_ambiguous) == (6, 0, 9, 3)
    for e in ex:
        for a in e.answers:
            assert e.context[a.start:a.end] == a.text
    ex, rep = read_mrc(os.path.join(MRC, "checklist_demo_cut.json"))
    assert rep.kept == 8 and rep.unanswerable == 4 and rep.unlabelled == 0
    assert all(e.title for e in ex)  # DuReader: title on the paragraph
    assert {e.qtype for e in ex} == {"in-domain"}
    ex, _ = read_mrc(os.path.join(MRC, "cmrc2018_trial_cut.json"))
    assert ex[0].title == "泡泡战士"  # CMRC2018 / SQuAD: title on the document


def test_questions_to_predict_are_counted_as_unlabelled_not_only_unanswerable(tmp_path):
    """A file to predict has no answers: the summary says so, rather than calling its questions unanswerable."""
    p = tmp_path / "ask.json"
    p.write_text(json.dumps({"data": [{"paragraphs": [{"context": "北京是中国的首都。", "qas": [
        {"id": "a", "question": "中国的首都是哪里？"},
        {"id": "b", "question": "上海是首都吗？", "is_impossible": True},
        {"id": "c", "question": "首都？", "answers": []}]}]}]}), encoding="utf-8")
    _, rep = read_mrc(str(p), mode="predict")
    assert (rep.kept, rep.unanswerable, rep.unlabelled) == (3, 3, 1)
    assert "(3 unanswerable, 1 of them unlabelled: no answers given)" in rep.summary()
    assert rep.to_dict()["unlabelled"] == 1


def test_find_answer_nearest_occurrence():
    ctx = "北京。上海。北京。"
    assert find_answer(ctx, "北京", 6) == (6, "exact")
    assert find_answer(ctx, "北京", 5) == (6, "ambiguous")  # off by one -> nearest of two
    assert find_answer(ctx, "上海", 0) == (3, "repaired")
    assert find_answer(ctx, "广州", 0) == (None, "missing")
    assert find_answer(ctx, "上海", "3") == (3, "repaired")  # non-int start


def test_bad_records_reported_and_rest_kept(tmp_path):
    ctx = "华为于2020年发布Mate 40。"
    qas = [
        {"id": "ok", "question": "何时", "answers": [{"text": "2020年", "answer_start": 3}]},
        {"id": "off", "question": "何时", "answers": [{"text": "2020年", "answer_start": 5}]},
        {"id": "ok", "question": "dup", "answers": [{"text": "华为", "answer_start": 0}]},
        {"id": "empty_q", "question": "  ", "answers": [{"text": "华为", "answer_start": 0}]},
        {"question": "no id", "answers": []},
        {"id": "num", "question": "x", "answers": [{"text": 40, "answer_start": 0}]},
        {"id": "num2", "question": "x", "answers": [{"text": 40, "answer_start": 0}, {"text": "Mate 40",
                                                                                      "answer_start": 10}]},
        {"id": "gone", "question": "x", "answers": [{"text": "苹果", "answer_start": 0}]},
        {"id": "imp", "question": "x", "is_impossible": "yes", "answers": []},
        {"id": "noans", "question": "x", "is_impossible": True, "answers": [{"text": "", "answer_start": -1}]},
        "not an object",
    ]
    path = _write(tmp_path, {"data": [{"title": "doc", "paragraphs": [
        {"context": ctx, "qas": qas}, {"context": "", "qas": [{"id": "ep", "question": "q", "answers": []}]},
        {"qas": [{"id": "nc", "question": "q", "answers": []}]}]}]})
    ex, rep = read_mrc(path)
    assert [e.qid for e in ex] == ["ok", "off", "num2", "noans"]
    assert ex[1].answers[0].start == 3 and rep.answers_repaired == 1
    assert ex[2].answers == [MRCAnswer("Mate 40", 10)]
    assert ex[3].is_impossible and ex[0].title == "doc"
    assert rep.skipped == {"duplicate id": 1, "empty question": 1, "missing id": 1, "no usable answer": 2,
                           "bad is_impossible": 1, "bad record": 1, "empty passage": 1, "missing context": 1}
    assert rep.questions == 13 and rep.kept + sum(rep.skipped.values()) == rep.questions  # nothing silent
    assert rep.answers_dropped == 3  # two numbers, one not in the passage
    text = "\n".join(rep.problems)
    assert "(id ok): duplicate id" in text and "(id gone)" in text and "not found" in text
    assert "qas[5]" in text and "int" in text


def test_read_many_per_source_counts_and_unique_ids(tmp_path):
    a = _write(tmp_path, {"data": [{"paragraphs": [{"context": "甲乙", "qas": [
        {"id": "1", "question": "q", "answers": [{"text": "甲", "answer_start": 0}]}]}]}]}, "a.json")
    os.makedirs(tmp_path / "x")
    b = _write(tmp_path, {"data": [{"paragraphs": [{"context": "丙丁", "qas": [
        {"id": "1", "question": "q", "answers": [{"text": "丁", "answer_start": 1}]}]}]}]}, "x/a.json")
    ex, reps = read_many([a, b])
    assert [r.kept for r in reps] == [1, 1]
    assert len({e.qid for e in ex}) == 2 and reps[0].source != reps[1].source
    with pytest.raises(DataError):
        read_many([_write(tmp_path, {"data": []}, "empty.json")])


@pytest.mark.parametrize("content, msg", [(b"{", "line 1"), (b"\xff\xfe\x00", "UTF-8"), (b'"text"', "data"),
                                          (b'{"data": 3}', "data")])
def test_unreadable_files_raise_data_error(tmp_path, content, msg):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(DataError, match=msg):
        read_mrc(str(p))
    with pytest.raises(DataError, match="not found"):
        read_mrc(str(tmp_path / "missing.json"))


def test_split_keeps_passages_together_and_roundtrips(tmp_path):
    ex, _ = read_many([os.path.join(MRC, f) for f in sorted(os.listdir(MRC)) if f.endswith(".json")])
    train, dev = split_examples(ex, 0.3, seed=0)
    assert len(train) + len(dev) == len(ex) and dev
    assert not {e.context for e in train} & {e.context for e in dev}
    write_squad(dev, str(tmp_path / "dev.json"))
    back, rep = read_mrc(str(tmp_path / "dev.json"))
    assert [(e.qid, e.is_impossible, e.answer_texts) for e in back] == [(e.qid, e.is_impossible, e.answer_texts)
                                                                        for e in dev]


# ------------------------------------------------------------------ windows and offsets
PASSAGE = ("华为Mate 40 Pro于2020年10月22日发布，售价６９９９元（约 $1,049）。 它搭载麒麟9000芯片，"
           "采用5nm工艺。Hello World！  旧款iPhone 12则使用A14。") * 3


def test_offsets_point_into_the_original_passage(tok):
    ex = {"question": "华为Mate 40用什么芯片？", "context": PASSAGE, "title": "华为手机 评测"}
    wins = build_windows(tok, [ex], max_length=48, doc_stride=12)
    assert len(wins) > 3
    covered = set()
    for w in wins:
        toks = tok.convert_ids_to_tokens(w.input_ids)
        for t, o in zip(toks, w.offsets):
            if o is None:
                continue
            piece = PASSAGE[o[0]:o[1]]
            assert piece.lower() == t.replace("##", "") or t == "[UNK]", (t, piece)
            covered.update(range(*o))
        # every window starts its second segment with the title, which never gets passage offsets
        seg2 = [t for t, ty in zip(toks, w.token_type_ids) if ty == 1]
        assert seg2[:4] == ["华", "为", "手", "机"]
    assert covered == {i for i, ch in enumerate(PASSAGE) if not ch.isspace()}  # every character in some window


@pytest.mark.parametrize("answer", ["６９９９元", "Mate 40 Pro", "2020年10月22日", "$1,049", "麒麟9000芯片",
                                    "Hello World", "iPhone 12", "（约 $1,049）"])
def test_answer_recovered_exactly_from_offsets(tok, answer):
    start = PASSAGE.index(answer, len(PASSAGE) // 3)  # the second copy: not in the first window
    ex = MRCExample("q", "问题", PASSAGE, "标题", [MRCAnswer(answer, start)])
    wins = build_windows(tok, [ex], max_length=64, doc_stride=16, with_labels=True)
    hits = [w for w in wins if w.answerable]
    assert hits, "some window must hold the answer"
    for w in hits:
        a, b = w.offsets[w.start_position][0], w.offsets[w.end_position][1]
        assert PASSAGE[a:b] == answer
    assert not wins[0].answerable  # windows without the answer are labelled 0/0 ([CLS])


def test_no_title_flag_and_label_span_edges(tok):
    ex = {"question": "q", "context": "甲乙丙", "title": "标题"}
    with_t = build_windows(tok, [ex], 32, 8)[0]
    without = build_windows(tok, [ex], 32, 8, use_title=False)[0]
    assert len(with_t.input_ids) == len(without.input_ids) + 2
    assert [o for o in with_t.offsets if o] == [o for o in without.offsets if o] == [(0, 1), (1, 2), (2, 3)]
    offs = [None, (0, 1), (1, 2), (2, 3), None]
    assert label_span(offs, 1, 3) == (2, 3)
    assert label_span(offs, 2, 4) == (0, 0)  # runs past the window
    wins = build_windows(tok, [ex, {"question": "长问题长问题", "context": "甲"}], 32, 8)
    lens = [len(w.input_ids) for w in wins]
    assert len(wins) == 2 and lens[0] != lens[1]  # so one of the two rows needs padding
    batch = collate_windows(wins, pad_id=0)
    assert batch["input_ids"].shape == (2, max(lens))  # padded to the longer window
    assert batch["attention_mask"].sum(1).tolist() == lens  # the padding is masked out, nothing else
    short = lens.index(min(lens))
    assert batch["input_ids"][short, min(lens):].eq(0).all()  # and holds pad_id
    assert batch["start_positions"].tolist() == [0, 0]


def test_long_question_is_truncated_not_fatal(tok):
    wins = build_windows(tok, [{"question": "很" * 300, "context": "甲乙丙丁" * 50}], max_length=96, doc_stride=32,
                         max_query_length=16)
    assert all(len(w.input_ids) <= 96 for w in wins)
    assert sum(1 for t in wins[0].token_type_ids if t == 0) == 16 + 2  # [CLS] 16 question tokens [SEP]


def test_spans_progress_when_words_are_longer_than_a_window():
    from bertfam.data.mrc_windows import _spans

    # a SentencePiece "word" is a whole space-free run of Chinese text: 300 tokens of one word
    spans = list(_spans([0] * 300, 300, 90, 32))
    assert spans[0] == (0, 90) and spans[-1][1] == 300
    assert all(b - a <= 90 for a, b in spans) and len(spans) <= 5
    assert all(s2[0] - s1[0] >= 58 - 1 for s1, s2 in zip(spans, spans[1:]))  # step = room - stride
    # short words: cuts move back to a word start, overlap never below zero
    words = [i // 3 for i in range(100)]
    spans = list(_spans(words, 100, 20, 5))
    assert all(words[a] != words[a - 1] for a, _ in spans[1:]) and spans[-1][1] == 100
    assert all(s2[0] <= s1[1] for s1, s2 in zip(spans, spans[1:]))
