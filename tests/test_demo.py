"""`bertfam demo`: the MRC demo on a given span model (a tiny random one here, for speed) and its errors."""
import json

import pytest

import bertfam
from bertfam.cli import main
from bertfam.runners.demo import HAND_WRITTEN, demo_data_path


@pytest.fixture(scope="module")
def tiny_span_dir(tmp_path_factory):
    from bertfam import HeadConfig, Tokenizer, preset
    from bertfam.config import MRCSettings

    from .conftest import ZH_VOCAB

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", mrc=MRCSettings(max_length=128, doc_stride=64)))
    d = tmp_path_factory.mktemp("demo") / "span"
    bertfam.build_model(cfg, seed=0).save_pretrained(str(d), tokenizer=tok)
    return d


def first_demo_questions(monkeypatch, n: int) -> None:
    """The demo answers only the first n demo questions (and the hand-written ones): a tiny model, fast."""
    from bertfam.runners import demo

    full = demo.demo_examples
    monkeypatch.setattr(demo, "demo_examples", lambda: (full()[0][:n], full()[1]))


def test_demo_data_is_the_checklist_demo():
    data = json.load(open(demo_data_path(), encoding="utf-8"))
    qas = [q for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert len(qas) == 100 and sum(q["is_impossible"] for q in qas) == 51
    for q, p, a in HAND_WRITTEN:
        assert a is None or a in p


def test_demo_on_a_span_model(tiny_span_dir, capsys, monkeypatch):
    from bertfam.runners.demo import DemoConfig, run_demo

    first_demo_questions(monkeypatch, 10)
    r = run_demo(DemoConfig(model=str(tiny_span_dir)))  # the first 10 demo questions: 4 without an answer
    out = capsys.readouterr().out
    assert "长江全长大约多少公里" in out and "无答案" in out  # table rows (the reference column at least)
    assert "questions/s" in out and "bertfam serve --model" in out
    base = next(line for line in out.splitlines() if line.startswith('always "no answer"'))
    assert base.split()[3:7] == ["40.0", "40.0", "0.0", "100.0"]  # the trivial baseline
    # a model given with --model is the user's, not the shipped one
    assert 0 <= r["your model"]["F1"] <= 100 and r["questions_per_s"] > 0 and "shipped model" not in r
    assert "your model" in out and "shipped model" not in out
    # the seed project's example comes first, with its title and reference
    seed = out[out.index("the seed's example"):]
    assert "番石榴汁热量" in seed and "番石榴汁的热量 - 妈妈网百科" in seed and "一个番石榴所含的脂肪约0.9克重或84卡路里" in seed


def test_demo_bad_model_says_what_is_expected(tmp_path, tiny_span_dir, capsys):
    assert main(["demo", "--model", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "head task 'span'" in err and err.count("\n") == 1
    enc = tmp_path / "encoder"
    m = bertfam.from_pretrained(str(tiny_span_dir))
    bertfam.build_model(m.config.replace(head=bertfam.HeadConfig()), seed=0).save_pretrained(str(enc),
                                                                                             tokenizer=m.tokenizer)
    assert main(["demo", "--model", str(enc)]) == 2
    err = capsys.readouterr().err
    assert "not an MRC model" in err and "bertfam mrc train" in err


def test_shipped_model_loads_and_answers():
    from bertfam.runners.demo import load_mrc_model, shipped_model_dir
    from bertfam.tasks.mrc import predictor_from_models

    d = shipped_model_dir()
    assert d is not None, "models/mrc-zh-e5small-l12 is missing from the checkout"
    model = load_mrc_model(d)
    assert model.config.head.task == "span" and model.config.num_hidden_layers == 12
    pred = predictor_from_models([model], [d], overrides={"null_threshold": -1e9, "answerable_threshold": 0.0})
    r = pred.predict("长江全长大约多少公里？", "长江是中国第一长河，全长约6300公里，最后注入东海。")  # forced: a span
    assert r.answerable and r.answer in "长江是中国第一长河，全长约6300公里，最后注入东海。"


def test_demo_scores_held_out_questions_apart(tmp_path, tiny_span_dir, capsys, monkeypatch):
    """A model trained/tuned on some demo questions (training_info.json demo_seen_qids) gets a second score table
    over the untouched ones, with its own baseline."""
    from bertfam.data.mrc import read_mrc
    from bertfam.runners.demo import DemoConfig, run_demo

    demo, _ = read_mrc(demo_data_path(), mode="predict")
    m = bertfam.from_pretrained(str(tiny_span_dir))
    seen = [ex.qid for ex in demo[:10] if not ex.is_impossible][:3]  # 3 answerable ones seen
    m.config.head.info = dict(m.config.head.info, demo_seen_qids=seen)
    d = tmp_path / "seen"
    m.save_pretrained(str(d))
    assert json.load(open(d / "training_info.json")) == {"demo_seen_qids": seen}
    assert "demo_seen_qids" not in (d / "config.json").read_text()
    first_demo_questions(monkeypatch, 10)
    r = run_demo(DemoConfig(model=str(d)))
    out = capsys.readouterr().out
    assert "3 of these questions were used to train / tune this model; the 7 held-out ones (4 without" in out
    base = r["held_out"]['always "no answer"']
    assert base["F1"] == pytest.approx(100 * 4 / 7, abs=0.01) and base["F1_noans"] == 100.0


def test_demo_prints_the_out_of_fold_score_beside_the_demos(tmp_path, tiny_span_dir, capsys, monkeypatch):
    """A model whose training_info.json holds a cross-validation record (recipes/mrc_checklist_cv.py --final)
    gets that estimate printed after the demo's own scores."""
    from bertfam.runners.demo import DemoConfig, run_demo

    m = bertfam.from_pretrained(str(tiny_span_dir))
    cv = {"label": "reader", "oof_f1": 57.25, "oof_em": 50.5, "ci95": [53.0, 61.4], "gain_ci95": [1.0, 8.0],
          "mean_answer_chars": 12.0, "questions": 567, "folds": 5, "baseline_f1": 52.6,
          "by_answerability": {"answerable": {"n": 269, "F1": 40.0}, "unanswerable": {"n": 298, "F1": 73.0}}}
    m.config.head.info = dict(m.config.head.info, cross_validation=cv)
    d = tmp_path / "cv"
    m.save_pretrained(str(d))
    first_demo_questions(monkeypatch, 4)
    r = run_demo(DemoConfig(model=str(d)))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("out of fold"))
    assert "567 real DuReader-checklist dev questions (5 folds" in line
    assert "F1 57.2 [95% 53.0, 61.4]" in line or "F1 57.3 [95% 53.0, 61.4]" in line
    assert 'always "no answer" 52.6' in line and "answerable 40.0 (n=269)" in out
    assert r["cross_validation"]["oof_f1"] == 57.25
    assert out.index("DuReader-checklist demo (") < out.index("out of fold")


def test_readme_and_model_card_quote_what_make_demo_prints_now(capsys):
    """The shipped model's demo, run as `make demo` runs it: every line it prints (the seed's example, the
    example table, the scores part, the serve commands) stands verbatim in README.md and the model card, but
    the model line (the clone's absolute path) and the speed line (it varies from run to run), and the
    quality figure both quote is the out-of-fold one."""
    import os

    from bertfam.runners.demo import shipped_model_dir

    d = shipped_model_dir()
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    scores = out[out.index("DuReader-checklist demo (100"):out.index("\nspeed:")].rstrip("\n")
    rule = next(line for line in out.splitlines() if line.startswith("  no-answer"))
    cv = json.load(open(os.path.join(d, "training_info.json")))["cross_validation"]
    oof = f"F1 {cv['oof_f1']} [95% {cv['ci95'][0]:.1f}, {cv['ci95'][1]:.1f}]"
    assert oof in scores  # the demo prints the out-of-fold record
    root = os.path.dirname(os.path.dirname(d))  # d is ROOT/models/NAME
    for doc in (os.path.join(root, "README.md"), os.path.join(d, "README.md")):
        text = open(doc, encoding="utf-8").read()
        assert scores in text, f"{doc} does not quote make demo's scores part as it prints now"
        assert rule in text, f"{doc} does not quote make demo's decision rule line"
        stale = [line for line in out.splitlines() if line.strip() and not line.startswith(("model:", "speed:"))
                 and line.rstrip() not in text]
        assert not stale, f"{doc} does not quote these lines make demo prints now: {stale[:3]}"
        assert "speed: " in text  # the run it quotes kept its speed line
        assert f"F1 {cv['oof_f1']} [95 % " in text  # the prose quotes the out-of-fold figure
