"""The telemetry sampler: a real sampler process, plus its summary on synthetic samples."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from stackcost.measure.sampler import Sampler, read_samples, summarize
from stackcost.measure.sampler_process import GpuProbe, ProcessTree, RaplProbe
from stackcost.measure.telemetry import BUSY_OTHER_CORES

# Waits for a line on stdin (so the sampler is up first), then burns 0.5 s of its own CPU
# time (not wall time: on a shared machine it may take longer, and still gets sampled).
BUSY_HALF_SECOND = (
    "import sys, time\nsys.stdin.readline()\nend = time.process_time() + 0.5\n"
    "while time.process_time() < end:\n    pass\n"
)


def fake_rapl(root: Path, energy_uj: int = 123_456) -> Path:
    """A powercap tree with one package zone and a subzone that must not be counted."""
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core")):
        d = root / zone
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text(f"{energy_uj}\n")
        (d / "max_energy_range_uj").write_text("262143328850\n")
    return root


def test_watches_a_busy_child_and_exits_with_it(tmp_path: Path):
    rapl = fake_rapl(tmp_path / "powercap")
    child = subprocess.Popen([sys.executable, "-c", BUSY_HALF_SECOND], stdin=subprocess.PIPE)
    sampler = Sampler(pid=child.pid, out_path=tmp_path / "t.jsonl", rapl_root=rapl, threads=1)
    sampler.start()
    assert child.stdin is not None
    child.stdin.write(b"go\n")
    child.stdin.close()
    # wait4 rather than wait: the child's own CPU time is the ground truth.
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    # Nobody stops it: the sampler notices the target is gone on its own.
    assert sampler.process is not None
    assert sampler.process.wait(timeout=5) == 0
    sampler.stop()
    assert sampler.end is not None and sampler.end["reason"] == "target exited"
    assert sampler.startup_s is not None and sampler.startup_s < READY_BOUND_S

    tel = sampler.summary()
    assert len(sampler.samples) >= 10
    # CPU time is cumulative: the last sample holds nearly all the child ever used (it
    # misses at most the last interval, a delayed wake-up on a busy machine, and a tick).
    assert sampler.samples[-1]["cpu"] == pytest.approx(usage.ru_utime + usage.ru_stime, abs=0.06)
    # One busy core; on a 2-core machine shared with other jobs it may get less, and
    # then the sampler must have seen the others.
    assert 0.2 < tel.cpu_util_cores_mean < 1.3
    assert tel.cpu_util_cores_mean > 0.8 or tel.busy_machine
    assert tel.cpu_util_cores_max >= tel.cpu_util_cores_mean
    assert tel.cpu_util_percent_of_threads == pytest.approx(100 * tel.cpu_util_cores_mean)
    assert tel.rss_peak_bytes > 0
    assert tel.gpu is None and tel.gpu_reason is not None and "NVML" in tel.gpu_reason
    assert tel.rapl.available and tel.rapl.zones == ["package-0"]
    assert sampler.samples[0]["rapl"] == {"package-0": [123_456, 262_143_328_850]}


def test_process_tree_finds_grandchildren_like_psutil():
    # A child that starts a grandchild and waits on it: both must be found through the
    # per-thread children files, as psutil's walk of all of /proc finds them.
    code = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(30)'])"
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        root = psutil.Process(child.pid)
        deadline = time.monotonic() + 10
        while not root.children() and time.monotonic() < deadline:
            time.sleep(0.02)
        tree = ProcessTree(os.getpid())
        expected = {c.pid for c in psutil.Process().children(recursive=True)}
        assert {child.pid, root.children()[0].pid} <= tree._descendants() == expected
        tree._refresh()
        assert set(tree.children) == expected
        tree.close()
    finally:
        for c in psutil.Process(child.pid).children(recursive=True):
            c.kill()
        child.kill()
        child.wait()


READY_BOUND_S = 5.0  # generous: the machine is shared; typically ~0.06 s


def test_own_process_window_between_marks(tmp_path: Path):
    # Normal priority: the sample count below must not depend on a core being idle.
    with Sampler(out_path=tmp_path / "t.jsonl", rapl_root=tmp_path / "none", sched_idle=False) as s:
        before = os.times()
        s.mark("timed_start")
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass
        s.mark("timed_end")
        after = os.times()
    own_cores = (after.user + after.system - before.user - before.system) / (
        (s.marks["timed_end"] - s.marks["timed_start"]) / 1e9
    )
    assert s.end is not None and s.end["reason"] == "SIGTERM"
    # A last sample is taken after the stop request, so the window is covered.
    assert s.samples[0]["t"] <= s.marks["timed_start"]
    assert s.samples[-1]["t"] >= s.marks["timed_end"]
    tel = s.summary()
    assert tel.covered_s == pytest.approx(tel.window_s)
    assert tel.n_samples >= 5
    # Against this process's own account of its CPU time; both count 10 ms ticks.
    assert tel.cpu_util_cores_mean == pytest.approx(own_cores, abs=0.15)
    assert tel.cpu_util_cores_mean > 0.8 or tel.busy_machine
    assert tel.cpu_util_percent_basis.startswith("all ")
    # The sampler is this process's child but not part of its CPU time.
    assert tel.sampler_cores_mean < 0.3
    assert not tel.rapl.available and tel.rapl.reason and "no RAPL" in tel.rapl.reason
    # The file holds what was read back (one JSON line each, header and end included).
    header, samples, end_rec = read_samples(tmp_path / "t.jsonl")
    assert header["pid"] == os.getpid() and samples == s.samples and end_rec == s.end


def test_sampler_process_imports_no_heavy_modules(tmp_path: Path):
    script = (
        "import runpy, sys\n"
        f"sys.argv = ['sampler', sys.argv[1], '0.01', {str(tmp_path / 't.jsonl')!r}]\n"
        "try:\n"
        "    runpy.run_module('stackcost.measure.sampler_process', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(','.join(m for m in ('torch', 'numpy', 'scipy', 'pydantic') if m in sys.modules))\n"
    )
    target = subprocess.Popen(["sleep", "30"])
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(target.pid)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
    finally:
        target.kill()  # the sampler exits with its target
        target.wait()
    rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert rest == "\n"  # none of the heavy modules was imported


def test_missing_target_fails_to_start(tmp_path: Path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(RuntimeError, match="did not start: no process"):
        Sampler(pid=gone.pid, out_path=tmp_path / "t.jsonl").start()


def test_no_nvml_here_gives_the_error_as_reason():
    probe = GpuProbe()
    assert probe.handles == []
    assert probe.reason is not None and probe.reason.startswith("NVMLError")


class FakeNvml:
    """Enough of pynvml for one device without an energy counter (pre-Volta)."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy_calls = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"Fake GPU"

    def nvmlDeviceGetUtilizationRates(self, h: str) -> SimpleNamespace:
        return SimpleNamespace(gpu=87, memory=30)

    def nvmlDeviceGetMemoryInfo(self, h: str) -> SimpleNamespace:
        return SimpleNamespace(used=2**30, total=2**34)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 123_000

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        self.energy_calls += 1
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=42, usedGpuMemory=5 * 2**20),
            SimpleNamespace(pid=7, usedGpuMemory=1),
        ]


