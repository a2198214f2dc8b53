"""Keyword queries (a search query with no question word: 番石榴汁热量) read and decoded their own way:
`query_form.is_keyword_query`, `MRCSettings.keyword_use_title` / `keyword_extension` in the predictor and the
decoder, their validation and checkpoint round trip, and recipes/mrc_checklist_cv.py's --keyword-title /
--keyword-extension."""
import dataclasses
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import bertfam
from bertfam import HeadConfig, Tokenizer, build_model, preset
from bertfam.config import MRCSettings
from bertfam.data.mrc_windows import Window
from bertfam.errors import ConfigError
from bertfam.tasks.mrc import MRCPredictor, settings_of
from bertfam.tasks.mrc.decoding import decode_with, extension_for
from bertfam.tasks.mrc.predictor import reader_items
from bertfam.tasks.mrc.query_form import is_keyword_query

from .conftest import ZH_VOCAB
from .test_mrc_crossval import _recipe_command


@pytest.mark.parametrize("question", ["番石榴汁热量", "五味子的功效与作用", "stop过去式", "全国最高的权利机关",
                                      "怀孕初期不小心吃了扁桃仁", "任何时候都能吃的水果"])
def test_a_question_without_question_words_is_a_keyword_query(question):
    assert is_keyword_query(question)


@pytest.mark.parametrize("question", ["中国的首都是哪里？", "北京大学创建于哪一年", "打完疫苗可以喝酒不", "变形计作者是",
                                      "除蚧壳虫是白醋好还是酒精好", "非特异性阴道炎咋治疗", "长江有多长", "谁发明了电话",
                                      "what is it?", "新生儿皮肤松弛正常吗", "为何", "", "  "])
def test_a_question_that_asks_or_is_blank_is_not(question):
    assert not is_keyword_query(question)


def test_the_keyword_extension_applies_to_keyword_queries_only():
    assert extension_for("番石榴汁热量", "none", "clause") == "clause"
    assert extension_for("中国的首都是哪里？", "none", "clause") == "none"
    assert extension_for("番石榴汁热量", "sentence", None) == "sentence"


def _window(passage: str) -> Window:
    # [CLS] q [SEP] then one token per passage character, [SEP]
    offs = [None, None, None] + [(i, i + 1) for i in range(len(passage))] + [None]
    return Window(0, [0] * len(offs), [0] * len(offs), offs)


def test_decode_with_widens_a_keyword_querys_span_to_its_clause():
    passage = "番石榴性温,孕妇也能吃。一个番石榴所含的脂肪约0.9克重或84卡路里。"
    a = passage.index("0.9")
    w = _window(passage)
    start, end = np.full(len(w.offsets), -5.0), np.full(len(w.offsets), -5.0)
    start[3 + a], end[3 + passage.index("里")] = 5.0, 5.0  # the span 0.9克重或84卡路里
    s = dataclasses.replace(MRCSettings(), keyword_extension="clause")
    kw = decode_with(s, [(w, start, end, 0.9)], passage, "番石榴汁热量")
    asks = decode_with(s, [(w, start, end, 0.9)], passage, "番石榴汁的热量是多少？")
    assert kw.best.text == "一个番石榴所含的脂肪约0.9克重或84卡路里"
    assert asks.best.text == "0.9克重或84卡路里"
    plain = decode_with(MRCSettings(), [(w, start, end, 0.9)], passage, "番石榴汁热量")
    assert plain.best.text == "0.9克重或84卡路里"


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_vocab(ZH_VOCAB)


def _tiny(tok):
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="span", answerability=True))
    m = build_model(cfg, seed=0)
    m.tokenizer = tok
    return m


def test_the_reader_reads_keyword_queries_without_their_title_when_told(tok):
    m = _tiny(tok)
    kw = dict(max_length=64, doc_stride=16)
    passage = "华为Mate 40 Pro于2020年10月发布，售价６９９９元。"
    items = [{"question": "华为手机发布时间", "passage": passage, "title": "华为手机发布"},
             {"question": "华为什么时候发布？", "passage": passage, "title": "华为手机发布"}]
    split = MRCPredictor(m, settings_of(m, keyword_use_title=False, **kw))
    titled = MRCPredictor(m, settings_of(m, **kw)).window_scores(items)
    plain = MRCPredictor(m, settings_of(m, use_title=False, **kw)).window_scores(items)
    got = split.window_scores(items)
    assert got[0][0][0].input_ids == plain[0][0][0].input_ids != titled[0][0][0].input_ids
    np.testing.assert_allclose(got[0][0][1], plain[0][0][1], atol=1e-5)
    assert got[1][0][0].input_ids == titled[1][0][0].input_ids  # a question that asks keeps its title
    np.testing.assert_allclose(got[1][0][1], titled[1][0][1], atol=1e-5)
    # only the reader's input changes: the items themselves (what the fused model reads) keep the title
    assert [it["title"] for it in items] == ["华为手机发布", "华为手机发布"]
    assert reader_items(split.settings, items)[0]["title"] is None
    # without use_title nothing is read with a title anyway
    assert reader_items(dataclasses.replace(split.settings, use_title=False), items) == items
    # the service's token budget counts what the reader reads
    from bertfam.serving.budget import token_counts
    from bertfam.tasks.pipelines import MRCPipeline

    m.config.head.mrc = dataclasses.replace(m.config.head.mrc_settings, **kw)
    pipe = MRCPipeline(m)
    titled_counts = token_counts(pipe, items)
    pipe.inner.settings = dataclasses.replace(pipe.inner.settings, keyword_use_title=False)
    counts = token_counts(pipe, items)
    assert counts[1] == titled_counts[1] and counts[0] == sum(len(w.input_ids) for w, *_ in plain[0]) < titled_counts[0]


