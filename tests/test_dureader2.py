"""DuReader 2.0 reader (segmented word spans -> character offsets, same-search negatives, other selected
documents), hard-negative mining, long-answer decoding and the tuned decoding settings."""
import dataclasses
import os

import numpy as np
import pytest

from bertfam import HeadConfig, Tokenizer, build_model, preset
from bertfam.config import MRCSettings
from bertfam.data.dureader2 import (align_words, answer_overlap, best_f1_span, find_squeezed, read_dureader2,
                                    word_span_to_chars)
from bertfam.data.mrc import MRCAnswer, MRCExample
from bertfam.data.mrc_windows import Window
from bertfam.data.mrc_negatives import (answer_removed_negative, answer_sentence_example, copula_swapped_example,
                                        definition_question_examples,
                                        sentences, similar_passage_negatives)
from bertfam.errors import DataError
from bertfam.tasks.mrc import MRCPredictor, RawScores, SpanCandidate, decode, settings_of, tune_on_raw

from .conftest import FIXTURES, ZH_VOCAB

CUT = os.path.join(FIXTURES, "mrc", "dureader2_search_train_cut.jsonl")


# ------------------------------------------------------------------ word spans -> characters
def test_align_words_skips_whitespace_between_words():
    text = "select to_date( '2005' ) 原因是:大小写"
    words = ["select", "to_date", "(", "'", "2005", "'", ")", "原因", "是", ":", "大小写"]
    offs = align_words(text, words)
    assert [text[a:b] for a, b in offs] == words
    assert word_span_to_chars(text, words, 7, 8) == (text.index("原因"), text.index("原因") + 3)
    assert align_words("一、在使用", ["在", "使用"]) is None  # other characters than whitespace: no alignment
    assert word_span_to_chars(text, words, 3, 99) is None


def test_find_squeezed_allows_whitespace_inside_the_answer():
    text = "一、如:select to_date( '2005-01-01 13:14:20 ') from dual;"
    a, b = find_squeezed(text, "selectto_date('2005-01-0113:14:20')")
    assert text[a:b] == "select to_date( '2005-01-01 13:14:20 ')"
    assert find_squeezed(text, "不在文中") is None and find_squeezed(text, "  ") is None


def test_best_f1_span_finds_the_answer_words():
    words = list("今天天气很好我们去公园玩吧")
    f1, s, e = best_f1_span(words, [list("我们去公园")])
    assert (f1, "".join(words[s:e + 1])) == (1.0, "我们去公园")
    f1, s, e = best_f1_span(words, [list("去公园散步")])
    assert "".join(words[s:e + 1]) == "去公园" and f1 == pytest.approx(2 * 3 / (3 + 5))


def test_reader_on_real_records():
    ex, rep = read_dureader2(CUT)
    # 6 lines: 4 with an answer document, one without (test-split style), one truncated JSON line
    assert (rep.questions, rep.kept) == (6, 4)
    assert rep.skipped == {"bad JSON": 1, "no answer document": 1}
    assert any("line 4" in p and "not valid JSON" in p for p in rep.problems)
    pos = [e for e in ex if not e.is_impossible]
    assert len(pos) == 4 and rep.answers_exact + rep.answers_repaired == 4 and rep.answers_repaired == 2
    import json
    recs = {str(r["question_id"]): r for r in (json.loads(line) for line in open(CUT, encoding="utf-8")
                                                 if line.strip().endswith("}"))}
    for e in pos:
        a = e.answers[0]
        assert e.context[a.start:a.end] == a.text  # character offsets into the raw paragraph
        fake = recs[e.qid.split(":")[0]]["fake_answers"][0]
        assert "".join(a.text.split()) == "".join(fake.split())  # the segmented span, whitespace aside
        assert e.title  # the document's title, as the checklist gives it
    # the one whose segmentation dropped a list number ("1、") is found in the raw text, not dropped
    hard = next(e for e in pos if e.qid.startswith("91170"))
    assert hard.answers[0].text.startswith("1、移动硬盘")
    neg = [e for e in ex if e.is_impossible]
    assert len(neg) == rep.unanswerable == 6
    for e in neg:
        q = recs[e.qid.split(":")[0]]
        k = int(e.qid.split(":neg")[1])
        assert not q["documents"][k]["is_selected"] and k not in q["answer_docs"]
        assert answer_overlap(e.context, q["answers"] + q["fake_answers"]) < 0.3
        assert not e.answers