def test_gpu_probe_reads_devices_and_drops_unsupported_queries():
    nvml = FakeNvml()
    probe = GpuProbe(nvml)
    assert probe.reason is None and probe.devices == [{"index": 0, "name": "Fake GPU"}]
    rows = [probe.read({42}) for _ in range(3)]
    assert rows[0] == [
        {
            "index": 0,
            "util": 87,
            "mem": 2**30,
            "power_mw": 123_000,
            "energy_mj": None,
            "proc_mem": 5 * 2**20,
        }
    ]
    assert nvml.energy_calls == 1  # not asked again after "Not Supported"


def test_rapl_probe_skips_subzones_and_reports_absence(tmp_path: Path):
    probe = RaplProbe(fake_rapl(tmp_path / "powercap", energy_uj=7))
    assert probe.read() == {"package-0": [7, 262_143_328_850]}
    missing = RaplProbe(tmp_path / "nowhere")
    assert missing.zones == {} and missing.reason and "no RAPL zones" in missing.reason


def synthetic(cpu_cores: float, sys_cores: float, n: int = 101, step_ms: int = 10) -> list[dict]:
    """Samples of a steady load: cumulative counters growing at the given rates."""
    out = []
    for k in range(n):
        s = k * step_ms / 1e3
        out.append(
            {
                "t": 1_000_000_000 + k * step_ms * 1_000_000,
                "cpu": cpu_cores * s,
                "rss": 1000 + k,
                "nch": 0,
                "sys": sys_cores * s,
                "self": 0.01 * s,
                "load1": 1.0,
            }
        )
    return out


