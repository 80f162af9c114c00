"""Every error a user can meet, each a class with its exit code; the CLI (cli.main) catches them once.

A usage error (exit 2) is a UsageError; every other class exits 1, Interrupted 130. The message is
printed as one line, without a traceback. cli.py's docstring (--help) is the table users read;
tests/unit/test_errors.py holds the classes, their codes and that table to each other.
"""
from __future__ import annotations

import sys


class OeqWheelsError(Exception):
    """An expected failure (bad input, a failed build step); the CLI prints it without a traceback."""

    exit_code = 1  # a build or check that failed


# --- 2: the command line, the pins or the given directory do not make sense -------------------------------------

class UsageError(OeqWheelsError):
    """The command line, the pins or the given directory do not make sense."""

    exit_code = 2


class PinsError(UsageError):
    """The pins file or a requested matrix/Python does not make sense."""


class RepinError(UsageError):
    """What was asked cannot be pinned: the registry lacks it, or the result would not load."""


class PythonNotFound(UsageError):
    """No usable CPython of a requested version on this host."""


# --- 1: a file that must not reach a user ------------------------------------------------------------------------

class Refused(OeqWheelsError):
    """A file that must not reach a user: not the recorded bytes, or a door found other bytes already there."""

    exit_code = 1


class SiteError(OeqWheelsError):
    """The site refuses the wheels or release assets it was given (renamed, missing, two of a name, none)."""

    exit_code = 1


class ReleaseError(OeqWheelsError):
    """The publish gate refused the set (incomplete, foreign files), or a release step failed (the index, twine)."""

    exit_code = 1


# --- 1: a build step that failed ---------------------------------------------------------------------------------

class BuildError(OeqWheelsError):
    """A build step failed (a compiler, a tree, a gate): the wheel it was for is not written."""


class CompileError(OeqWheelsError):
    """No usable compiler, or a compile that failed."""


class LinkError(OeqWheelsError):
    """A link or strip that failed."""


class StableBuildError(OeqWheelsError):
    """The stable-ABI (abi3) OEq build failed."""


class VariantError(OeqWheelsError):
    """A line wheel cannot be made into its PEP 825 variant wheel."""


class BuildRootError(OeqWheelsError):
    """The pinned build root cannot be had: no pins for this build host, or a root that is not its packages'."""


class BuildImageError(OeqWheelsError):
    """The build image cannot be made (no root, a missing tool, a failed debootstrap)."""


class ImageUnavailable(OeqWheelsError):
    """The engine answers but has the build image neither locally nor through a pull.

    runner.choose turns it into a notice (--runner auto) or a UsageError (--runner docker).
    """


class DriverStubError(OeqWheelsError):
    """The link-only libcuda.so.1 stand-in (driver_stub.py) cannot be made."""


# --- 1: an input that could not be had, or is not what the pins say -----------------------------------------------

class FetchError(OeqWheelsError):
    """A pinned file could not be downloaded, or is not the pinned bytes."""


class InputError(OeqWheelsError):
    """A downloaded archive cannot be unpacked."""


class MemberError(OeqWheelsError):
    """A member, RECORD or response that does not match the pins: refused."""


class Unsupported(OeqWheelsError):
    """This index or file host cannot serve members (no JSON API, ranges ignored): fetch the whole wheel.

    inputs/fetch.py catches it and downloads the whole wheel instead.
    """


class LinkStubError(OeqWheelsError):
    """A link stub (inputs/link_stubs.py) cannot be read or written."""


class FreeThreadedError(OeqWheelsError):
    """The free-threaded CPython could not be built or does not run without the GIL."""


class RegistryError(OeqWheelsError):
    """The registry cannot be reached, lacks a project or file, or answers something we cannot use."""


# --- 1: a check that failed --------------------------------------------------------------------------------------

class CompareError(OeqWheelsError):
    """Two builds cannot be compared (a wheel fails the gate, a build holds no wheel)."""


class ReversionError(OeqWheelsError):
    """The wheel cannot be re-versioned: missing, not a wheel, or inconsistent inside."""


class RecordError(OeqWheelsError):
    """A file that is not a run record; the message names the file and what is wrong."""


class EmulationError(OeqWheelsError):
    """An emulated (qemu-user) check cannot run: no emulated CPython, no binfmt, no root."""


class LoaderStubError(OeqWheelsError):
    """The load stubs for a clean install cannot be made."""


class HostError(OeqWheelsError):
    """A stand-in host of the checks (the upload server, the index) did not start or answer."""


class RehearsalError(OeqWheelsError):
    """The release rehearsal (checks/rehearse.py) found the site or an install line not working."""


class CIRehearsalError(OeqWheelsError):
    """The CI rehearsal (checks/rehearse_ci.py) cannot run a workflow as written."""


class LastMileError(OeqWheelsError):
    """The last-mile rehearsal has nothing recorded to publish."""


# --- 130: stopped ------------------------------------------------------------------------------------------------

class Interrupted(OeqWheelsError):
    """The run was stopped by SIGINT or SIGTERM; nothing after that point was written."""

    exit_code = 130


def report(exc: OeqWheelsError) -> int:
    """Print an expected failure as its one line on stderr; the exit code its class gives.

    cli.main catches every OeqWheelsError once and reports it here; so does recorded.main, the doors' second entry
    point (release.yml runs it with the bare python3, standard library only).
    """
    print(f"oeq-wheels: error: {exc}", file=sys.stderr)
    return exc.exit_code
