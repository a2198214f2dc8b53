"""Multimodal members (VisualBERT / VideoBERT / SpeechBERT-style input) on the one encoder."""
import json
import os

import numpy as np
import pytest
import torch

import bertfam
from bertfam.errors import ConfigError, DataError
from bertfam.multimodal import MultimodalConfig, build_multimodal, load_multimodal
from bertfam.multimodal.audio import log_mel, read_wav, wav_features
from bertfam.multimodal.codebook import Codebook, fit_codebook
from bertfam.multimodal.config import AudioConfig
from bertfam.multimodal.data import FeatureTextCollator, token_masker
from bertfam.multimodal.features import load_records

from .conftest import FIXTURES

MM = os.path.join(FIXTURES, "multimodal")
VOCAB = os.path.join(MM, "vocab.txt")


def tiny(task=None, vocab=60, **kw):
    return bertfam.ModelConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=48, max_position_embeddings=64, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0, head=bertfam.HeadConfig(task=task, **kw))


def batch(B=3, T=7, N=4, D=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (B, T), generator=g)
    am = torch.ones(B, T, dtype=torch.long)
    am[1, 5:] = 0
    f = torch.randn(B, N, D, generator=g)
    fm = torch.ones(B, N, dtype=torch.long)
    fm[0, 2:] = 0
    return ids, am, f, fm


def test_joint_sequence_masks_and_cross_modal_attention():
    m = build_multimodal(tiny(), MultimodalConfig(modality="image", feature_dim=12), seed=0).eval()
    ids, am, f, fm = batch()
    with torch.no_grad():
        out = m(input_ids=ids, attention_mask=am, features=f, feature_mask=fm)
        assert out.last_hidden_state.shape == (3, 7 + 4, 32)
        f2 = f.clone()
        f2[0, 2:] += 100.0  # padded feature slots of example 0: invisible
        out2 = m(input_ids=ids, attention_mask=am, features=f2, feature_mask=fm)
        assert torch.allclose(out.last_hidden_state[0, :7], out2.last_hidden_state[0, :7], atol=1e-6)
        f3 = f.clone()
        f3[0, 0] += 1.0  # a real region: the text states of example 0 change, the others do not
        out3 = m(input_ids=ids, attention_mask=am, features=f3, feature_mask=fm)
        assert (out.last_hidden_state[0, :7] - out3.last_hidden_state[0, :7]).abs().max() > 1e-3
        assert torch.allclose(out.last_hidden_state[1:], out3.last_hidden_state[1:], atol=1e-6)
        # zero feature positions: region order does not matter (a set); sequential positions: it does
        perm = torch.tensor([1, 0, 2, 3])
        fp = f[:, perm]
        fmp = fm[:, perm]
        a = m(input_ids=ids, attention_mask=am, features=fp, feature_mask=fmp).last_hidden_state[:, :7]
        assert torch.allclose(a[1:], out.last_hidden_state[1:, :7], atol=1e-5)
    s = build_multimodal(tiny(), MultimodalConfig(modality="speech", feature_dim=12, feature_positions="sequential"),
                         seed=0).eval()
    with torch.no_grad():
        x = s(input_ids=ids, features=f).last_hidden_state[:, :7]
        y = s(input_ids=ids, features=f[:, perm]).last_hidden_state[:, :7]
    assert (x - y).abs().max() > 1e-4
    # the text part alone goes through the unchanged backbone
    with torch.no_grad():
        t = m(input_ids=ids, attention_mask=am).last_hidden_state
        b = m.backbone(ids, am).last_hidden_state
    assert torch.allclose(t[am.bool()], b[am.bool()], atol=1e-6)


