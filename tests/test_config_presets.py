import json

import pytest
import transformers as T

import bertfam
from bertfam.config import ModelConfig, preset
from bertfam.convert.hf import config_to_hf
from bertfam.errors import ConfigError

HF_CLASSES = {"bert": (T.BertConfig, T.BertModel), "roberta": (T.RobertaConfig, T.RobertaModel),
              "albert": (T.AlbertConfig, T.AlbertModel), "tinybert": (T.BertConfig, T.BertModel),
              "ernie": (T.ErnieConfig, T.ErnieModel)}
# preset -> approximate published size (millions), to catch a wrong preset even if HF agrees
PUBLISHED = {"bert-base": 110, "bert-base-chinese": 102, "bert-large": 340, "albert-base": 12, "albert-large": 18,
             "albert-xlarge": 60, "albert-xxlarge": 235, "roberta-base": 125, "tinybert-4l-312": 14.5,
             "tinybert-6l-768": 67, "bert-tiny": 4.4, "bert-mini": 11.3, "bert-small": 29.1, "bert-medium": 41.7}


def _hf_count(cfg):
    d = config_to_hf(cfg)
    conf_cls, model_cls = HF_CLASSES[cfg.family]
    d = {k: v for k, v in d.items() if k not in ("architectures", "model_type")}
    import torch

    with torch.device("meta"):
        m = model_cls(conf_cls(**d))
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_param_count_equals_transformers(name):
    import torch

    cfg = preset(name)
    with torch.device("meta"):
        ours = bertfam.TaskModel(cfg).num_parameters()["total"]
    assert ours == _hf_count(cfg)
    assert abs(ours / 1e6 - PUBLISHED[name]) / PUBLISHED[name] < 0.07, ours


def test_config_json_roundtrip(tmp_path):
    cfg = preset("albert-base", vocab_size=21128)
    cfg.head.task = "classification"
    cfg.head.labels = ["neg", "pos"]
    p = tmp_path / "config.json"
    cfg.save(str(p))
    again = ModelConfig.load(str(p))
    assert again == cfg
    assert json.loads(p.read_text())["embedding_size"] == 128


def test_hand_written_config_in_bertfam_fields_is_read_as_bertfam(tmp_path):
    """A --model-config file written from the dataclass (no version key) keeps its family and ALBERT fields;
    it used to be read as a Hugging Face config, silently becoming a BERT with unfactorized embeddings."""
    from dataclasses import asdict

    from bertfam.checkpoint.io import resolve_config

    p = tmp_path / "albert-mini.json"
    want = preset("bert-mini-chinese").replace(family="albert", embedding_size=128, num_hidden_groups=1)
    p.write_text(json.dumps(asdict(want)))
    got = resolve_config(str(p))
    assert (got.family, got.embedding_size, got.num_hidden_groups) == ("albert", 128, 1)
    hf = tmp_path / "hf.json"
    hf.write_text(json.dumps(config_to_hf(preset("albert-base"))))
    assert resolve_config(str(hf)).family == "albert"  # a Hugging Face file still goes through model_type


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="multiple"):
        ModelConfig(hidden_size=100, num_attention_heads=12)
    with pytest.raises(ConfigError, match="unknown preset"):
        preset("bert-gigantic")
    p = tmp_path / "config.json"
    p.write_text('{"bertfam_config_version": 1, "hidden_sise": 3}')
    with pytest.raises(ConfigError, match="hidden_sise"):
        ModelConfig.load(str(p))
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.load(str(p))
