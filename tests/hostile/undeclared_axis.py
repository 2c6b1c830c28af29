"""A Workload whose input names a size axis it does not declare."""

from stackcost.workload import Input, Workload

WORKLOAD = Workload(
    "undeclared-axis",
    "ids of seq_len tokens, but no seq_len in sizes",
    "torch.nn:Identity",
    inputs=(Input("ids", ("batch", "seq_len"), "int64", "ids", 100),),
    sizes={"resolution": 8},
)
