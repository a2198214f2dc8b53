"""data/splits.py: dev_split, the one seeded train / dev splitter (finetune's carved dev, MRC's by-passage
split, the multimodal evaluation split, the GLUE and family recipes)."""
import json
import os
import random
from collections import namedtuple

import pytest

from bertfam.data.splits import dev_split

from .conftest import FIXTURES, ROOT


def test_dev_split_is_seeded_lossless_and_in_order():
    items = list(range(40))
    train, dev = dev_split(items, 0.25, seed=3)
    assert (train, dev) == dev_split(items, 0.25, seed=3)
    assert dev_split(items, 0.25, seed=4) != (train, dev)
    assert len(dev) == 10 and sorted(train + dev) == items
    assert train == sorted(train) and dev == sorted(dev)  # the items' order
    assert len(dev_split(items, 0.001, seed=3, min_dev=1)[1]) == 1
    assert len(dev_split(items, 0.5, seed=3, n_dev=7)[1]) == 7
    tr, dv = dev_split(items, 0.25, seed=3, shuffled=True)
    assert sorted(dv) == dev and sorted(tr) == train  # the same draw, in the drawn order


def test_dev_split_matches_the_finetune_rule():
    """runners.finetune.split_train_dev (and recipes/glue_split.py) before it used dev_split: shuffle the
    indices with random.Random(seed), the first max(1, round(n x ratio)) are dev."""
    from bertfam.runners.finetune import split_train_dev

    items = [f"line {i}" for i in range(57)]
    idx = list(range(len(items)))
    random.Random(42).shuffle(idx)
    n_dev = max(1, round(len(items) * 0.1))
    expected = [items[i] for i in sorted(idx[n_dev:])], [items[i] for i in sorted(idx[:n_dev])]
    assert split_train_dev(items, 0.1, 42) == expected == dev_split(items, 0.1, 42, min_dev=1)


Q = namedtuple("Q", "source context qid")


