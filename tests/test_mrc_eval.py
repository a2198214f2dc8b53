"""The official DuReader metric, rule by rule, against hand-computed cases; and the SQuAD 2.0 metric."""
import json
from collections import OrderedDict

import pytest

from bertfam.evaluation import dureader as D
from bertfam.evaluation import squad as S


def ref(answers, impossible=False, qtype="in-domain"):
    return D.Reference(list(answers), impossible, qtype)


# ------------------------------------------------------------------ normalisation
def test_normalize_drops_every_listed_char_and_lowercases():
    listed = ":_`，。：？！()“”；’《》·、,「」（）－～『』|"
    assert D.normalize("A" + listed + "b") == "ab"


def test_normalize_keeps_the_ellipsis_quirk_and_unlisted_punctuation():
    # "……" is in the official list as ONE two-character string; a per-character test never matches it
    assert D.normalize("好……的") == "好……的"
    assert D.normalize("x.y;z\"-") == "x.y;z\"-"  # ASCII . ; " - are not in the list


# ------------------------------------------------------------------ tokens
def test_tokens_cjk_per_char_equals_sign_and_latin_runs():
    assert D.tokenize("我爱NLP 2和x=y") == ["我", "爱", "NLP 2", "和", "x", "=", "y"]
    assert D.tokenize("iPhone 12") == ["iPhone 12"]  # one run, space inside
    assert D.tokenize("") == []
    assert D.tokenize("㐀") == ["㐀"]  # CJK extension A counts as an ideograph (BERT's ranges)


# ------------------------------------------------------------------ F1 / EM
def test_f1_prefix_of_reference():
    assert D.f1_score(["北京大学"], "北京") == pytest.approx(2 * 1.0 * 0.5 / 1.5)


def test_f1_uses_contiguous_run_not_bag_or_subsequence():
    # bag-of-tokens would give 1.0, a non-contiguous LCS 0.75; the contiguous run 丙丁 gives 0.5
    assert D.f1_score(["甲乙丙丁"], "甲丙丁乙") == pytest.approx(0.5)


def test_f1_latin_run_is_one_token():
    assert D.f1_score(["iPhone 12"], "iPhone") == 0.0
    # [苹,果,iphone,手,机] vs [iphone,手,机]: run 3, p = 1, r = 3/5
    assert D.f1_score(["苹果iPhone手机"], "iphone手机") == pytest.approx(2 * 0.6 / 1.6)


def test_f1_equals_sign_is_a_token():
    assert D.f1_score(["a=b"], "a=c") == pytest.approx(2 / 3)


def test_f1_max_over_references_and_empty_prediction():
    assert D.f1_score(["北京", "北京大学"], "北京大学") == 1.0
    assert D.f1_score(["北京"], "") == 0.0
    assert D.f1_score(["北京"], "。，") == 0.0  # normalises to nothing


def test_em_after_normalisation():
    assert D.em_score(["《红楼梦》"], "红楼梦") == 1.0
    assert D.em_score(["红楼梦"], "红楼梦…") == 0.0
    assert D.em_score(["A", "Hello，World"], "hello world") == 0.0  # space is kept
    assert D.em_score(["A", "Hello，World"], "helloWORLD") == 1.0


def test_unanswerable_needs_literal_no_answer_any_case():
    r = ref([""], impossible=True)
    assert D.score_one(r, "No Answer") == (1.0, 1.0)
    assert D.score_one(r, "no answer") == (1.0, 1.0)
    assert D.score_one(r, "") == (0.0, 0.0)
    assert D.score_one(r, "无答案") == (0.0, 0.0)
    assert D.score_one(ref(["北京"]), "no answer") == (0.0, 0.0)


def test_totals_skip_and_format():
    refs = OrderedDict(q1=ref(["北京大学"]), q2=ref(["北京大学"]), q3=ref([], True), q4=ref(["上海"], qtype="vocab"))
    preds = {"q1": "北京大学", "q2": "北京", "q3": "NO ANSWER"}  # q4 missing
    r = D.evaluate(refs, preds)
    # F1 = (1 + 2/3 + 1 + 0) / 4, EM = (1 + 0 + 1 + 0) / 4
    assert D.official_line(r) == '{"F1": "66.667", "EM": "50.000", "TOTAL": 4, "SKIP": 1}'
    assert r["per_type"]["vocab"] == {"F1": "0.000", "EM": "0.000", "TOTAL": 1, "SKIP": 1}
    assert r["per_type"]["in-domain"]["TOTAL"] == 3
    assert "vocab" in D.type_table(r) and "ALL" in D.type_table(r)


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return str(p)


def _data(qas):
    return {"data": [{"title": "", "paragraphs": [{"context": "北京大学在北京。", "title": "t", "qas": qas}]}]}


def test_files_tag_filter_and_non_string_prediction(tmp_path):
    data = _write(tmp_path, "d.json", _data([
        {"id": "a", "question": "q", "type": "vocab_1", "answers": [{"text": "北京大学", "answer_start": 0}]},
        {"id": "b", "question": "q", "type": "vocab_2", "answers": [{"text": "北京", "answer_start": 5}]},
        {"id": "c", "question": "q", "type": "in-domain", "answers": [{"text": "", "answer_start": -1}],
         "is_impossible": True}]))
    pred = _write(tmp_path, "p.json", {"a": "北京大学", "b": 7, "c": "no answer"})
    r = D.evaluate_files(data, pred, tag="vocab")
    assert D.official_line(r) == '{"F1": "50.000", "EM": "50.000", "TOTAL": 2, "SKIP": 1}'
    assert any("'b'" in m for m in r["problems"])
    r = D.evaluate_files(data, pred)
    assert (r["TOTAL"], r["SKIP"], r["EM"]) == (3, 1, "66.667")


# ------------------------------------------------------------------ SQuAD 2.0
def test_squad2_metric_hasans_noans():
    refs = OrderedDict(a=ref(["the Eiffel Tower"]), b=ref(["Paris, France", "Paris"]), c=ref([], True))
    r = S.evaluate(refs, {"a": "Eiffel Tower", "b": "in Paris", "c": "no answer"})
    # a: EM after article removal; b: F1 vs "Paris" = 2*(1/2)*1/(1.5) = 2/3; c: empty vs empty = 1
    assert r["HasAns_exact"] == pytest.approx(50.0)
    assert r["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert r["NoAns_exact"] == 100.0 and r["NoAns_total"] == 1
    assert r["exact"] == pytest.approx(200 / 3)
    r = S.evaluate(refs, {"a": "Eiffel", "c": "something"})
    assert r["NoAns_f1"] == 0.0 and r["HasAns_total"] == 2
