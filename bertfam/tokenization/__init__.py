from .tokenizer import Tokenizer, tokenizer_from, train_vocab  # noqa: F401
