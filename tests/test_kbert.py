"""K-BERT: graph loading, the sentence tree written out by hand, visibility in the model."""
import logging
import os

import pytest
import torch

from bertfam import DataError, Tokenizer, build_model, preset
from bertfam.errors import ConfigError
from bertfam.knowledge import KBertInputBuilder, KnowledgeGraph

from .conftest import FIXTURES, ZH_VOCAB


KB = os.path.join(FIXTURES, "kbert")
GRAPH = "张三\t是\t人\n北京\t在\t中国\n北京\t是\t城市\n北京\t有\t故宫\n"


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_vocab(ZH_VOCAB)


@pytest.fixture
def graph(tmp_path):
    p = tmp_path / "g.spo"
    p.write_text(GRAPH, encoding="utf-8")
    return KnowledgeGraph.load(str(p), max_entities=2)


def rows(*lines):
    return torch.tensor([[int(c) for c in ln.replace(" ", "")] for ln in lines], dtype=torch.bool)


# ---------------------------------------------------------------- the hand-made tree
def test_hand_made_sentence_tree(tok, graph):
    e = KBertInputBuilder(tok, graph, max_length=64).encode("张三去北京")
    # 张三 gets "是人"; 北京 gets its first two entities ("有故宫" is the third: max_entities=2 drops it)
    assert tok.convert_ids_to_tokens(e["input_ids"]) == [
        "[CLS]", "张", "三", "是", "人", "去", "北", "京", "在", "中", "国", "是", "城", "市", "[SEP]"]
    # soft positions: the sentence counts 0..6 as if nothing were injected; a branch continues its word
    assert e["position_ids"] == [0, 1, 2, 3, 4, 3, 4, 5, 6, 7, 8, 6, 7, 8, 6]
    assert e["token_type_ids"] == [0] * 15
    assert e["source_index"] == [-1, 0, 1, -1, -1, 2, 3, 4, -1, -1, -1, -1, -1, -1, -1]
    assert e["injected"] == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0]
    expected = rows(
        # C 张三 是人 去 北京 在中国 是城市 S
        "1 11 00 1 11 000 000 1",  # [CLS]: the sentence only
        "1 11 11 1 11 000 000 1",  # 张: sentence + its own branch 是人
        "1 11 11 1 11 000 000 1",  # 三
        "0 11 11 0 00 000 000 0",  # 是 (injected): its branch + its word 张三
        "0 11 11 0 00 000 000 0",  # 人
        "1 11 00 1 11 000 000 1",  # 去: no branch of its own
        "1 11 00 1 11 111 111 1",  # 北: sentence + both branches of 北京
        "1 11 00 1 11 111 111 1",  # 京
        "0 00 00 0 11 111 000 0",  # 在: own branch + 北京, never the sibling branch 是城市
        "0 00 00 0 11 111 000 0",
        "0 00 00 0 11 111 000 0",
        "0 00 00 0 11 000 111 0",  # 是 (城市 branch)
        "0 00 00 0 11 000 111 0",
        "0 00 00 0 11 000 111 0",
        "1 11 00 1 11 000 000 1",  # [SEP]
    )
    assert torch.equal(e["visible_matrix"], expected)


def test_pair_segments_and_units(tok, graph):
    enc = KBertInputBuilder(tok, graph, max_length=64)
    e = enc.encode("去北京", "张三")
    toks = tok.convert_ids_to_tokens(e["input_ids"])
    assert toks[:1] == ["[CLS]"] and toks.count("[SEP]") == 2
    b_start = toks.index("[SEP]") + 1
    assert set(e["token_type_ids"][:b_start]) == {0} and set(e["token_type_ids"][b_start:]) == {1}
    assert e["source_index"][b_start:b_start + 2] == [0, 1]  # indices into text_pair
    # pre-split units (NER): every unit gets a token, source_index = unit index, specials/injected -1
    e = enc.encode(["张", "三", " ", "7", "3", "岁"])
    real = [s for s, inj in zip(e["source_index"], e["injected"]) if s >= 0]
    assert real == [0, 1, 2, 3, 4, 5]  # the blank unit became [UNK] so tags stay aligned
    assert sum(e["injected"]) == 2  # 张三 -> 是人


