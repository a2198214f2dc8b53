"""decode's question-overlap penalty: a span made of the question's own words loses to the answer, the
setting travels in head.mrc, and the predictor applies it."""
import numpy as np
import pytest

from bertfam.config import MRCSettings
from bertfam.errors import ConfigError
from bertfam.tasks.mrc.decoding import coverage, decode, decode_with


class _W:
    """A window whose tokens are the passage's characters."""

    def __init__(self, passage):
        self.offsets = [(i, i + 1) for i in range(len(passage))]


def _windows(passage, spans):
    """One window, logits that favour spans (start, end, score) in the given order."""
    start, end = np.full(len(passage), -10.0), np.full(len(passage), -10.0)
    for a, b, sc in spans:
        start[a] = max(start[a], sc / 2)
        end[b - 1] = max(end[b - 1], sc / 2)
    start[0] = end[0] = -5.0  # the null score sits on the first token; it is not a valid span start here
    w = _W(passage)
    w.offsets[0] = None
    return [(w, start, end, 0.9)]


def test_coverage():
    assert coverage("中华人民共和国的首都", "中国的首都是哪里？") == pytest.approx(5 / 10)
    assert coverage("北京", "中国的首都是哪里？") == 0.0


def test_the_penalty_moves_the_answer_off_the_question_words():
    passage = "#北京是中华人民共和国的首都。"
    q = "中国的首都是哪里？"
    a, b = passage.index("中华人民共和国的首都"), passage.index("。")
    ws = _windows(passage, [(a, b, 6.0), (1, 3, 4.0)])
    plain = decode(ws, passage, n_best=5, max_answer_length=20)
    assert plain.best.text == "中华人民共和国的首都"
    fixed = decode(ws, passage, n_best=5, max_answer_length=20, question=q, overlap_penalty=5.0)
    assert fixed.best.text == "北京"
    assert fixed.best.score == pytest.approx(4.0)  # 北京 shares no character with the question
    weak = decode(ws, passage, n_best=5, max_answer_length=20, question=q, overlap_penalty=2.0)
    assert weak.best.text == "中华人民共和国的首都"  # 6 - 2 x 0.5 > 4
    assert decode(ws, passage, 5, 20, question="", overlap_penalty=5.0).best.text == "中华人民共和国的首都"
    # decode_with takes the penalty (and the rest) from a model's settings
    s = MRCSettings(n_best=5, max_answer_length=20, question_overlap_penalty=5.0)
    assert decode_with(s, ws, passage, q) == fixed


def test_the_setting_is_checked_and_applied_by_the_predictor(tmp_path):
    import bertfam
    from bertfam import HeadConfig, Tokenizer, preset
    from bertfam.tasks.mrc import MRCPredictor

    from .conftest import ZH_VOCAB

    with pytest.raises(ConfigError, match="question_overlap_penalty must be a non-negative number"):
        MRCSettings(question_overlap_penalty=-1.0)
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    item = {"question": "中国的首都是哪里？", "passage": "北京是中华人民共和国的首都。"}
    scores = {}
    for q in (0.0, 50.0):
        cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                     head=HeadConfig(task="span", answerability=True,
                                     mrc=MRCSettings(max_length=64, doc_stride=32, question_overlap_penalty=q)))
        bertfam.build_model(cfg, seed=0).save_pretrained(str(tmp_path / f"m{q}"), tokenizer=tok)
        pred = MRCPredictor(bertfam.from_pretrained(str(tmp_path / f"m{q}")))
        assert pred.settings.question_overlap_penalty == q
        scores[q] = pred.predict_batch([item], details=True)[0].nbest
    # the same random model: a heavy penalty ranks spans by their share of question characters first
    share = [coverage(c.text, item["question"]) for c in scores[50.0]]
    assert share[0] == min(coverage(c.text, item["question"]) for c in scores[0.0])


def test_the_length_bonus_leans_to_the_longer_span_by_log_length():
    passage = "#高速公路倒车扣12分。"
    a = passage.index("扣")
    ws = _windows(passage, [(a + 1, a + 4, 5.0), (a, a + 4, 4.6)])  # 12分 a little above 扣12分
    plain = decode(ws, passage, n_best=5, max_answer_length=20)
    assert plain.best.text == "12分"
    got = decode(ws, passage, n_best=5, max_answer_length=20, length_bonus=2.0)
    assert got.best.text == "扣12分"
    before = next(c.score for c in plain.nbest if c.text == "扣12分")
    assert got.best.score == pytest.approx(before + 2.0 * np.log(1 + 4))  # score + bonus x log(1 + characters)
    assert decode_with(MRCSettings(max_answer_length=20, length_bonus=2.0), ws, passage).best.text == "扣12分"
    with pytest.raises(ConfigError, match="length_bonus"):
        MRCSettings(length_bonus=-1.0)
