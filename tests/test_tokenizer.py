import pytest
import transformers as T

from bertfam import Tokenizer
from bertfam.errors import ConfigError, TokenizerError
from bertfam.tokenization import tokenizer_from

from .conftest import ZH_VOCAB

TEXTS = [
    "我爱北京天安门，今天天气很好。",
    "BERT模型在2018年发布；GPT-4呢？",
    "Ｆｕｌｌ－ｗｉｄｔｈ　ＡＢＣ １２３ 和 half width abc 123",
    "emoji 😀👍 混合 text 🤗",
    "  leading and trailing spaces   中 文  ",
    "Café naïve résumé Ünïcödé",
    "控制\u0000字符\u200b零宽\t制表",
    "[MASK]是一个特殊的[MASK]标记",
    "https://example.com/path?q=北京&x=1",
    "",
]


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    import shutil

    d = tmp_path_factory.mktemp("zhvocab")
    shutil.copy(ZH_VOCAB, d / "vocab.txt")
    return Tokenizer.from_vocab(ZH_VOCAB), T.BertTokenizerFast.from_pretrained(str(d))


def test_single_matches_transformers(toks):
    ours, hf = toks
    for t in TEXTS:
        a = ours(t, return_offsets_mapping=True, return_tensors=None)
        b = hf(t, return_offsets_mapping=True)
        assert a["input_ids"] == b["input_ids"], t
        assert a["token_type_ids"] == b["token_type_ids"], t
        assert [tuple(o) for o in a["offset_mapping"]] == [tuple(o) for o in b["offset_mapping"]], t


def test_pairs_truncation_padding_match(toks):
    ours, hf = toks
    a_texts, b_texts = TEXTS[:5], [t * 8 + "尾" for t in TEXTS[5:]]
    for strategy in ("longest_first", "only_second"):
        a = ours(a_texts, b_texts, max_length=40, truncation=strategy)
        b = hf(a_texts, b_texts, max_length=40, truncation=strategy, padding=True, return_tensors="pt")
        for k in ("input_ids", "token_type_ids", "attention_mask"):
            assert a[k].tolist() == b[k].tolist(), (strategy, k)


def test_impossible_truncation_is_a_clear_error(toks):
    ours, _ = toks
    with pytest.raises(TokenizerError, match="truncat"):
        ours(["很长的问题" * 20], ["短"], max_length=16, truncation="only_second")


def test_offsets_point_into_original_text(toks):
    ours, _ = toks
    text = "ＧＤＰ增长了３．５％，iPhone 15 在 北京 发售。"
    enc = ours(text, return_offsets_mapping=True, return_tensors=None)
    pieces = [text[s:e] for s, e in enc["offset_mapping"] if e > s]
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")


def test_overflowing_windows(toks):
    ours, _ = toks
    passage = "".join(str(i % 10) + "字" for i in range(200))
    enc = ours(["问题是什么"], [passage], max_length=64, truncation="only_second", stride=16,
               return_overflowing_tokens=True, return_offsets_mapping=True)
    assert enc["input_ids"].shape[1] == 64 and enc["input_ids"].shape[0] > 5
    assert set(enc["overflow_to_sample_mapping"].tolist()) == {0}


def test_encode_ignores_settings_of_earlier_calls(toks):
    ours, _ = toks
    text = "字" * 100
    ours([text], max_length=16)
    assert len(ours.tokenize(text)) == 100 and len(ours.encode(text)) == 102


def test_save_and_reload(tmp_path, toks):
    ours, _ = toks
    ours.save_pretrained(str(tmp_path))
    again = Tokenizer.from_pretrained(str(tmp_path))
    assert again.encode(TEXTS[1]) == ours.encode(TEXTS[1])
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").count("\n") == 21128
    assert again.mask_token_id == 103 and again.cls_token_id == 101


def test_vocab_training(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 50 + "我们在北京学习自然语言处理\n" * 50,
                      encoding="utf-8")
    from bertfam.tokenization import train_vocab

    tok = train_vocab([str(corpus)], 200, str(tmp_path / "v"), min_frequency=1)
    assert tok.tokenize("the quick fox")[:1] == ["the"]
    assert tok.tokenize("北京") == ["北", "京"]
    assert (tmp_path / "v" / "vocab.txt").exists()