def test_boxes_heads_and_errors():
    mm = MultimodalConfig(modality="image", feature_dim=12, box_dim=5)
    m = build_multimodal(tiny("pretraining", pair_objective="nsp"), mm, seed=1)
    ids, am, f, fm = batch()
    boxes = torch.rand(3, 4, 5)
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    out = m(input_ids=ids, attention_mask=am, features=f, feature_mask=fm, boxes=boxes, labels=labels,
            masked_positions=labels.ne(-100), pair_labels=torch.tensor([0, 1, 0]))
    assert out.logits.shape == (3, 60) and out.pair_logits.shape == (3, 2) and torch.isfinite(out.loss)
    out.loss.backward()
    assert m.adapter.box.weight.grad.abs().sum() > 0 and m.adapter.projection.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="boxes"):
        m(input_ids=ids, features=f)
    with pytest.raises(ConfigError, match=r"\(B, N, 12\)"):
        m(input_ids=ids, features=f[..., :5], boxes=boxes)
    span = build_multimodal(tiny("span", answerability=False), MultimodalConfig(modality="speech", feature_dim=12,
                                                                                 feature_positions="sequential"))
    o = span(input_ids=ids, attention_mask=am, features=f, feature_mask=fm, start_positions=torch.tensor([1, 2, 3]),
             end_positions=torch.tensor([2, 2, 4]))
    assert o.start_logits.shape == (3, 7) and o.loss > 0  # span logits over the text part only
    with pytest.raises(ConfigError):
        MultimodalConfig(modality="smell", feature_dim=3)


def test_save_load_roundtrip(tmp_path):
    mm = MultimodalConfig(modality="speech", feature_dim=12, feature_positions="sequential",
                          audio=AudioConfig(n_mels=3))
    m = build_multimodal(tiny("span"), mm, seed=2).eval()
    m.save_pretrained(str(tmp_path / "m"))
    m2 = load_multimodal(str(tmp_path / "m"))
    assert m2.mm == mm and m2.config == m.config
    ids, am, f, fm = batch()
    with torch.no_grad():
        assert torch.equal(m(input_ids=ids, features=f).start_logits, m2(input_ids=ids, features=f).start_logits)
    bertfam.build_model(tiny()).save_pretrained(str(tmp_path / "text"))
    with pytest.raises(bertfam.CheckpointError, match="multimodal.json"):
        load_multimodal(str(tmp_path / "text"))


def test_init_from_text_copies_backbone_and_grows_vocab(tmp_path):
    from bertfam.multimodal import init_from_text

    text = bertfam.build_model(tiny("mlm"), seed=5)
    text.save_pretrained(str(tmp_path / "t"))
    mm = MultimodalConfig(modality="video", text_vocab_size=60, codebook_size=8)
    m = build_multimodal(tiny("mlm", vocab=68), mm, seed=6)
    init_from_text(m, str(tmp_path / "t"))
    w = m.backbone.embeddings.word.weight
    assert torch.equal(w[:60], text.backbone.embeddings.word.weight) and not torch.equal(w[60:], torch.zeros(8, 32))
    assert torch.equal(m.backbone.encoder.layers[1].ffn_in.weight, text.backbone.encoder.layers[1].ffn_in.weight)
    with pytest.raises(ConfigError, match="vocab_size"):
        build_multimodal(tiny("mlm", vocab=66), mm)