def test_no_graph_is_plain_bert(tok):
    e = KBertInputBuilder(tok, None, max_length=16).encode("张三去北京")
    assert e["input_ids"] == tok.encode("张三去北京")
    assert e["position_ids"] == list(range(7)) and bool(e["visible_matrix"].all())


# ---------------------------------------------------------------- visibility inside the model
def test_sentence_tokens_never_attend_to_foreign_branches(tok, graph):
    enc = KBertInputBuilder(tok, graph, max_length=64)
    batch = enc.collate([enc.encode("张三去北京"), enc.encode("去北京")])
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=2, max_position_embeddings=64)
    model = build_model(cfg, seed=0).eval()
    out = model(**batch, output_attentions=True, output_hidden_states=True)
    vm = batch["attention_mask"][0]  # (T, T)
    foreign = ~vm
    foreign[vm.sum(-1) == 0] = False  # padding rows
    for scores in out.attentions:  # raw masked scores (B, h, T, T) per layer
        probs = torch.softmax(scores[0], dim=-1)  # (h, T, T)
        assert probs[:, foreign].abs().max().item() == 0.0  # exactly zero, not just small
        assert probs[:, vm].min().item() > 0.0
    # perturbation: other branch tokens change, the first-layer output of 张/三/去 does not
    ids2 = batch["input_ids"].clone()
    ids2[0, 8:14] = torch.tensor(tok.convert_tokens_to_ids(list("东西南北上下")))  # the two branches of 北京
    out2 = model(**dict(batch, input_ids=ids2), output_attentions=True, output_hidden_states=True)  # same kernel
    h1, h2 = out.hidden_states[1][0], out2.hidden_states[1][0]  # after layer 1 (T, H)
    assert torch.equal(h1[[1, 2, 5]], h2[[1, 2, 5]])
    assert not torch.allclose(h1[6], h2[6])  # 北 sees its branch, so it does change


# ---------------------------------------------------------------- bad input
def test_malformed_triples_reported_and_skipped(tmp_path, caplog):
    p = tmp_path / "bad.spo"
    p.write_text("北京\t在\t中国\n只有两列\t中国\n\n上海\t\t中国\na\tb\tc\td\n广州\t在\t广东\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        kg = KnowledgeGraph.load(str(p))
    assert [(ln, why[:1]) for _, ln, why in kg.skipped] == [(2, "2"), (4, "e"), (5, "4")]
    assert f"{p}:2" in caplog.text and f"{p}:5" in caplog.text
    assert kg.lookup("北京") == ["在中国"] and kg.lookup("广州") == ["在广东"] and len(kg) == 2


def test_empty_or_missing_graph(tmp_path):
    empty = tmp_path / "empty.spo"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="no valid triple"):
        KnowledgeGraph.load(str(empty))
    bad = tmp_path / "bad.spo"
    bad.write_text("x\ty\n", encoding="utf-8")
    with pytest.raises(DataError, match="1 malformed"):
        KnowledgeGraph.load(str(bad))
    with pytest.raises(DataError, match="not found"):
        KnowledgeGraph.load(str(tmp_path / "nope.spo"))
    with pytest.raises(DataError):
        KnowledgeGraph.load([])


def test_entity_longer_than_max_length_is_never_injected(tok, tmp_path, caplog):
    p = tmp_path / "long.spo"
    p.write_text("北京\t是\t" + "很" * 100 + "\n北京\t在\t中国\n", encoding="utf-8")
    enc = KBertInputBuilder(tok, KnowledgeGraph.load(str(p)), max_length=16)
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        e = enc.encode("去北京")
    assert "longer than max_length" in caplog.text
    assert tok.convert_ids_to_tokens(e["input_ids"]) == ["[CLS]", "去", "北", "京", "在", "中", "国", "[SEP]"]
    assert enc.stats["dropped_entities"] == 1 and enc.stats["injected_entities"] == 1
    # no room at all: the sentence wins, every branch is left out whole and the length is respected
    e = KBertInputBuilder(tok, KnowledgeGraph.load(str(p)), max_length=5).encode("去北京去北京")
    assert len(e["input_ids"]) == 5 and sum(e["injected"]) == 0
    with pytest.raises(ConfigError):
        KBertInputBuilder(tok, None, max_length=2)


