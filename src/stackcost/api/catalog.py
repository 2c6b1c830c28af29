"""What can be run here: the models, the backends (with their options and whether each is
available on this machine), the precisions and size axes, and the baseline rung.

A backend's class is imported to read what it declares; whether it is available is its
own check (its packages installed, a compiler, a GPU), which needs no model and runs
nothing."""

from __future__ import annotations

from dataclasses import dataclass

from stackcost.axes import PRECISIONS
from stackcost.backends import BASELINE, REGISTRY, check_name, is_import_path
from stackcost.workload import SIZE_AXES, Input, SizeAxis, Workload

__all__ = [
    "BASELINE",
    "PRECISIONS",
    "SIZE_AXES",
    "BackendInfo",
    "BackendOption",
    "Input",
    "SizeAxis",
    "Workload",
    "backend",
    "backend_names",
    "backends",
    "check_backend",
    "init_schemes",
    "models",
]


@dataclass(frozen=True)
class BackendOption:
    """One option a backend reads (`-o BACKEND.KEY=VALUE`)."""

    key: str
    default: str
    choices: tuple[str, ...]  # the values it takes; empty: any value
    help: str = ""

    @property
    def values(self) -> tuple[str, ...]:
        """The values it takes, its default first (only the default when any value goes)."""
        return (self.default, *(c for c in self.choices if c != self.default))


@dataclass(frozen=True)
class BackendInfo:
    """A backend as declared by its class, and whether it can run on this machine."""

    name: str
    description: str
    available: bool
    reason: str  # why it is not available here; "" when it is
    modes: tuple[str, ...]  # what it runs itself (infer, train ...), sorted; not generate
    devices: tuple[str, ...]  # sorted
    precisions: tuple[str, ...]  # the known ones in PRECISIONS' order, then any other
    # Its token generator's precisions, sorted; None: the backend does not generate.
    generate_precisions: tuple[str, ...] | None
    options: tuple[BackendOption, ...]
    # GPU code that compiles but has not yet run on a GPU: none of its numbers is measured.
    not_yet_run_on_gpu: bool
    import_path: str  # "module:Class"
    generator: str | None  # its generator's "module:Class"; None: it does not generate

    @property
    def generates(self) -> bool:
        """Whether the backend generates tokens (mode generate)."""
        return self.generate_precisions is not None


def check_backend(name: str) -> None:
    """Refuse a backend name that is neither registered nor a 'module:Class' path.

    Raises:
        SpecError: naming the registered backends.
    """
    check_name(name)


def backend_names() -> list[str]:
    """The registered backends, in ladder order: top (most Python) to bottom."""
    return list(REGISTRY)


def backend(name: str) -> BackendInfo:
    """One backend, registered or 'module:Class' (which is imported to read it).

    Raises:
        SpecError: for a name that is neither.
    """
    from stackcost.backends import load_backend
    from stackcost.backends.base import as_option

    check_name(name)
    b = load_backend(name)
    a, caps, gen = b.available(), b.capabilities, b.generate_capabilities()
    known = [p for p in PRECISIONS if p in caps.precisions]
    return BackendInfo(
        name=name,
        description=b.description,
        available=a.ok,
        reason=a.reason,
        modes=tuple(sorted(caps.modes - {"generate"})),
        devices=tuple(sorted(caps.devices)),
        precisions=(*known, *sorted(caps.precisions - set(known))),
        generate_precisions=tuple(sorted(gen.precisions)) if gen is not None else None,
        options=tuple(
            BackendOption(key, o.default, o.choices, o.help)
            for key, o in ((k, as_option(d)) for k, d in b.options.items())
        ),
        not_yet_run_on_gpu=b.not_yet_run_on_gpu,
        import_path=name if is_import_path(name) else REGISTRY[name],
        generator=b.generator,
    )


def backends() -> list[BackendInfo]:
    """Every registered backend, in ladder order, with its availability on this machine."""
    return [backend(name) for name in REGISTRY]


def models() -> list[Workload]:
    """The zoo's models: what each is fed, its size axes with their defaults and bounds."""
    from stackcost.zoo import MODELS

    return list(MODELS.values())


def init_schemes() -> tuple[str, ...]:
    """The weight initialisations a model can be built with (`init=`)."""
    from stackcost.zoo import INIT_SCHEMES

    return tuple(INIT_SCHEMES)
