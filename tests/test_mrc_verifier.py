"""MRC answer extension (clause / sentence), the question-passage verifier (CosineVerifier, PairVerifier) as a third
no-answer test, its settings in head.mrc, threshold tuning with it, the verifier travelling with the model
directory, and similar-passage negatives restricted to other questions."""
import dataclasses
import json
import os

import numpy as np
import pytest

import bertfam
from bertfam import ConfigError, HeadConfig, Tokenizer, build_model, preset
from bertfam.config import MRCSettings
from bertfam.data.mrc import MRCAnswer, MRCExample
from bertfam.data.mrc_negatives import similar_passage_negatives
from bertfam.data.mrc_windows import Window
from bertfam.tasks.mrc import (MRCPredictor, RawScores, SpanCandidate, answered, decode, save_thresholds,
                               settings_of, tune_on_raw)
from bertfam.tasks.mrc.decoding import extend_span
from bertfam.tasks.mrc.verifier import CosineVerifier, PairVerifier, Verifier, load_verifier, verifier_for

from .conftest import ZH_VOCAB

#      0 1 2 3 4 5 6  7 8 9 10 11 12 13 14
P = "甲乙，丙丁。 戊己；庚辛！壬癸"


# ------------------------------------------------------------------ answer extension
@pytest.mark.parametrize("span,mode,want", [
    ((3, 4), "none", "丙"),
    ((3, 4), "clause", "丙丁"), ((3, 4), "sentence", "甲乙，丙丁"),
    ((4, 6), "clause", "丙丁。"), ((4, 6), "sentence", "甲乙，丙丁。"),  # ends on its own stop: kept
    ((1, 3), "clause", "甲乙，"), ((1, 3), "sentence", "甲乙，丙丁"),  # a clause stop does not end a sentence
    ((8, 9), "clause", "戊己"), ((8, 9), "sentence", "戊己；庚辛"),  # the space after 。 is dropped
    ((0, 1), "clause", "甲乙"), ((13, 14), "clause", "壬癸"), ((13, 14), "sentence", "壬癸"),  # passage edges
])
def test_extend_span(span, mode, want):
    a, b = extend_span(P, *span, mode)
    assert P[a:b] == want and a <= span[0] and b >= span[1]


@pytest.mark.parametrize("span,want", [
    ((3, 10), "丙丁"),  # runs on past 。: cut there, the stop dropped
    ((0, 5), "甲乙，丙丁"),  # a clause stop does not cut
    ((3, 5), "丙丁"), ((7, 15), "戊己；庚辛"), ((13, 15), "壬癸"),  # ends before a stop / at the passage end
    ((5, 8), "。 戊"), ((5, 6), "。"),  # a span that starts on a stop is cut at the next one (never empty)
])
def test_trim_cuts_a_span_at_its_first_sentence_end(span, want):
    a, b = extend_span(P, *span, "trim")
    assert P[a:b] == want and a == span[0] and b <= span[1]


def test_decode_with_trim_merges_spans_cut_to_one_text():
    offs = [None] + [(i, i + 1) for i in range(len(P))] + [None]
    w = Window(0, [0] * len(offs), [0] * len(offs), offs)
    start, end = np.zeros(len(offs)), np.zeros(len(offs))
    start[4] = 5.0  # 丙
    end[5], end[10] = 4.0, 6.0  # 丁, 庚 (past 。)
    out = decode([(w, start, end, None)], P, n_best=2, max_answer_length=12, extend="trim")
    assert out.best.text == "丙丁" and out.best.score == 11.0
    assert [c.text for c in out.nbest].count("丙丁") == 1


def test_extend_span_leading_spaces_and_newlines():
    assert extend_span("  甲乙。丙", 3, 4, "clause") == (2, 4)
    assert extend_span("甲\n乙丙", 3, 4, "sentence") == (2, 4)
    assert extend_span("甲\n乙丙", 3, 4, "none") == (3, 4)


