"""Tiny-config shape tests for every head; loss only when labels are given; ALBERT sharing."""
import pytest
import torch

import bertfam
from bertfam import HeadConfig


def _model(cfg, **head):
    return bertfam.build_model(cfg.replace(head=HeadConfig(**head)), seed=0)


def _inputs(B=3, T=10, V=120):
    ids = torch.randint(5, V, (B, T))
    am = torch.ones(B, T, dtype=torch.long)
    am[0, 6:] = 0
    return ids, am


def test_backbone_shapes(tiny_cfg):
    ids, am = _inputs()
    out = _model(tiny_cfg)(ids, am, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (3, 10, 128)
    assert out.pooler_output.shape == (3, 128)
    assert len(out.hidden_states) == tiny_cfg.num_hidden_layers + 1
    assert out.attentions[0].shape == (3, 2, 10, 10)
    assert out.logits is None and out.loss is None


@pytest.mark.parametrize("task,kw,labels_fn,logit_shape", [
    ("classification", {"num_labels": 4}, lambda B, T: torch.randint(0, 4, (B,)), (3, 4)),
    ("regression", {}, lambda B, T: torch.rand(B), (3, 1)),
    ("token", {"num_labels": 7}, lambda B, T: torch.randint(0, 7, (B, T)), (3, 10, 7)),
    ("mlm", {}, lambda B, T: torch.full((B, T), -100).index_fill_(1, torch.tensor([2, 5]), 7), (3, 10, 120)),
])
def test_head_shapes_and_loss(tiny_cfg, task, kw, labels_fn, logit_shape):
    m = _model(tiny_cfg, task=task, **kw)
    ids, am = _inputs()
    out = m(ids, am)
    assert out.logits.shape == logit_shape and out.loss is None
    out = m(ids, am, labels=labels_fn(3, 10))
    assert out.loss is not None and out.loss.dim() == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert m.backbone.embeddings.word.weight.grad is not None


def test_pretraining_head(tiny_cfg):
    m = _model(tiny_cfg, task="pretraining", pair_objective="nsp").eval()
    ids, am = _inputs()
    labels = torch.full((3, 10), -100)
    labels[:, 3] = 9
    out = m(ids, am, labels=labels, pair_labels=torch.tensor([0, 1, 1]))
    assert out.pair_logits.shape == (3, 2) and out.loss > 0
    masked = labels != -100
    sel = m(ids, am, labels=labels, masked_positions=masked)
    assert sel.logits.shape == (3, 120)
    mlm_only = m(ids, am, labels=labels).loss - torch.nn.functional.cross_entropy(out.pair_logits, torch.tensor([0, 1, 1]))
    assert torch.allclose(sel.loss - torch.nn.functional.cross_entropy(sel.pair_logits, torch.tensor([0, 1, 1])),
                          mlm_only, atol=1e-5)


def test_mlm_decoder_is_tied(tiny_cfg):
    m = _model(tiny_cfg, task="mlm")
    assert m.mlm.word[0].weight is m.backbone.embeddings.word.weight
    assert "mlm.decoder.weight" not in m.state_dict()


def test_span_head_with_answerability(tiny_cfg):
    m = _model(tiny_cfg, task="span")
    ids, am = _inputs()
    out = m(ids, am)
    assert out.start_logits.shape == (3, 10) and out.answerable_logits.shape == (3, 2)
    assert out.logits.shape == (3, 10, 2)
    out = m(ids, am, start_positions=torch.tensor([0, 2, 3]), end_positions=torch.tensor([0, 4, 3]))
    assert out.loss is not None
    out.loss.backward()
    assert m.span.answerable.weight.grad.abs().sum() > 0


def test_albert_sharing_and_factorization():
    cfg = bertfam.preset("albert-base", vocab_size=300, num_hidden_layers=6, hidden_size=64, num_attention_heads=4,
                         intermediate_size=128, num_hidden_groups=2)
    m = bertfam.build_model(cfg)
    assert len(m.backbone.encoder.layers) == 2
    assert m.backbone.encoder.schedule() == [[0], [0], [0], [1], [1], [1]]
    assert m.backbone.embeddings.word.weight.shape == (300, 128)
    out = m(torch.randint(0, 300, (2, 7)), output_hidden_states=True)
    assert len(out.hidden_states) == 7 and out.last_hidden_state.shape == (2, 7, 64)


def test_visibility_matrix_blocks_attention(tiny_cfg):
    """A (B, T, T) mask: changing a token that position 0 cannot see leaves position 0 unchanged."""
    m = _model(tiny_cfg).eval()
    ids = torch.randint(5, 120, (1, 6))
    vis = torch.ones(1, 6, 6, dtype=torch.long)
    vis[0, :4, 4:] = 0  # tokens 0-3 never see the branch 4-5 (so no path through any layer)
    pos = torch.tensor([[0, 1, 2, 3, 2, 3]])  # soft positions (K-BERT style)
    a = m(ids, vis, position_ids=pos).last_hidden_state
    ids2 = ids.clone()
    ids2[0, 4] = (ids[0, 4] + 1 - 5) % 115 + 5
    b = m(ids2, vis, position_ids=pos).last_hidden_state
    assert torch.equal(a[0, :4], b[0, :4])
    assert not torch.equal(a[0, 4], b[0, 4])


def test_roberta_positions_skip_padding():
    cfg = bertfam.preset("roberta-base", vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=20)
    m = bertfam.build_model(cfg)
    ids = torch.tensor([[0, 5, 6, 2, 1, 1]])
    assert m.backbone.embeddings.position_ids_for(ids).tolist() == [[2, 3, 4, 5, 1, 1]]


def test_one_head_per_task_and_its_parts_are_the_checkpoint_names(tiny_cfg):
    from bertfam.modeling.heads import HEADS

    for task, cls in HEADS.items():
        m = _model(tiny_cfg, task=task, pair_objective="nsp", num_labels=3)
        assert type(m.head) is cls and m.head.task == task
        for name, part in m.head.parts.items():
            assert getattr(m, name) is part and any(k.startswith(name + ".") for k in m.state_dict())
    assert _model(tiny_cfg).head is None


def test_mlm_labels_with_nothing_to_predict_give_a_zero_loss(tiny_cfg):
    """The text and multimodal models share the MLM head: no target in the batch is a zero loss, not NaN."""
    m = _model(tiny_cfg, task="mlm")
    ids, am = _inputs()
    out = m(ids, am, labels=torch.full((3, 10), -100))
    assert float(out.loss.detach()) == 0.0 and out.loss.requires_grad


def test_mean_pooling_classifier_reads_the_real_tokens_mean():
    """classifier_pooling="mean": the logits are the linear head on the mean of the real tokens' final
    states, so padding a sequence further does not change them; an unknown pooling is a ConfigError."""
    import pytest
    import torch

    import bertfam
    from bertfam.config import HeadConfig
    from bertfam.modeling import build_model

    cfg = bertfam.preset("bert-tiny", vocab_size=50, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                         num_hidden_layers=2, max_position_embeddings=32,
                         head=HeadConfig(task="classification", num_labels=2, classifier_pooling="mean"))
    m = build_model(cfg, seed=0).eval()
    ids = torch.tensor([[2, 7, 9, 4, 3, 0, 0], [2, 5, 3, 0, 0, 0, 0]])
    mask = ids.ne(0).long()
    with torch.no_grad():
        logits = m(ids, mask, packing="padded").logits  # (2, 2)
        h = m.backbone(ids[:1, :5], mask[:1, :5], packing="padded").last_hidden_state  # (1, 5, H): row 0 unpadded
        want = m.classifier.classifier(h.mean(1))
        short = m(ids[1:, :3], mask[1:, :3]).logits
    assert torch.allclose(logits[:1], want, atol=1e-5) and torch.allclose(logits[1:], short, atol=1e-5)
    with pytest.raises(bertfam.ConfigError, match="classifier_pooling 'max' not in pooler, cls_dense, mean"):
        HeadConfig(task="classification", classifier_pooling="max")


def test_mean_pooling_classifier_is_not_exported_to_hugging_face(tmp_path):
    """transformers' sequence classifiers read [CLS]: exporting a mean-pooling head would give other logits."""
    import pytest

    import bertfam
    from bertfam.config import HeadConfig
    from bertfam.convert.hf import export_hf
    from bertfam.modeling import build_model

    cfg = bertfam.preset("bert-tiny", vocab_size=50, hidden_size=16, num_attention_heads=2, intermediate_size=32,
                         num_hidden_layers=1, max_position_embeddings=32,
                         head=HeadConfig(task="classification", num_labels=2, classifier_pooling="mean"))
    with pytest.raises(bertfam.ConfigError, match="no Hugging Face"):
        export_hf(build_model(cfg, seed=0), str(tmp_path / "hf"))


def test_mean_pool_over_any_token_axis():
    """modeling.pooling.mean_pool: padding never counts, the token axis can be any, an empty row is zeros."""
    import torch

    from bertfam.modeling.pooling import mean_pool

    h = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)  # (B, T, H)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    got = mean_pool(h, mask)
    assert torch.equal(got[0], h[0, :2].mean(0)) and torch.equal(got[1], torch.zeros(4))
    layers = torch.stack([h, 2 * h], dim=1)  # (B, L, T, H)
    assert torch.equal(mean_pool(layers, mask, dim=2)[:, 1], 2 * got)
    assert torch.equal(mean_pool(h, None), h.mean(1))
