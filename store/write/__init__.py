"""The write side: the one writer (``writer``) and its unit of work (``unit``), plan apply, edits,
forget, undo and the batched recall write-back. Every change commits with its record.

Imports values, ``store.reads`` and ``store.exports``; nothing above ``store.database``.
"""