def test_decode_with_extension_merges_spans_widening_to_one_text():
    offs = [None] + [(i, i + 1) for i in range(len(P))] + [None]
    w = Window(0, [0] * len(offs), [0] * len(offs), offs)
    start, end = np.zeros(len(offs)), np.zeros(len(offs))
    start[4], start[5] = 5.0, 4.0  # 丙, 丁 (token i + 1 is char i)
    end[4], end[5] = 3.0, 5.0
    plain = decode([(w, start, end, None)], P, n_best=2, max_answer_length=10)
    assert [(c.text, c.score) for c in plain.nbest] == [("丙丁", 10.0), ("丁", 9.0)]
    ext = decode([(w, start, end, None)], P, n_best=2, max_answer_length=10, extend="clause")
    assert ext.nbest == (SpanCandidate("丙丁", 3, 5, 10.0, 1.0),)  # 丙, 丁 and 丙丁 all widen to the clause: once
    sent = decode([(w, start, end, None)], P, n_best=2, max_answer_length=10, extend="sentence")
    assert [c.text for c in sent.nbest] == ["甲乙，丙丁"] and sent.relevance is None


def _raw(text, null_diff, p, relevance=None):
    """One question's raw scores with one span (`text`)."""
    return RawScores((SpanCandidate(text, 0, len(text), 1.0, 1.0),), null_diff, p, relevance)


def test_answered_with_relevance():
    raw = _raw("x", 1.0, 0.9)
    with_rel = lambda **kw: dataclasses.replace(raw, **kw)  # noqa: E731
    assert answered(raw, 0.0, 0.5, 0.5)  # no relevance: the verifier test is skipped
    assert not answered(with_rel(relevance=0.3), 0.0, 0.5, 0.5)
    assert answered(with_rel(relevance=0.5), 0.0, 0.5, 0.5)  # at the threshold passes
    assert answered(with_rel(relevance=0.3), 0.0, 0.5)  # no verifier threshold
    assert answered(with_rel(relevance=0.3), 0.0, 0.5, None)
    assert not answered(with_rel(relevance=0.9), 2.0, 0.5, 0.5)  # the null rule still holds
    assert not answered(with_rel(relevance=0.9, p_answerable=0.1), 0.0, 0.5, 0.5)
    assert not answered(with_rel(nbest=(), relevance=0.9), 0.0, 0.5, 0.5)


@pytest.mark.parametrize("kw,field", [({"answer_extension": "paragraph"}, "answer_extension"),
                                      ({"verifier": "/abs/verifier"}, "verifier"),
                                      ({"verifier": "  "}, "verifier"),
                                      ({"verifier_threshold": 2.0}, "verifier_threshold"),
                                      ({"verifier_threshold": -1.5}, "verifier_threshold")])
def test_mrc_settings_validation(kw, field):
    with pytest.raises(ConfigError) as e:
        MRCSettings(**kw)
    msg = str(e.value)
    assert f"head.mrc.{field}" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="head.mrc.answer_extension"):
        MRCSettings.from_dict({"answer_extension": "paragraph"})
    ok = MRCSettings(answer_extension="sentence", verifier="verifier", verifier_threshold=1)
    assert (ok.answer_extension, ok.verifier, ok.verifier_threshold) == ("sentence", "verifier", 1.0)


# ------------------------------------------------------------------ tuning with the verifier
def _tuning_case():
    exs = [MRCExample("a", "q", "答案在这里", answers=[MRCAnswer("答案", 0)]),
           MRCExample("c", "q", "也有答案", answers=[MRCAnswer("答案", 2)]),
           MRCExample("b1", "q", "没有", is_impossible=True),
           MRCExample("b2", "q", "没有", is_impossible=True)]
    # the null diff and the classifier rank the unanswerable ones ABOVE the answerable ones; only the
    # verifier's relevance separates them
    raw = [_raw("答案", 1.0, 0.3, 0.8), _raw("答案", 2.0, 0.2, 0.7), _raw("没有", 5.0, 0.9, 0.2),
           _raw("没有", 6.0, 0.8, 0.1)]
    return exs, raw