def _questions(n=60, seed=0):
    r = random.Random(seed)
    return [Q(r.choice("ab"), f"passage {r.randrange(12)}", i) for i in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dev_split_never_puts_one_group_in_both_parts(seed):
    qs = _questions(seed=seed)
    train, dev = dev_split(qs, 0.3, seed, group=lambda q: q.context)
    assert sorted(train + dev) == sorted(qs) and dev
    assert not {q.context for q in train} & {q.context for q in dev}
    assert (train, dev) == dev_split(qs, 0.3, seed, group=lambda q: q.context)
    n_groups = len({q.context for q in qs})
    assert len({q.context for q in dev}) == round(n_groups * 0.3)


def test_dev_split_stratified_by_passage_is_the_mrc_split():
    """data.mrc.split_examples: passages of each source (in sorted source order, one random stream) shuffled,
    the first round(fraction x passages) dev; both parts in the shuffled order."""
    from bertfam.data.mrc import split_examples

    qs = _questions(seed=5)
    rng = random.Random(7)
    expected = [], []
    for src in sorted({q.source for q in qs}):
        groups = {}
        for q in qs:
            if q.source == src:
                groups.setdefault(q.context, []).append(q)
        groups = list(groups.values())
        rng.shuffle(groups)
        for i, g in enumerate(groups):
            expected[i >= round(len(groups) * 0.3)].extend(g)
    expected = expected[1], expected[0]  # (train, dev)
    got = dev_split(qs, 0.3, 7, group=lambda q: q.context, stratify=lambda q: q.source, shuffled=True)
    assert got == expected
    assert split_examples(qs, 0.3, seed=7) == expected
    for part in got:
        assert {q.source for q in part} == {"a", "b"}  # every source in both parts


# ---------------------------------------------------------------- the draws of the former copies
def _former_split_eval(items, eval_fraction, seed):
    """multimodal.runs.split_eval as it was before it used dev_split (its own numpy draw)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(items))
    n_eval = int(round(len(items) * eval_fraction))
    if eval_fraction > 0 and len(items) >= 4:
        n_eval = max(2, n_eval)
    return [items[i] for i in order[n_eval:]], [items[i] for i in order[:n_eval]]


@pytest.mark.parametrize("n,fraction,seed", [(40, 0.1, 0), (40, 0.25, 7), (5, 0.1, 3), (3, 0.5, 1), (9, 0.0, 2)])
def test_multimodal_eval_split_is_the_same_as_before(n, fraction, seed):
    from bertfam.multimodal.runs import split_eval

    items = [f"record {i}" for i in range(n)]
    assert split_eval(items, fraction, seed) == _former_split_eval(items, fraction, seed)


def test_family_recipe_tnews_split_is_the_same_as_before(tmp_path):
    """recipes/family_compare.py split_lines: the lines of random.Random(seed).sample(range(n), n_dev) to dev,
    both parts in file order, as before it used dev_split (duplicate lines included)."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import family_compare as fc

    lines = [json.dumps({"i": i % 37}) + "\n" for i in range(100)]  # repeated lines: split by position
    src = tmp_path / "src.json"
    src.write_text("".join(lines), encoding="utf-8")
    fc.split_lines(str(src), str(tmp_path / "train.json"), str(tmp_path / "dev.json"), n_dev=15, seed=42)
    pick = set(random.Random(42).sample(range(100), 15))
    assert (tmp_path / "dev.json").read_text(encoding="utf-8") == "".join(l for i, l in enumerate(lines) if i in pick)
    assert (tmp_path / "train.json").read_text(encoding="utf-8") == \
        "".join(l for i, l in enumerate(lines) if i not in pick)


# questions of tests/fixtures/mrc, split by passage and source with split_examples(0.25, seed=0) before
# dev_split learned its other draws: the ids must stay these (mrc train --dev-fraction, recipes/mrc_cropped_data.py)
MRC_DEV_IDS = ["eae7af70dc9645c8ceeb3eac6e241160", "18a3b2d75e9bd76ca023b87b65093552",
               "b02dbc89b20aa01e05e10b761c6820f7", "9c664d4fa30fa54c7e1bb2b184e6c5ad"]


def test_mrc_passage_split_gives_the_recorded_ids():
    from bertfam.data.mrc import read_mrc, split_examples

    exs = []
    for name in ("robust_demo_dev_cut.json", "checklist_demo_cut.json", "cmrc2018_trial_cut.json"):
        exs += read_mrc(os.path.join(FIXTURES, "mrc", name), source=name.split("_")[0])[0]
    train, dev = split_examples(exs, 0.25, seed=0)
    assert [e.qid for e in dev] == MRC_DEV_IDS
    assert len(train) == 16 and not {e.qid for e in train} & set(MRC_DEV_IDS)


def test_dev_split_names_a_wrong_draw():
    with pytest.raises(ValueError, match="draw must be one of shuffle, permutation, sample"):
        dev_split(list(range(5)), 0.2, draw="numpy")


def test_general_stage_data_short_passages():
    """recipes/mrc_cropped_data.py --short: the chosen share of questions get the answer's sentence (or, when
    unanswerable, one or two sentences) as passage, answers still at their text; 0 changes nothing."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import mrc_cropped_data as cd
    from bertfam.data.mrc import MRCAnswer, MRCExample

    ctx = "长江发源于青藏高原。长江全长约6300公里，是中国第一长河。它流经十一个省份。"
    pos = [MRCExample(f"p{i}", "长江有多长", ctx, answers=[MRCAnswer("6300公里", ctx.index("6300公里"))])
           for i in range(400)]
    neg = [MRCExample(f"n{i}", "黄河有多长", ctx, is_impossible=True) for i in range(400)]
    assert cd.shorten(pos + neg, 0.0, random.Random(0)) == pos + neg
    out = cd.shorten(pos + neg, 0.3, random.Random(0))
    cut_pos = [x for x in out[:400] if x.context != ctx]
    cut_neg = [x for x in out[400:] if x.context != ctx]
    assert 80 < len(cut_pos) < 160 and 80 < len(cut_neg) < 160  # about 30 % of each, not all
    assert {x.context for x in cut_pos} <= {"长江全长约6300公里，是中国第一长河。", "长江全长约6300公里，是中国第一长河。它流经十一个省份。"}
    assert all(x.context[a.start:a.end] == a.text for x in cut_pos for a in x.answers)
    assert all(x.is_impossible and not x.answers and len(x.context) < len(ctx) for x in cut_neg)
    assert [x.qid for x in out] == [x.qid for x in pos + neg]  # same questions, same ids


def test_general_stage_data_copula_swaps():
    """recipes/mrc_cropped_data.py --swap: each "X是ANSWER" question comes back as the sentence "ANSWER是X。",
    inside its passage, and with another swapped sentence as an unanswerable copy; answers at their text."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import mrc_cropped_data as cd
    from bertfam.data.mrc import MRCAnswer, MRCExample

    def ex(qid, q, ctx, ans):
        return MRCExample(qid, q, ctx, answers=[MRCAnswer(ans, ctx.index(ans))])

    exs = [ex("a", "中国的首都是哪里", "中国位于亚洲东部，中国的首都是北京。", "北京"),
           ex("b", "法国的首都是哪里", "法国位于欧洲西部，法国的首都是巴黎。", "巴黎"),
           ex("c", "长江有多长", "长江全长约6300公里。", "6300公里")]  # no "X是ANSWER": not swapped
    out = cd.swapped(exs, 2, random.Random(0), 300)
    assert len(out) == 2 * 6 and len({x.qid for x in out}) == 12  # copies get their own ids
    first = [x for x in out if x.qid.endswith("#0")]
    by_id = {x.qid: x for x in first}
    assert by_id["a:swap#0"].context == "北京是中国的首都。"
    assert by_id["a:swapc#0"].context == "中国位于亚洲东部，北京是中国的首都。"
    assert all(x.context[a.start:a.end] == a.text for x in out for a in x.answers)
    negs = [x for x in first if x.is_impossible]
    assert {x.context for x in negs} == {"巴黎是法国的首都。", "北京是中国的首都。"}  # the other one's sentence
    assert all(not any(t in x.context for t in by_id[x.qid.split(":")[0] + ":swap#0"].answer_texts) for x in negs)
    assert cd.swapped(exs, 0, random.Random(0), 300) == []


def test_general_stage_data_definition_questions():
    """recipes/mrc_cropped_data.py --definitions: a defining sentence "X，…，是Y的Z" comes back as the question
    "Y的Z是…？" answered by X, in its passage and as its sentence, and with another definition sentence as an
    unanswerable copy; one passage shared by several questions is used once."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import mrc_cropped_data as cd
    from bertfam.data.mrc import MRCAnswer, MRCExample

    def ex(qid, ctx, ans):
        return MRCExample(qid, "q", ctx, answers=[MRCAnswer(ans, ctx.index(ans))])

    bj = "北京，简称“京”，是中华人民共和国的首都。北京地处华北平原北部。"
    exs = [ex("a", bj, "华北平原"), ex("a2", bj, "北部"),  # the same passage twice: its question made once
           ex("b", "巴黎是法兰西共和国的首都。巴黎位于塞纳河畔。", "塞纳河"),
           ex("c", "长江全长约6300公里。", "6300公里")]  # no defining sentence
    out = cd.definitions(exs, 2, random.Random(0), 300)
    first = [x for x in out if x.qid.endswith("#0")]
    assert len(out) == 2 * len(first) and len({x.qid for x in out}) == len(out)
    pos = [x for x in first if not x.is_impossible]
    assert {(x.question, x.answers[0].text) for x in pos} == {("中华人民共和国的首都是哪里？", "北京"),
                                                              ("法兰西共和国的首都是哪里？", "巴黎")}
    assert {x.context for x in pos} >= {bj, "巴黎是法兰西共和国的首都。巴黎位于塞纳河畔。"}  # in the passage
    # the sentence copy: the defining sentence, or it and the next one (here the whole passage)
    assert {x.context for x in pos if x.question.startswith("中华")} <= {bj, "北京，简称“京”，是中华人民共和国的首都。"}
    assert all(x.context[a.start:a.end] == a.text for x in out for a in x.answers)
    negs = [x for x in first if x.is_impossible]
    assert len(negs) == 2 and all(not x.answers for x in negs)
    assert {x.question for x in negs} == {x.question for x in pos}  # each question with the OTHER sentence
    assert all(("北京" in x.context) != x.question.startswith("中华") for x in negs)
    assert cd.definitions(exs, 0, random.Random(0), 300) == []


def test_entity_swapped_negative_changes_the_topic_name_only():
    """bertfam.data.mrc_negatives.entity_swapped_negative: the question's longest name that the passage holds
    (and no answer does) is replaced by another name of the same kind that the passage, title and question
    lack; the passage is kept and the copy is unanswerable. Questions without such a name give None."""
    from bertfam.data.mrc import MRCAnswer, MRCExample
    from bertfam.data.mrc_negatives import entity_swapped_negative, name_pool, question_names

    assert ("北京大学", "organisation") in question_names("北京大学创建于哪一年？")
    ctx = "北京大学创建于1898年，初名京师大学堂。"
    ex = MRCExample("a", "北京大学创建于哪一年？", ctx, answers=[MRCAnswer("1898年", ctx.index("1898年"))])
    pool = {"organisation": ["北京大学", "清华大学", "复旦大学", "中山大学"], "person": ["李白", "杜甫"]}
    outs = {entity_swapped_negative(ex, pool, random.Random(s)).question for s in range(20)}
    assert outs == {"清华大学创建于哪一年？", "复旦大学创建于哪一年？", "中山大学创建于哪一年？"}  # never itself
    neg = entity_swapped_negative(ex, pool, random.Random(0))
    assert neg.context == ctx and neg.is_impossible and not neg.answers and neg.qid == "a:ent"
    # a pool whose other names all occur in the passage: no replacement
    ctx2 = "北京大学创建于1898年，清华大学创建于1911年。"
    ex2 = MRCExample("b", "北京大学创建于哪一年？", ctx2, answers=[MRCAnswer("1898年", ctx2.index("1898年"))])
    assert entity_swapped_negative(ex2, {"organisation": ["北京大学", "清华大学"]}, random.Random(0)) is None
    # the name is the answer's own text, or absent from the passage: no topic to swap
    ctx3 = "创建最早的是北京大学。"
    ex3 = MRCExample("c", "哪所大学是北京大学？", ctx3, answers=[MRCAnswer("北京大学", ctx3.index("北京大学"))])
    assert entity_swapped_negative(ex3, pool, random.Random(0)) is None
    ex4 = MRCExample("d", "北京大学创建于哪一年？", "它创建于1898年。", answers=[MRCAnswer("1898年", 4)])
    assert entity_swapped_negative(ex4, pool, random.Random(0)) is None
    assert name_pool([ex])["organisation"] == ["北京大学"]


def test_hard_entity_swap_draws_names_written_with_the_passages_characters():
    """entity_swapped_negative(hard=True): the new name is one at least half written with the passage's own
    characters (北京大学 against a passage on 清华大学 in 北京), never one that shares the topic's first two
    characters (清华园 may name the same place); without such a name the draw is the plain one."""
    from bertfam.data.mrc import MRCAnswer, MRCExample
    from bertfam.data.mrc_negatives import entity_swapped_negative

    ctx = "清华大学创建于1911年，位于北京西北郊。"
    ex = MRCExample("a", "清华大学创建于哪一年？", ctx, answers=[MRCAnswer("1911年", ctx.index("1911年"))])
    pool = {"organisation": ["北京大学", "复旦大学", "中山大学", "清华园区", "武汉理工"]}
    hard = {entity_swapped_negative(ex, pool, random.Random(s), hard=True).question for s in range(30)}
    # 北京大学: 4 of 4 characters in the passage; 复旦大学 / 中山大学: 2 of 4 (大学); 武汉理工: none
    assert hard == {"北京大学创建于哪一年？", "复旦大学创建于哪一年？", "中山大学创建于哪一年？"}
    plain = {entity_swapped_negative(ex, pool, random.Random(s)).question for s in range(60)}
    assert "武汉理工创建于哪一年？" in plain and "清华园区创建于哪一年？" not in hard
    far = {"organisation": ["武汉理工", "南开中学"]}  # none qualifies: the plain draw
    assert {entity_swapped_negative(ex, far, random.Random(s), hard=True).question for s in range(30)} == {
        "武汉理工创建于哪一年？", "南开中学创建于哪一年？"}


def test_general_stage_data_entity_swaps():
    """recipes/mrc_cropped_data.py --entity-swap: about the chosen share of answerable questions come back as
    unanswerable twins with another name in the question and the same passage; unanswerable inputs never."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import mrc_cropped_data as cd
    from bertfam.data.mrc import MRCAnswer, MRCExample

    unis = ["北京大学", "清华大学", "复旦大学", "中山大学", "南京大学", "浙江大学"]
    exs = []
    for i in range(300):
        u = unis[i % len(unis)]
        ctx = f"{u}创建于{1890 + i}年。"
        exs.append(MRCExample(f"p{i}", f"{u}创建于哪一年？", ctx,
                              answers=[MRCAnswer(f"{1890 + i}年", ctx.index(f"{1890 + i}年"))]))
    exs += [MRCExample(f"n{i}", "北京大学在哪里？", "长江全长约6300公里。", is_impossible=True) for i in range(50)]
    out = cd.entity_swapped(exs, 0.5, random.Random(0))
    assert 110 < len(out) < 190  # about half of the 300 answerable ones
    src = {x.qid: x for x in exs}
    for x in out:
        orig = src[x.qid.removesuffix(":ent")]
        assert not orig.is_impossible and x.is_impossible and not x.answers and x.context == orig.context
        assert x.question != orig.question and x.question[:4] in unis and x.question[:4] not in x.context
    assert cd.entity_swapped(exs, 0.0, random.Random(0)) == []
    # hard 0 draws no coin: the same twins as before the option existed; hard 1: names nearer the passage
    assert cd.entity_swapped(exs, 0.5, random.Random(0), hard=0.0) == out
    hard = cd.entity_swapped(exs, 0.5, random.Random(0), hard=1.0)
    assert len(hard) > 100 and all(x.question[:4] in unis for x in hard)


@pytest.mark.parametrize("flag,message", [("--swap", "--swap: -1 is negative"),
                                          ("--definitions", "--definitions: -1 is negative"),
                                          ("--entity-swap", "--entity-swap: -1.0 is not a share between 0 and 1"),
                                          ("--entity-swap-hard", "--entity-swap-hard: -1.0 is not a share between 0 and 1")])
def test_general_stage_data_rejects_a_negative_count(tmp_path, flag, message):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, os.path.join(ROOT, "recipes", "mrc_cropped_data.py"), "--out",
                        str(tmp_path / "d"), flag, "-1"], capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "d").exists()


