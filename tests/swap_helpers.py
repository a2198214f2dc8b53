"""Undoing optimize_for_inference, for tests that check the swap keeps weights, names and optimizer references
(the library never needs it: a prediction entry point swaps a model it will only predict with)."""
from torch import nn

from bertfam.modeling.encoder import Encoder, Layer
from bertfam.modeling.linear import swap_projections
from bertfam.modeling.optimize import ReusingEncoder, ReusingLayer
from bertfam.modeling.swap import swap_modules

COMPILED = ("attn_residual", "ffn_block")  # the Layer methods `compile=True` replaces by instance attributes


def restore_plain(model: nn.Module) -> nn.Module:
    """Plain encoders and layers again, by the same module replacement, no compiled blocks, and plain
    nn.Linear projections (no PackedLinear of `linear=`: modeling/linear.py). In place; returns model (a new
    one only where `model` is itself an encoder or a layer)."""
    plain = {ReusingEncoder: Encoder, ReusingLayer: Layer}
    model = swap_modules(model, lambda m: plain.get(type(m)))
    swap_projections(model, "aten")
    for m in model.modules():
        if isinstance(m, Layer):
            for name in COMPILED:
                m.__dict__.pop(name, None)
    return model
