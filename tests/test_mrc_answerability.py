"""The fused answerability model (bertfam.tasks.mrc.answerability): its question/title/passage features, a
fit that learns a real signal and ignores a constant one, the out-of-fold "fused" rule, the model saved in
head.mrc (checked on load) and applied by MRCPredictor."""
import json
import math

import numpy as np
import pytest

from bertfam.config import AnswerabilityModel, MRCSettings
from bertfam.data.mrc import MRCAnswer, MRCExample
from bertfam.errors import ConfigError
from bertfam.tasks.mrc.answerability import (FEATURES, KNOWN_FEATURES, WORD_FEATURES, apply, check_model,
                                             clean_title, content_words, coverage, feature_vector, fit,
                                             lexical_features, probability, word_features)
from bertfam.tasks.mrc.crossval import tune_out_of_fold
from bertfam.tasks.mrc.results import RawScores, SpanCandidate


@pytest.mark.parametrize("title,want", [
    ("婴儿轻微肠炎能自愈吗_妈妈网小百科", "婴儿轻微肠炎能自愈吗"),
    ("宇宙会不会是一个骗局? - 知乎", "宇宙会不会是一个骗局?"),
    ("张家港高铁站位置在哪- 苏州本地宝", "张家港高铁站位置在哪"),
    ("光大信托放款上征信吗-光大银行 - 南方财富网", "光大信托放款上征信吗"),
    ("【一吨沙子等于多少立方】作业帮", "一吨沙子等于多少立方"),
    ("毛泽东思想的重要内容有哪些?--中国共产党新闻网", "毛泽东思想的重要内容有哪些?"),
    ("价格18.99-28.39万", "价格18.99-28.39万"),  # a range is not a site suffix
    ("hiit是什么", "hiit是什么"), ("", ""), (None, ""),
])
def test_clean_title_cuts_the_site_suffix(title, want):
    assert clean_title(title) == want


def test_coverage_counts_ngrams_found():
    assert coverage("下巴长痘痘", "下巴反复长痘痘是什么原因") == 1.0
    assert coverage("力补金秋胶囊副作用", "力补金秋胶囊有什么作用") == pytest.approx(8 / 9)
    assert coverage("abcd", "abxcd", 2) == pytest.approx(2 / 3)
    assert coverage("a", "xyz", 2) == 1.0  # shorter than n: nothing to miss


def test_lexical_features_zero_the_title_terms_without_a_title():
    f = lexical_features("中国的首都是哪里？", "北京是中华人民共和国的首都。", None)
    assert f["has_title"] == 0.0 and f["q_in_title"] == f["title_in_q"] == f["q_bigrams_in_title"] == 0.0
    g = lexical_features("下巴长痘痘是什么原因14岁", "……", "下巴反复长痘痘是什么原因_有问必答_快速问医生")
    assert g["has_title"] == 1.0 and g["q_in_title"] == pytest.approx(10 / 13) and g["title_in_q"] == pytest.approx(10 / 12)
    assert set(f) | {"null_diff", "reader_logit", "top_prob", "relevance", "span_log_len", "span_in_question"} == set(FEATURES)


def test_content_words_drop_question_and_function_words():
    assert content_words("北京大学创建于哪一年？") == ["北京大学", "创建", "于"]  # 哪一年 asks, it is not asked about
    assert content_words("中国的首都是哪里？") == ["中国", "首都"]
    assert content_words("是什么？") == []


def test_word_features_see_a_name_missing_that_character_ngrams_mostly_find():
    q, tsinghua = "北京大学创建于哪一年？", "清华大学位于北京，创建于1911年，是中国著名的高等学府。"
    f = word_features(q, tsinghua, None)
    assert f["q_words_in_passage"] == pytest.approx(2 / 3)  # 北京大学 missing; 创建, 于 found
    assert f["q_missing_word_log_len"] == pytest.approx(math.log(5))  # 北京大学, 4 characters
    assert f["q_words_in_title"] == 0.0  # no title
    assert lexical_features(q, tsinghua, None)["q_in_passage"] > 0.7  # most of the characters are there
    g = word_features(q, "北京大学创建于1898年，初名京师大学堂。", "北京大学创建于哪一年_百度知道")
    assert g["q_words_in_title"] == 1.0 and g["q_words_in_passage"] == 1.0 and g["q_missing_word_log_len"] == 0.0
    assert word_features("是什么？", "文", "题") == {"q_words_in_passage": 1.0, "q_words_in_title": 1.0,
                                                   "q_missing_word_log_len": 0.0}


