"""MRC decoding across windows, the MRCPredictor contract, threshold tuning, ensembles, and the CLI
end to end (tiny random model: train a few steps -> predict -> evaluate -> ensemble/compare -> ask)."""
import dataclasses
import json
import math
import os
from collections import namedtuple

import numpy as np
import pytest
import torch

import bertfam
from bertfam import HeadConfig, Tokenizer, build_model, preset
from bertfam.cli import main
from bertfam.config import MRCSettings
from bertfam.data.mrc import MRCAnswer, MRCExample
from bertfam.data.mrc_windows import Window
from bertfam.tasks.mrc import (MRCPrediction, MRCPredictor, RawScores, VotingEnsemble, decode, settings_of,
                               tune_thresholds)

from .conftest import FIXTURES, ZH_VOCAB

MRC = os.path.join(FIXTURES, "mrc")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_vocab(ZH_VOCAB)


def tiny_span_model(tok, seed=0):
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span"))
    m = build_model(cfg, seed=seed)
    m.tokenizer = tok
    return m


def _win(offsets):
    return Window(0, [0] * len(offsets), [0] * len(offsets), offsets)


# ------------------------------------------------------------------ decoding
def test_decode_picks_best_span_across_windows():
    passage = "甲乙丙丁戊己庚辛"
    w1 = _win([None, (0, 1), (1, 2), (2, 3), (3, 4), None])
    w2 = _win([None, (3, 4), (4, 5), (5, 6), (6, 7), None])
    s1 = np.array([1.0, 3.0, 0, 0, 0, -9]); e1 = np.array([2.0, 0, 3.0, 0, 0, -9])  # noqa: E702
    s2 = np.array([0.5, 0, 4.0, 0, 0, -9]); e2 = np.array([0.5, 0, 0, 0, 3.5, -9])  # noqa: E702
    r = decode([(w1, s1, e1, 0.3), (w2, s2, e2, 0.8)], passage, n_best=5, max_answer_length=10)
    best = r.best
    assert (best.text, best.start, best.end, best.score) == ("戊己庚", 4, 7, 7.5)
    assert r.null_diff == pytest.approx(7.5 - 1.0)  # min null score over windows: w2's 0.5 + 0.5
    assert r.p_answerable == 0.8  # max over windows
    assert sum(c.prob for c in r.nbest) == pytest.approx(1.0)
    assert all(c.end >= c.start for c in r.nbest)
    # max_answer_length (tokens) rules the long span out
    r = decode([(w2, s2, e2, 0.8)], passage, n_best=5, max_answer_length=2)
    assert all(c.end - c.start <= 2 for c in r.nbest)
    assert r.best.text != "戊己庚"


def test_decode_merges_duplicate_spans_from_overlapping_windows():
    w = _win([None, (0, 1), (1, 2), None])
    s = np.array([0, 2.0, 0, -9]); e = np.array([0, 0, 2.0, -9])  # noqa: E702
    r = decode([(w, s, e, None), (w, s + 1, e, None)], "甲乙", n_best=10, max_answer_length=5)
    spans = [(c.start, c.end) for c in r.nbest]
    assert len(spans) == len(set(spans)) and r.best.score == 5.0 and r.p_answerable is None


# ------------------------------------------------------------------ predictor contract
def test_predictor_contract_and_offsets(tok):
    m = tiny_span_model(tok)
    pred = MRCPredictor(m, settings_of(m, max_length=48, doc_stride=16, null_threshold=-1e9,
                                       answerable_threshold=0.0))
    passage = "华为Mate 40 Pro于2020年10月发布，售价６９９９元。" * 4
    r = pred.predict("华为什么时候发布？", passage, "华为")
    assert isinstance(r, MRCPrediction) and set(r.to_dict()) == {"answer", "start", "end", "score", "answerable"}
    assert r.answerable and passage[r.start:r.end] == r.answer and 0 <= r.score <= 1
    out = pred.predict_batch([{"question": "q", "passage": ""}, {"question": " ", "passage": passage},
                              {"question": "发布", "passage": passage, "title": None}])
    assert [o.answerable for o in out] == [False, False, True]
    assert out[0].to_dict() == {"answer": None, "start": None, "end": None, "score": 1.0, "answerable": False}
    # thresholds come from the model's config by default
    m.config.head.mrc = MRCSettings(null_threshold=1e9, answerable_threshold=0.5)
    assert MRCPredictor(m).predict("发布", passage).answerable is False
    with pytest.raises(Exception, match="question must be a string"):
        pred.predict_batch([{"question": 3, "passage": "x"}])


