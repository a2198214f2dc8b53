"""Cross-validation on real MRC questions (bertfam.tasks.mrc.crossval): folds that share no passage, question
or title; decoding and thresholds chosen out of fold; the bootstrap interval."""
import dataclasses
import json
import math
import random

import numpy as np
import pytest

from bertfam.data.mrc import MRCAnswer, MRCExample
from bertfam.errors import ConfigError
from bertfam.tasks.mrc import NO_ANSWER
from bertfam.tasks.mrc.answerability import FEATURES
from bertfam.tasks.mrc.crossval import (assign_folds, bootstrap_interval, breakdown, fold_sizes, leaks,
                                        tune_out_of_fold)
from bertfam.tasks.mrc.results import RawScores, SpanCandidate


def _examples(n=120, seed=0):
    """Checklist-like examples: passages asked several questions, titles shared by several passages,
    repeated question texts on other passages (as the checklist's same-topic unanswerable ones are)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        passage = f"passage {rng.randrange(n)}"
        title = f"title {rng.randrange(n)}" if rng.random() < 0.3 else ""
        question = f"question {rng.randrange(2 * n)}"
        imp = rng.random() < 0.5
        out.append(MRCExample(f"q{i}", question, passage, title, [] if imp else [MRCAnswer("pass", 0)], imp, "in-domain"))
    return out


def test_folds_share_no_passage_question_or_title():
    exs = _examples()
    folds = assign_folds(exs, 5, seed=3)
    assert leaks(exs, folds) == []
    assert leaks(exs, [i % 5 for i in range(len(exs))]) != []  # the fixture does share texts across questions
    for key in ("context", "question"):
        where = {}
        for e, f in zip(exs, folds):
            where.setdefault(getattr(e, key), set()).add(f)
        assert all(len(v) == 1 for v in where.values())
    assert set(folds) <= set(range(5))


def test_leaks_finds_a_shared_passage():
    exs = _examples(20)
    folds = [0] * 10 + [1] * 10
    exs[15] = MRCExample("x", "other", exs[0].context, "")
    assert any("passage" in s for s in leaks(exs, folds))


def test_folds_are_balanced_and_seeded():
    exs = [MRCExample(f"q{i}", f"question {i}", f"passage {i // 2}", "", [], i % 3 == 0) for i in range(100)]
    folds = assign_folds(exs, 5, seed=1)
    sizes = fold_sizes(exs, folds)
    assert [n for n, _ in sizes.values()] == [20] * 5
    assert max(u for _, u in sizes.values()) - min(u for _, u in sizes.values()) <= 2
    assert assign_folds(exs, 5, seed=1) == folds and assign_folds(exs, 5, seed=2) != folds


def test_folds_refuse_too_few_groups():
    exs = [MRCExample(f"q{i}", f"q{i}", "one passage", "") for i in range(10)]
    with pytest.raises(ConfigError, match="cannot fill"):
        assign_folds(exs, 5)
    with pytest.raises(ConfigError):
        assign_folds(exs, 1)


def _raw(text, diff, p=0.5):
    return RawScores((SpanCandidate(text, 0, len(text), diff, 1.0),), diff, p)


def _tuning_case(n=100, seed=0):
    """Answerable questions score null_diff ~ +1, unanswerable ~ -1 (noisy); setting "good" answers with the
    reference, "bad" with a wrong text."""
    rng = np.random.default_rng(seed)
    exs, good, bad = [], [], []
    for i in range(n):
        imp = i % 2 == 0
        exs.append(MRCExample(f"q{i}", f"question {i}", f"passage {i}", "", [] if imp else [MRCAnswer("甲乙丙", 0)], imp))
        d = float(rng.normal(-1 if imp else 1, 0.7))
        good.append(_raw("甲乙丙", d))
        bad.append(_raw("丁戊", d))
    return exs, {"bad": bad, "good": good}


def test_out_of_fold_tuner_picks_the_better_setting_and_scores_each_fold_out_of_fold():
    exs, cands = _tuning_case()
    folds = [i % 5 for i in range(len(exs))]
    res = tune_out_of_fold(cands, exs, folds, rules=("null",))
    assert all(c["setting"] == "good" for c in res["choices"].values())
    assert res["pooled"]["setting"] == "good"
    # every answer follows its own fold's thresholds
    for i, (e, f) in enumerate(zip(exs, folds)):
        c = res["choices"][f]
        expect = "甲乙丙" if cands["good"][i].null_diff > c["null_threshold"] else NO_ANSWER
        assert res["answers"][i] == expect
    assert 0.5 < res["f1"].mean() < 1.0 and len(res["em"]) == len(exs)


def test_kept_fold_files_load_and_write_back_byte_for_byte():
    """recipes/mrc_checklist_cv.py keeps each fold's raw scores on disk ({setting: [raw scores per question]},
    OUT/foldF.raw.json); files written when raw scores were plain dicts load into RawScores and write back
    the same bytes."""
    kept = ('{"none/8": [{"nbest": [{"text": "甲乙丙", "start": 0, "end": 3, "score": 1.25, "prob": 1.0}], '
            '"null_diff": 0.75, "p_answerable": 0.5, "relevance": null}, '
            '{"nbest": [], "null_diff": -Infinity, "p_answerable": null, "relevance": 0.25}]}')
    raws = {k: [RawScores.from_dict(r, "fold0.raw.json") for r in v] for k, v in json.loads(kept).items()}
    assert raws["none/8"][0].best == SpanCandidate("甲乙丙", 0, 3, 1.25, 1.0)
    assert raws["none/8"][1].null_diff == -math.inf and raws["none/8"][1].relevance == 0.25
    assert json.dumps({k: [r.to_dict() for r in v] for k, v in raws.items()}, ensure_ascii=False) == kept


def test_a_folds_own_predictions_never_choose_its_thresholds():
    exs, cands = _tuning_case(seed=1)
    folds = [i % 4 for i in range(len(exs))]
    before = tune_out_of_fold(cands, exs, folds, rules=("null",))
    # make fold 0's unanswerable questions look answerable: only the other folds' choices may move
    moved = {k: [dataclasses.replace(r, null_diff=r.null_diff + 5) if folds[i] == 0 and exs[i].is_impossible else r
                 for i, r in enumerate(v)] for k, v in cands.items()}
    after = tune_out_of_fold(moved, exs, folds, rules=("null",))
    assert after["choices"][0]["null_threshold"] == before["choices"][0]["null_threshold"]
    assert any(after["choices"][f]["null_threshold"] != before["choices"][f]["null_threshold"] for f in (1, 2, 3))
    # and fold 0 then answers its unanswerable questions, which costs it F1
    f0 = [i for i, f in enumerate(folds) if f == 0]
    assert after["f1"][f0].mean() < before["f1"][f0].mean()


def test_fused_rule_uses_only_the_features_asked_for():
    """tune_out_of_fold(features=...): the fused answerability model of every fold and of the pooled choice
    is fitted on those inputs only; the null score alone separates this case, the title match cannot."""
    exs, cands = _tuning_case(seed=2)
    exs = [dataclasses.replace(e, title="北京" if i % 3 else "") for i, e in enumerate(exs)]  # title: noise
    folds = [i % 5 for i in range(len(exs))]
    res = tune_out_of_fold(cands, exs, folds, rules=("fused",), features=("null_diff", "has_title"))
    fits = [c["fusion"] for c in res["choices"].values()] + [res["pooled"]["fusion"]]
    assert all(f["features"] == ["null_diff", "has_title"] and len(f["coef"]) == 2 for f in fits)
    assert all(abs(f["coef"][0]) > 3 * abs(f["coef"][1]) for f in fits)  # the null score carries it
    default = tune_out_of_fold(cands, exs, folds, rules=("fused",))
    assert len(default["pooled"]["fusion"]["features"]) == len(FEATURES)


def test_choices_tuned_on_one_read_apply_to_another():
    """tune_out_of_fold(applied=...): every fold's setting, rule and thresholds come from `candidates` (the
    read the model was tuned with) and are applied to another read of the same questions: the choices are
    those of the run without it, the answers and scores the other read's."""
    exs, cands = _tuning_case(seed=3)
    folds = [i % 5 for i in range(len(exs))]
    # the other read: the same null scores, the good setting's answers replaced by a wrong text
    other = {"bad": cands["bad"], "good": [dataclasses.replace(r, nbest=(SpanCandidate("庚", 0, 1, 1.0, 1.0),))
                                           for r in cands["good"]]}
    plain = tune_out_of_fold(cands, exs, folds, rules=("null",))
    mixed = tune_out_of_fold(cands, exs, folds, rules=("null",), applied=other)
    assert mixed["choices"] == plain["choices"] and mixed["pooled"] == plain["pooled"]
    assert all(a in ("庚", NO_ANSWER) for a in mixed["answers"])
    assert "庚" in mixed["answers"] and mixed["f1"].mean() < plain["f1"].mean()
    assert [a == NO_ANSWER for a in mixed["answers"]] == [a == NO_ANSWER for a in plain["answers"]]
    # itself as the other read changes nothing
    same = tune_out_of_fold(cands, exs, folds, rules=("null",), applied=cands)
    assert same["answers"] == plain["answers"]


