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
