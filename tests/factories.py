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


class _Spin(torch.nn.Module):
    """x + 1 after busy-waiting `ms` milliseconds: a step of known, steady duration."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms = ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        end = time.perf_counter() + self.ms / 1e3
        while time.perf_counter() < end:
            pass
        return x + 1


# A file every process that builds `biased` appends its pid to (tests/execute/
# test_process_bias.py passes it by --inherit-env).
BIAS_FILE = "STACKCOST_TEST_BIAS_FILE"


def biased() -> torch.nn.Module:
    """A worker with a planted per-process bias: the n-th process to build it spins 2 ms a
    step when n is even and 3 ms when odd, steady within the process."""
    import os

    path = os.environ[BIAS_FILE]
    with open(path, "a+") as f:
        f.write(f"{os.getpid()}\n")
        f.seek(0)
        seen = list(dict.fromkeys(f.read().split()))
    n = seen.index(str(os.getpid()))
    return _Spin(2.0 if n % 2 == 0 else 3.0)
