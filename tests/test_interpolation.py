"""Weight interpolation with the base model (bertfam.training.interpolation, WiSE-FT) and the cross-validation
recipe's --base-weight."""
import pytest
import torch

from bertfam import HeadConfig, build_model, preset
from bertfam.errors import ConfigError
from bertfam.training.interpolation import interpolate_


def _pair():
    cfg = preset("bert-tiny", vocab_size=64, num_hidden_layers=1, max_position_embeddings=32,
                 head=HeadConfig(task="span", answerability=True))
    return build_model(cfg, seed=0), build_model(cfg, seed=1)


def test_interpolation_mixes_every_float_tensor_and_keeps_integer_buffers():
    tuned, base = _pair()
    before = {k: v.clone() for k, v in tuned.state_dict().items()}
    base_sd = base.state_dict()
    interpolate_(tuned, base_sd, 0.25)
    after = tuned.state_dict()
    floats = [k for k, v in before.items() if v.is_floating_point()]
    assert len(floats) > 10
    for k, v in before.items():
        want = 0.25 * base_sd[k] + 0.75 * v if v.is_floating_point() else v
        assert torch.allclose(after[k], want, atol=1e-6), k
    # the parameters themselves moved (the state dict shares their storage): the model computes with the mix
    assert not torch.equal(next(tuned.parameters()), before[next(iter(dict(tuned.named_parameters())))])


def test_interpolation_ends_are_the_two_models():
    tuned, base = _pair()
    own = {k: v.clone() for k, v in tuned.state_dict().items()}
    interpolate_(tuned, base.state_dict(), 0.0)
    assert all(torch.equal(tuned.state_dict()[k], v) for k, v in own.items())
    interpolate_(tuned, base.state_dict(), 1.0)
    assert all(torch.equal(tuned.state_dict()[k], v) for k, v in base.state_dict().items())


def test_interpolation_refuses_other_models_and_weights_outside_0_1():
    tuned, base = _pair()
    sd = dict(base.state_dict())
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        interpolate_(tuned, sd, 1.5)
    key = next(k for k, v in sd.items() if v.dim() == 2)
    with pytest.raises(ConfigError, match="shapes differ"):
        interpolate_(tuned, {**sd, key: sd[key][:, :3]}, 0.5)
    sd.pop(key)
    with pytest.raises(ConfigError, match="lacks"):
        interpolate_(tuned, sd, 0.5)
