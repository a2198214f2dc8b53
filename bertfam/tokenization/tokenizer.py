"""WordPiece (and any `tokenizers` model) with BERT conventions and character offsets.

Built on the Rust `tokenizers` library. Loads a directory with `tokenizer.json` (any Hugging Face fast
tokenizer: WordPiece, RoBERTa BPE, SentencePiece unigram) or a plain `vocab.txt` (+ optional
`tokenizer_config.json`), and reproduces BertTokenizerFast's ids, type ids and offsets.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Optional, Sequence, Union

from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from ..errors import ConfigError, TokenizerError
from ..utils import atomic_write_text

SPECIAL_KEYS = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")
BERT_SPECIALS = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                 "mask_token": "[MASK]"}
TextInput = Union[str, Sequence[str]]


def read_vocab(path: str) -> dict[str, int]:
    vocab: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                tok = line.rstrip("\n").rstrip("\r")
                if tok in vocab:  # BERT keeps the first id of a duplicated line
                    continue
                vocab[tok] = i
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not UTF-8 ({e})") from None
    if not vocab:
        raise TokenizerError(f"{path}: empty vocabulary")
    return vocab


def bert_wordpiece(vocab: dict[str, int], lowercase: bool = True, strip_accents: Optional[bool] = None,
                   specials: Optional[dict] = None) -> HFTokenizer:
    """The BertTokenizerFast pipeline: BertNormalizer (clean text, CJK chars split, case/accents),
    BertPreTokenizer, WordPiece, [CLS] A [SEP] B [SEP] template."""
    sp = dict(BERT_SPECIALS, **(specials or {}))
    for k in ("unk_token", "cls_token", "sep_token"):
        if sp[k] not in vocab:
            raise TokenizerError(f"vocabulary has no {k} {sp[k]!r}")
    tok = HFTokenizer(WordPiece(vocab, unk_token=sp["unk_token"], max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=strip_accents, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = sp["cls_token"], sp["sep_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in sp.values() if t in vocab])
    return tok


class Encoded(dict):
    """input_ids / attention_mask / token_type_ids (+ offset_mapping, overflow_to_sample) and the raw
    `tokenizers` encodings (`.encodings`) for word ids and sequence ids."""

    encodings: list


class Tokenizer:
    def __init__(self, tok: HFTokenizer, specials: Optional[dict] = None, do_lower_case: bool = True,
                 model_max_length: int = 512):
        self._tok = tok
        self._lock = threading.Lock()  # truncation/padding settings are state on the Rust object
        self.specials = dict(BERT_SPECIALS, **(specials or {}))
        self.do_lower_case = do_lower_case
        self.model_max_length = model_max_length
        vocab = tok.get_vocab(with_added_tokens=True)
        missing = [k for k in ("cls_token", "sep_token", "pad_token") if self.specials[k] not in vocab]
        if missing:
            raise TokenizerError(f"vocabulary lacks special token(s): {', '.join(self.specials[k] for k in missing)}")

    # ------------------------------------------------------------ loading
    @classmethod
    def from_vocab(cls, vocab_file: str, do_lower_case: bool = True, strip_accents: Optional[bool] = None,
                   **kw) -> "Tokenizer":
        vocab = read_vocab(vocab_file)
        return cls(bert_wordpiece(vocab, do_lower_case, strip_accents), do_lower_case=do_lower_case, **kw)

    @classmethod
    def from_pretrained(cls, path: str) -> "Tokenizer":
        if not os.path.isdir(path):
            raise TokenizerError(f"{path}: tokenizer directory not found")
        conf = _read_optional_json(os.path.join(path, "tokenizer_config.json"))
        conf.update(_read_optional_json(os.path.join(path, "special_tokens_map.json")))
        specials = {k: _content(conf[k]) for k in SPECIAL_KEYS if conf.get(k)}
        lower = bool(conf.get("do_lower_case", True))
        max_len = conf.get("model_max_length", 512)
        max_len = int(max_len) if isinstance(max_len, (int, float)) and max_len < 1e6 else 512
        tj, vt = os.path.join(path, "tokenizer.json"), os.path.join(path, "vocab.txt")
        if os.path.isfile(tj):
            try:
                tok = HFTokenizer.from_file(tj)
            except Exception as e:  # tokenizers raises plain Exception on parse errors
                raise TokenizerError(f"{tj}: cannot be read ({str(e).splitlines()[0]})") from None
            return cls(tok, specials, lower, max_len)
        if os.path.isfile(vt):
            vocab = read_vocab(vt)
            strip = conf.get("strip_accents")
            return cls(bert_wordpiece(vocab, lower, strip, specials), specials, lower, max_len)
        raise TokenizerError(f"{path}: no tokenizer.json or vocab.txt")

    def save_pretrained(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        atomic_write_text(os.path.join(path, "tokenizer.json"), self._tok.to_str())
        model = self._tok.model
        if isinstance(model, WordPiece):
            vocab = self._tok.get_vocab(with_added_tokens=False)
            atomic_write_text(os.path.join(path, "vocab.txt"),
                              "".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
        conf = dict(self.specials, do_lower_case=self.do_lower_case, model_max_length=self.model_max_length,
                    tokenizer_class="BertTokenizer" if isinstance(model, WordPiece) else "PreTrainedTokenizerFast")
        atomic_write_text(os.path.join(path, "tokenizer_config.json"), json.dumps(conf, indent=2, ensure_ascii=False))

    # ------------------------------------------------------------ vocab
    @property
    def backend(self) -> HFTokenizer:
        return self._tok

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        """Entries in the vocabulary, added tokens included (transformers' `len(tokenizer)`)."""
        return self.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return self._tok.get_vocab(with_added_tokens=True)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> Optional[str]:
        return self._tok.id_to_token(i)

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        unk = self.unk_token_id
        return [self._tok.token_to_id(t) if self._tok.token_to_id(t) is not None else unk for t in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return [self._tok.id_to_token(int(i)) for i in ids]

    def __getattr__(self, name: str):
        # cls_token_id, sep_token_id, pad_token_id, mask_token_id, unk_token_id; cls_token, ...
        if name.endswith("_token_id") and name[:-3] in SPECIAL_KEYS:
            return self.__dict__["_tok"].token_to_id(self.__dict__["specials"][name[:-3]])
        if name in SPECIAL_KEYS:
            return self.__dict__["specials"][name]
        raise AttributeError(name)

    @property
    def all_special_ids(self) -> set[int]:
        return {i for i in (self.token_to_id(t) for t in self.specials.values()) if i is not None}

    # ------------------------------------------------------------ encoding
    def _plain(self, text: str, text_pair: Optional[str], add_special_tokens: bool):
        """One encoding with neither truncation nor padding (those are state left by __call__)."""
        with self._lock:
            self._tok.no_truncation()
            self._tok.no_padding()
            return self._tok.encode(text, text_pair, add_special_tokens=add_special_tokens)

    def tokenize(self, text: str) -> list[str]:
        return self._plain(text, None, False).tokens

    def encode(self, text: str, text_pair: Optional[str] = None, add_special_tokens: bool = True) -> list[int]:
        return self._plain(text, text_pair, add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """ids (a list, or a 1-d tensor) -> text. Special tokens are skipped by default (transformers keeps
        them unless told): a decoded input reads as the text, not as [CLS] ... [SEP] [PAD] [PAD]."""
        return self._tok.decode([int(i) for i in _as_list(ids)], skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        """A batch of ids (a list of lists, or a 2-d tensor such as `enc["input_ids"]`) -> one text each;
        padding is a special token, so it goes too (the default)."""
        return self._tok.decode_batch([[int(i) for i in _as_list(s)] for s in _as_list(sequences)],
                                      skip_special_tokens=skip_special_tokens)

    def __call__(self, text: TextInput, text_pair: Optional[TextInput] = None, *, max_length: Optional[int] = None,
                 truncation: Union[bool, str] = True, padding: Union[bool, str] = "longest", stride: int = 0,
                 return_overflowing_tokens: bool = False, return_offsets_mapping: bool = False,
                 return_tensors: Optional[str] = "pt", add_special_tokens: bool = True,
                 pad_to_multiple_of: Optional[int] = None) -> Encoded:
        """Encode one text (or pair) or a batch.

        truncation: True / "longest_first" / "only_first" / "only_second" / False.
        padding: "longest" (default), "max_length", or False (lists of unequal length, no tensors).
        return_tensors: "pt" (default: torch tensors, what the model takes), "np", or None (lists; with
        padding=False, transformers' own default output). With return_overflowing_tokens, long inputs become
        several windows overlapping by `stride` tokens; `overflow_to_sample_mapping` says which input each
        window came from.
        """
        if return_tensors not in ("pt", "np", None):
            raise ValueError(f"return_tensors must be 'pt', 'np' or None, got {return_tensors!r}")
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        pairs = None
        if text_pair is not None:
            pairs = [text_pair] if isinstance(text_pair, str) else list(text_pair)
            if len(pairs) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(pairs)} text pairs")
        max_length = max_length or self.model_max_length
        strategy = "longest_first" if truncation is True else truncation
        with self._lock:
            if strategy:
                self._tok.enable_truncation(max_length, stride=stride, strategy=strategy)
            else:
                self._tok.no_truncation()
            if padding:
                self._tok.enable_padding(pad_id=self.pad_token_id, pad_token=self.pad_token,
                                         length=max_length if padding == "max_length" else None,
                                         pad_to_multiple_of=pad_to_multiple_of)
            else:
                self._tok.no_padding()
            inputs = texts if pairs is None else list(zip(texts, pairs))
            try:
                encs = self._tok.encode_batch(inputs, add_special_tokens=add_special_tokens)
            except Exception as e:  # the Rust library raises plain Exception (e.g. impossible truncation)
                raise TokenizerError(f"cannot encode: {str(e).splitlines()[0]}") from None
        flat, sample = [], []
        for i, e in enumerate(encs):
            flat.append(e)
            sample.append(i)
            if return_overflowing_tokens:
                for o in e.overflowing:
                    flat.append(o)
                    sample.append(i)
        if return_overflowing_tokens and padding:
            longest = max(len(e.ids) for e in flat)  # overflow windows were padded separately
            for e in flat:
                e.pad(longest, pad_id=self.pad_token_id, pad_token=self.pad_token)
        out = Encoded(input_ids=[e.ids for e in flat], attention_mask=[e.attention_mask for e in flat],
                      token_type_ids=[e.type_ids for e in flat])
        if return_offsets_mapping:
            out["offset_mapping"] = [e.offsets for e in flat]
        if return_overflowing_tokens:
            out["overflow_to_sample_mapping"] = sample
        out.encodings = flat
        if return_tensors is not None and padding:
            import numpy as np
            import torch

            for k in ("input_ids", "attention_mask", "token_type_ids", "offset_mapping", "overflow_to_sample_mapping"):
                if k in out:
                    out[k] = torch.tensor(out[k], dtype=torch.long) if return_tensors == "pt" else np.array(
                        out[k], dtype=np.int64)
        elif single and not return_overflowing_tokens:
            for k in list(out):
                out[k] = out[k][0]
        return out


def tokenizer_from(path: Optional[str], *checkpoints: Optional[str]) -> Tokenizer:
    """The tokenizer a run reads with. `path` (a `--vocab`): a tokenizer or model directory
    (`Tokenizer.from_pretrained`), or a vocabulary file (vocab.txt, BERT WordPiece, lowercased:
    `Tokenizer.from_vocab`). Without it (None or ""), the tokenizer of the first of `checkpoints` (the
    directories a run starts from, in the caller's order: a pre-training data cache, an --init model) that
    holds one. ConfigError when `path` is neither a directory nor a file, or when nothing gives a tokenizer."""
    if not path:
        for d in checkpoints:
            if d and any(os.path.isfile(os.path.join(d, f)) for f in ("tokenizer.json", "vocab.txt")):
                return Tokenizer.from_pretrained(d)
        raise ConfigError("give --vocab (vocab.txt or tokenizer directory) or an --init checkpoint with a tokenizer")
    if os.path.isdir(path):
        return Tokenizer.from_pretrained(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: vocabulary file or tokenizer directory not found")
    return Tokenizer.from_vocab(path)


def _as_list(x) -> list:
    """A tensor or array (anything with .tolist()) as a list; a list as it is."""
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _content(v) -> str:
    return v["content"] if isinstance(v, dict) else str(v)


def _read_optional_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{path}: not valid JSON ({e})") from None
    return d if isinstance(d, dict) else {}


def _has_text(path: str, chunk: int = 1 << 20) -> bool:
    """Any non-blank byte in the file (read a chunk at a time: corpora can be gigabytes)."""
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return False
            if b.strip():
                return True


def train_vocab(files: Sequence[str], vocab_size: int, out_dir: str, lowercase: bool = True,
                min_frequency: int = 2, limit_alphabet: int = 10000) -> Tokenizer:
    """Train a WordPiece vocabulary (BERT normalization, CJK characters as single tokens)."""
    from tokenizers.trainers import WordPieceTrainer

    for f in files:
        if not os.path.isfile(f):
            raise TokenizerError(f"{f}: corpus file not found")
    if not any(_has_text(f) for f in files):
        raise TokenizerError(f"{', '.join(files)}: no text to learn a vocabulary from (empty or blank)")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = HFTokenizer(WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                               limit_alphabet=limit_alphabet, continuing_subword_prefix="##")
    tok.train(list(files), trainer)
    vocab = tok.get_vocab()
    if len(vocab) <= len(specials):  # e.g. only control characters, which BERT's normaliser removes
        raise TokenizerError(f"{', '.join(files)}: no token survived normalisation; nothing to learn a vocabulary "
                             f"from")
    t = Tokenizer(bert_wordpiece(vocab, lowercase), do_lower_case=lowercase)
    t.save_pretrained(out_dir)
    return t
