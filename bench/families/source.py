"""The source repository a converter reads: a git checkout or bare git directory, or a folder.

A git repository is read at its HEAD commit (``git show HEAD:<path>``), whatever its work tree
holds, so the commit recorded is the one the files came from; a plain folder (an unpacked
archive) is read as it is, and its commit is whatever ``--commit`` says.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


class SourceError(Exception):
    """The source repository cannot be read."""


class SourceRepo:
    """Read files of a fetched repository by their repository-relative path."""

    def __init__(self, path: Path, commit: str | None = None) -> None:
        self.path = path
        if not path.exists():
            raise SourceError(f"{path} does not exist")
        self._git = _git_dir(path)
        self.commit = self._head() if self._git is not None else (commit or "unknown")
        if commit is not None and self._git is not None and commit != self.commit:
            raise SourceError(f"{path} is at {self.commit}, not at --commit {commit}")

    def read_text(self, relpath: str) -> str:
        """Return the file's text; raise SourceError if it is missing (as files of 4 MiB and
        more are in fetched snapshots)."""
        if self._git is None:
            file = self.path / relpath
            if not file.is_file():
                raise SourceError(f"{file} is missing")
            return file.read_text(encoding="utf-8")
        try:
            return self._run("show", f"HEAD:{relpath}")
        except SourceError as error:
            raise SourceError(f"{relpath} is missing from {self.path} at HEAD: {error}") from None

    def _head(self) -> str:
        return self._run("rev-parse", "HEAD").strip()

    def _run(self, *command: str) -> str:
        try:
            done = subprocess.run(
                ["git", f"--git-dir={self._git}", *command],
                capture_output=True,
                check=True,
                timeout=120,
            )
        except subprocess.CalledProcessError as error:
            raise SourceError(error.stderr.decode(errors="replace").strip()) from None
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SourceError(str(error)) from None
        return done.stdout.decode("utf-8")


def _git_dir(path: Path) -> Path | None:
    """The git directory of a checkout (``path/.git``) or of a bare repository (``path``)."""
    if (path / ".git").is_dir():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    return None