# ------------------------------------------------------------------------------- feature files
def _write_manifest(d, rows):
    with open(d / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def test_manifest_bad_records_are_reported_and_skipped(tmp_path, caplog):
    d = tmp_path
    np.save(d / "ok.npy", np.ones((3, 4), np.float32))
    np.save(d / "wrongdim.npy", np.ones((3, 5), np.float32))
    nan = np.ones((2, 4), np.float32)
    nan[1, 2] = np.nan
    np.save(d / "nan.npy", nan)
    np.savez(d / "other.npz", features=np.ones((2, 4), np.float32), id=np.array("someone-else"))
    np.savez(d / "boxes.npz", features=np.ones((2, 4), np.float32), boxes=np.ones((3, 4), np.float32))
    np.save(d / "empty.npy", np.zeros((0, 4), np.float32))
    np.save(d / "byid.npy", np.zeros((1, 4), np.float32))
    (d / "garbage.npy").write_bytes(b"not numpy")
    _write_manifest(d, [
        {"id": "a", "text": "x", "features": "ok.npy"},
        {"id": "b", "text": "x", "features": "wrongdim.npy"},
        {"id": "c", "text": "x", "features": "nan.npy"},
        {"id": "d", "text": "x", "features": "missing.npy"},
        {"id": "e", "text": "x", "features": "other.npz"},
        {"id": "a", "text": "x", "features": "ok.npy"},
        "{not json",
        {"id": "f", "features": "ok.npy"},
        {"id": "g", "text": "x", "features": "boxes.npz"},
        {"id": "h", "text": "x", "features": "empty.npy"},
        {"id": "byid", "text": "x"},
        {"id": "i", "text": "x", "features": "garbage.npy"},
    ])
    recs, rep = load_records(str(d), require=("text",))
    assert [r.id for r in recs] == ["a", "byid"] and rep.total == 12 and rep.skipped == 10
    reasons = {ln: r for ln, _, r in rep.problems}
    assert "dimension 5, expected 4" in reasons[2]
    assert "NaN/Inf" in reasons[3] and "row 1, column 2" in reasons[3]
    assert "not found" in reasons[4]
    assert "id mismatch" in reasons[5] and "someone-else" in reasons[5]
    assert reasons[6] == "duplicate id" and "JSON" in reasons[7] and "'text'" in reasons[8]
    assert "3 boxes for 2" in reasons[9] and "empty" in reasons[10] and "cannot read" in reasons[12]
    assert "manifest.jsonl:2 (id b)" in caplog.text
    assert "2 of 12 records kept, 10 skipped" in rep.summary()
    _write_manifest(d, [{"id": "b", "text": "x", "features": "wrongdim.npy"}])
    with pytest.raises(DataError, match="no usable record.*dimension"):
        load_records(str(d), feature_dim=4)
    with pytest.raises(DataError, match="manifest not found"):
        load_records(str(d / "nowhere"))


# ------------------------------------------------------------------------------- audio
def test_wav_reading_resampling_and_log_mel(tmp_path):
    from scipy.io import wavfile

    cfg = AudioConfig()
    f22, notes22 = wav_features(os.path.join(MM, "wav", "dog-22k.wav"), cfg)
    f8, notes8 = wav_features(os.path.join(MM, "wav", "cat-8k.wav"), cfg)
    assert notes22 == ["resampled 22050 Hz -> 16000 Hz"] and notes8 == ["resampled 8000 Hz -> 16000 Hz"]
    assert f22.shape[1] == 160 and np.isfinite(f22).all() and np.isfinite(f8).all()
    y, sr = read_wav(os.path.join(MM, "wav", "dog-22k.wav"))
    assert sr == 22050 and -1 <= y.min() < 0 < y.max() <= 1
    # a 1 kHz tone peaks in the mel band around 1 kHz, wherever its sample rate started
    t = np.arange(8000) / 8000.0
    wavfile.write(tmp_path / "tone8k.wav", 8000, (0.5 * np.sin(2 * np.pi * 1000 * t) * 32767).astype(np.int16))
    stereo = np.stack([np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000.0)] * 2, 1).astype(np.float32) * 0.5
    wavfile.write(tmp_path / "tone16k_stereo.wav", 16000, stereo)
    from bertfam.multimodal.audio import mel_filterbank, resample

    centre = np.argmax(mel_filterbank(16000, 512, 40, 20.0, 8000.0)[:, int(1000 / 16000 * 512)])
    for name in ("tone8k.wav", "tone16k_stereo.wav"):
        y, sr = read_wav(str(tmp_path / name))
        m = log_mel(resample(y, sr, 16000), cfg)
        assert abs(int(np.median(m.argmax(1))) - centre) <= 1, name
    wavfile.write(tmp_path / "empty.wav", 16000, np.zeros(0, np.int16))
    with pytest.raises(ValueError, match="empty audio"):
        read_wav(str(tmp_path / "empty.wav"))
    wavfile.write(tmp_path / "nan.wav", 16000, np.array([0.1, np.nan, 0.2], np.float32))
    (tmp_path / "junk.wav").write_bytes(b"RIFFjunk")
    _write_manifest(tmp_path, [{"id": "q1", "text": "the dog", "audio": os.path.join(MM, "wav", "dog-22k.wav")},
                               {"id": "q2", "text": "x", "audio": "empty.wav"},
                               {"id": "q3", "text": "x", "audio": "nan.wav"},
                               {"id": "q4", "text": "x", "audio": "junk.wav"},
                               {"id": "q5", "text": "x", "audio": "absent.wav"}])
    recs, rep = load_records(str(tmp_path), audio=cfg)
    assert [r.id for r in recs] == ["q1"] and rep.notes[0][2].startswith("resampled")
    reasons = [r for _, _, r in rep.problems]
    assert "empty audio" in reasons[0] and "NaN" in reasons[1]
    assert "cannot read" in reasons[2] and "not found" in reasons[3]