def test_vocab_training_refuses_a_corpus_without_text(tmp_path):
    from bertfam.tokenization import train_vocab

    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n   \n\t\n")
    (tmp_path / "control.txt").write_bytes(b"\x01\x02\x03\n")  # BERT's normaliser removes these
    with pytest.raises(TokenizerError, match="empty.txt, .*blank.txt: no text to learn a vocabulary from"):
        train_vocab([str(tmp_path / "empty.txt"), str(tmp_path / "blank.txt")], 100, str(tmp_path / "v"))
    with pytest.raises(TokenizerError, match="control.txt: no token survived normalisation"):
        train_vocab([str(tmp_path / "control.txt")], 100, str(tmp_path / "v"))
    assert not (tmp_path / "v" / "vocab.txt").exists()


def test_tokenizer_errors(tmp_path):
    with pytest.raises(TokenizerError, match="not found"):
        Tokenizer.from_pretrained(str(tmp_path / "nope"))
    with pytest.raises(TokenizerError, match="no tokenizer.json or vocab.txt"):
        Tokenizer.from_pretrained(str(tmp_path))
    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\n\xff\xfe\n")
    with pytest.raises(TokenizerError, match="not UTF-8"):
        Tokenizer.from_pretrained(str(tmp_path))
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(TokenizerError, match=r"\[UNK\]"):
        Tokenizer.from_pretrained(str(tmp_path))


def test_len_decode_batch_decode_and_return_tensors_as_transformers(toks):
    import numpy as np
    import torch

    ours, hf = toks
    assert len(ours) == len(hf) == ours.vocab_size
    enc = ours(TEXTS[:4])  # default: padded torch tensors, what the model takes
    assert isinstance(enc["input_ids"], torch.Tensor) and enc["input_ids"].shape[0] == 4
    texts = ours.batch_decode(enc["input_ids"])  # padding and [CLS]/[SEP] skipped
    assert texts == hf.batch_decode(enc["input_ids"].tolist(), skip_special_tokens=True)
    assert ours.decode(enc["input_ids"][1]) == texts[1] and "[PAD]" not in texts[2]
    assert ours.batch_decode(enc["input_ids"], skip_special_tokens=False) == hf.batch_decode(enc["input_ids"])
    # return_tensors=None and padding=False: transformers' default output, lists of unequal length
    lists = ours(TEXTS[:3], return_tensors=None, padding=False)
    assert lists["input_ids"] == hf(TEXTS[:3])["input_ids"]
    assert isinstance(ours(TEXTS[:2], return_tensors="np")["input_ids"], np.ndarray)
    with pytest.raises(ValueError, match="return_tensors must be 'pt', 'np' or None, got 'tf'"):
        ours("好", return_tensors="tf")


def test_tokenizer_from_a_vocab_file_or_a_directory(tmp_path):
    from_file = tokenizer_from(ZH_VOCAB)
    assert from_file.get_vocab() == Tokenizer.from_vocab(ZH_VOCAB).get_vocab()
    from_file.save_pretrained(str(tmp_path / "tok"))
    from_dir = tokenizer_from(str(tmp_path / "tok"))
    assert from_dir.encode("今天天气很好") == from_file.encode("今天天气很好")
    with pytest.raises(ConfigError, match="vocabulary file or tokenizer directory not found"):
        tokenizer_from(str(tmp_path / "missing.txt"))


def test_tokenizer_from_falls_back_to_the_first_checkpoint_with_a_tokenizer(tmp_path):
    """Without --vocab a run reads with the tokenizer of the first directory it starts from that holds one
    (pretrain: the data cache, then --init; the multimodal runs: --init), as the runs' own helpers did."""
    Tokenizer.from_vocab(ZH_VOCAB).save_pretrained(str(tmp_path / "init"))
    (tmp_path / "cache").mkdir()  # no tokenizer files
    tok = tokenizer_from(None, str(tmp_path / "cache"), None, str(tmp_path / "init"))
    assert tok.encode("今天天气很好") == Tokenizer.from_vocab(ZH_VOCAB).encode("今天天气很好")
    assert tokenizer_from(ZH_VOCAB, str(tmp_path / "cache")).get_vocab() == tok.get_vocab()  # --vocab first
    for empty in (None, ""):
        with pytest.raises(ConfigError, match="give --vocab .* or an --init checkpoint with a tokenizer"):
            tokenizer_from(empty, str(tmp_path / "cache"), None, str(tmp_path / "missing"))
