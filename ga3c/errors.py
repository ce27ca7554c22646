"""Errors a user can fix: bad settings, game ids, checkpoints, folders. Printed as one line, exit status 2."""


class ConfigError(ValueError):
    """Bad input that stops ga3c before any work starts; the message names the problem and the fix."""


class CheckpointError(ConfigError):
    """A checkpoint that is missing, truncated, not a checkpoint, or made for another game or network."""