def test_keyword_settings_are_checked_and_kept_in_the_checkpoint(tok, tmp_path):
    m = _tiny(tok)
    with pytest.raises(ConfigError, match=r"^head.mrc.keyword_extension must be null or one of none, clause"):
        settings_of(m, keyword_extension="word").check()
    m.config.head.mrc = dataclasses.replace(m.config.head.mrc_settings, keyword_use_title=False,
                                            keyword_extension="clause")
    m.save_pretrained(str(tmp_path / "m"), tokenizer=tok)
    back = bertfam.from_pretrained(str(tmp_path / "m")).config.head.mrc_settings
    assert (back.keyword_use_title, back.keyword_extension) == (False, "clause")
    raw = json.load(open(tmp_path / "m" / "config.json"))
    raw["head"]["mrc"]["keyword_extension"] = "word"
    (tmp_path / "m" / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="keyword_extension"):
        bertfam.from_pretrained(str(tmp_path / "m"))


def test_the_recipe_reads_keyword_queries_as_told_and_writes_it_into_the_final_model(tmp_path):
    """Fold models trained once; --members scores them again with keyword queries read without the title and
    widened to their clause (a new --out), and the final model's config records both; an --out holding
    another run's predictions is refused (one line, exit 2)."""
    out, cmd = _recipe_command(tmp_path)
    cmd = cmd + ["--extensions", "none", "--lengths", "16", "--overlap-penalties", "0"]
    first = subprocess.run(cmd + ["--final"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    mixed = subprocess.run(cmd + ["--keyword-title", "dropped"], capture_output=True, text=True, timeout=300)
    assert mixed.returncode == 2 and mixed.stderr.strip().splitlines()[-1].endswith("use another --out"), mixed.stderr
    final = tmp_path / "final-copy"
    shutil.copytree(out / "final", final)
    i = cmd.index("--out")
    kw = cmd[:i + 1] + [str(tmp_path / "cv-kw")] + cmd[i + 2:] + [
        "--members", str(out), "--keyword-title", "dropped", "--keyword-extension", "clause", "--final",
        "--final-model", str(final)]
    r = subprocess.run(kw, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "trained" not in r.stderr, r.stderr[-2000:]
    assert json.load(open(tmp_path / "cv-kw" / "reads.json")) == {
        "reader_title": "kept", "keyword_title": "dropped", "keyword_extension": "clause"}
    s = bertfam.from_pretrained(str(final)).config.head.mrc_settings
    assert (s.keyword_use_title, s.keyword_extension, s.use_title) == (False, "clause", True)
    assert not os.path.exists(tmp_path / "cv-kw" / "final")
    bad = subprocess.run(kw[:-4] + ["--keyword-extension", "word"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--keyword-extension" in bad.stderr.strip().splitlines()[-1]

    # --decide-on: the keyword reads scored under the first run's choices, which the copy then ships with
    decided = tmp_path / "final-decided"
    shutil.copytree(out / "final", decided)
    kd = cmd[:i + 1] + [str(tmp_path / "cv-kd")] + cmd[i + 2:] + [
        "--members", str(out), "--decide-on", str(out), "--keyword-title", "dropped", "--keyword-extension", "clause"]
    r = subprocess.run(kd + ["--final", "--final-model", str(decided)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "trained" not in r.stderr, r.stderr[-2000:]
    base_cv, kd_cv = (json.load(open(d / "cv.json")) for d in (out, tmp_path / "cv-kd"))
    assert all(rep["label"].endswith(f"decided on {out}'s predictions") for rep in kd_cv["reports"])
    for a, b in zip(base_cv["reports"], kd_cv["reports"]):
        assert a["pooled"] == b["pooled"] and a["folds"] == b["folds"]  # the first run's choices, unchanged
    s = bertfam.from_pretrained(str(decided)).config.head.mrc_settings
    first = bertfam.from_pretrained(str(out / "final")).config.head.mrc_settings
    assert (s.keyword_use_title, s.keyword_extension) == (False, "clause")
    assert dataclasses.replace(s, keyword_use_title=True, keyword_extension=None) == first
    flags = ("--members", "--decide-on")
    plain = [a for j, a in enumerate(kd) if a not in flags and kd[j - 1] not in flags]
    plain[plain.index("--out") + 1] = str(tmp_path / "cv-bad")
    for extra, what in ((["--members", str(out), "--decide-on", str(tmp_path)], "no readable folds.json"),
                        (["--decide-on", str(out)], "needs --members")):
        bad = subprocess.run(plain + extra, capture_output=True, text=True, timeout=300)
        assert bad.returncode == 2 and what in bad.stderr.strip().splitlines()[-1], bad.stderr[-500:]


def test_the_demo_says_how_keyword_queries_are_read(tmp_path, capsys):
    """bertfam demo's header names the keyword-query reads of the model it runs (and says nothing of them for a
    model without)."""
    from bertfam.runners.demo import _print_rule

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    m = _tiny(tok)
    _print_rule(MRCPredictor(m))
    assert "keyword queries" not in capsys.readouterr().out
    _print_rule(MRCPredictor(m, settings_of(m, keyword_use_title=False, keyword_extension="clause")))
    assert ("  keyword queries (no question word, e.g. 番石榴汁热量): read without their title, answers widened to "
            "their clause") in capsys.readouterr().out.splitlines()
    _print_rule(MRCPredictor(m, settings_of(m, keyword_extension="trim")))
    assert capsys.readouterr().out.splitlines()[-2].endswith("queries (no question word, e.g. 番石榴汁热量): answers "
                                                            "cut at their first sentence end")
