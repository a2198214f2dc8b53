"""Checkpoint I/O: model directories (bertfam's and Hugging Face's) read and loaded.

- `checkpoint/io.py`: what a directory holds, read without building a model (weights, config, the head a
  caller asks for, a state dict into a model, the tokenizer);
- `checkpoint/loading.py`: `from_pretrained`, a text model from a directory (`bertfam.from_pretrained`).

Writing is the model's own `save_pretrained` (config.json + model.safetensors + tokenizer files).
"""
from .io import (CONFIG_FILE, TOKENIZER_FILES, config_from_dict, fit_head, is_native, load_config,  # noqa: F401
                 load_state, materialise, read_tokenizer, read_weights, resolve_config, weights_file, with_task)
from .loading import from_pretrained  # noqa: F401