def test_summary_interpolates_window_edges_and_flags_a_busy_machine():
    samples = synthetic(cpu_cores=1.5, sys_cores=2.0)
    header = {"interval_s": 0.01, "logical_cpus": 2, "gpu_reason": "none"}
    # Edges between samples: counters are interpolated, so the mean is exact.
    start, end = 1_000_000_000 + 105_000_000, 1_000_000_000 + 555_000_000
    tel = summarize(samples, start, end, header=header, threads=2)
    assert tel.cpu_util_cores_mean == pytest.approx(1.5)
    assert tel.cpu_util_percent_of_threads == pytest.approx(75.0)
    assert tel.cpu_util_percent_basis == "threads=2"
    assert tel.other_busy_cores_mean == pytest.approx(0.49)
    assert tel.busy_machine and tel.other_busy_cores_mean > BUSY_OTHER_CORES
    assert tel.n_samples == 45 and tel.window_s == pytest.approx(0.45)
    assert tel.rss_peak_bytes == 1055

    quiet = summarize(synthetic(cpu_cores=1.0, sys_cores=1.1), start, end, header=header)
    assert not quiet.busy_machine and quiet.other_busy_cores_mean == pytest.approx(0.09)


def test_summary_reports_partial_coverage():
    samples = synthetic(cpu_cores=1.0, sys_cores=1.0, n=11)  # 0.1 s of samples
    tel = summarize(samples, 1_000_000_000 - 100_000_000, 1_000_000_000 + 100_000_000)
    assert tel.window_s == pytest.approx(0.2) and tel.covered_s == pytest.approx(0.1)
    assert tel.cpu_util_cores_mean == pytest.approx(1.0)


def test_sampler_yields_by_default_and_normal_is_recorded(tmp_path: Path):
    # SCHED_IDLE by default: at normal priority its wake-ups cost a fully subscribed
    # workload several percent (benchmarks/sampler_overhead.py).
    with Sampler(out_path=tmp_path / "t.jsonl", nvml=False) as s:
        assert os.sched_getscheduler(s.process.pid) == os.SCHED_IDLE
    assert s.header["sched"] == "idle" and s.header["gpu_reason"].startswith("NVML disabled")
    tel = s.summary()
    assert tel.sched == "idle" and tel.gap_max_s >= 0
    with Sampler(out_path=tmp_path / "n.jsonl", nvml=False, sched_idle=False) as s:
        assert os.sched_getscheduler(s.process.pid) == os.SCHED_OTHER
    assert s.summary().sched == "normal"


def test_the_environment_record_lists_nvmls_gpus():
    from stackcost.env import gpus

    class Nvml(FakeNvml):
        def nvmlDeviceGetUUID(self, h: str) -> bytes:
            return b"GPU-1234"

        def nvmlSystemGetDriverVersion(self) -> bytes:
            return b"580.65"

        def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
            return 13000

        def nvmlDeviceGetCudaComputeCapability(self, h: str) -> tuple[int, int]:
            return (9, 0)

    devices, reason = gpus(Nvml())
    assert reason is None
    assert devices == [
        {
            "index": 0,
            "name": "Fake GPU",
            "uuid": "GPU-1234",
            "memory_bytes": 2**34,
            "driver": "580.65",
            "cuda_driver": "13.0",
            "compute_capability": "9.0",
        }
    ]


def test_torch_cuda_is_read_from_torch_without_importing_it(tmp_path: Path):
    import torch

    from stackcost.env import collect, torch_cuda

    assert torch_cuda() == torch.version.cuda  # None for this CPU build
    assert "torch_cuda" in collect()
    version = tmp_path / "version.py"
    version.write_text("__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n")
    assert torch_cuda(version) == "13.0"
    assert torch_cuda(tmp_path / "missing.py") is None


def test_no_nvml_leaves_no_gpus_and_says_why():
    from stackcost.env import gpus

    class Broken(FakeNvml):
        def nvmlInit(self) -> None:
            raise self.NVMLError("NVML Shared Library Not Found")

    assert gpus(Broken()) == ([], "no NVML: NVML Shared Library Not Found")
    devices, reason = gpus()  # this machine: no GPU
    assert devices == [] or reason is None