def test_logit_ensemble_averages_and_equals_single_for_copies(tok):
    m1, m2 = tiny_span_model(tok, 1), tiny_span_model(tok, 2)
    kw = dict(max_length=48, doc_stride=16, null_threshold=-1e9, answerable_threshold=0.0)
    item = [{"question": "价格", "passage": "售价６９９９元，华为于2020年发布。"}]

    def run(models):
        return MRCPredictor(models, settings_of(models, **kw)).predict_batch(item, details=True)[0]

    one, twice = run(m1), run([m1, m1])
    assert twice.answer == one.answer and twice.p_answerable == pytest.approx(one.p_answerable)
    p1, p2 = one.p_answerable, run(m2).p_answerable
    assert run([m1, m2]).p_answerable == pytest.approx((p1 + p2) / 2, abs=1e-6)


class _Fixed:
    def __init__(self, answers):
        self.answers = answers

    def predict_batch(self, items, details=False):
        return list(self.answers)


def _ans(text, score):
    if text is None:
        return MRCPrediction(None, None, None, score, False)
    return MRCPrediction(text, 0, len(text), score, True)


def test_voting_ensemble_sums_scores_of_normalised_answers():
    v = VotingEnsemble([_Fixed([_ans("《北京》", 0.4)]), _Fixed([_ans("北京", 0.3)]), _Fixed([_ans(None, 0.6)])])
    r = v.predict("q", "p")
    assert r.answer == "《北京》" and r.score == pytest.approx(0.7 / 3)  # 0.4 + 0.3 beats 0.6
    assert r.votes is None and set(r.to_dict()) == {"answer", "start", "end", "score", "answerable"}
    votes = v.predict_batch([{"question": "q", "passage": "p"}], details=True)[0].to_dict()["votes"]
    assert votes == pytest.approx({"北京": 0.7, "\0none": 0.6})
    v = VotingEnsemble([_Fixed([_ans("北京", 0.2)]), _Fixed([_ans(None, 0.9)])])
    assert v.predict("q", "p").answerable is False


class _RawStub:
    has_answerability = True
    settings = MRCSettings(null_threshold=0.0, answerable_threshold=0.5)

    def __init__(self, raws):
        self.raws = raws

    def raw_scores(self, items):
        return self.raws


def test_tune_thresholds_finds_a_separating_pair():
    exs = [MRCExample("a", "q", "北京", answers=[MRCAnswer("北京", 0)]),
           MRCExample("b", "q", "上海", answers=[MRCAnswer("上海", 0)]),
           MRCExample("c", "q", "广州", is_impossible=True), MRCExample("d", "q", "深圳", is_impossible=True)]

    def raw(text, diff, p):
        return RawScores.from_dict({"nbest": [{"text": text, "start": 0, "end": 2, "score": 1.0, "prob": 1.0}],
                                    "null_diff": diff, "p_answerable": p})

    # the answerable ones have a LOWER null diff than the unanswerable ones but a higher P(answerable):
    # the default rule (diff > 0 and p >= 0.5) wrongly answers c; only the probability separates them
    stub = _RawStub([raw("北京", 0.5, 0.9), raw("上海", 0.5, 0.8), raw("广州", 3.0, 0.6), raw("深圳", 4.0, 0.3)])
    t = tune_thresholds(stub, exs)
    assert t["dev_f1"] == 100.0 and t["dev_f1_before"] == 75.0
    assert 0.6 < t["answerable_threshold"] <= 0.8 and t["null_threshold"] < 0.5