def test_real_graph_cut(tok):
    """Fixture cuts of K-BERT's Medical.spo / HowNet.spo and a medical_ner sentence."""
    kg = KnowledgeGraph.load([os.path.join(KB, "medical.spo"), os.path.join(KB, "hownet.spo")])
    with open(os.path.join(KB, "medical_ner.tsv"), encoding="utf-8") as f:
        chars = f.read().splitlines()[1].split("\t")[0].split(" ")
    e = KBertInputBuilder(tok, kg, max_length=128).encode(chars)
    vm, inj = e["visible_matrix"], torch.tensor(e["injected"], dtype=torch.bool)
    assert inj.any()
    assert torch.equal(vm, vm.T)  # visibility is mutual in K-BERT's tree
    sent = ~inj
    assert bool(vm[sent][:, sent].all())  # the sentence sees itself entirely
    # every injected token sees exactly its branch + one contiguous anchor word, nothing else of the sentence
    for i in torch.nonzero(inj).flatten().tolist():
        assert 0 < int(vm[i][sent].sum()) < int(sent.sum())
    assert sorted(s for s in e["source_index"] if s >= 0) == list(range(len(chars)))


def test_cli_show(tmp_path, capsys):
    from bertfam.cli import main

    p = tmp_path / "g.spo"
    p.write_text(GRAPH + "broken line\n", encoding="utf-8")
    tok_dir = tmp_path / "tok"
    Tokenizer.from_vocab(ZH_VOCAB).save_pretrained(str(tok_dir))
    assert main(["kbert", "show", "--kg", str(p), "--tokenizer", str(tok_dir), "张三去北京"]) == 0
    out = capsys.readouterr().out
    assert "1 malformed lines skipped" in out and "是*/3 人*/4 去/3" in out
    assert main(["kbert", "show", "--kg", str(tmp_path / "none.spo"), "--tokenizer", str(tok_dir), "x"]) == 2


def test_finetune_inputs_ignore_injected_tokens(tok):
    """Integration with the fine-tuning inputs (tasks.inputs.InputBuilder): NER labels of injected tokens are
    ignored and stripped."""
    from bertfam import HeadConfig
    from bertfam.data.ner import read_kbert_ner
    from bertfam.tasks.inputs import InputBuilder, collect_labels
    from bertfam.tasks.table import get_task

    spec = get_task("medical_ner")
    ex = read_kbert_ner(os.path.join(KB, "medical_ner.tsv"))
    labels = collect_labels(spec, ex)
    kg = KnowledgeGraph.load(os.path.join(KB, "medical.spo"))
    builder = InputBuilder(tok, spec, labels, 128, KBertInputBuilder(tok, kg, 128))
    inputs = builder.build(ex)
    batch = builder.collate(inputs)
    assert batch["attention_mask"].dim() == 3 and "position_ids" in batch
    inj = torch.zeros_like(batch["labels"], dtype=torch.bool)
    for i, inp in enumerate(inputs):
        inj[i, : len(inp["enc"]["injected"])] = torch.tensor(inp["enc"]["injected"], dtype=torch.bool)
    assert inj.any() and bool((batch["labels"][inj] == -100).all())
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, num_hidden_layers=1, max_position_embeddings=128,
                 head=HeadConfig(task="token", num_labels=len(labels)))
    preds = builder.predict(build_model(cfg, seed=0), inputs)
    assert [len(p) for p in preds] == [len(e.tokens) for e in ex]  # one tag per character, none injected
