"""Errors of the secretary package; each builds its own message."""

from __future__ import annotations


class SecretaryError(Exception):
    """Base class: an error the CLI turns into a clean message and a non-zero exit code."""

    exit_code = 1


class ConfigError(SecretaryError):
    """The configuration file or environment is invalid."""

    exit_code = 2