# ------------------------------------------------------------------------------- VideoBERT codebook
def test_codebook_recovers_clusters(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1, (5, 8)) * 4
    lab = rng.integers(0, 5, 300)
    x = (centres[lab] + rng.normal(0, 0.3, (300, 8))).astype(np.float32)
    cb = fit_codebook([x[:150], x[150:]], 5, seed=0)
    q = cb.quantize(x)
    purity = sum(np.bincount(lab[q == k]).max() for k in range(5) if (q == k).any()) / len(x)
    assert purity > 0.98
    cb.save(str(tmp_path / "cb.npz"))
    cb2 = Codebook.load(str(tmp_path / "cb.npz"))
    assert np.array_equal(cb2.quantize(x), q) and cb2.size == 5
    with pytest.raises(DataError, match="dimension 8"):
        cb.quantize(x[:, :3])
    with pytest.raises(DataError, match="lower --size"):
        fit_codebook([x[:3]], 5)


def test_match_collator_masks_every_text_but_predicts_only_matched(tmp_path):
    from bertfam.tokenization import Tokenizer

    tok = Tokenizer.from_vocab(VOCAB)
    exs = [{"input_ids": tok.encode("a photo of a dog and a cat"), "features": np.full((2, 3), i, np.float32),
            "boxes": None} for i in range(64)]
    torch.manual_seed(0)
    b = FeatureTextCollator(token_masker(tok, tok.vocab_size, 0.3), tok.pad_token_id, 0.5)(exs)
    mism = b["pair_labels"].bool()
    assert 15 < int(mism.sum()) < 49  # about half
    owner = b["features"][:, 0, 0].long()
    assert torch.equal(owner != torch.arange(64), mism)  # mismatched = another example's features
    masked = b["input_ids"].eq(tok.mask_token_id).any(1)
    assert masked[mism].float().mean() > 0.5 and masked[~mism].float().mean() > 0.5  # no give-away
    assert not b["masked_positions"][mism].any() and b["masked_positions"][~mism].any(1).all()


def test_multimodal_reheading_keeps_the_adapter_and_backbone(tmp_path):
    """New labels on a multimodal classifier: a new head (checkpoint.fit_head, as for text models); the feature
    adapter and the backbone are still the checkpoint's."""
    m = build_multimodal(tiny("classification", num_labels=2, labels=["a", "b"]),
                         MultimodalConfig(modality="image", feature_dim=12), seed=0)
    m.save_pretrained(str(tmp_path / "m"))
    r = load_multimodal(str(tmp_path / "m"), task="classification", labels=["x", "y", "z"], seed=1)
    assert r.config.head.num_labels == 3
    saved, now = m.state_dict(), r.state_dict()
    kept = [k for k in saved if k.startswith(("adapter.", "backbone."))]
    assert kept and all(torch.equal(saved[k], now[k]) for k in kept)
    assert now["classifier.classifier.weight"].shape[0] == 3
