"""One exception hierarchy; the CLI prints any of these as a one-line `Error: ...` and exits non-zero."""


class IRSurgeonError(Exception):
    """Base of every error irsurgeon raises on purpose."""


class ConfigError(IRSurgeonError):
    """config.json is missing, malformed, or describes no usable MTP head."""


class CheckpointError(IRSurgeonError):
    """A safetensors checkpoint is unreadable, incomplete, or does not match its config."""


class IRError(IRSurgeonError):
    """An OpenVINO IR is missing, malformed, or does not have the structure an edit needs."""


class OutputError(IRSurgeonError):
    """The output location cannot be written."""


class CompressionError(IRSurgeonError):
    """Weight compression options are invalid or cannot be applied to the model."""
