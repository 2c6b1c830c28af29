"""Catching regressions: verdicts between runs, change points over history, bisection."""
