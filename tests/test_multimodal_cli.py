"""`bertfam multimodal ...` end to end on tiny generated data (a few optimizer steps each), and the
VisualBERT parity with transformers."""
import json
import os
import shutil

import numpy as np
import pytest
import torch

from bertfam.cli import main
from bertfam.multimodal import load_multimodal
from bertfam.multimodal.synthetic import make_image_set, make_video_set

from .conftest import FIXTURES, run_cli

MM = os.path.join(FIXTURES, "multimodal")
VOCAB = os.path.join(MM, "vocab.txt")
def last_json(out: str) -> dict:
    """The summary JSON printed last by a command (after the data report lines)."""
    start = out.rfind("\n{\n")
    return json.loads(out[start + 1 if start >= 0 else out.index("{"):])


TINY = ["--max-steps", "3", "--batch-size", "8", "--no-progress", "--log-every", "1", "--max-length", "16"]


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    p = tmp_path_factory.mktemp("cfg") / "tiny.json"
    p.write_text(json.dumps({"bertfam_config_version": 1, "vocab_size": 60, "hidden_size": 32, "num_hidden_layers": 1,
                             "num_attention_heads": 2, "intermediate_size": 48, "max_position_embeddings": 64}))
    return str(p)


def test_image_pretrain_eval_and_convert(tmp_path, tiny_config, capsys):
    make_image_set(str(tmp_path / "img"), n=24, dim=8)
    out = tmp_path / "run"
    assert main(["multimodal", "pretrain", "--modality", "image", "--features", str(tmp_path / "img"), "--vocab", VOCAB,
                 "--model-config", tiny_config, "--out", str(out), "--eval-fraction", "0.25", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "24 of 24 records kept" in printed
    ev = last_json(printed)["final_eval"]
    assert {"eval_mlm_acc", "eval_match_acc", "eval_mlm_acc_shuffled", "eval_match_acc_shuffled"} <= set(ev)
    m = load_multimodal(str(out))
    assert m.mm.modality == "image" and m.mm.box_dim == 5 and m.pair is not None  # boxes found in the .npz files
    assert main(["multimodal", "eval", str(out), "--features", str(tmp_path / "img")]) == 0
    assert "match_acc_shuffled" in capsys.readouterr().out
    # continue from the saved model, dropping the boxes from the data: a clear error
    with open(tmp_path / "img" / "manifest.jsonl") as f:
        rows = [json.loads(l) for l in f]
    for r in rows:
        z = np.load(tmp_path / "img" / r["features"])
        np.save(tmp_path / "img" / (r["id"] + ".npy"), z["features"])
        r["features"] = r["id"] + ".npy"
    (tmp_path / "img" / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["multimodal", "pretrain", "--modality", "image", "--features", str(tmp_path / "img"), "--init",
                 str(out), "--out", str(tmp_path / "run2"), *TINY]) == 2
    assert "box_dim is 5 but the data needs 0" in capsys.readouterr().err


def test_image_classify_finetune_from_pretrained(tmp_path, tiny_config, capsys):
    make_image_set(str(tmp_path / "img"), n=16, dim=8)
    rows = [json.loads(line) for line in open(tmp_path / "img" / "manifest.jsonl")]
    for r in rows:  # label: does the caption mention an animal?
        r["label"] = "animal" if any(w in r["text"].split() for w in ("dog", "cat", "bird")) else "thing"
    (tmp_path / "img" / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["multimodal", "pretrain", "--modality", "image", "--features", str(tmp_path / "img"), "--vocab", VOCAB,
                 "--model-config", tiny_config, "--out", str(tmp_path / "pt"), *TINY]) == 0
    assert main(["multimodal", "finetune", "--modality", "image", "--task", "classify", "--features",
                 str(tmp_path / "img"), "--init", str(tmp_path / "pt"), "--out", str(tmp_path / "cls"),
                 "--eval-fraction", "0.25", *TINY]) == 0
    out = capsys.readouterr().out
    assert {"eval_acc", "eval_acc_shuffled"} <= set(last_json(out)["final_eval"])
    m = load_multimodal(str(tmp_path / "cls"))
    pt = load_multimodal(str(tmp_path / "pt"))
    assert m.config.head.labels == ["animal", "thing"] and m.classifier is not None
    # the pre-trained adapter was carried over (not re-initialised) before fine-tuning moved it a little
    assert (m.adapter.projection.weight - pt.adapter.projection.weight).abs().max() < 0.1


def test_video_vocab_and_cross_modal_mlm(tmp_path, tiny_config, capsys):
    make_video_set(str(tmp_path / "vid"), n=24, dim=6)
    cb = tmp_path / "codebook.npz"
    assert main(["multimodal", "vocab", "--features", str(tmp_path / "vid"), "--size", "10", "--out", str(cb)]) == 0
    assert "10 visual words of dimension 6" in capsys.readouterr().out
    out = tmp_path / "run"
    assert main(["multimodal", "pretrain", "--modality", "video", "--features", str(tmp_path / "vid"), "--vocab", VOCAB,
                 "--codebook", str(cb), "--model-config", tiny_config, "--out", str(out), "--eval-fraction", "0.25",
                 *TINY]) == 0
    ev = last_json(capsys.readouterr().out)["final_eval"]
    assert {"eval_text_mlm_acc", "eval_video_mlm_acc", "eval_text_mlm_acc_shuffled"} <= set(ev)
    m = load_multimodal(str(out))
    assert m.config.vocab_size == 43 + 10 and m.mm.text_vocab_size == 43 and os.path.isfile(out / "codebook.npz")
    assert m.adapter is None and m.codebook.size == 10  # visual words are tokens of the one vocabulary
    ckpt = next((out / "checkpoints").iterdir())
    assert load_multimodal(str(ckpt)).codebook.size == 10  # checkpoints carry the codebook too
    assert main(["multimodal", "eval", str(out), "--features", str(tmp_path / "vid")]) == 0
    assert "video_mlm_acc_shuffled" in capsys.readouterr().out
    # the spelling: `bertfam pretrain --modality ...` dispatches to the same code
    assert main(["pretrain", "--modality", "video", "--features", str(tmp_path / "vid"), "--codebook", str(cb),
                 "--vocab", VOCAB, "--model-config", tiny_config, "--out", str(tmp_path / "generic"),
                 "--max-steps", "2", "--batch-size", "8", "--no-progress"]) == 0
    assert load_multimodal(str(tmp_path / "generic")).mm.codebook_size == 10


def test_spoken_qa_finetune_with_wav_fixtures(tmp_path, tiny_config, capsys):
    d = tmp_path / "sp"
    os.makedirs(d)
    shutil.copy(os.path.join(MM, "wav", "dog-22k.wav"), d)
    shutil.copy(os.path.join(MM, "wav", "cat-8k.wav"), d)
    rows = []
    for i in range(12):
        animal = ["dog", "cat"][i % 2]
        passage = "the dog is red. the cat is blue." if i % 4 < 2 else "the cat is green. the dog is black."
        color = passage.split(f"the {animal} is ")[1].split(".")[0]
        rows.append({"id": f"q{i}", "passage": passage, "answer": {"text": color, "start": 999},  # start repaired
                     "audio": "dog-22k.wav" if animal == "dog" else "cat-8k.wav"})
    rows.append({"id": "bad", "passage": "the dog is red.", "answer": {"text": "purple"}, "audio": "dog-22k.wav"})
    (d / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "qa"
    assert main(["multimodal", "finetune", "--modality", "speech", "--task", "qa", "--features", str(d),
                 "--vocab", VOCAB, "--model-config", tiny_config, "--out", str(out), "--eval-fraction", "0.34", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "12 of 13 records kept, 1 skipped" in printed and "'purple' not found" in printed
    ev = last_json(printed)["final_eval"]
    assert {"eval_em", "eval_f1", "eval_em_shuffled"} <= set(ev)
    rep = json.loads((out / "data_report.json").read_text())
    assert rep["skipped"] == 1 and len(rep["notes"]) == 12 and "resampled" in rep["notes"][0]["what"]
    m = load_multimodal(str(out))
    assert m.mm.audio.sample_rate == 16000 and m.span is not None
    assert main(["multimodal", "eval", str(out), "--features", str(d)]) == 0
    assert "em_shuffled" in capsys.readouterr().out


def test_cli_bad_features_exit_2(tmp_path):
    (tmp_path / "manifest.jsonl").write_text('{"id": "a", "text": "x", "features": "a.npy"}\n')
    r = run_cli("multimodal", "pretrain", "--modality", "image", "--features", tmp_path, "--vocab", VOCAB,
                "--out", tmp_path / "o")
    assert r.returncode == 2 and "no usable record" in r.stderr and "a.npy not found" in r.stderr
    assert "Traceback" not in r.stderr


def test_visualbert_parity_with_transformers(tmp_path):
    """Random tiny VisualBertModel / VisualBertForPreTraining: bertfam's outputs within 1e-5, with padding in
    the text and in the regions; export back loads in transformers with no missing or unexpected keys."""
    transformers = pytest.importorskip("transformers")
    from bertfam.multimodal.hf import export_hf_visualbert

    torch.manual_seed(0)
    cfg = transformers.VisualBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                        intermediate_size=37, max_position_embeddings=64, visual_embedding_dim=12)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 99, (3, 9), generator=g)
    am = torch.ones(3, 9, dtype=torch.long)
    am[1, 6:] = 0
    am[2, 3:] = 0
    ids = ids.masked_fill(am == 0, cfg.pad_token_id)
    tt = torch.zeros_like(ids)
    tt[:, 4:] = 1
    f = torch.randn(3, 5, 12, generator=g)
    fm = torch.ones(3, 5, dtype=torch.long)
    fm[0, 3:] = 0
    fm[2, 1:] = 0
    joint = torch.cat([am, fm], 1).bool()
    for cls in (transformers.VisualBertModel, transformers.VisualBertForPreTraining):
        hf = cls(cfg).eval()
        hf.save_pretrained(tmp_path / cls.__name__)
        ours = load_multimodal(str(tmp_path / cls.__name__))
        assert ours.config.family == "visualbert" and ours.mm.feature_dim == 12
        with torch.no_grad():
            a = hf(input_ids=ids, attention_mask=am, token_type_ids=tt, visual_embeds=f, visual_attention_mask=fm,
                   output_hidden_states=True)
            b = ours(input_ids=ids, attention_mask=am, token_type_ids=tt, features=f, feature_mask=fm)
        assert (a.hidden_states[-1] - b.last_hidden_state)[joint].abs().max() <= 1e-5
        if cls is transformers.VisualBertModel:
            assert (a.pooler_output - b.pooler_output).abs().max() <= 1e-5
        else:
            assert (a.prediction_logits[:, :9] - b.logits)[am.bool()].abs().max() <= 1e-5
            assert (a.seq_relationship_logits - b.pair_logits).abs().max() <= 1e-5
        export_hf_visualbert(ours, str(tmp_path / ("back-" + cls.__name__)))
        hf2, info = cls.from_pretrained(str(tmp_path / ("back-" + cls.__name__)), output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        with torch.no_grad():
            c = hf2.eval()(input_ids=ids, attention_mask=am, token_type_ids=tt, visual_embeds=f,
                           visual_attention_mask=fm, output_hidden_states=True)
        assert (c.hidden_states[-1] - b.last_hidden_state)[joint].abs().max() <= 1e-5


# ------------------------------------------------------------------ one seed: train.seed
class _AtTrainer(Exception):
    """Raised where a run hands its model and data to the trainer: no step is taken."""


def _handed_to_trainer(monkeypatch, run) -> tuple:
    """(trainer seed, initial weights, training items in order) a library run hands its Trainer."""
    import bertfam.multimodal.finetune as ft
    import bertfam.multimodal.pretrain as pt

    seen = []

    def trainer(model, cfg, data, *a, **kw):
        items = [ex["id"] if "id" in ex else ex["features"].tobytes() if "features" in ex  # qa: a window
                 else tuple(ex["input_ids"].tolist()) for ex in data]  # video: an instance
        seen.append((cfg.seed, {k: v.clone() for k, v in model.state_dict().items()}, items))
        raise _AtTrainer

    for mod in (pt, ft):
        monkeypatch.setattr(mod, "Trainer", trainer)
    with pytest.raises(_AtTrainer):
        run()
    return seen[0]


@pytest.mark.parametrize("job", ["pretrain image", "pretrain video", "finetune classify", "finetune qa"])
def test_train_seed_is_the_one_seed_of_a_library_run(monkeypatch, tmp_path, tiny_config, job):
    """pretrain_multimodal / finetune_multimodal take no seed of their own: train.seed draws the trainer's
    order and masking, a new model's weights and the evaluation split. The same train.seed gives the same
    start twice; another one changes the weights and the split as well as the trainer's seed."""
    from bertfam.multimodal.finetune import finetune_multimodal
    from bertfam.multimodal.pretrain import fit_visual_vocab, pretrain_multimodal
    from bertfam.multimodal.runs import default_train

    kind, what = job.split()
    d, out = str(tmp_path / "data"), str(tmp_path / "out")
    kw = dict(vocab=VOCAB, config=tiny_config, max_length=16, eval_fraction=0.25)
    if what == "video":
        make_video_set(d, n=16, dim=6)
        fit_visual_vocab(d, str(tmp_path / "cb.npz"), 6)
        kw["codebook"] = str(tmp_path / "cb.npz")
    else:
        make_image_set(d, n=16, dim=8)
    if kind == "finetune":
        rows = [json.loads(line) for line in open(os.path.join(d, "manifest.jsonl"))]
        for i, r in enumerate(rows):
            r["label"] = ["a", "b"][i % 2]
            r["passage"] = f"the thing is {r['text'].split()[-1]}."
            r["answer"] = {"text": r["text"].split()[-1]}
        with open(os.path.join(d, "manifest.jsonl"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))

    def start(seed: int) -> tuple:
        train = default_train(seed=seed, max_steps=1)
        if kind == "pretrain":
            return _handed_to_trainer(monkeypatch, lambda: pretrain_multimodal(what, d, out, train=train, **kw))
        return _handed_to_trainer(monkeypatch, lambda: finetune_multimodal("image", what, d, out, train=train, **kw))

    def same_weights(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    (s1, w1, i1), (s2, w2, i2), (s3, w3, i3) = start(3), start(3), start(4)
    assert (s1, s2, s3) == (3, 3, 4)
    assert same_weights(w1, w2) and i1 == i2
    assert not same_weights(w1, w3)  # the weights follow train.seed
    assert set(i1) != set(i3)  # so does the split: other records are held out
