"""Factories for bring-your-own-model tests (imported as tests.factories:NAME)."""

import torch


def tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))


def not_a_module():
    return "a string"


def exits():
    import sys

    sys.exit(0)


def prints() -> torch.nn.Module:
    print("hello from a chatty factory [bold]not markup[/bold]")
    return tiny()


def aborts():
    import os

    os.abort()
