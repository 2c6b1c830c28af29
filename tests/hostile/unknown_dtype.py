"""A Workload whose input has a dtype stackcost does not draw."""

from stackcost.workload import Input, Workload

WORKLOAD = Workload(
    "unknown-dtype",
    "an input in float8",
    "torch.nn:Identity",
    inputs=(Input("x", ("batch", 4), "float8"),),  # type: ignore[arg-type]
)
