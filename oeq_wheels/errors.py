"""The one error base class: every expected failure is an OeqWheelsError, printed as one line."""
from __future__ import annotations


class OeqWheelsError(Exception):
    """An expected failure (bad input, a failed build step); the CLI prints it without a traceback."""

    exit_code = 1  # a build or check that failed


class UsageError(OeqWheelsError):
    """The command line, the pins or the given directory do not make sense."""

    exit_code = 2


class BuildError(OeqWheelsError):
    """A build step failed (a compiler, a tree, a gate): the wheel it was for is not written."""


class Refused(OeqWheelsError):
    """A file that must not reach a user: not the recorded bytes, or a door found other bytes already there."""

    exit_code = 1


class BuildRootError(OeqWheelsError):
    """The pinned build root cannot be had: no pins for this build host, or a root that is not its packages'."""
