from .tokenizer import Tokenizer, train_vocab  # noqa: F401