def test_general_stage_data_hard_swaps_need_entity_swaps(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, os.path.join(ROOT, "recipes", "mrc_cropped_data.py"), "--out",
                        str(tmp_path / "d"), "--entity-swap-hard", "0.5"], capture_output=True, text=True)
    assert r.returncode == 2 and "--entity-swap-hard: needs --entity-swap" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "d").exists()


def test_general_stage_data_drcd_comes_in_simplified_characters(tmp_path, monkeypatch):
    """recipes/mrc_cropped_data.py --add drcd: DRCD's traditional passages, questions and answers are
    converted to simplified (OpenCC), every answer still at its text, and get similar-passage negatives
    like the other sets. The traditional sentences are written for this test."""
    import sys

    sys.path.insert(0, os.path.join(ROOT, "recipes"))
    import mrc_cropped_data as cd

    paras = [("國立臺灣大學創立於一九二八年，當時稱為臺北帝國大學。", "臺灣大學當時叫什麼？", "臺北帝國大學"),
             ("長江發源於青藏高原，全長約六千三百公里，是中國第一長河。", "長江發源於哪裡？", "青藏高原"),
             ("熊貓主要棲息在四川的山區，以竹子為主要食物。", "熊貓吃什麼？", "竹子")]
    data = {"data": [{"title": f"t{i}", "paragraphs": [{"context": c, "qas": [
        {"id": f"d{i}", "question": q, "answers": [{"text": a, "answer_start": c.index(a)}]}]}]}
        for i, (c, q, a) in enumerate(paras)]}
    (tmp_path / "drcd.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(cd, "D", str(tmp_path))
    monkeypatch.setitem(cd.ADDED, "drcd", "drcd.json")
    out = cd.added_set("drcd", 0, random.Random(0), 0.4, 300, 0.0, random.Random(1))
    pos = [x for x in out if not x.is_impossible]
    assert len(pos) == 3 and len(out) == 5  # 0.4 of the set as negatives: 2 more
    by_q = {x.question: x for x in pos}
    assert set(by_q) == {"台湾大学当时叫什么？", "长江发源于哪里？", "熊猫吃什么？"}
    assert by_q["台湾大学当时叫什么？"].answers[0].text == "台北帝国大学"
    assert all(x.context[a.start:a.end] == a.text for x in out for a in x.answers)
    left = {ch for x in out for ch in x.context + x.question if ch in "臺灣當長發於貓棲為"}
    assert not left, (left, out)