def test_word_features_are_optional_and_known():
    item = {"question": "北京大学创建于哪一年？", "passage": "清华大学创建于1911年。", "title": None}
    names = FEATURES + WORD_FEATURES
    v = dict(zip(names, feature_vector(_raw("1911年", 2.0), item, names)))
    assert v["q_words_in_passage"] == pytest.approx(2 / 3) and v["null_diff"] == 2.0
    assert len(feature_vector(_raw("1911年", 2.0), item)) == len(FEATURES)  # the default set leaves them out
    check_model(AnswerabilityModel(features=list(KNOWN_FEATURES), mean=[0.0] * len(KNOWN_FEATURES),
                                   scale=[1.0] * len(KNOWN_FEATURES), coef=[0.0] * len(KNOWN_FEATURES), intercept=0.0))


@pytest.mark.parametrize("question,want", [("朋友圈怎么发语音", (1.0, 0.0, 0.0)), ("香蕉能和柚子一起吃吗", (0.0, 1.0, 0.0)),
                                           ("鬼迷心窍原唱是谁", (0.0, 0.0, 1.0)), ("番石榴汁热量", (0.0, 0.0, 0.0))])
def test_cue_features_say_what_the_question_asks_for_and_are_optional(question, want):
    from bertfam.tasks.mrc.answerability import CUE_FEATURES

    item = {"question": question, "passage": "一段话。", "title": None}
    names = FEATURES + CUE_FEATURES
    v = dict(zip(names, feature_vector(_raw("一段话", 1.0), item, names)))
    assert tuple(v[n] for n in CUE_FEATURES) == want
    assert not set(CUE_FEATURES) & set(FEATURES) and set(CUE_FEATURES) <= set(KNOWN_FEATURES)


def _raw(text, diff, p=0.5, prob=0.6):
    nbest = (SpanCandidate(text, 0, len(text), diff, prob),) if text else ()
    return RawScores(nbest, diff if text else -math.inf, p)


def test_feature_vector_of_a_question_without_a_span():
    v = feature_vector(_raw("", 0.0), {"question": "问", "passage": "文", "title": None})
    f = dict(zip(FEATURES, v))
    assert f["null_diff"] == -20.0 and f["top_prob"] == 0.0 and f["span_log_len"] == 0.0 and f["relevance"] == 0.0
    assert np.isfinite(v).all()


def _title_case(n=120, seed=0):
    """Answerable questions are the title asked again; unanswerable ones change the title's question
    (half its characters replaced). The reader's signals are noise."""
    rng = np.random.default_rng(seed)
    exs, raws = [], []
    for i in range(n):
        imp = i % 2 == 1
        title = f"第{i}个问题是什么原因"
        q = title if not imp else f"第{i}个东西为何如此"
        exs.append(MRCExample(f"q{i}", q, f"第{i}段文字，原因在此。", title + "_百度知道",
                              [] if imp else [MRCAnswer("原因在此", 5)], imp, "in-domain"))
        raws.append(_raw("原因在此", float(rng.normal(0, 1)), p=float(rng.uniform(0.2, 0.8))))
    return exs, raws


def test_fit_learns_the_title_signal_and_gives_a_constant_feature_no_weight():
    exs, raws = _title_case()
    items = [{"question": e.question, "passage": e.context, "title": e.title} for e in exs]
    y = [not e.is_impossible for e in exs]
    m = fit(raws, items, y)
    check_model(m)
    p = np.array([probability(m, r, it) for r, it in zip(raws, items)])
    assert p[np.array(y)].min() > p[~np.array(y)].max()  # separable through the title features
    assert m.coef[FEATURES.index("relevance")] == 0.0  # no verifier: constant 0, scale 1, no weight
    assert m.coef[FEATURES.index("q_in_title")] > 0
    fused = apply(m, raws, items)
    assert [r.p_reader for r in fused] == [r.p_answerable for r in raws]
    assert [r.p_answerable for r in fused] == pytest.approx(p.tolist())
    with pytest.raises(ConfigError, match="answerable and unanswerable"):
        fit(raws[::2], items[::2], y[::2])


