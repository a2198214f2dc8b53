"""Typed errors. The CLI turns every BertfamError into one line on stderr and exit code 2."""


class BertfamError(Exception):
    """Base class of every error bertfam raises on purpose (bad input, bad files)."""


class ConfigError(BertfamError):
    """A configuration file or value is missing, malformed or inconsistent."""


class UnsupportedError(ConfigError):
    """An operation this model cannot do, however it is configured: an int8 model trained, differentiated
    or run off the CPU. A ConfigError, so callers that catch those still do."""


class CheckpointError(BertfamError):
    """A model directory is missing, incomplete, corrupt or does not match its config."""


class TokenizerError(BertfamError):
    """A vocabulary / tokenizer file is missing or malformed."""


class DataError(BertfamError):
    """An input data file is missing or has no usable record."""


class TrainingStopped(Exception):
    """Training stopped on SIGTERM/SIGINT after the step in progress, with a checkpoint at `path` (None when
    checkpoints are off). Not an error: the CLI exits 0 on SIGTERM, 130 on SIGINT."""

    def __init__(self, signum: int, path=None):
        super().__init__(f"training stopped by signal {signum}" + (f"; checkpoint {path}" if path else ""))
        self.signum, self.path = signum, path
