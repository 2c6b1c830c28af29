"""The error every bad input raises, in a module of its own so that light processes (the
user-code probe) can raise it without importing the spec machinery (scipy, ~1 s)."""


class SpecError(ValueError):
    """Bad input: the message is one line, fit to print as is."""