def _collinear_case(n=400, seed=3):
    """Answerable iff a hidden score d is high; the reader's null diff and P(answerable) see d plus a nuisance
    e, and the top span's probability sees e alone: fitted freely, the top span's probability takes a
    negative weight that subtracts the nuisance (what a one-sentence passage, with a top span probability
    far above any seen in fitting, then turns into a large negative vote)."""
    rng = np.random.default_rng(seed)
    d, e = rng.normal(0, 2, n), rng.normal(0, 2, n)
    y = d + rng.normal(0, 0.5, n) > 0
    raws = [_raw("答案", float(di + ei), p=float(1 / (1 + np.exp(-(di + ei)))), prob=float(np.clip(0.5 + 0.1 * ei, 0.01, 0.99)))
            for di, ei in zip(d, e)]
    items = [{"question": "问题是什么", "passage": "一段文字", "title": None}] * n
    return raws, items, list(y)


def test_fit_matches_sklearn_without_bounds_and_keeps_the_readers_weights_nonnegative():
    from sklearn.linear_model import LogisticRegression

    raws, items, y = _collinear_case()
    free = fit(raws, items, y, nonnegative=())
    X = np.stack([feature_vector(r, it) for r, it in zip(raws, items)])
    ref = LogisticRegression(C=1.0, max_iter=5000, tol=1e-10).fit((X - free.mean) / np.array(free.scale), y)
    assert np.allclose(free.coef, ref.coef_[0], atol=2e-3) and free.intercept == pytest.approx(ref.intercept_[0], abs=2e-3)
    reader = [FEATURES.index(n) for n in ("null_diff", "reader_logit", "top_prob")]
    assert free.coef[FEATURES.index("top_prob")] < -0.5  # the case has a free weight to bound
    bounded = fit(raws, items, y)
    assert min(bounded.coef[i] for i in reader) >= 0.0 and bounded.coef[FEATURES.index("null_diff")] > 0.5
    assert bounded.coef[FEATURES.index("top_prob")] == 0.0  # at its bound


def test_the_fused_rule_out_of_fold_beats_the_reader_rules_on_a_title_signal():
    exs, raws = _title_case(160, seed=2)
    folds = [i % 4 for i in range(len(exs))]
    reader = tune_out_of_fold({"none/8": raws}, exs, folds, rules=("both", "null", "cls"))
    fused = tune_out_of_fold({"none/8": raws}, exs, folds, rules=("both", "null", "cls", "fused"))
    assert fused["f1"].mean() > reader["f1"].mean() + 0.3
    assert all(c["rule"] == "fused" and c["fusion"]["features"] == list(FEATURES) for c in fused["choices"].values())
    assert fused["pooled"]["rule"] == "fused"
    json.dumps(fused["pooled"])  # the recipe writes it into cv.json and the model's config
    # each fold's P(answerable) comes from a model fitted without that fold
    y = np.array([not e.is_impossible for e in exs])
    p = np.array(fused["p_answerable"])
    assert p[y].mean() > 0.8 and p[~y].mean() < 0.2


def test_the_model_in_head_mrc_is_checked_on_load():
    good = {"features": ["null_diff", "has_title"], "mean": [0.0, 0.5], "scale": [1.0, 0.5], "coef": [1.0, -2.0],
            "intercept": 0.1}
    s = MRCSettings.from_dict({"answerability": good})
    assert isinstance(s.answerability, AnswerabilityModel) and s.answerability.coef == [1.0, -2.0]
    with pytest.raises(ConfigError, match=r"head.mrc.answerability.coef must be a list of 2"):
        MRCSettings.from_dict({"answerability": dict(good, coef=[1.0])})
    with pytest.raises(ConfigError, match=r"head.mrc.answerability.scale must be positive"):
        MRCSettings.from_dict({"answerability": dict(good, scale=[1.0, 0.0])})
    with pytest.raises(ConfigError, match=r"head.mrc.answerability: unknown field"):
        MRCSettings.from_dict({"answerability": dict(good, bias=1.0)})
    with pytest.raises(ConfigError, match="unknown feature"):
        check_model(AnswerabilityModel(**dict(good, features=["null_diff", "moon_phase"])))