def test_reader_other_selected_documents_and_overlap_filter():
    base, _ = read_dureader2(CUT)
    more, rep = read_dureader2(CUT, other_selected_min_f1=0.7)
    extra = [e for e in more if e.qid not in {b.qid for b in base}]
    assert len(extra) == 4 and all(not e.is_impossible for e in extra)
    for e in extra:
        assert e.context[e.answers[0].start:e.answers[0].end] == e.answers[0].text
    strict, _ = read_dureader2(CUT, max_answer_overlap=0.05)
    assert sum(e.is_impossible for e in strict) < sum(e.is_impossible for e in base)
    none, _ = read_dureader2(CUT, negatives=False)
    assert not any(e.is_impossible for e in none)


def test_reader_errors(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        read_dureader2(str(tmp_path / "missing.json"))
    p = tmp_path / "gbk.json"
    p.write_bytes("问题".encode("gbk"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_dureader2(str(p))
    p = tmp_path / "odd.json"
    p.write_text('{"question_id": 1, "question": "q", "documents": 5, "answer_docs": [0]}\n[1, 2]\n',
                 encoding="utf-8")
    ex, rep = read_dureader2(str(p))
    assert ex == [] and sum(rep.skipped.values()) == 2  # both reported and counted, no traceback


# ------------------------------------------------------------------ negatives
def _ex(qid, q, ctx, ans):
    return MRCExample(qid, q, ctx, title=f"{qid} title", answers=[MRCAnswer(ans, ctx.index(ans))])


def test_similar_passage_negatives_pick_same_topic_passages_without_the_answer():
    exs = [_ex("a", "番石榴汁的热量是多少", "一个番石榴所含的热量约84卡路里。", "84卡路里"),
           _ex("b", "番石榴有什么功效", "番石榴汁热量低,番石榴性温,有收敛的功效。", "收敛"),
           _ex("c", "北京到上海多远", "北京到上海约1200公里。", "1200公里"),
           _ex("d", "上海有多少人口", "上海人口约2400万,北京到上海的高铁很快。", "2400万")]
    neg = {n.qid.split(":")[0]: n for n in similar_passage_negatives(exs)}
    assert set(neg) == {"a", "b", "c", "d"}
    assert neg["a"].context == exs[1].context and neg["a"].title == "b title"  # same topic, other question
    assert neg["c"].context == exs[3].context
    for n in neg.values():
        assert n.is_impossible and not n.answers and n.qid.endswith(":sim0")
    # a passage that contains the question's answer is never its negative
    exs.append(_ex("e", "番石榴汁热量", "番石榴汁热量:84卡路里左右。", "84卡路里"))
    neg = {n.qid.split(":")[0]: n for n in similar_passage_negatives(exs)}
    assert "84卡路里" not in neg["a"].context and "84卡路里" not in neg["e"].context
    two = similar_passage_negatives(exs, per_question=2)
    assert len(two) == 2 * len(exs) and len({(n.qid, n.context) for n in two}) == len(two)


def test_answer_removed_negative_cuts_the_answer_sentences():
    ctx = "番石榴性温,味甜。一个番石榴所含的脂肪约0.9克重或84卡路里。平时容易上火的人要少吃!"
    assert [ctx[a:b] for a, b in sentences(ctx)] == ["番石榴性温,味甜。", "一个番石榴所含的脂肪约0.9克重或84卡路里。",
                                                      "平时容易上火的人要少吃!"]
    ex = _ex("a", "番石榴汁热量", ctx, "84卡路里")
    n = answer_removed_negative(ex, min_chars=10)
    assert n.context == "番石榴性温,味甜。平时容易上火的人要少吃!" and n.is_impossible and not n.answers
    assert answer_removed_negative(ex, min_chars=40) is None  # too little left
    twice = _ex("b", "q", "84卡路里。番石榴性温,味甜,平时容易上火的人要少吃,84卡路里", "84卡路里")
    assert answer_removed_negative(twice, min_chars=5) is None  # the answer text is still there


def test_answer_sentence_example_keeps_the_answer_sentence_only():
    ctx = "番石榴性温,味甜。\n一个番石榴所含的脂肪约0.9克重或84卡路里。平时容易上火的人要少吃!"
    ex = _ex("a", "番石榴汁热量", ctx, "84卡路里")
    s = answer_sentence_example(ex)
    assert s.context == "一个番石榴所含的脂肪约0.9克重或84卡路里。"  # the line break before it is not kept
    a = s.answers[0]
    assert s.context[a.start:a.end] == "84卡路里" and not s.is_impossible and s.qid == "a:sent"
    always_next = answer_sentence_example(ex, np.random.default_rng(0), p_next=1.0)
    assert always_next.context == "一个番石榴所含的脂肪约0.9克重或84卡路里。平时容易上火的人要少吃!"
    first = answer_sentence_example(_ex("b", "谁", "北京是首都。它很大。", "北京"))
    assert first.context == "北京是首都。" and first.answers[0].start == 0  # the answer is the first word
    assert answer_sentence_example(_ex("c", "q", "北京是首都。", "北京")) is None  # one sentence: no change
    assert answer_sentence_example(dataclasses.replace(ex, answers=[], is_impossible=True)) is None
    across = _ex("d", "q", "甲。乙说。丙来了。丁。", "乙说。丙")  # an answer over two sentences keeps both
    assert answer_sentence_example(across).context == "乙说。丙来了。"


def test_copula_swapped_example_puts_the_answer_first():
    ex = _ex("a", "全聚德老板是谁", "全聚德始建于1864年，全聚德创始人是杨全仁，后来传给了他的儿子。", "杨全仁")
    s = copula_swapped_example(ex)
    assert s.context == "杨全仁是全聚德创始人。" and s.qid == "a:swap" and not s.is_impossible
    a = s.answers[0]
    assert (a.start, a.end) == (0, 3) and s.context[a.start:a.end] == "杨全仁"
    assert s.question == ex.question and s.title == ex.title
    c = copula_swapped_example(ex, in_context=True)  # the clause rewritten where it stands, the rest kept
    assert c.context == "全聚德始建于1864年，杨全仁是全聚德创始人，后来传给了他的儿子。" and c.qid == "a:swapc"
    a = c.answers[0]
    assert a.start == 12 and c.context[a.start:a.end] == "杨全仁"
    # not "X是ANSWER" ending its clause: left alone
    assert copula_swapped_example(_ex("b", "q", "创始人是杨全仁先生。", "杨全仁")) is None  # the clause goes on
    assert copula_swapped_example(_ex("c", "q", "创始人为杨全仁。", "杨全仁")) is None  # no 是
    assert copula_swapped_example(_ex("d", "q", "是杨全仁。", "杨全仁")) is None  # no subject to move
    assert copula_swapped_example(_ex("e", "q", "我个人感觉是吕颂贤版。", "吕颂贤版")) is None  # a hedge
    assert copula_swapped_example(_ex("f", "q", "他说这就是杨全仁。", "杨全仁")) is None  # a pronoun
    assert copula_swapped_example(_ex("h", "q", "价格基本都是100元。", "100元")) is None  # an adverb of 是
    assert copula_swapped_example(_ex("g", "q", "老板是谁是杨全仁。", "杨全仁")) is None  # 是 in the stem
    assert copula_swapped_example(_ex("i", "q", "虽然今天大气的成分是氮。", "氮")) is None  # a connective
    assert copula_swapped_example(_ex("j", "q", "小猪出生时是粉灰色。", "粉灰色")) is None  # a time clause
    assert copula_swapped_example(_ex("k", "q", "中国的首都是北京。", "北京")).context == "北京是中国的首都。"  # 都 of a noun
    assert copula_swapped_example(dataclasses.replace(ex, answers=[], is_impossible=True)) is None


def test_definition_question_examples_ask_for_the_entity_that_opens_the_sentence():
    ctx = "北京，简称“京”，是中华人民共和国的首都，也是全国的政治中心。雨果大街（Avenue Victor-Hugo）是法国巴黎的一条街道。"
    made = definition_question_examples(_ex("a", "q", ctx, "全国"))
    assert [(d.question, d.answers[0].text, d.answers[0].start) for d in made] == [
        ("中华人民共和国的首都是哪里？", "北京", 0), ("法国巴黎的一条街道是哪里？", "雨果大街", 31)]
    assert all(ctx[d.answers[0].start:d.answers[0].end] == d.answers[0].text and d.context == ctx for d in made)
    assert made[0].qid == "a:def0" and not made[0].is_impossible
    person = definition_question_examples(_ex("b", "q", "邓霓仪是已故富豪邓肇坚爵士的孙女，身家丰厚。", "身家"))
    assert person[0].question == "已故富豪邓肇坚爵士的孙女是谁？" and person[0].answers[0].text == "邓霓仪"
    thing = definition_question_examples(_ex("c", "q", "土地伦理是环境伦理的视角之一。", "土地伦理"))
    assert thing[0].question == "环境伦理的视角之一是什么？"
    # no entity, or no relation that names its subject: nothing made
    for bad in ("另外，五羊邨站是非换乘的一般车站。",  # an adverb opens the sentence
                "同时，这层白霜使得整个柿饼都是干燥的。",  # an adjective predicate
                "西里伯斯鹿豚起初被认为是巴比如萨猪鹿的亚种。",  # a clause, not a name
                "牠们是非洲最大的水鸟。",  # a pronoun
                "新加坡是一个城市国家。",  # no 的: "一个城市国家是什么" asks for nothing in particular
                "全聚德始建于1864年。"):  # no 是
        assert definition_question_examples(_ex("d", "q", bad, bad[:2])) == [], bad
    many = "。".join(f"甲{c}是乙国的城市" for c in "一二三四") + "。"
    assert len(definition_question_examples(_ex("e", "q", many, "乙国"), max_per_passage=2)) == 2


# ------------------------------------------------------------------ long answers and tuned decoding
def _win(n):
    return Window(0, [0] * (n + 2), [0] * (n + 2), [None] + [(i, i + 1) for i in range(n)] + [None])


def test_decoder_returns_long_descriptive_answers_when_allowed():
    passage = "甲" * 100
    w = _win(100)
    start, end = np.zeros(102), np.zeros(102)
    start[1], end[90] = 9.0, 9.0  # the best span: 90 tokens
    start[5], end[8] = 4.0, 4.0  # a short, weaker one
    long_ = decode([(w, start, end, 0.9)], passage, n_best=5, max_answer_length=128).best
    assert (long_.start, long_.end) == (0, 90)
    short = decode([(w, start, end, 0.9)], passage, n_best=5, max_answer_length=64).best
    assert short.end - short.start <= 64


def test_tune_on_raw_rules():
    # two answerable questions and two unanswerable ones that only the two signals TOGETHER decline:
    # b1 passes the span null rule but not the classifier, b2 the other way round
    exs = [MRCExample("a", "q", "答案在这里", answers=[MRCAnswer("答案", 0)]),
           MRCExample("c", "q", "也有答案", answers=[MRCAnswer("答案", 2)]),
           MRCExample("b1", "q", "没有", is_impossible=True),
           MRCExample("b2", "q", "没有", is_impossible=True)]
    raw = [RawScores((SpanCandidate(text, 0, len(text), 1.0, 1.0),), diff, p)
           for text, diff, p in (("答案", 6.0, 0.4), ("答案", 3.0, 0.9), ("没有", 4.0, 0.2), ("没有", 1.0, 0.6))]
    both = tune_on_raw(raw, exs, rule="both")
    assert both["dev_f1"] == pytest.approx(100.0)
    assert 1.0 <= both["null_threshold"] < 3.0 and 0.2 < both["answerable_threshold"] <= 0.4
    null = tune_on_raw(raw, exs, rule="null")
    assert null["answerable_threshold"] == 0.0 and null["dev_f1"] == pytest.approx(75.0)
    cls = tune_on_raw(raw, exs, rule="cls")
    assert cls["null_threshold"] == -1e9 and cls["dev_f1"] == pytest.approx(75.0)
    with pytest.raises(Exception, match="rule"):
        tune_on_raw(raw, exs, rule="bogus")


def test_predictor_takes_the_tuned_answer_length_from_the_model():
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", mrc=MRCSettings(max_answer_length=96)))
    m = build_model(cfg, seed=0)
    m.tokenizer = tok
    assert MRCPredictor(m).settings.max_answer_length == 96
    assert MRCPredictor(m, settings_of(m, max_answer_length=12)).settings.max_answer_length == 12
    m.config.head = HeadConfig(task="span")
    assert MRCPredictor(m).settings.max_answer_length == MRCSettings.max_answer_length == 64