def test_fused_choices_apply_their_fitted_model_to_the_other_read():
    """With rule "fused" the model fitted on `candidates` scores the other read: raising every answerable
    question's null score there (and only there) makes the fold models answer more, never refits them."""
    exs, cands = _tuning_case(seed=4)
    folds = [i % 5 for i in range(len(exs))]
    plain = tune_out_of_fold(cands, exs, folds, rules=("fused",))
    lifted = {k: [dataclasses.replace(r, null_diff=r.null_diff + 3) for r in v] for k, v in cands.items()}
    mixed = tune_out_of_fold(cands, exs, folds, rules=("fused",), applied=lifted)
    assert [c["fusion"] for c in mixed["choices"].values()] == [c["fusion"] for c in plain["choices"].values()]
    n_ans = lambda r: sum(a != NO_ANSWER for a in r["answers"])  # noqa: E731
    assert n_ans(mixed) > n_ans(plain)
    assert all(p2 >= p1 for p1, p2 in zip(plain["p_answerable"], mixed["p_answerable"]))


def test_out_of_fold_tuner_checks_its_inputs():
    exs, cands = _tuning_case(10)
    with pytest.raises(ConfigError, match="one entry per example"):
        tune_out_of_fold(cands, exs, [0, 1] * 4)
    with pytest.raises(ConfigError, match="rule"):
        tune_out_of_fold(cands, exs, [0, 1] * 5, rules=("nope",))
    with pytest.raises(ConfigError, match="no decoding setting"):
        tune_out_of_fold({}, exs, [0, 1] * 5)
    with pytest.raises(ConfigError, match="applied"):
        tune_out_of_fold(cands, exs, [0, 1] * 5, applied={"good": cands["good"]})
    with pytest.raises(ConfigError, match="applied"):
        tune_out_of_fold(cands, exs, [0, 1] * 5, applied={k: v[:9] for k, v in cands.items()})


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_questions():
    rng = np.random.default_rng(0)
    small, large = rng.random(50), rng.random(2000)
    lo, hi = bootstrap_interval(small, 2000)
    assert lo < 100 * small.mean() < hi
    lo2, hi2 = bootstrap_interval(large, 2000)
    assert (hi2 - lo2) < (hi - lo) / 3
    # the standard error of a mean of 0/1 scores at p=0.5 over 50 questions is ~7 points: interval ~ +-14
    coin = np.array([0.0, 1.0] * 25)
    lo3, hi3 = bootstrap_interval(coin, 4000)
    assert math.isclose(hi3 - lo3, 2 * 1.96 * 100 * 0.5 / math.sqrt(50), rel_tol=0.15)
    with pytest.raises(ConfigError):
        bootstrap_interval([])


