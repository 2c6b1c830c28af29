"""The two sides of an interleaved A/B: which interpreter, environment and options each has.

A side is this environment unless told otherwise, plus what `--SIDE-env KEY=VALUE` and
`--SIDE-option backend.key=value` add. Its interpreter can instead be:
- a Python executable (`--base ../venv-main/bin/python`): two venvs, the framework
  developer's case; stackcost must be importable there;
- `git:REF`: the project at REF (the repository of --repo, default the current
  directory's) installed into its own venv. That venv sees this environment's packages
  through a .pth line, so only the project itself differs; it is built once per commit
  and kept in the cache directory.

Either way the side's workers run the worker of *that* interpreter's stackcost, which
must read this stackcost's task files (same major protocol).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stackcost.env import ENV_NAME
from stackcost.errors import SpecError
from stackcost.runspec.grammar import parse_options

GIT_PREFIX = "git:"


@dataclass(frozen=True)
class Side:
    """One side of an A/B: its interpreter, the environment and options it adds."""

    name: str  # base or cand
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    origin: str = "this environment"

    def describe(self) -> str:
        extra = [f"{k}={v}" for k, v in self.env.items()]
        extra += [f"{b}.{k}={v}" for b, kv in self.options.items() for k, v in kv.items()]
        return self.origin + (f" + {', '.join(extra)}" if extra else "")

    def same_as(self, other: Side) -> bool:
        return (self.python, self.env, self.options) == (other.python, other.env, other.options)

    def record(self) -> dict[str, object]:
        """What the side's run stores about it."""
        return {
            "side": self.name,
            "python": self.python,
            "origin": self.origin,
            "env": self.env,
            "options": self.options,
        }


def parse_env(items: Sequence[str], flag: str) -> dict[str, str]:
    """KEY=VALUE items into a dict; SpecError naming the bad item."""
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not ENV_NAME.fullmatch(key):
            raise SpecError(
                f"{flag} {item!r}: expected KEY=VALUE with KEY an environment variable name"
            )
        out[key] = value
    return out


# What a side's interpreter must print: a Python that imported stackcost's worker. An exit
# status alone proves nothing: /bin/true exits 0 whatever it is asked.
PROBE = "import stackcost, stackcost.execute.worker; print('stackcost', stackcost.__version__)"
PROBE_TIMEOUT_S = 120.0  # the worker's imports, on a cold disk; a hang is refused after it


def check_python(python: str, flag: str) -> None:
    """The interpreter runs Python and imports stackcost's worker: else one line, before
    any store exists or any block runs."""
    path = Path(python)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise SpecError(
            f"{flag} {python!r} is neither an executable Python interpreter nor "
            f"{GIT_PREFIX}REF (a commit of --repo)"
        )
    try:
        proc = subprocess.run(
            [python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise SpecError(
            f"{flag} {python!r} did not import stackcost's worker in {PROBE_TIMEOUT_S:g} s"
        ) from None
    except OSError as exc:
        raise SpecError(f"{flag} {python!r} does not run: {exc.strerror or exc}") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("stackcost "):
        raise SpecError(
            f"{flag} {python!r} is not a Python interpreter with stackcost (it does not run "
            f"`import stackcost.execute.worker`): give one with stackcost installed, or "
            f"{GIT_PREFIX}REF"
        )


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SpecError(f"git {' '.join(args)} in {str(repo)!r}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _install_error(stderr: str) -> str:
    """The line of pip's output that says what went wrong: the last exception or error
    line (pip's closing lines are hints that point back at it), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line for line in lines if re.match(r"(\w+(Error|Exception)|ERROR):", line)]
    return (said or lines or ["no output"])[-1]


def git_venv(ref: str, repo: Path, cache: Path, log=print) -> tuple[str, str]:
    """(python, commit): a venv with the project at `ref` installed over this
    environment's packages, built once per commit under `cache`."""
    sha = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    venv = cache / f"{repo.resolve().name}-{sha[:12]}"
    python = venv / "bin" / "python"
    if (venv / ".installed").is_file():
        return str(python), sha
    log(f"building a venv for {ref} ({sha[:12]}) in {venv}")
    tree = cache / f"tree-{sha[:12]}"
    subprocess.run(["rm", "-rf", str(venv), str(tree)], check=False)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        _git(repo, "worktree", "add", "--detach", "--force", str(tree), sha)
        # No pip or setuptools of its own: the ones venv bundles are the interpreter's
        # (setuptools 65 with Python 3.11), too old for an SPDX `license = "..."` such as
        # this project's (setuptools >= 77). This environment's build them, via the .pth.
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
        )
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # This environment's packages (and their own .pth files: an editable stackcost),
        # after the venv's own site-packages on sys.path: the ref's project wins.
        parent = sysconfig.get_paths()["purelib"]
        Path(site, "stackcost-ab-parent.pth").write_text(
            f"import site; site.addsitedir({parent!r})\n"
        )
        install = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                str(tree),
            ],
            capture_output=True,
            text=True,
        )
        if install.returncode != 0:
            why = _install_error(install.stderr)
            raise SpecError(f"{GIT_PREFIX}{ref}: pip install of {sha[:12]} failed: {why}")
        (venv / ".installed").write_text(sha + "\n")
    except subprocess.CalledProcessError as exc:
        raise SpecError(f"{GIT_PREFIX}{ref}: building its venv failed: {exc}") from None
    finally:
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
        )
    return str(python), sha


def resolve(
    name: str,
    where: str | None,
    env_items: Sequence[str],
    option_items: Sequence[str],
    *,
    repo: Path,
    cache: Path,
    log=print,
) -> Side:
    """A side from its flags; SpecError on bad input (checked before anything runs)."""
    env = parse_env(env_items, f"--{name}-env")
    options = parse_options(list(option_items))
    if where is None:
        return Side(name, env=env, options=options)
    if where.startswith(GIT_PREFIX):
        ref = where.removeprefix(GIT_PREFIX)
        if not ref:
            raise SpecError(f"--{name} {where!r}: name a commit, e.g. {GIT_PREFIX}main")
        python, sha = git_venv(ref, repo, cache, log)
        check_python(python, f"--{name} {where}: its venv's python")  # the commit has stackcost
        return Side(name, python, env, options, f"{where} ({sha[:12]})")
    check_python(where, f"--{name}")
    return Side(name, str(Path(where)), env, options, f"python {where}")


__all__ = ["GIT_PREFIX", "Side", "check_python", "git_venv", "parse_env", "resolve"]
