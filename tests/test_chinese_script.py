"""Traditional -> simplified conversion of MRC examples (bertfam.data.chinese_script): spans stay exact.

The traditional sentences below are written for this test (no third-party text)."""
from bertfam.data.chinese_script import opencc_converter, simplified_examples
from bertfam.data.mrc import MRCAnswer, MRCExample


def example(context, answer, question="問題？", title="標題"):
    return MRCExample(qid="q", question=question, context=context, title=title,
                      answers=[MRCAnswer(answer, context.index(answer))])


def test_opencc_converts_every_text_and_keeps_the_span():
    ctx = "國立臺灣大學創立於一九二八年，當時稱為臺北帝國大學。"
    ex = example(ctx, "臺北帝國大學", question="臺灣大學當時叫什麼？", title="臺灣大學的歷史")
    (out,), dropped = simplified_examples([ex])
    assert dropped == 0
    assert out.context == "国立台湾大学创立于一九二八年，当时称为台北帝国大学。"
    assert out.question == "台湾大学当时叫什么？" and out.title == "台湾大学的历史"
    a = out.answers[0]
    assert a.text == "台北帝国大学" and out.context[a.start:a.end] == a.text


def fake(table):
    """A converter made of phrase replacements, so that lengths can change as a phrase mapping may."""
    def convert(s):
        for old, new in table.items():
            s = s.replace(old, new)
        return s
    return convert


def test_a_length_change_before_the_answer_moves_its_start():
    ex = example("甲乙丙說答案在此", "答案")
    (out,), dropped = simplified_examples([ex], convert=fake({"甲乙丙": "丁", "說": "说"}))
    assert dropped == 0
    assert out.context == "丁说答案在此" and out.answers[0] == MRCAnswer("答案", 2)


def test_an_answer_the_converted_passage_no_longer_holds_is_dropped_and_counted():
    # the phrase spans the answer's edge: the passage converts it, the answer alone does not
    exs = [example("前後文答案", "文答案"), example("答案在前", "答案")]
    out, dropped = simplified_examples(exs, convert=fake({"後文": "后"}))
    assert dropped == 1
    assert [x.context for x in out] == ["答案在前"]


def test_unanswerable_examples_pass_through_converted():
    ex = MRCExample(qid="n", question="這是誰？", context="無關的段落。", is_impossible=True)
    (out,), dropped = simplified_examples([ex])
    assert (out.question, out.context, out.answers, out.is_impossible, dropped) == ("这是谁？", "无关的段落。", [], True, 0)


def test_the_converter_is_opencc_t2s():
    assert opencc_converter()("體育") == "体育"