def test_breakdown_per_answerability_and_type():
    exs, cands = _tuning_case(10)
    answers = [NO_ANSWER if e.is_impossible else "甲乙丙" for e in exs]
    f1 = np.ones(10)
    t = breakdown(exs, f1, f1, answers)
    assert t["all"]["n"] == 10 and t["all"]["F1"] == 100.0 and t["all"]["baseline_F1"] == 50.0
    assert t["answerable"]["answered"] == 5 and t["unanswerable"]["answered"] == 0
    assert t["type ?"]["n"] == 10


def _recipe_command(tmp_path):
    """(OUT, the recipes/mrc_checklist_cv.py command line) for the 8-question checklist fixture, 2 folds of 2
    steps, with a tiny random span model saved as --base."""
    import os
    import sys

    import bertfam
    from bertfam import HeadConfig, Tokenizer, preset
    from bertfam.config import MRCSettings

    from .conftest import ZH_VOCAB

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", answerability=True, mrc=MRCSettings(max_length=128, doc_stride=64)))
    base = tmp_path / "base"
    bertfam.build_model(cfg, seed=0).save_pretrained(str(base), tokenizer=tok)
    out = tmp_path / "cv"
    return out, [sys.executable, os.path.join(root, "recipes", "mrc_checklist_cv.py"), "--out", str(out),
                 "--base", str(base), "--data", os.path.join(root, "tests", "fixtures", "mrc", "checklist_demo_cut.json"),
                 "--folds", "2", "--steps", "2", "--batch-size", "4", "--extra", "", "--max-length", "128",
                 "--doc-stride", "64", "--threads", "1",
                 # two of the four extensions: the search over settings is what takes the time on 8 questions
                 "--extensions", "none,sentence"]


