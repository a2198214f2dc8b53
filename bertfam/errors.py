"""Typed errors. The CLI turns every BertfamError into one line on stderr and exit code 2."""


class BertfamError(Exception):
    """Base class of every error bertfam raises on purpose (bad input, bad files)."""


class ConfigError(BertfamError):
    """A configuration file or value is missing, malformed or inconsistent."""


class CheckpointError(BertfamError):
    """A model directory is missing, incomplete, corrupt or does not match its config."""


class TokenizerError(BertfamError):
    """A vocabulary / tokenizer file is missing or malformed."""


class DataError(BertfamError):
    """An input data file is missing or has no usable record."""