def test_a_saved_model_is_applied_by_the_predictor(tmp_path):
    """A span model whose head.mrc holds an answerability model answers by its probability: coef on
    has_title alone, so a question with a title is declined and the same question without one is answered."""
    import bertfam
    from bertfam import HeadConfig, Tokenizer, preset
    from bertfam.tasks.mrc import MRCPredictor

    from .conftest import ZH_VOCAB

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    fused = AnswerabilityModel(features=["has_title"], mean=[0.0], scale=[1.0], coef=[-30.0], intercept=15.0)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", answerability=True,
                                 mrc=MRCSettings(max_length=64, doc_stride=32, null_threshold=-1e9,
                                                 answerable_threshold=0.5, answerability=fused)))
    bertfam.build_model(cfg, seed=0).save_pretrained(str(tmp_path / "m"), tokenizer=tok)
    model = bertfam.from_pretrained(str(tmp_path / "m"))
    assert model.config.head.mrc.answerability == fused  # through config.json and back
    pred = MRCPredictor(model)
    no_title, titled = pred.predict_batch([{"question": "中国的首都是哪里？", "passage": "北京是中华人民共和国的首都。"},
                                           {"question": "中国的首都是哪里？", "passage": "北京是中华人民共和国的首都。",
                                            "title": "首都"}], details=True)
    assert no_title.answerable and no_title.p_answerable > 0.99 and no_title.p_reader is not None
    assert not titled.answerable and titled.p_answerable < 0.01


def test_a_model_that_weighs_the_verifier_needs_one():
    m = AnswerabilityModel(features=["relevance", "has_title"], mean=[0.5, 0.5], scale=[0.1, 0.5], coef=[2.0, 0.0],
                           intercept=0.0)
    check_model(m)
    with pytest.raises(ConfigError, match="weighs the verifier's relevance, but the predictor has no verifier"):
        check_model(m, needs_relevance=True)
    check_model(AnswerabilityModel(**dict(m.__dict__, coef=[0.0, 1.0])), needs_relevance=True)


def test_fit_extra_questions_teach_the_fused_model_a_regime_the_judged_set_lacks():
    """The judged questions all have titles and a reader that is noise; the extra questions (no title, a
    reader that is right) enter only the fused fit: with them, a new title-less question with a confident
    reader gets a higher P(answerable), and the scores are still the judged questions' alone."""
    from bertfam.tasks.mrc.crossval import FitExtra

    exs, raws = _title_case(80, seed=4)
    folds = [(i // 2) % 2 for i in range(len(exs))]
    rng = np.random.default_rng(5)
    extra_exs, extra_raws = [], []
    for i in range(60):
        imp = i % 2 == 1
        extra_exs.append(MRCExample(f"x{i}", "中国的首都是哪里", "北京是中国的首都。", None,
                                    [] if imp else [MRCAnswer("北京", 0)], imp, "in-domain"))
        extra_raws.append(_raw("北京", float(rng.normal(-6 if imp else 6, 1)), p=0.2 if imp else 0.9))
    fe = FitExtra(extra_exs, {0: {"none/8": extra_raws}, 1: {"none/8": extra_raws[::-1]}})
    assert fe.of(1, "none/8")[0] == extra_raws[::-1]
    pooled_raws, pooled_exs = fe.of(-1, "none/8")
    assert len(pooled_raws) == len(pooled_exs) == 120 and pooled_exs[60] is extra_exs[0]
    with pytest.raises(ConfigError, match="none/16"):
        fe.of(0, "none/16")
    plain = tune_out_of_fold({"none/8": raws}, exs, folds, rules=("fused",))
    mixed = tune_out_of_fold({"none/8": raws}, exs, folds, rules=("fused",), fit_extra=fe)
    assert len(mixed["f1"]) == len(exs)
    new = {"question": "法国的首都是哪里", "passage": "巴黎是法国的首都。", "title": None}
    p = [probability(AnswerabilityModel(**r["pooled"]["fusion"]), _raw("巴黎", 6.0, p=0.9), new)
         for r in (plain, mixed)]
    assert p[1] > p[0] + 0.2, p