# ------------------------------------------------------------------ CLI end to end
def test_cli_train_predict_evaluate_ensemble_compare_ask(tmp_path, capsys):
    out = str(tmp_path / "m")
    train = [os.path.join(MRC, "cmrc2018_trial_cut.json"), os.path.join(MRC, "robust_demo_dev_cut.json")]
    dev = os.path.join(MRC, "checklist_demo_cut.json")
    rc = main(["mrc", "train", "--model", "bert-tiny", "--vocab", ZH_VOCAB, "--train", *train, "--dev", dev,
               "--out", out, "--max-steps", "3", "--batch-size", "8", "--max-length", "96", "--doc-stride", "24",
               "--tune-threshold", "--eval-limit", "4"])
    assert rc == 0
    captured = capsys.readouterr()
    err = captured.err
    table = captured.out.strip().splitlines()  # one table of named scores, not a JSON blob with two F1s
    assert table[0].startswith("mrc train: 3 steps, 12 questions") and table[1].split() == [
        "dev", "scores", "(x", "100)", "questions", "F1", "EM"], table
    names = ("last evaluation (step 3), default thresholds ", "before tuning, default thresholds ",
             "tuned thresholds (null ")
    assert len(table) == 6 and all(r.startswith(n) for r, n in zip(table[2:], names)), table
    assert table[5].startswith(f"wrote {out} (") and "model " in table[5], table  # what was written, its size
    assert "cmrc2018_trial_cut.json: 6/6 questions kept" in err and "9 repaired by search" in err
    cfg = json.load(open(os.path.join(out, "config.json")))
    mrc = cfg["head"]["mrc"]
    assert cfg["head"]["task"] == "span" and mrc["max_length"] == 96 and mrc["doc_stride"] == 24
    assert "extra" not in cfg["head"] and mrc["max_query_length"] == MRCSettings.max_query_length
    info = json.load(open(os.path.join(out, "training_info.json")))  # provenance beside config.json
    assert info["thresholds_tuned_on"] == "checklist_demo_cut.json" and "tuned_dev_f1" in info
    run = info["runs"][-1]
    assert run["command"] == "mrc train" and run["steps"] == 3 and run["train_files"] == train
    assert run["base_model"] == "bert-tiny" and run["dev"] == "checklist_demo_cut.json"
    m = bertfam.from_pretrained(out)
    assert m.config.head.info == info and m.config.head.mrc == MRCSettings(**mrc)
    summary = json.load(open(os.path.join(out, "mrc_train_summary.json")))
    assert summary["steps"] == 3 and [s["kept"] for s in summary["sources"]] == [6, 6]

    pred = str(tmp_path / "pred.json")
    assert main(["mrc", "predict", "--model", out, "--data", dev, "--out", pred]) == 0
    preds = json.load(open(pred))
    nbest = json.load(open(str(tmp_path / "pred.nbest.json")))
    assert len(preds) == 8 and set(preds) == set(nbest)
    data = json.load(open(dev))
    ctx = {q["id"]: p["context"] for d in data["data"] for p in d["paragraphs"] for q in p["qas"]}
    for qid, n in nbest.items():
        assert list(n) == ["answerable", "answer", "start", "end", "score", "p_answerable", "null_diff", "nbest"]
        assert preds[qid] == (n["answer"] if n["answerable"] else "no answer")
        for c in n["nbest"]:
            assert ctx[qid][c["start"]:c["end"]] == c["text"]
    capsys.readouterr()
    assert main(["mrc", "evaluate", dev, pred]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    r = json.loads(line)
    assert list(r) == ["F1", "EM", "TOTAL", "SKIP"] and r["TOTAL"] == 8 and r["SKIP"] == 0
    assert 0.0 <= float(r["F1"]) <= 100.0

    # --always-answer: no no-answer rule, every question gets its best span (the n-best's first)
    always = str(tmp_path / "always.json")
    assert main(["mrc", "predict", "--model", out, "--data", dev, "--out", always, "--always-answer"]) == 0
    answers, kept = json.load(open(always)), json.load(open(str(tmp_path / "always.nbest.json")))
    assert all(answers[q] == n["nbest"][0]["text"] and n["answerable"] for q, n in kept.items() if n["nbest"])
    assert sum(a != "no answer" for a in answers.values()) == sum(bool(n["nbest"]) for n in kept.values()) > 0
    # --length-bonus: every span's score + B x log(1 + characters): a large B picks long spans
    longer = str(tmp_path / "longer.json")
    assert main(["mrc", "predict", "--model", out, "--data", dev, "--out", longer, "--always-answer",
                 "--length-bonus", "50"]) == 0
    long_answers = json.load(open(longer))
    assert sum(map(len, long_answers.values())) > sum(map(len, answers.values()))
    capsys.readouterr()

    # the trivial baseline: always "no answer" -> exactly the unanswerable share (4 of 8)
    base = str(tmp_path / "base.json")
    json.dump({k: "no answer" for k in preds}, open(base, "w"))
    main(["mrc", "evaluate", dev, base, "--no-table"])
    assert capsys.readouterr().out.strip() == '{"F1": "50.000", "EM": "50.000", "TOTAL": 8, "SKIP": 0}'

    ens = str(tmp_path / "ens.json")
    assert main(["mrc", "ensemble", "--models", out, out, "--data", dev, "--out", ens]) == 0
    assert json.load(open(ens)) == preds  # the same model twice: averaged logits are the model's own

    cmp_dir = str(tmp_path / "cmp")
    capsys.readouterr()
    assert main(["mrc", "compare", "--models", out, out, "--names", "a", "b", "--data", dev, "--out", cmp_dir]) == 0
    assert "| ensemble |" in capsys.readouterr().out
    with open(os.path.join(cmp_dir, "compare.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert set(json.load(open(os.path.join(cmp_dir, "compare.json")))) == {"a", "b", "ensemble"}

    assert main(["mrc", "ask", "--model", out, "--question", "谁", "--passage", "张三是作者。", "--title", "t"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert a["display"] == (a["answer"] if a["answerable"] else "无答案")


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"data\": [", encoding="utf-8")
    assert main(["mrc", "evaluate", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json: line 1" in err
    assert main(["mrc", "train", "--model", "bert-tiny", "--train", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert main(["mrc", "ask", "--model", str(tmp_path), "--question", "q", "--passage", "p"]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_train_runner_runs_from_a_config_without_the_cli(tmp_path, tok):
    """`mrc train` is runners.mrc.run_mrc_train of an MRCTrainConfig: a library caller gets the same run."""
    from bertfam.runners.mrc import MRCTrainConfig, run_mrc_train

    base, out = str(tmp_path / "base"), str(tmp_path / "run")
    tiny_span_model(tok).save_pretrained(base, tokenizer=tok)
    cfg = MRCTrainConfig(model=base, train_files=[os.path.join(MRC, "cmrc2018_trial_cut.json")], out=out,
                         dev_fraction=0.5, max_length=64, doc_stride=16, eval_limit=2,
                         train=MRCTrainConfig.default_train(max_steps=2, batch_size=8, progress=False))
    assert MRCTrainConfig.from_dict(cfg.to_dict()) == cfg
    summary = run_mrc_train(cfg)
    assert summary["steps"] == 2 and summary["written"].startswith(f"wrote {out} (")
    saved = json.load(open(os.path.join(out, "mrc_train_summary.json")))
    assert saved["steps"] == 2 and [s["kept"] for s in saved["sources"]] == [6] and "written" not in saved
    head = json.load(open(os.path.join(out, "config.json")))["head"]
    assert head["task"] == "span" and (head["mrc"]["max_length"], head["mrc"]["doc_stride"]) == (64, 16)
    assert os.path.isfile(os.path.join(out, "dev_heldout.json"))  # no dev file: half the passages held out


def test_attention_dropout_option_sets_the_run_and_the_written_model(tmp_path, tok, capsys):
    """--attention-dropout 0: every attention layer trains without it (SDPA's fused kernel) and the written
    config says so; without the option the model's own value (0.1) is kept; out of range: one line, exit 2."""
    from bertfam.modeling import set_attention_dropout
    from bertfam.modeling.attention import SelfAttention

    base = str(tmp_path / "base")
    model = tiny_span_model(tok)
    assert model.config.attention_probs_dropout_prob > 0
    model.save_pretrained(base, tokenizer=tok)
    train = os.path.join(MRC, "cmrc2018_trial_cut.json")
    common = ["--train", train, "--dev-fraction", "0.5", "--max-steps", "1", "--batch-size", "4",
              "--max-length", "64", "--doc-stride", "16", "--eval-limit", "1"]
    for value, out in (("0", "zero"), (None, "own")):
        flag = ["--attention-dropout", value] if value is not None else []
        assert main(["mrc", "train", "--model", base, "--out", str(tmp_path / out), *common, *flag]) == 0
    written = {o: json.load(open(tmp_path / o / "config.json"))["attention_probs_dropout_prob"] for o in ("zero", "own")}
    assert written == {"zero": 0.0, "own": model.config.attention_probs_dropout_prob}
    set_attention_dropout(model, 0.0)
    assert [m.p_drop for m in model.modules() if isinstance(m, SelfAttention)] == [0.0] * model.config.num_hidden_layers
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # argparse's own exit for a bad option value
        main(["mrc", "train", "--model", base, "--out", str(tmp_path / "bad"), *common, "--attention-dropout", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1 and "--attention-dropout" in err


def test_models_with_different_tokenizers_fall_back_to_voting(tok):
    from bertfam import ConfigError
    from bertfam.tasks.mrc import predictor_from_models
    from bertfam.tokenization.tokenizer import bert_wordpiece

    small = Tokenizer(bert_wordpiece({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                                  "甲", "乙"])}))
    m1, m2 = tiny_span_model(tok), tiny_span_model(tok, 3)
    m2.tokenizer = small
    ens = predictor_from_models([m1, m2], ["a", "b"], overrides={"max_length": 48})
    assert isinstance(ens, VotingEnsemble)
    assert [p.settings.max_length for p in ens.predictors] == [48, 48]
    r = ens.predict("甲", "甲乙甲乙")
    assert set(r.to_dict()) == {"answer", "start", "end", "score", "answerable"}
    with pytest.raises(ConfigError, match="share a tokenizer"):
        predictor_from_models([m1, m2], ["a", "b"], mode="average")
    assert isinstance(predictor_from_models([m1, m1], ["a", "a"]), MRCPredictor)


def test_decode_lists_each_answer_text_once():
    passage = "北京北京"
    w = _win([None, (0, 1), (1, 2), (2, 3), (3, 4), None])
    s = np.array([0, 3.0, 0, 2.0, 0, -9]); e = np.array([0, 0, 3.0, 0, 2.0, -9])  # noqa: E702
    r = decode([(w, s, e, None)], passage, n_best=10, max_answer_length=2)
    texts = [c.text for c in r.nbest]
    assert len(texts) == len(set(texts)) and (r.best.start, r.best.end) == (0, 2)


def test_expected_f1_choice_answers_the_span_the_nbest_agrees_on(tok):
    passage = "甲乙丙丁戊己庚辛"
    w = _win([None] + [(i, i + 1) for i in range(8)] + [None])  # one token per character
    s = np.full(10, -9.0); e = np.full(10, -9.0)  # noqa: E702
    s[0] = e[0] = 0.0  # the null score
    s[1] = e[1] = 3.0  # 甲 alone: the best single span (score 6)
    s[5] = s[6] = 2.6; e[7] = e[8] = 2.6  # noqa: E702  four overlapping spans around 己庚 (5.2 each)
    win = [(w, s, e, 0.9)]
    by_score = decode(win, passage, n_best=10, max_answer_length=4)
    by_ef1 = decode(win, passage, n_best=10, max_answer_length=4, choice="expected_f1")
    assert by_score.best.text == "甲" and by_ef1.best.text in {"戊己庚", "戊己庚辛", "己庚", "己庚辛"}
    # the same candidates and no-answer signals either way; only the order (and so the answer) differs
    assert sorted(c.text for c in by_score.nbest) == sorted(c.text for c in by_ef1.nbest)
    assert (by_score.null_diff, by_score.p_answerable) == (by_ef1.null_diff, by_ef1.p_answerable) == (6.0, 0.9)
    # expected_f1: the answer's F1 against the n-best weighted by probability, higher for the consensus span
    assert 0.0 < by_score.expected_f1 < by_ef1.expected_f1 <= 1.0
    assert by_score.expected_f1 == pytest.approx(by_score.best.prob, abs=1e-4)  # 甲 overlaps only unlikely ones
    with pytest.raises(ValueError, match="span choice 'mbr' not in score, expected_f1"):
        decode(win, passage, choice="mbr")
    # the setting reaches decoding through the predictor, and the commands' option is an override
    from bertfam.runners.mrc import MRCPredictorOptions

    m = tiny_span_model(tok)
    pred = MRCPredictor(m, settings_of(m, span_choice="expected_f1", max_length=48, doc_stride=16))
    raw = pred.raw_scores([{"question": "价格", "passage": "售价６９９９元，华为于2020年发布。"}])[0]
    assert raw.expected_f1 == pytest.approx(max(_expected(raw.nbest)))
    assert MRCPredictorOptions(span_choice="expected_f1").overrides() == {"span_choice": "expected_f1"}
    assert MRCPredictorOptions(length_bonus=1.5).overrides() == {"length_bonus": 1.5}


def _expected(nbest):
    """Each candidate's expected F1, written out pair by pair."""
    def f1(a, b):
        o = max(0, min(a.end, b.end) - max(a.start, b.start))
        return 2 * o / ((a.end - a.start) + (b.end - b.start))
    return [sum(b.prob * f1(a, b) for b in nbest) for a in nbest]


def test_window_logits_cut_each_window_to_its_tokens():
    from bertfam.tasks.mrc import window_logits

    W = namedtuple("W", "input_ids")
    wins = [W([1, 2, 3]), W([1, 2, 3, 4, 5])]
    start, end = torch.arange(10.0).view(2, 5), -torch.arange(10.0).view(2, 5)
    out = window_logits(wins, start, end, torch.tensor([0.25, 0.75]))
    assert [w for w, *_ in out] == wins
    assert out[0][1].tolist() == [0, 1, 2] and out[1][2].tolist() == [-5, -6, -7, -8, -9]
    assert [p for *_, p in out] == [0.25, 0.75]
    assert [p for *_, p in window_logits(wins, start, end)] == [None, None]


def test_the_mrc_package_exports_the_names_of_the_old_module():
    """tasks/mrc.py became a package (predictor, decoding, ensemble, thresholds, training, scoring); what the
    one module offered is still importable from bertfam.tasks.mrc."""
    import bertfam.tasks.mrc as mrc

    names = ("NO_ANSWER MRCPredictor VotingEnsemble same_tokenizer decode answered load_predictor "
             "predictor_from_models predict_examples tune_thresholds tune_on_raw save_thresholds load_span_model "
             "train_mrc score_examples").split()
    assert [n for n in names if not hasattr(mrc, n)] == []
    # the defaults of the decoding settings are config.MRCSettings' fields alone (no second name for them)
    assert not [n for n in dir(mrc) if n.startswith("DEFAULT_")]


def test_training_a_model_whose_verifier_is_missing_scores_the_reader_alone(tok, tmp_path, caplog):
    """A checkpoint whose head.mrc names a verifier directory that is not there (e.g. a model taken out of
    git history, which never holds the verifier) still trains: the dev evaluations and the threshold tuning
    use the reader's own tests, said once before training; not an error at the first epoch's end."""
    import dataclasses

    from bertfam.data.mrc import read_mrc
    from bertfam.tasks.mrc import train_mrc
    from bertfam.training import TrainConfig

    m = tiny_span_model(tok)
    m.config.head = dataclasses.replace(m.config.head, mrc=MRCSettings(verifier="verifier"))
    m.save_pretrained(str(tmp_path / "base"), tokenizer=tok)
    base = bertfam.from_pretrained(str(tmp_path / "base"))
    assert base.config.head.mrc_settings.verifier == "verifier" and not (tmp_path / "base" / "verifier").exists()
    exs, _ = read_mrc(os.path.join(MRC, "cmrc2018_trial_cut.json"), mode="train")
    with caplog.at_level("WARNING", logger="bertfam"):
        s = train_mrc(base, exs, str(tmp_path / "run"), exs[:3], max_length=64, doc_stride=16,
                      train=TrainConfig(epochs=1, batch_size=8, progress=False))
    assert s["last_eval"]["questions"] == 3 and "thresholds" in s
    said = [r.message for r in caplog.records if "verifier" in r.message]
    assert len(said) == 2 and "score the reader alone" in said[0], said  # + once for all the saves
    assert "written without it" in said[1]
    # the trained model still names it: build-verifier can build it there, and predicting says what is missing
    assert bertfam.from_pretrained(str(tmp_path / "run")).config.head.mrc_settings.verifier == "verifier"


# ------------------------------------------------------------------ settings and typed results
def test_a_settings_override_changes_the_given_field_and_keeps_the_rest(tok):
    from bertfam.runners.mrc import MRCPredictorOptions

    m = tiny_span_model(tok)
    m.config.head.mrc = MRCSettings(max_length=96, doc_stride=24, n_best=7, null_threshold=1.5,
                                    answer_extension="clause")
    s = settings_of(m, max_answer_length=30)
    assert s == dataclasses.replace(m.config.head.mrc, max_answer_length=30)
    assert MRCPredictor(m, s).settings == s
    assert MRCPredictor(m).settings == m.config.head.mrc  # None: the model's own
    # an ensemble: the first model's windows and decoding, the members' mean thresholds
    m2 = tiny_span_model(tok, 2)
    m2.config.head.mrc = MRCSettings(max_length=64, null_threshold=0.5, answerable_threshold=0.25)
    both = MRCPredictor([m, m2]).settings
    assert (both.max_length, both.n_best, both.null_threshold, both.answerable_threshold) == (96, 7, 1.0, 0.375)
    # the windows are cut to the model's positions
    assert MRCPredictor(m, settings_of(m, max_length=4096)).settings.max_length == m.config.max_sequence_length
    # the commands' options are overrides of the fields they give
    kw = MRCPredictorOptions(max_answer_length=30, verifier=False).predictor_kw()
    assert kw == {"overrides": {"max_answer_length": 30}, "verifier": False, "batch_size": 32, "int8": False}
    # always_answer: the thresholds that let every span through, whatever the model's tuned ones
    strict = dataclasses.replace(m.config.head.mrc, null_threshold=1e9, answerable_threshold=1.0)
    m.config.head.mrc = strict
    item = {"question": "价格", "passage": "售价６９９９元，华为于2020年发布。"}
    assert not MRCPredictor(m).predict(**item).answerable
    over = MRCPredictorOptions(always_answer=True, n_best=5).overrides()
    assert over == {"n_best": 5, "null_threshold": -1e30, "answerable_threshold": 0.0, "verifier_threshold": -1.0}
    assert MRCPredictor(m, settings_of(m, **over)).predict(**item).answerable


def test_typed_results_give_the_json_shapes_of_before(tok):
    m = tiny_span_model(tok)
    pred = MRCPredictor(m, settings_of(m, max_length=48, doc_stride=16, null_threshold=-1e9, answerable_threshold=0.0))
    item = {"question": "价格", "passage": "售价６９９９元，华为于2020年发布。"}
    plain, detailed = pred.predict_batch([item])[0], pred.predict_batch([item], details=True)[0]
    assert list(plain.to_dict()) == ["answer", "start", "end", "score", "answerable"]
    d = detailed.to_dict()
    assert list(d) == ["answer", "start", "end", "score", "answerable", "nbest", "null_diff", "p_answerable",
                       "relevance"]
    assert list(d["nbest"][0]) == ["text", "start", "end", "score", "prob"] and d["answer"] == d["nbest"][0]["text"]
    blank = pred.predict_batch([{"question": " ", "passage": "x"}], details=True)[0].to_dict()
    assert blank == {"answer": None, "start": None, "end": None, "score": 1.0, "answerable": False, "nbest": [],
                     "null_diff": -math.inf, "p_answerable": None, "relevance": None}
    raw = pred.raw_scores([item])[0]
    assert list(raw.to_dict()) == ["nbest", "null_diff", "p_answerable", "relevance", "expected_f1"]
    assert RawScores.from_dict(json.loads(json.dumps(raw.to_dict()))) == raw  # as kept fold files are read back
    assert pred.decide(raw, details=True) == detailed


def test_a_bad_setting_is_one_config_error_line(tok):
    from bertfam import ConfigError, DataError

    m = tiny_span_model(tok)
    cases = [(lambda: settings_of(m, max_answer_length=0), "head.mrc.max_answer_length must be a positive integer"),
             (lambda: settings_of(m, answer_extension="word"), "head.mrc.answer_extension must be one of"),
             (lambda: settings_of(m, span_choice="mbr"), "head.mrc.span_choice must be one of score, expected_f1"),
             (lambda: settings_of(m, max_answer_len=30), r"head.mrc: unknown field\(s\) max_answer_len"),
             (lambda: MRCPredictor(m, {"max_length": 64}), "MRCPredictor: settings must be an MRCSettings")]
    for make, message in cases:
        with pytest.raises(ConfigError, match="^" + message) as e:
            make()
        assert "\n" not in str(e.value)
    bad = settings_of(m)
    bad.n_best = -1  # set after construction: the predictor checks its settings again
    with pytest.raises(ConfigError, match=r"^head.mrc.n_best must be a positive integer, got -1$"):
        MRCPredictor(m, bad)
    with pytest.raises(DataError, match="^kept.json: not MRC raw scores"):
        RawScores.from_dict({"nbest": []}, "kept.json")


# ------------------------------------------------------------------ reading with and without the title
def test_average_reads_averages_each_passage_token_with_its_titled_twin():
    from bertfam.tasks.mrc.predictor import average_reads

    titled = _win([None, None, None, (0, 1), (1, 2), None])  # [CLS] question [SEP] title passage... [SEP]
    plain = _win([None, None, (0, 1), (1, 2), (2, 3), None])  # (2, 3): a token the titled read never held
    ts, te = np.array([2.0, 0, 0, 4.0, 0, -9]), np.array([1.0, 0, 0, 0, 6.0, -9])
    ps, pe = np.array([0.0, 0, 2.0, 0, 3.0, -9]), np.array([3.0, 0, 0, 2.0, 1.0, -9])
    (w, s, e, p), = average_reads([(titled, ts, te, 0.9)], [(plain, ps, pe, 0.5)])
    assert w is plain and p == pytest.approx(0.7)
    assert s.tolist() == [1.0, 0, 3.0, 0, 3.0, -9] and e.tolist() == [2.0, 0, 0, 4.0, 1.0, -9]
    assert ps.tolist() == [0.0, 0, 2.0, 0, 3.0, -9]  # the reads themselves are left as they were
    # two titled windows holding one token: their mean is its titled logit; [CLS]: their mean too
    (_, s, _, _), = average_reads([(titled, ts, te, 0.9), (titled, ts + 2, te, 0.2)], [(plain, ps, pe, None)])
    assert s.tolist() == [(0 + 3) / 2, 0, (2 + 5) / 2, (0 + 1) / 2, 3.0, -9]


def test_title_ensemble_reads_titled_questions_twice_and_others_once(tok):
    from bertfam.serving.budget import token_counts
    from bertfam.tasks.mrc.predictor import average_reads
    from bertfam.tasks.pipelines import MRCPipeline

    m = tiny_span_model(tok)
    kw = dict(max_length=48, doc_stride=16, null_threshold=-1e9, answerable_threshold=0.0)
    passage = "华为Mate 40 Pro于2020年10月发布，售价６９９９元。" * 2  # two windows either way
    items = [{"question": "华为什么时候发布？", "passage": passage, "title": "华为手机"},
             {"question": "售价多少？", "passage": passage, "title": " "}]
    both = MRCPredictor(m, settings_of(m, title_ensemble=True, **kw)).window_scores(items)
    titled = MRCPredictor(m, settings_of(m, **kw)).window_scores(items)
    plain = MRCPredictor(m, settings_of(m, use_title=False, **kw)).window_scores(items)
    want = average_reads(titled[0], plain[0])
    assert len(both[0]) == len(want) >= 2
    for (w1, s1, e1, p1), (w2, s2, e2, p2) in zip(both[0], want):
        assert w1.input_ids == w2.input_ids and p1 == pytest.approx(p2, abs=1e-6)
        np.testing.assert_allclose(s1, s2, atol=1e-5)
        np.testing.assert_allclose(e1, e2, atol=1e-5)
    assert not np.allclose(both[0][0][1], plain[0][0][1], atol=1e-3)  # the title changed the logits it averages
    for (_, s1, _, _), (_, s2, _, _) in zip(both[1], titled[1]):  # a blank title: one read, as before
        np.testing.assert_allclose(s1, s2, atol=1e-5)
    # the service's token budget counts the second read
    m.config.head.mrc = dataclasses.replace(m.config.head.mrc_settings, **kw)
    pipe = MRCPipeline(m)
    once = token_counts(pipe, items)
    pipe.inner.settings = dataclasses.replace(pipe.inner.settings, title_ensemble=True)
    twice = token_counts(pipe, items)
    assert twice[1] == once[1] and twice[0] > once[0] + sum(len(w.input_ids) for w, *_ in plain[0]) - 1