@pytest.mark.parametrize("rule", ["verifier", "all"])
def test_tune_on_raw_verifier_rules(rule):
    exs, raw = _tuning_case()
    t = tune_on_raw(raw, exs, rule=rule)
    assert t["dev_f1"] == pytest.approx(100.0) and t["dev_em"] == pytest.approx(100.0)
    assert 0.2 < t["verifier_threshold"] <= 0.7
    tn, ta, tv = t["null_threshold"], t["answerable_threshold"], t["verifier_threshold"]
    assert [answered(r, tn, ta, tv) for r in raw] == [True, True, False, False]
    if rule == "verifier":  # the thresholds it does not use let everyone through
        assert tn == -1e9 and ta == 0.0
    both = tune_on_raw(raw, exs, rule="both")
    assert both["dev_f1"] < 100.0 and both["verifier_threshold"] == -1.0


def _pair_by_pair(raw, exs, rule, start=(0.0, 0.5, -1.0)):
    """The grid search one threshold triple at a time (how tune_on_raw searched before it scored a whole
    (null, answerable) grid at once): the reference its choice must equal, ties and order included."""
    from bertfam.evaluation.dureader import Reference, score_one
    from bertfam.tasks.mrc.decoding import NO_ANSWER

    refs = [Reference(e.answer_texts, e.is_impossible, e.qtype) for e in exs]
    ans = np.array([score_one(f, r.best.text if r.nbest else NO_ANSWER) for f, r in zip(refs, raw)])
    non = np.array([score_one(f, NO_ANSWER) for f in refs])
    diffs = np.array([r.null_diff if r.nbest else -np.inf for r in raw])
    probs = np.array([r.p_answerable for r in raw])
    rels = np.array([r.relevance if rule in ("verifier", "all") else 1.0 for r in raw])
    fin = diffs[np.isfinite(diffs)]
    ng = np.unique(np.concatenate([[-1e9, 0.0], np.quantile(fin, np.linspace(0, 1, 41)) - 1e-6]))
    ag = np.round(np.linspace(0.0, 0.95, 20), 2)
    vg = (np.unique(np.concatenate([[-1.0], np.clip(np.quantile(rels, np.linspace(0, 1, 21)) - 1e-6, -1, 1)]))
          if rule in ("verifier", "all") else np.array([-1.0]))
    ng = np.array([-1e9]) if rule in ("cls", "verifier") else ng
    ag = np.array([0.0]) if rule in ("null", "verifier") else ag

    def score(tn, ta, tv):
        a = (diffs > tn) & (probs >= ta) & (rels >= tv)
        return (float(np.where(a, ans[:, 0], non[:, 0]).mean()), float(np.where(a, ans[:, 1], non[:, 1]).mean()))

    best = (score(*start), *start) if rule in ("both", "all") else ((-1.0, -1.0), 0.0, 0.0, -1.0)
    for tv in vg:
        for tn in ng:
            for ta in ag:
                s = score(float(tn), float(ta), float(tv))
                if s > best[0]:
                    best = (s, float(tn), float(ta), float(tv))
    return best