def test_the_cross_validation_recipe_end_to_end(tmp_path):
    """recipes/mrc_checklist_cv.py on the 8-question checklist fixture with a tiny span model: 2 folds, 2
    steps each, then the final model with the pooled choice and the cross-validation record that `bertfam
    demo` prints; a second run reuses every fold's predictions (resumable)."""
    import json
    import os
    import subprocess
    import sys

    import bertfam

    out, cmd = _recipe_command(tmp_path)
    cmd = cmd + ["--final"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "== reader: out-of-fold F1" in r.stdout and "pooled choice" in r.stdout
    folds = json.load(open(out / "folds.json"))
    assert sorted(set(folds.values())) == [0, 1] and len(folds) == 8
    cv = json.load(open(out / "cv.json"))
    assert {x["label"] for x in cv["reports"]} >= {"reader", "fused signals (logistic regression)"}
    assert set(cv["signals"]["auc"]) == {"null_diff", "p_answerable"}
    final = bertfam.from_pretrained(str(out / "final"))
    rec = final.config.head.info["cross_validation"]
    assert rec["questions"] == 8 and rec["folds"] == 2 and rec["baseline_f1"] == 50.0
    best = next(x for x in cv["reports"] if x["label"] == cv["best"])
    assert rec["oof_f1"] == best["oof_f1"]
    mrc = final.config.head.mrc
    ext, length, *penalty = best["pooled"]["setting"].split("/")
    assert (mrc.answer_extension, mrc.max_answer_length) == (ext, int(length)) and mrc.verifier is None
    assert mrc.question_overlap_penalty == (float(penalty[0][1:]) if penalty else 0.0)
    assert (mrc.answerability is not None) == (best["pooled"]["rule"] == "fused")
    # rerun: every fold's predictions and the final model are reused, the same table comes out
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "held out" not in again.stderr
    assert json.load(open(out / "cv.json"))["reports"][0]["oof_f1"] == cv["reports"][0]["oof_f1"]
    # a new decoding setting: the kept fold models score their folds again, nothing is retrained
    more = subprocess.run(cmd + ["--overlap-penalties", "0,2,5,9"], capture_output=True, text=True, timeout=300)
    assert more.returncode == 0 and "held out" in more.stderr and "trained" not in more.stderr, more.stderr[-2000:]
    assert "none/8/q9" in json.load(open(out / "fold0.raw.json"))
    # a smaller search space: only its settings are chosen from, the kept fold files are reused as they are
    small = subprocess.run(cmd + ["--extensions", "none", "--lengths", "16,48", "--overlap-penalties", "0"],
                           capture_output=True, text=True, timeout=300)
    assert small.returncode == 0 and "held out" not in small.stderr, small.stderr[-2000:]
    chosen = {c["setting"] for rep in json.load(open(out / "cv.json"))["reports"]
              for c in [rep["pooled"], *rep["folds"].values()]}
    assert chosen and chosen <= {"none/16", "none/48"}, chosen
    # the n-best's consensus span as the answer: the fold files hold both span choices, only this one is chosen
    ef1 = subprocess.run(cmd + ["--extensions", "none", "--span-choices", "expected_f1"], capture_output=True,
                         text=True, timeout=300)
    assert ef1.returncode == 0 and "held out" not in ef1.stderr, ef1.stderr[-2000:]
    chosen = {c["setting"] for rep in json.load(open(out / "cv.json"))["reports"]
              for c in [rep["pooled"], *rep["folds"].values()]}
    assert chosen and all(c.startswith("none/") and c.endswith("/ef1") for c in chosen), chosen
    assert bertfam.from_pretrained(str(out / "final")).config.head.mrc.span_choice == "expected_f1"
    badc = subprocess.run(cmd + ["--span-choices", "mbr"], capture_output=True, text=True, timeout=300)
    assert badc.returncode == 2 and badc.stderr.strip().splitlines()[-1].startswith("--span-choices: 'mbr'")
    badx = subprocess.run(cmd + ["--extra", "robust-swop:10"], capture_output=True, text=True, timeout=300)
    assert badx.returncode == 2 and badx.stderr.strip().splitlines()[-1].startswith("--extra: 'robust-swop'")
    bad = subprocess.run(cmd + ["--extensions", "none,word"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("--extensions: 'none,word'")
    # the fused model without the title features: any fused fit it reports has none of them
    notitle = subprocess.run(cmd + ["--extensions", "none", "--fused-features", "no-title"], capture_output=True,
                             text=True, timeout=300)
    assert notitle.returncode == 0, notitle.stderr[-2000:]
    fits = [c["fusion"] for rep in json.load(open(out / "cv.json"))["reports"]
            for c in [rep["pooled"], *rep["folds"].values()] if c.get("fusion")]
    assert all("title_in_q" not in f["features"] and "null_diff" in f["features"] for f in fits)
    # the optional word-level features on top of the default set
    words = subprocess.run(cmd + ["--extensions", "none", "--fused-features", "all+words"], capture_output=True,
                           text=True, timeout=300)
    assert words.returncode == 0, words.stderr[-2000:]
    fits = [c["fusion"] for rep in json.load(open(out / "cv.json"))["reports"]
            for c in [rep["pooled"], *rep["folds"].values()] if c.get("fusion")]
    assert fits and all(f["features"][-3:] == ["q_words_in_passage", "q_words_in_title", "q_missing_word_log_len"]
                        and "title_in_q" in f["features"] for f in fits)
    cues = subprocess.run(cmd + ["--extensions", "none", "--fused-features", "all+cues"], capture_output=True,
                          text=True, timeout=300)
    assert cues.returncode == 0, cues.stderr[-2000:]
    fits = [c["fusion"] for rep in json.load(open(out / "cv.json"))["reports"]
            for c in [rep["pooled"], *rep["folds"].values()] if c.get("fusion")]
    assert fits and all(f["features"][-3:] == ["q_asks_how", "q_asks_yes_no", "q_asks_entity"] for f in fits)
    badf = subprocess.run(cmd + ["--fused-features", "null_diff,titel"], capture_output=True, text=True, timeout=300)
    assert badf.returncode == 2 and badf.stderr.strip().splitlines()[-1].startswith("--fused-features: 'null_diff,titel'")
    # recipes/mrc_final_vs_folds.py: the final model and each fold model under the final model's settings
    check = [sys.executable, os.path.join(os.path.dirname(cmd[1]), "mrc_final_vs_folds.py"), str(out),
             "--data", cmd[cmd.index("--data") + 1], "--threads", "1"]
    fv = subprocess.run(check, capture_output=True, text=True, timeout=300)
    assert fv.returncode == 0, fv.stderr[-2000:]
    rows = {ln.split()[0]: ln.split()[1:] for ln in fv.stdout.splitlines()[2:]}
    assert set(rows) == {"final", "fold0", "fold1"} and "8 questions (4 answerable)" in fv.stdout, fv.stdout
    assert all(int(r[0]) == int(r[1]) + int(r[2]) and 0 <= float(r[4]) <= 100 for r in rows.values())
    same = subprocess.run(check + ["--model", str(out / "fold0")], capture_output=True, text=True, timeout=300)
    srows = {ln.split()[0]: ln.split()[1:] for ln in same.stdout.splitlines()[2:]}
    assert srows["final"] == srows["fold0"], same.stdout  # one model under one set of settings: one row
    nofold = subprocess.run(check[:2] + [str(tmp_path), "--data", check[4]], capture_output=True, text=True,
                            timeout=300)
    assert nofold.returncode == 2 and nofold.stderr.strip().startswith("mrc_final_vs_folds: ") \
        and len(nofold.stderr.strip().splitlines()) == 1, nofold.stderr


def test_the_recipes_folds_split_between_processes(tmp_path):
    """--only-folds with 'final': one process trains fold 1 and the final model, another fold 0 (each as
    with --threads 1 side by side); a run with --final then trains nothing, builds the table from the kept
    fold files and writes the choice into the final model the first process trained. A bad entry: one
    line, exit 2."""
    import json
    import os
    import subprocess
    import sys

    import bertfam

    out, cmd = _recipe_command(tmp_path)
    cmd = cmd + ["--extensions", "none", "--lengths", "16", "--overlap-penalties", "0"]
    first = subprocess.run(cmd + ["--only-folds", "1,final"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "1 of 2 folds done" in first.stderr and "== reader" not in first.stdout
    assert (out / "fold1.raw.json").is_file() and not (out / "fold0.raw.json").exists()
    weights = (out / "final" / "model.safetensors").read_bytes()
    info = out / "final" / "training_info.json"
    assert not info.exists() or "cross_validation" not in info.read_text()  # no choice written yet
    second = subprocess.run(cmd + ["--only-folds", "0"], capture_output=True, text=True, timeout=300)
    assert second.returncode == 0 and (out / "fold0.raw.json").is_file(), second.stderr[-2000:]
    last = subprocess.run(cmd + ["--final"], capture_output=True, text=True, timeout=300)
    assert last.returncode == 0 and "held out" not in last.stderr and "trained" not in last.stderr, last.stderr[-2000:]
    assert "== reader: out-of-fold F1" in last.stdout
    assert (out / "final" / "model.safetensors").read_bytes() == weights  # loaded, not trained again
    rec = bertfam.from_pretrained(str(out / "final")).config.head.info["cross_validation"]
    assert rec["questions"] == 8 and rec["folds"] == 2
    for bad in ("2", "0,last"):
        r = subprocess.run(cmd + ["--only-folds", bad], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(f"--only-folds: {bad!r}"), r.stderr


def test_the_recipes_base_weight_mixes_each_fold_model_with_the_base(tmp_path):
    """--base-weight A: the fold model saved (and predicting) is A x --base + (1 - A) x the model as trained;
    the same fold trained without it gives the unmixed weights (training is seeded). Outside [0, 1]: one
    line, exit 2."""
    import subprocess

    import torch
    from safetensors.torch import load_file

    out, cmd = _recipe_command(tmp_path)
    cmd = cmd + ["--extensions", "none", "--lengths", "16", "--overlap-penalties", "0", "--only-folds", "0"]
    plain = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    mixed_out = tmp_path / "cv-mixed"
    mixed = subprocess.run([x if x != str(out) else str(mixed_out) for x in cmd] + ["--base-weight", "0.5"],
                           capture_output=True, text=True, timeout=300)
    assert mixed.returncode == 0 and "0.5 x base + 0.5 x fine-tuned" in mixed.stderr, mixed.stderr[-2000:]
    base = load_file(str(tmp_path / "base" / "model.safetensors"))
    tuned = load_file(str(out / "fold0" / "model.safetensors"))
    mix = load_file(str(mixed_out / "fold0" / "model.safetensors"))
    moved = [k for k in tuned if tuned[k].is_floating_point() and not torch.allclose(tuned[k], base[k])]
    assert moved  # training changed the weights, so the check below can fail
    for k in moved:
        assert torch.allclose(mix[k], 0.5 * base[k] + 0.5 * tuned[k], atol=1e-6), k
    assert (mixed_out / "fold0.raw.json").read_text() != (out / "fold0.raw.json").read_text()
    bad = subprocess.run(cmd + ["--base-weight", "1.5"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == "--base-weight: 1.5 is not in [0, 1]"
    # --fused-extra: a set the folds also train on, or an unknown one, is one line and exit 2
    for spec, extra, want in (("trial-sent:10", "trial:5", "--fused-extra: trial is in --extra too"),
                              ("trail:10", "", "--fused-extra: 'trail' not in")):
        r = subprocess.run(cmd + ["--fused-extra", spec, "--extra", extra], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(want), r.stderr[-500:]


def test_the_verifier_cross_validation_recipe_feeds_the_reader_recipe(tmp_path):
    """recipes/mrc_verifier_cv.py on the 8-question fixture with a tiny encoder: per fold a pair classifier
    with its bottom layer frozen, fused with a cosine verifier out of fold, one score per question, the
    final model's int8 delta (only the trained tensors) and its fusion; recipes/mrc_checklist_cv.py
    --verifier RUN then uses those scores as its relevance signal (its AUC is reported) and tunes the
    verifier rules on them."""
    import json
    import os
    import subprocess
    import sys

    import bertfam
    from bertfam import HeadConfig, Tokenizer, preset
    from bertfam.config import MRCSettings
    from safetensors.torch import load_file

    from .conftest import ZH_VOCAB

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = os.path.join(root, "tests", "fixtures", "mrc", "checklist_demo_cut.json")
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    enc = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=2, max_position_embeddings=128)
    bertfam.build_model(enc, seed=0).save_pretrained(str(tmp_path / "enc"), tokenizer=tok)
    vcv = tmp_path / "vcv"
    r = subprocess.run([sys.executable, os.path.join(root, "recipes", "mrc_verifier_cv.py"), "--out", str(vcv),
                        "--base", str(tmp_path / "enc"), "--data", data, "--folds", "2", "--steps", "2",
                        "--batch-size", "4", "--extra", "", "--max-length", "128", "--freeze-layers", "1",
                        "--precision", "fp32", "--cosine", str(tmp_path / "enc"), "--threads", "1", "--final"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    oof = json.load(open(vcv / "oof.json"))
    assert len(oof) == 8 and all(0.0 <= x <= 1.0 for x in oof)
    assert "pooled out-of-fold AUC" in r.stdout
    assert set(json.load(open(vcv / "verifier_cv.json"))["auc"]) == {"pair", "cosine", "fused"}
    delta = load_file(str(vcv / "final" / "delta" / "delta.safetensors"))
    assert delta and all(k.startswith(("backbone.encoder.layers.1.", "backbone.pooler.", "classifier."))
                         for k in delta)
    assert any(k.endswith("weight_int8") for k in delta)  # the int8 verifier that was scored
    assert json.load(open(vcv / "final" / "delta" / "head.json"))["classifier_pooling"] == "mean"
    assert set(json.load(open(vcv / "final" / "delta" / "fusion.json"))) == {"weights", "bias"}
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", answerability=True, mrc=MRCSettings(max_length=128, doc_stride=64)))
    bertfam.build_model(cfg, seed=0).save_pretrained(str(tmp_path / "reader"), tokenizer=tok)
    cv = tmp_path / "cv"
    r = subprocess.run([sys.executable, os.path.join(root, "recipes", "mrc_checklist_cv.py"), "--out", str(cv),
                        "--base", str(tmp_path / "reader"), "--data", data, "--folds", "2", "--steps", "2",
                        "--batch-size", "4", "--extra", "", "--max-length", "128", "--doc-stride", "64",
                        "--threads", "1", "--verifier", str(vcv),
                        # one extension, no penalty (7 settings, not 84): the verifier's third threshold makes
                        # each setting's search slow, and the settings are not what this test is about
                        "--extensions", "none", "--overlap-penalties", "0"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.load(open(cv / "cv.json"))
    assert "relevance" in res["signals"]["auc"]
    labels = [x["label"] for x in res["reports"]]
    assert "reader + verifier rules" in labels and "fused signals without the verifier" in labels
    assert all(x["applied_auc"] is not None for x in res["reports"])
    # per-question records, for paired comparisons: a run against itself gains nothing on any question
    assert all(len(x["questions"]) == 8 and {q["qid"] for q in x["questions"]} == set(json.load(open(cv / "folds.json")))
               for x in res["reports"])
    r = subprocess.run([sys.executable, os.path.join(root, "recipes", "mrc_paired_compare.py"), str(cv / "cv.json"),
                        str(cv / "cv.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "B - A +0.0 [paired 95% +0.0, +0.0]" in r.stdout and "the same on 8" in r.stdout
    raws = json.load(open(cv / "fold0.raw.json"))
    folds = json.load(open(cv / "folds.json"))
    held = [i for i, f in enumerate(folds.values()) if f == 0]
    assert [r["relevance"] for r in raws["none/8"]] == [oof[i] for i in held]


def test_the_recipes_extra_sets_swap_and_definition_questions(tmp_path, monkeypatch, capsys):
    """recipes/mrc_checklist_cv.py --extra NAME-swap / NAME-def on a small made-up set: a swap rewrites
    "X是ANSWER" as "ANSWER是X。"; a definition question asks for "X，…，是Y的Z"'s predicate in the whole passage,
    answered by X, and no negative of it states that predicate (it would answer); a question is in one
    extra set only; an unknown kind is one line, exit 2."""
    import os
    import sys

    from bertfam.data.mrc import write_squad

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes"))
    import mrc_checklist_cv as cv

    def ex(qid, q, ctx, ans):
        return MRCExample(qid, q, ctx, answers=[MRCAnswer(ans, ctx.index(ans))])

    exs = [ex("a", "中国的首都是哪里", "中国位于亚洲东部，中国的首都是北京。", "北京"),
           ex("b", "巴黎在哪", "巴黎是法兰西共和国的首都，位于塞纳河畔。", "塞纳河畔"),
           ex("c", "柏林在哪", "柏林是德意志联邦共和国的首都，位于施普雷河畔。", "施普雷河畔"),
           ex("d", "鼠尾草属有多大", "鼠尾草属是唇形科中的一个属，约有900种。", "900种"),
           ex("e", "紫珠属有什么", "紫珠属是唇形科中的一个属，其中的植物主要是灌木。", "灌木")]
    path = tmp_path / "set.json"
    write_squad(exs, str(path))
    monkeypatch.setitem(cv.EXTRA, "toy", (str(path), "toy"))
    out = cv.extra_examples("toy-swap:5,toy-def:5", seed=0)
    swaps = [x for x in out if x.qid.endswith(":swap")]
    assert [(x.context, x.answers[0].text) for x in swaps] == [("北京是中国的首都。", "北京")]
    defs = [x for x in out if ":def" in x.qid and not x.is_impossible]
    assert {(x.question, x.answers[0].text) for x in defs} == {
        ("法兰西共和国的首都是哪里？", "巴黎"), ("德意志联邦共和国的首都是哪里？", "柏林"),
        ("唇形科中的一个属是什么？", "鼠尾草属"), ("唇形科中的一个属是什么？", "紫珠属")}
    assert all(x.context == next(e.context for e in exs if e.context.startswith(x.answers[0].text)) for x in defs)
    negs = [x for x in out if ":def" in x.qid and x.is_impossible]
    assert negs and all(x.question.rsplit("是", 1)[0] not in x.context for x in negs)
    # the two 唇形科 passages say the same predicate: neither is a negative of the other's question
    assert not any(x.question.startswith("唇形科") for x in negs)
    with pytest.raises(SystemExit) as e:
        cv.extra_examples("toy-defs:5", seed=0)
    assert e.value.code == 2 and "'toy-defs' not in" in capsys.readouterr().err


def test_the_recipes_extra_entity_twins(tmp_path, monkeypatch):
    """recipes/mrc_checklist_cv.py --extra NAME-ent:N (also a --fused-extra kind): N answerable questions that
    have an entity-swapped twin, each with that twin (same passage, another university named in the question,
    unanswerable) as its negative; questions without a name in their passage are not taken."""
    import os
    import sys

    from bertfam.data.mrc import write_squad

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes"))
    import mrc_checklist_cv as cv

    unis = ["北京大学", "清华大学", "复旦大学", "中山大学"]
    exs = []
    for i, u in enumerate(unis):
        ctx = f"{u}创建于{1890 + i}年。"
        exs.append(MRCExample(f"u{i}", f"{u}创建于哪一年？", ctx, answers=[MRCAnswer(f"{1890 + i}年", ctx.index("1"))]))
    exs.append(MRCExample("x", "它创建于哪一年？", "它创建于1900年。", answers=[MRCAnswer("1900年", 4)]))
    path = tmp_path / "set.json"
    write_squad(exs, str(path))
    monkeypatch.setitem(cv.EXTRA, "toy", (str(path), "toy"))
    out = cv.extra_examples("toy-ent:3", seed=0)
    pos = [x for x in out if not x.is_impossible]
    twins = {x.qid: x for x in out if x.is_impossible}
    assert len(pos) == 3 and len(twins) == 3 and "x" not in {x.qid for x in pos}
    for p in pos:
        t = twins[p.qid + ":ent"]
        assert t.context == p.context and not t.answers and t.question != p.question
        assert t.question[:4] in unis and t.question[:4] not in p.context
    assert len(cv.extra_examples("toy-ent:9", seed=0)) == 8  # the four that have a twin


def test_the_recipes_dureader2_extra_brings_same_search_negatives(monkeypatch, capsys):
    """--extra dureader2:N: N answerable DuReader 2.0 questions (answer paragraph, the page's title) and the
    unselected paragraphs of exactly those searches as their negatives (fixture: a cut of the search demo)."""
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "recipes"))
    import mrc_checklist_cv as cv

    monkeypatch.setattr(cv, "DUREADER2", [os.path.join(root, "tests", "fixtures", "mrc",
                                                       "dureader2_search_train_cut.jsonl")])
    every = cv.extra_examples("dureader2:100", seed=0)
    pos = [x for x in every if not x.is_impossible]
    negs = [x for x in every if x.is_impossible]
    assert pos and negs and all(x.title for x in pos)
    assert all(x.context[x.answers[0].start:].startswith(x.answers[0].text) for x in pos)
    one = cv.extra_examples("dureader2:1", seed=0)
    searches = {x.qid.split(":")[0] for x in one}
    assert sum(not x.is_impossible for x in one) == 1 and len(searches) == 1  # its own search's negatives only
    assert {x.qid for x in one if x.is_impossible} == {x.qid for x in negs if x.qid.split(":")[0] in searches}
    assert "same-search negatives" in capsys.readouterr().err


def test_paired_compare_of_two_runs(tmp_path):
    """recipes/mrc_paired_compare.py: the gain of B over A on the same questions with a paired bootstrap
    interval; different questions, a report without per-question records, a file that is not JSON or an
    unknown report: one line, exit 2."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "recipes", "mrc_paired_compare.py")

    def run_file(name, f1s, qids=None, label="fused signals"):
        qs = [{"qid": q, "f1": f, "answer": "x"} for q, f in zip(qids or [f"q{i}" for i in range(len(f1s))], f1s)]
        path = tmp_path / name
        path.write_text(json.dumps({"best": label, "reports": [{"label": "reader", "questions": qs[::-1]},
                                                                {"label": label, "questions": qs}]}))
        return str(path)

    a = run_file("a.json", [0.0, 1.0, 0.5, 0.0] * 25)
    b = run_file("b.json", [1.0, 1.0, 0.5, 0.0] * 25)  # B right on 25 more questions: +25 F1
    r = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "100 questions: F1 A 37.5, B 62.5; B - A +25.0" in r.stdout
    assert "B higher on 25, lower on 0, the same on 75" in r.stdout
    lo, hi = map(float, r.stdout.split("[paired 95% ")[1].split("]")[0].split(", "))
    assert 15 < lo < 25 < hi < 35
    bad = [([a, run_file("c.json", [1.0] * 100, [f"z{i}" for i in range(100)])], "score different questions"),
           ([a, a, "--report", "verifier"], "no report whose label starts with 'verifier'")]
    (tmp_path / "old.json").write_text(json.dumps({"best": "fused", "reports": [{"label": "fused"}]}))
    (tmp_path / "bad.json").write_text("{")
    bad += [([a, str(tmp_path / "old.json")], "has no per-question records"),
            ([str(tmp_path / "bad.json"), a], "cannot read a cv.json")]
    for args, message in bad:
        r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


def test_the_recipes_reader_title_dropped_reaches_training_prediction_and_the_final_config(tmp_path):
    """--reader-title dropped: the fold models train and predict on [CLS] question [SEP] passage (their saved
    settings say so, and their fold predictions differ from the run that reads titles), and the final model's
    config keeps it, so the shipped predictor reads what the choice was made on."""
    import subprocess

    import bertfam

    out, cmd = _recipe_command(tmp_path)
    cmd = cmd + ["--extensions", "none", "--lengths", "16", "--overlap-penalties", "0"]
    kept = subprocess.run(cmd + ["--only-folds", "0"], capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0, kept.stderr[-2000:]
    dropped_out = tmp_path / "cv-dropped"
    dropped = subprocess.run([x if x != str(out) else str(dropped_out) for x in cmd] + ["--reader-title", "dropped",
                             "--final"], capture_output=True, text=True, timeout=300)
    assert dropped.returncode == 0, dropped.stderr[-2000:]
    assert bertfam.from_pretrained(str(out / "fold0")).config.head.mrc.use_title is True
    assert bertfam.from_pretrained(str(dropped_out / "fold0")).config.head.mrc.use_title is False
    assert bertfam.from_pretrained(str(dropped_out / "final")).config.head.mrc.use_title is False
    assert (dropped_out / "fold0.raw.json").read_text() != (out / "fold0.raw.json").read_text()
    bad = subprocess.run(cmd + ["--reader-title", "none"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--reader-title" in bad.stderr.strip().splitlines()[-1]


def test_the_recipes_reader_title_both_predicts_each_titled_question_twice_and_says_so_in_the_final_config(tmp_path):
    """--reader-title both over a run's fold models (--members): the fold questions predicted with and without
    their titles (the fold predictions differ from the run's own), and the final model's config asks for both
    reads (title_ensemble), the title still read (use_title)."""
    import shutil
    import subprocess

    import bertfam

    out, cmd = _recipe_command(tmp_path)
    cmd = cmd + ["--extensions", "none", "--lengths", "16", "--overlap-penalties", "0"]
    kept = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert bertfam.from_pretrained(str(out / "fold0")).config.head.mrc.title_ensemble is False
    both_out, final = tmp_path / "cv-both", tmp_path / "final-both"
    shutil.copytree(tmp_path / "base", final)  # the model the members stand for: any span model here
    both = subprocess.run([x if x != str(out) else str(both_out) for x in cmd]
                          + ["--members", str(out), "--reader-title", "both", "--final", "--final-model", str(final)],
                          capture_output=True, text=True, timeout=300)
    assert both.returncode == 0, both.stderr[-2000:]
    assert (both_out / "fold0.raw.json").read_text() != (out / "fold0.raw.json").read_text()
    mrc = bertfam.from_pretrained(str(final)).config.head.mrc
    assert (mrc.use_title, mrc.title_ensemble) == (True, True)


def test_untitled_copies_drop_the_title_of_the_first_copies_only(tmp_path):
    """fold_training_set(..., untitled=1) with repeat 2: every training question once with its title and once
    without (the held-out fold absent, extras untouched); --untitled-copies above --repeat: one line, exit 2."""
    import os
    import subprocess
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes"))
    import mrc_checklist_cv as cv

    exs = [MRCExample(f"q{i}", f"问题{i}", f"段落{i}。", title=f"标题{i}") for i in range(6)]
    extra = [MRCExample("x", "外加", "外加段落。", title="外加标题")]
    train = cv.fold_training_set(exs, [0, 0, 1, 1, 2, 2], 1, 2, extra, untitled=1)
    ids = sorted(e.qid for e in train)
    assert ids == sorted([f"q{i}#{k}" for i in (0, 1, 4, 5) for k in (0, 1)] + ["x"])
    by_id = {e.qid: e for e in train}
    for i in (0, 1, 4, 5):
        assert by_id[f"q{i}#0"].title == "" and by_id[f"q{i}#1"].title == f"标题{i}"
    assert by_id["x"].title == "外加标题"
    assert all(e.title for e in cv.fold_training_set(exs, [0, 0, 1, 1, 2, 2], 1, 2, extra))
    _, cmd = _recipe_command(tmp_path)
    bad = subprocess.run(cmd + ["--untitled-copies", "3"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == "--untitled-copies: 3 is not in [0, --repeat 2]"


def test_length_bonuses_are_decoding_settings_whose_names_parse_back(tmp_path):
    """--length-bonuses 0,1.5: each setting once without and once with the bonus ("/b1.5" in its name), parsed
    back into the bonus the final model's config gets; a negative or non-numeric entry: one line, exit 2."""
    import os
    import subprocess
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes"))
    import mrc_checklist_cv as cv

    names = cv.setting_names([0.0, 5.0], ("none",), (32,), ("score",), (0.0, 1.5))
    assert names == ["none/32", "none/32/q5", "none/32/b1.5", "none/32/q5/b1.5"]
    assert [cv.parse_setting(n)[2:] for n in names] == [(0.0, "score", 0.0), (5.0, "score", 0.0),
                                                       (0.0, "score", 1.5), (5.0, "score", 1.5)]
    assert cv.parse_setting("none/48/q2/b1/ef1") == ("none", 48, 2.0, "expected_f1", 1.0)
    _, cmd = _recipe_command(tmp_path)
    for bad in ("0,-1", "x"):
        r = subprocess.run(cmd + ["--length-bonuses", bad], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("--length-bonuses:")


def test_oof_breakdown_by_reference_start_and_answer_kind(tmp_path):
    """recipes/mrc_oof_breakdown.py on the 8-question checklist fixture and a hand-made cv.json: the answerable
    questions bucketed by where their reference starts, and each given answer classed against its reference."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = os.path.join(root, "tests", "fixtures", "mrc", "checklist_demo_cut.json")
    qs = [  # (qid, answer, f1): references start at 0, 12, 31 and 5
        ("e0285179a076cfb1e667042de441d1b5", "孕妇吃扁桃仁", 0.2),  # inside its long reference, which opens the passage
        ("18a3b2d75e9bd76ca023b87b65093552", "不要饮酒", 1.0),  # exact
        ("d54766c666c86ef8087f68192981cf2a", "no answer", 0.0),  # declined
        ("a4514bb2f8d2b143115751b1979a55cf", "耳东兔子的《暗格里的秘密》", 0.6),  # contains its reference
        ("eae7af70dc9645c8ceeb3eac6e241160", "no answer", 1.0),  # unanswerable questions are not counted
        ("0f3d16c6241f28fbabad2d1e5f4d6a16", "心脏", 0.0)]
    cv = tmp_path / "cv.json"
    cv.write_text(json.dumps({"best": "fused", "reports": [
        {"label": "fused", "questions": [{"qid": q, "answer": a, "f1": f} for q, a, f in qs]}]}), encoding="utf-8")
    script = os.path.join(root, "recipes", "mrc_oof_breakdown.py")
    r = subprocess.run([sys.executable, script, str(cv), "--data", data], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {ln.split()[0]: ln.split()[1:] for ln in r.stdout.splitlines()[2:6]}
    assert rows == {"0-4": ["1", "1", "20.0", "65.0"], "5-19": ["2", "2", "80.0", "6.0"],
                    "20-99": ["1", "0", "0.0", "64.0"], "100+": ["0", "0", "0.0", "0.0"]}, r.stdout
    assert "4 answerable questions" in r.stdout
    kinds = {" ".join(ln.split()[:-3]): ln.split()[-3] for ln in r.stdout.splitlines()[7:]}
    assert kinds == {"exact": "1", "inside a longer reference": "1", "contains a reference": "1",
                     "overlaps in part": "0", "wrong": "0"}, r.stdout
    # a run over questions the data file does not hold: one line, exit 2
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"best": "fused", "reports": [
        {"label": "fused", "questions": [{"qid": "nope", "answer": "x", "f1": 0.0}]}]}), encoding="utf-8")
    bad = subprocess.run([sys.executable, script, str(other), "--data", data], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("mrc_oof_breakdown: --data") \
        and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
