"""Exports and restores: the export's lines (``lines``, pure), putting rows back (``restoring``),
``export --all`` and ``import`` (``backup``), and moving an export into a namespace (``remap``).

Imports values, ``store.db`` and ``store.reads``; the writer imports it, never the other way.
"""
