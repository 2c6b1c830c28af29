"""stackcost's version, in a module of its own: the environment record and the CLI read it
without importing the package's API."""

__version__ = "0.1.0"