@pytest.mark.parametrize("rule", ["both", "null", "cls", "verifier", "all"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tune_on_raw_chooses_as_a_pair_by_pair_search(rule, seed):
    """The whole-grid search picks the very thresholds a one-at-a-time search picks: on random questions
    whose scores tie often (few distinct values), with right, partly right and wrong spans."""
    rng = np.random.default_rng(seed)
    exs, raw = [], []
    for i in range(60):
        impossible = rng.random() < 0.5
        exs.append(MRCExample(f"q{i}", "q", "甲乙丙丁戊己", is_impossible=impossible,
                              answers=[] if impossible else [MRCAnswer("乙丙丁", 1)]))
        text = ["乙丙丁", "丙丁", "甲", "戊己"][rng.integers(4)]
        raw.append(_raw(text, float(rng.integers(-3, 4)), float(rng.choice([0.1, 0.4, 0.5, 0.9])),
                        float(rng.choice([-0.2, 0.3, 0.6]))))
    raw[0] = RawScores((), -np.inf, 0.2, 0.1)  # a question without any span
    (f1, em), tn, ta, tv = _pair_by_pair(raw, exs, rule)
    t = tune_on_raw(raw, exs, 0.0, 0.5, rule=rule, verifier_threshold=-1.0)
    assert (t["null_threshold"], t["answerable_threshold"], t["verifier_threshold"]) == (tn, ta, tv)
    assert (t["dev_f1"], t["dev_em"]) == (100 * f1, 100 * em)


def test_tune_on_raw_verifier_rules_need_relevance():
    exs, raw = _tuning_case()
    raw[2] = dataclasses.replace(raw[2], relevance=None)
    for rule in ("verifier", "all"):
        with pytest.raises(ConfigError, match="relevance"):
            tune_on_raw(raw, exs, rule=rule)
    assert tune_on_raw(raw, exs, rule="null")["verifier_threshold"] == -1.0  # rules without it do not care


# ------------------------------------------------------------------ the verifier model
@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_vocab(ZH_VOCAB)


def _tiny(tok, head, seed=0):
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                 num_hidden_layers=1, max_position_embeddings=128, head=head)
    m = build_model(cfg, seed=seed)
    m.tokenizer = tok
    return m


ITEMS = [{"question": "华为什么时候发布？", "passage": "华为Mate 40于2020年10月发布，售价6999元。"},
         {"question": "北京到上海多远", "passage": "北京到上海约1200公里。", "title": "距离"},
         {"question": "谁", "passage": "张三是这本书的作者，他住在杭州。"}]


def test_relevance_verifier_scores(tok):
    v = verifier_for(_tiny(tok, HeadConfig()), batch_size=2)
    s = v.scores(ITEMS)
    assert isinstance(s, np.ndarray) and s.shape == (3,) and np.all(np.abs(s) <= 1 + 1e-5)
    assert np.allclose([v.scores([it])[0] for it in ITEMS], s, atol=1e-5)  # batching keeps the order
    assert v.scores([]).shape == (0,)
    same = verifier_for(_tiny(tok, HeadConfig(), seed=1), query_prefix="", passage_prefix="")
    texts = ["今天天气很好", "北京是中国的首都。", "好"]
    assert np.allclose(same.scores([{"question": t, "passage": t} for t in texts]), 1.0, atol=1e-5)
    assert same.scores([{"question": "今天天气很好", "passage": "上海的人口约2400万。"}])[0] < 0.9999
    with pytest.raises(ConfigError, match="not found"):
        load_verifier("/nonexistent/verifier")


def test_verifier_travels_with_the_model_directory(tok, tmp_path):
    d, d2 = str(tmp_path / "m"), str(tmp_path / "copy")
    span = _tiny(tok, HeadConfig(task="span"))
    span.save_pretrained(d)
    _tiny(tok, HeadConfig(), seed=5).save_pretrained(os.path.join(d, "verifier"))
    save_thresholds(span, d, {"null_threshold": 0.0, "answerable_threshold": 0.5, "dev_f1": 50.0,
                              "verifier": "verifier", "verifier_threshold": 0.25, "answer_extension": "clause"},
                    tuned_on="dev.json")
    mrc = json.load(open(os.path.join(d, "config.json")))["head"]["mrc"]
    assert (mrc["verifier"], mrc["verifier_threshold"], mrc["answer_extension"]) == ("verifier", 0.25, "clause")
    m = bertfam.from_pretrained(d)
    assert m.name_or_path == d
    windows = settings_of(m, max_length=64, doc_stride=16)
    pred = MRCPredictor(m, windows)
    assert isinstance(pred.verifier, CosineVerifier) and pred.settings.verifier_threshold == 0.25
    assert pred.settings.answer_extension == "clause"
    rel = pred.relevance(ITEMS)
    assert rel.shape == (3,) and np.all(np.abs(rel) < 1.0)
    forced = dataclasses.replace(windows, null_threshold=-1e9, answerable_threshold=0.0)
    assert [r.answerable for r in MRCPredictor(m, forced).predict_batch(ITEMS)] == [True] * 3
    strict = MRCPredictor(m, dataclasses.replace(forced, verifier_threshold=1.0)).predict_batch(ITEMS, details=True)
    assert [r.answerable for r in strict] == [False] * 3  # no cosine reaches 1
    assert [r.relevance for r in strict] == pytest.approx(rel.tolist(), abs=1e-6)
    # -1 lets all pass: the null / classifier rule alone decides, as without a verifier
    loose = MRCPredictor(m, dataclasses.replace(windows, verifier_threshold=-1.0)).predict_batch(ITEMS, details=True)
    off = MRCPredictor(m, windows, verifier=False).predict_batch(ITEMS, details=True)
    assert [(r.answerable, r.answer) for r in loose] == [(r.answerable, r.answer) for r in off]
    assert all(r.relevance is None for r in off)
    given = MRCPredictor(m, windows, verifier=os.path.join(d, "verifier"))
    assert np.allclose(given.relevance(ITEMS), rel, atol=1e-6)
    assert MRCPredictor(m, verifier=False).relevance(ITEMS) is None
    # save_pretrained copies the verifier directory along, and its fine-tuned delta where there is one
    os.makedirs(os.path.join(d, "verifier-delta"))
    open(os.path.join(d, "verifier-delta", "head.json"), "w").write("{}")
    m.save_pretrained(d2)
    assert os.path.isfile(os.path.join(d2, "verifier", "config.json"))
    assert os.path.isfile(os.path.join(d2, "verifier-delta", "head.json"))
    assert np.allclose(MRCPredictor(bertfam.from_pretrained(d2)).relevance(ITEMS), rel, atol=1e-6)
    m.save_pretrained(d)  # onto itself: nothing to copy, nothing broken
    assert os.path.isfile(os.path.join(d, "verifier", "config.json"))


def test_missing_verifier_is_a_config_error(tok, tmp_path):
    d = str(tmp_path / "m")
    span = _tiny(tok, HeadConfig(task="span", mrc=MRCSettings(verifier="gone")))
    with pytest.raises(ConfigError, match="not loaded from a directory"):
        MRCPredictor(span)  # built in memory: where would "gone" be?
    assert MRCPredictor(span, verifier=False).verifier is None
    span.save_pretrained(d)
    assert not os.path.exists(os.path.join(d, "gone"))
    with pytest.raises(ConfigError, match="is not there; `bertfam mrc build-verifier .*` builds"):
        MRCPredictor(bertfam.from_pretrained(d))
    assert MRCPredictor(bertfam.from_pretrained(d), verifier=False).verifier is None


# ------------------------------------------------------------------ negatives from other questions only
def _ex(qid, q, ctx, ans):
    return MRCExample(qid, q, ctx, title=f"{qid} title", answers=[MRCAnswer(ans, ctx.index(ans))])


def test_similar_passage_negatives_other_questions_only():
    q = "番石榴汁的热量是多少"
    a = _ex("a", q, "一个番石榴所含的热量约84卡路里。", "84卡路里")
    sibling = _ex("a2", q, "番石榴汁的热量很低，适合减肥的人喝。", "很低")  # same question, other paragraph
    other = _ex("b", "番石榴有什么功效", "番石榴性温，有收敛的功效。", "收敛")
    pool = [a, sibling, other]
    (near,) = similar_passage_negatives([a], pool=pool)
    assert near.context == sibling.context and near.is_impossible
    (far,) = similar_passage_negatives([a], pool=pool, other_questions_only=True)
    assert far.context == other.context and far.title == "b title" and far.qid == "a:sim0"
    assert similar_passage_negatives([a], pool=[a, sibling], other_questions_only=True) == []


# ------------------------------------------------------------------ the tuning recipe with a verifier
def test_checklist_eval_recipe_tunes_and_ships_the_verifier(tok, tmp_path, monkeypatch, capsys):
    """recipes/mrc_checklist_eval.py --verifier --save: every extension x rule is tried, the report has each
    signal's AUC, and the saved directory holds the verifier and names it only when the chosen rule uses it."""
    import importlib.util
    import sys

    from .conftest import FIXTURES, ROOT

    spec = importlib.util.spec_from_file_location("mrc_checklist_eval", os.path.join(ROOT, "recipes",
                                                                                     "mrc_checklist_eval.py"))
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    d, ver, out, rep = (str(tmp_path / n) for n in ("m", "ver", "ship", "report.json"))
    _tiny(tok, HeadConfig(task="span")).save_pretrained(d)
    _tiny(tok, HeadConfig(), seed=3).save_pretrained(ver)
    data = os.path.join(FIXTURES, "mrc", "checklist_demo_cut.json")
    monkeypatch.setattr(sys, "argv", ["x", d, "--dev", data, "--demo", data, "--verifier", ver, "--lengths", "8,16",
                                      "--save", out, "--json", rep, "--threads", "1"])
    assert recipe.main() == 0
    r = json.load(open(rep))
    tried = {(s["answer_extension"], s["rule"]) for s in r["settings"]}
    assert tried == {(e, x) for e in ("none", "clause", "sentence") for x in ("both", "null", "cls", "verifier", "all")}
    assert set(r["dev"]["auc"]) == {"null_diff", "p_answerable", "relevance"}
    saved = bertfam.from_pretrained(out).config.head.mrc
    chosen = r["chosen"]
    assert (saved.answer_extension, saved.max_answer_length) == (chosen["answer_extension"], chosen["max_answer_length"])
    uses = chosen["rule"] in ("verifier", "all")
    assert (saved.verifier == "verifier") == uses and os.path.isdir(os.path.join(out, "verifier")) == uses
    if uses:
        assert saved.verifier_threshold == pytest.approx(chosen["verifier_threshold"])


# ------------------------------------------------------------------ the pair-classifier kind
def test_pair_classifier_verifier_scores_p_yes(tok, tmp_path):
    """A 2-label classification model is a cross-encoder verifier: its score is P("yes") of the pair
    (question, title + passage), the same number the model itself gives; it is loaded with its head."""
    import torch

    m = _tiny(tok, HeadConfig(task="classification", num_labels=2, labels=["yes", "no"]), seed=4)
    v = verifier_for(m, batch_size=2)
    assert isinstance(v, PairVerifier) and v.positive == 0 and not hasattr(v, "query_prefix")
    s = v.scores(ITEMS)
    enc = tok([it["question"] for it in ITEMS], [f"{it['title']} {it['passage']}" if it.get("title") else it["passage"]
                                                  for it in ITEMS], max_length=128, truncation=True, padding="longest")
    with torch.no_grad():
        want = torch.softmax(m(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).logits, -1)[:, 0]
    assert s.shape == (3,) and np.allclose(s, want.numpy(), atol=1e-5) and np.all((s >= 0) & (s <= 1))
    d = str(tmp_path / "pair")
    m.save_pretrained(d)
    back = load_verifier(d)
    assert back.kind == "pair" and np.allclose(back.scores(ITEMS), s, atol=1e-5)
    assert isinstance(verifier_for(_tiny(tok, HeadConfig())), CosineVerifier)
    assert isinstance(back, Verifier) and back.kind == "pair"


@pytest.mark.parametrize("head,match", [
    (HeadConfig(task="classification", num_labels=3, labels=["a", "b", "c"]), "needs 2 labels"),
    (HeadConfig(task="span"), "an encoder or a 2-label classifier"),
])
def test_a_verifier_of_another_kind_is_a_config_error(tok, head, match):
    with pytest.raises(ConfigError, match=match):
        verifier_for(_tiny(tok, head))
