"""Masking strategies: rates (statistically), specials, whole words (## and jieba), ERNIE entities, spans."""
import numpy as np
import pytest

from bertfam import Tokenizer
from bertfam.objectives import IGNORE, Masker, MaskingConfig, describe_masking
from bertfam.objectives.masking import WORD_BEGIN
from bertfam.objectives.segment import SentenceSegmenter

from .conftest import ZH_VOCAB

V, MASK, CLS, SEP, PAD = 1000, 4, 2, 3, 0
SPECIALS = [0, 1, 2, 3, 4]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_vocab(ZH_VOCAB)


def _random_seqs(rng, n=400):
    """Sequences with [CLS] ... [SEP] ... [SEP] and padding: specials inside must never be masked.
    Lengths vary so that the per-sequence rounding of 15 % averages out."""
    out = []
    for _ in range(n):
        T = int(rng.integers(20, 100))
        ids = rng.integers(10, V, size=T)
        ids[0], ids[T // 2], ids[T - 4] = CLS, SEP, SEP
        ids[T - 3:] = PAD
        out.append(ids)
    return out


def test_token_masking_rates_and_specials():
    rng = np.random.default_rng(0)
    m = Masker(MaskingConfig("token"), V, MASK, SPECIALS)
    sel = n = to_mask = to_rand = kept = 0
    for ids in _random_seqs(rng):
        flags = np.full(len(ids), WORD_BEGIN, np.uint8)
        out, labels = m(ids, flags, rng)
        special = np.isin(ids, SPECIALS)
        assert (labels[special] == IGNORE).all() and (out[special] == ids[special]).all()
        chosen = labels != IGNORE
        assert (labels[chosen] == ids[chosen]).all()
        assert (out[~chosen] == ids[~chosen]).all()  # unchosen tokens are untouched
        n += int((~special).sum())
        sel += int(chosen.sum())
        to_mask += int((out[chosen] == MASK).sum())
        kept += int((out[chosen] == ids[chosen]).sum())
        to_rand += int(((out[chosen] != MASK) & (out[chosen] != ids[chosen])).sum())
        assert not np.isin(out[chosen & (out != MASK)], SPECIALS).any()  # random tokens are never specials
    assert abs(sel / n - 0.15) < 0.005
    assert abs(to_mask / sel - 0.8) < 0.02
    assert abs(to_rand / sel - 0.1) < 0.015
    assert abs(kept / sel - 0.1) < 0.015


def test_rate_is_configurable():
    rng = np.random.default_rng(1)
    m = Masker(MaskingConfig("token", rate=0.4), V, MASK, SPECIALS)
    sel = n = 0
    for ids in _random_seqs(rng, 100):
        _, labels = m(ids, np.ones(len(ids), np.uint8), rng)
        sel += int((labels != IGNORE).sum())
        n += int((~np.isin(ids, SPECIALS)).sum())
    assert abs(sel / n - 0.4) < 0.01


def _words(flags, ids, special_ids):
    """Word spans from flags (the ground truth the masking must respect)."""
    spans, cur = [], None
    for i in range(len(ids)):
        if ids[i] in special_ids:
            cur = None
            continue
        if cur is None or flags[i] & WORD_BEGIN:
            spans.append([i, i + 1])
            cur = len(spans) - 1
        else:
            spans[cur][1] = i + 1
    return spans


def _with_specials(tok, ids, flags):
    ids = np.concatenate([[tok.cls_token_id], ids, [tok.sep_token_id]])
    return ids, np.concatenate([[0], flags, [0]]).astype(np.uint8)


def _assert_whole_words(tok, text, strategy, seeds=200):
    enc = SentenceSegmenter(tok, "jieba" if strategy != "ernie" else "ernie")
    ids, flags = _with_specials(tok, *enc.encode_batch([text])[0])
    words = _words(flags, ids, tok.all_special_ids)
    multi = [w for w in words if w[1] - w[0] > 1]
    assert multi, "the test sentence must hold multi-token words"
    m = Masker(MaskingConfig(strategy, rate=0.5), tok.vocab_size, tok.mask_token_id, tok.all_special_ids)
    hit_multi = 0
    for s in range(seeds):
        out, labels = m(ids, flags, np.random.default_rng(s))
        for b, e in words:
            chosen = labels[b:e] != IGNORE
            assert chosen.all() or not chosen.any(), f"word {tok.convert_ids_to_tokens(ids[b:e])} split"
            if chosen.all():
                is_mask = out[b:e] == tok.mask_token_id
                assert is_mask.all() or not is_mask.any(), "a word is replaced consistently"
                hit_multi += e - b > 1
    assert hit_multi > 0
    return words, ids


def test_wwm_english_wordpieces(tok):
    words, ids = _assert_whole_words(tok, "The unbelievable transformers are here.", "wwm")
    pieces = [tok.convert_ids_to_tokens(ids[b:e]) for b, e in words]
    assert any(len(p) > 1 and all(t.startswith("##") for t in p[1:]) for p in pieces)


def test_wwm_chinese_jieba_words(tok):
    import jieba

    text = "我们的学校有一个很大的图书馆，同学们经常去那里看书。"
    words, ids = _assert_whole_words(tok, text, "wwm")
    got = ["".join(tok.convert_ids_to_tokens(ids[b:e])) for b, e in words]
    assert got == [w for w in jieba.cut(text)]  # units are exactly jieba's words


def test_span_masking_rate_and_whole_words(tok):
    _assert_whole_words(tok, "周末的时候，她喜欢去公园散步，然后回家看电视。", "span")
    rng = np.random.default_rng(3)
    m = Masker(MaskingConfig("span"), V, MASK, SPECIALS)
    sel = n = 0
    for ids in _random_seqs(rng, 200):
        flags = (rng.random(len(ids)) < 0.6).astype(np.uint8)  # words of 1-3 tokens
        _, labels = m(ids, flags, rng)
        sel += int((labels != IGNORE).sum())
        n += int((~np.isin(ids, SPECIALS)).sum())
    assert 0.13 < sel / n <= 0.151


def test_ernie_entities_masked_whole(tok):
    text = "张三在北京大学读书，他喜欢哈尔滨的冬天。"
    enc = SentenceSegmenter(tok, "ernie")
    ids, flags = _with_specials(tok, *enc.encode_batch([text])[0])
    m = Masker(MaskingConfig("ernie", ernie_mix=(0, 0, 1), rate=0.5), tok.vocab_size, tok.mask_token_id,
               tok.all_special_ids)
    ents = [u for u in m.units(ids, flags, "entity")]
    names = ["".join(tok.convert_ids_to_tokens(ids[b:e])) for b, e in ents]
    assert names == ["张三", "北京大学", "哈尔滨"]
    seen = set()
    for s in range(50):
        units, level = m.choose(ids, flags, np.random.default_rng(s))
        assert level == "entity"
        for b, e in units:
            seen.add("".join(tok.convert_ids_to_tokens(ids[b:e])))
        for b, e in ents:  # an entity is masked entirely or not at all
            covered = [any(ub <= i < ue for ub, ue in units) for i in range(b, e)]
            assert all(covered) or not any(covered)
    assert {"张三", "北京大学"} <= seen
    toks = tok.convert_ids_to_tokens(ids[1:-1])
    shown = describe_masking(toks, [(b - 1, e - 1) for b, e in ents])
    assert shown.startswith("[张三] 在 [北京大学]")


def test_ernie_adjacent_name_parts_merged():
    from bertfam.objectives import segment

    class P:  # jieba.posseg may cut a full name into surname + given name
        def __init__(self, w, f):
            self.word, self.flag = w, f

    import jieba.posseg

    orig = jieba.posseg.cut
    jieba.posseg.cut = lambda text, HMM=True: iter([P("欧阳", "nr"), P("明日", "nr"), P("在", "p"), P("南京", "ns"),
                                          P("工作", "vn")])
    try:
        words, ents = segment._jieba_words("欧阳明日在南京工作", True)
    finally:
        jieba.posseg.cut = orig
    assert ents == [(0, 4), (5, 7)]  # 欧阳 + 明日 -> one person; 南京 separate
    assert words[:2] == [(0, 2), (2, 4)]


def test_ernie_level_mix_is_configurable(tok):
    enc = SentenceSegmenter(tok, "ernie")
    ids, flags = _with_specials(tok, *enc.encode_batch(["周杰伦在广州举办了一场演唱会。"])[0])
    m = Masker(MaskingConfig("ernie", ernie_mix=(0.5, 0.5, 0)), tok.vocab_size, tok.mask_token_id,
               tok.all_special_ids)
    levels = [m.choose(ids, flags, np.random.default_rng(s))[1] for s in range(400)]
    assert "entity" not in levels
    assert 0.42 < levels.count("basic") / 400 < 0.58


def test_bad_masking_config_is_a_clear_error():
    from bertfam import ConfigError

    with pytest.raises(ConfigError, match="masking"):
        Masker(MaskingConfig("nope"), V, MASK, SPECIALS)
    with pytest.raises(ConfigError, match="rate"):
        Masker(MaskingConfig("token", rate=1.5), V, MASK, SPECIALS)


def test_out_of_dictionary_text_skips_the_slow_hmm():
    """Traditional characters are mostly outside jieba's dictionary: its HMM would take ~100x longer there."""
    import jieba.posseg as pseg

    from bertfam.objectives.segment import _posseg

    assert isinstance(_posseg(pseg, "諾貝爾文學獎是依諾貝爾在1895年的遺囑所成立的獎項"), list)  # dictionary-only pass
    assert not isinstance(_posseg(pseg, "张三在北京大学读书，他喜欢哈尔滨的冬天。"), list)  # full HMM pass


def test_sentence_encoder_ignores_truncation_left_by_a_tokenizer_call(tok):
    tok("短", max_length=4, padding="max_length")  # leaves truncation + padding set on the Rust tokenizer
    ids, flags = SentenceSegmenter(tok).encode_batch(["一二三四五六七八"])[0]
    assert len(ids) == len(flags) == 8 and tok.pad_token_id not in ids.tolist()
