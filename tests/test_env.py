"""The environment record's CPU: the ISA flags that decide int8 speed are read and recorded,
with the list that was looked for (so a view can tell absent from never checked)."""

from __future__ import annotations

from pathlib import Path

from stackcost.env import CPU_FLAGS, INT8_ISA, LEGACY_CPU_FLAGS, cpu_info

CPUINFO = """processor\t: 0
model name\t: Test Xeon
flags\t\t: fpu sse avx2 fma avx512f avx512_vnni avx_vnni amx_int8 amx_tile

processor\t: 1
model name\t: Test Xeon
flags\t\t: fpu sse avx2
"""


def test_int8_isa_flags_are_recorded_with_what_was_checked(tmp_path: Path):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    cpu = cpu_info(path)
    # The first processor's flags, in CPU_FLAGS order; avx_vnni and amx_int8 among them.
    assert cpu["flags"] == [
        "avx2",
        "avx512f",
        "amx_tile",
        "fma",
        "avx512_vnni",
        "avx_vnni",
        "amx_int8",
    ]
    assert cpu["flags_checked"] == list(CPU_FLAGS)


def test_every_int8_isa_feature_is_checked_and_the_old_list_is_a_prefix():
    assert set(INT8_ISA) <= set(CPU_FLAGS)
    assert {"avx_vnni", "amx_int8"} <= set(CPU_FLAGS) - set(LEGACY_CPU_FLAGS)


def test_no_cpuinfo_gives_no_flags(tmp_path: Path):
    cpu = cpu_info(tmp_path / "missing")
    assert cpu["flags"] == [] and cpu["flags_checked"] == list(CPU_FLAGS)


def test_vnni_reads_the_flags_and_a_narrowed_onednn():
    from stackcost.env import vnni

    assert vnni(["avx2", "avx512_vnni", "amx_int8"]) == ["avx512_vnni", "amx_int8"]
    assert vnni(["avx2"]) == []
    # ONEDNN_MAX_CPU_ISA below VNNI: oneDNN runs none of it, whatever the CPU has.
    assert vnni(["avx512_vnni"], "AVX2") == [] and vnni(["avx512_vnni"], "avx512_core") == []
    assert vnni(["avx512_vnni"], "AVX512_CORE_VNNI") == ["avx512_vnni"]


def test_onednn_cap_reads_either_name_oneDNN_obeys():
    from stackcost.env import onednn_cap

    assert onednn_cap({}) is None and onednn_cap({"ONEDNN_MAX_CPU_ISA": ""}) is None
    assert onednn_cap({"DNNL_MAX_CPU_ISA": "AVX2"}) == "AVX2"
    # oneDNN prefers the newer name when both are set.
    both = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "DNNL_MAX_CPU_ISA": "AVX2"}
    assert onednn_cap(both) == "AVX512_CORE"
