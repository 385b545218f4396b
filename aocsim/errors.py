"""Error types raised by aocsim for bad user input.

Every error message is one line that names what is wrong (the field or file,
the value found and what was expected), so that the CLI can print it without
a traceback.
"""

from __future__ import annotations


class AocsimError(Exception):
    """Base class of every error aocsim raises on purpose."""

    def __init__(self, *args: object) -> None:
        # One line even when a user's value (a file name, say) holds a line break.
        if args and isinstance(args[0], str):
            args = (args[0].replace("\r", "\\r").replace("\n", "\\n"), *args[1:])
        super().__init__(*args)


class InputError(AocsimError, ValueError):
    """A tensor or argument passed to aocsim has the wrong shape, type or value."""


class UnknownNameError(AocsimError, KeyError):
    """A name looked up in a registry (solver, device, model, recipe) does not exist."""

    def __init__(self, kind: str, name: object, known: list[str]):
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(f"unknown {kind} {name!r}; known: {', '.join(self.known) or '(none)'}")

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return self.args[0]


class ProfileError(AocsimError, ValueError):
    """A device profile file or override is invalid."""


class ModelFileError(AocsimError, ValueError):
    """A model directory, model card or weight file is missing, corrupt or inconsistent."""


class ConvergenceError(AocsimError, RuntimeError):
    """A fixed-point solve did not converge and the caller asked for an exception."""
