// The measurement protocol every native program follows: the same rule as
// stackcost.measure.protocol (cold call apart, warmup until two window medians agree,
// timed batches until min time and count and the median's CI target, or a cap), and the
// one-line JSON answer described in native/README.md. Header-only, standard C++17.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

namespace stackcost {

using Clock = std::chrono::steady_clock;
using Args = std::map<std::string, std::string>;
using Step = std::function<void()>;

struct Protocol {
  double min_time_s, max_time_s, target_ci, z, warmup_tolerance, warmup_max_time_s,
      check_interval_s;
  int64_t min_iters, max_iters;
};

inline std::string arg(const Args& args, const std::string& key) {
  const auto it = args.find(key);
  if (it == args.end()) throw std::runtime_error("missing argument " + key + "=");
  return it->second;
}

// An optional key: its value, or `fallback` where it is absent.
inline std::string arg_or(const Args& args, const std::string& key, const std::string& fallback) {
  const auto it = args.find(key);
  return it == args.end() ? fallback : it->second;
}

// The profiled pass after the timed loop (--profile): `profile_iters=N profile_out=PATH`.
// N = 0 (the default, keys absent) means no profiled pass. The program writes its per-op
// timeline to PATH and puts "profile_iters" and "profile_wall_ns" (steady_clock around the
// N profiled iterations) in its answer's details (native/README.md, "Profiling").
struct ProfileRequest {
  int64_t iters = 0;
  std::string out;
};

inline ProfileRequest parse_profile(const Args& args) {
  ProfileRequest r;
  const auto it = args.find("profile_iters");
  if (it == args.end()) return r;
  r.iters = std::stoll(it->second);
  if (r.iters < 0) throw std::runtime_error("profile_iters must be >= 0, got " + it->second);
  if (r.iters > 0) r.out = arg(args, "profile_out");
  return r;
}

// `run key=value ...`: everything after the command word.
inline Args parse_args(const std::vector<std::string>& words) {
  Args args;
  for (size_t i = 1; i < words.size(); ++i) {
    const auto eq = words[i].find('=');
    if (eq == std::string::npos) throw std::runtime_error("expected key=value: " + words[i]);
    args[words[i].substr(0, eq)] = words[i].substr(eq + 1);
  }
  return args;
}

// Which network to build: a family and its parameters, from the zoo entry's Workload
// (family, params) that Python reads and passes on as keys. The
// programs build by family; `arch` (the zoo's name) is only a label for the answer.
//   family=resnet block=basic|bottleneck depths=2,2,2,2     family=mnist-cnn
struct Family {
  std::string name, arch;
  std::string block;            // resnet
  std::vector<int64_t> depths;  // resnet: blocks per stage
  bool resnet() const { return name == "resnet"; }
  bool bottleneck() const { return block == "bottleneck"; }
};

inline Family parse_family(const Args& args, const std::string& program) {
  Family f;
  f.name = arg(args, "family");
  const auto label = args.find("arch");
  f.arch = label == args.end() ? f.name : label->second;
  if (f.name == "resnet") {
    f.block = arg(args, "block");
    if (f.block != "basic" && f.block != "bottleneck") {
      throw std::runtime_error("block must be basic or bottleneck, not " + f.block);
    }
    std::stringstream in(arg(args, "depths"));
    for (std::string part; std::getline(in, part, ',');) f.depths.push_back(std::stoll(part));
    if (f.depths.empty()) throw std::runtime_error("depths= names no stage");
    for (const int64_t d : f.depths) {
      if (d < 1) throw std::runtime_error("depths must be positive: " + arg(args, "depths"));
    }
  } else if (f.name != "mnist-cnn") {
    throw std::runtime_error(program + " has no C++ definition of the family " + f.name);
  }
  return f;
}

inline Protocol parse_protocol(const Args& args) {
  return Protocol{std::stod(arg(args, "min_time_s")),       std::stod(arg(args, "max_time_s")),
                  std::stod(arg(args, "target_ci")),        std::stod(arg(args, "z")),
                  std::stod(arg(args, "warmup_tolerance")), std::stod(arg(args, "warmup_max_time_s")),
                  std::stod(arg(args, "check_interval_s")), std::stoll(arg(args, "min_iters")),
                  std::stoll(arg(args, "max_iters"))};
}

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline int64_t time_once(const Step& step) {
  const auto t0 = Clock::now();
  step();
  const auto t1 = Clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
}

// A device's own clock beside the wall clock (a GPU program's CUDA events around each
// call): called right after a timed call, outside its wall time, it returns that call's
// device time in ns. Programs without one pass none and answer as before.
using DeviceTime = std::function<int64_t()>;

inline void run_n(const Step& step, int64_t n, std::vector<int64_t>& samples,
                  const DeviceTime& device = nullptr, std::vector<int64_t>* device_samples = nullptr) {
  for (int64_t i = 0; i < n; ++i) {
    samples.push_back(time_once(step));
    if (device && device_samples) device_samples->push_back(device());
  }
}

inline double median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double hi = static_cast<double>(v[mid]);
  if (v.size() % 2 == 1) return hi;
  return (static_cast<double>(*std::max_element(v.begin(), v.begin() + mid)) + hi) / 2;
}

inline int64_t window(double estimate_ns, double seconds, int64_t floor) {
  return std::max<int64_t>(
      floor, static_cast<int64_t>(std::ceil(seconds * 1e9 / std::max(estimate_ns, 1.0))));
}

// Half-width of the median's CI relative to the median: order statistics with the normal
// approximation of Bin(n, 1/2). Only the stop decision uses it; Python recomputes the
// stored statistics with the exact binomial from the samples.
inline double ci_half_width_rel(std::vector<int64_t> v, double z) {
  const double n = static_cast<double>(v.size());
  const auto k = static_cast<int64_t>(std::floor((n - z * std::sqrt(n)) / 2.0 - 0.5));
  if (k < 0) return INFINITY;
  std::sort(v.begin(), v.end());
  const double m = median(v);
  if (m <= 0) return INFINITY;
  return static_cast<double>(v[v.size() - 1 - k] - v[k]) / 2.0 / m;
}

// A /proc/self/status field in bytes (VmRSS:, VmHWM:), -1 where there is none.
inline int64_t vm_bytes(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(key);
  while (std::getline(status, line)) {
    if (line.compare(0, len, key) == 0) return std::stoll(line.substr(len + 1)) * 1024;
  }
  return -1;
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

// The CPUs whose counters count: those this process is pinned to (a repetition on a Ray
// node, inherited from the Python worker: execute/cores.py), or none (= all) when it may
// run on every online CPU. The same rule as stackcost.measure.counters.pinned_cpus.
inline bool pinned_cpus(cpu_set_t& allowed) {
  CPU_ZERO(&allowed);
  return sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
         CPU_COUNT(&allowed) < sysconf(_SC_NPROCESSORS_ONLN);
}

// Busy and steal CPU seconds since boot from /proc/stat (-1 where unreadable). Busy: all
// but idle and iowait (steal included); steal: the 8th column, time the hypervisor ran
// another guest while this one's CPU was runnable. A pinned process counts only its cores'
// lines, so a measurement on the next cores is not its disturbance; an unpinned one counts
// the first line, all CPUs. The same rule as stackcost.measure.counters.system_times.
struct CpuTimes {
  double busy_s = -1, steal_s = -1;
};

inline CpuTimes cpu_times() {
  cpu_set_t allowed;
  const bool pinned = pinned_cpus(allowed);
  std::ifstream stat("/proc/stat");
  std::string line;
  int64_t busy = 0, steal = 0;
  bool read = false;
  while (std::getline(stat, line) && line.rfind("cpu", 0) == 0) {
    std::istringstream in(line);
    std::string name;
    in >> name;
    const bool all = name == "cpu";
    if (pinned == all) continue;  // pinned: per-CPU lines only; unpinned: the first only
    if (pinned) {
      const int cpu = std::atoi(name.c_str() + 3);
      if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) continue;
    }
    int64_t v[8] = {};
    for (auto& x : v) in >> x;  // user nice system idle iowait irq softirq steal
    if (!in) return {};
    for (int i = 0; i < 8; ++i) busy += (i == 3 || i == 4) ? 0 : v[i];
    steal += v[7];
    read = true;
    if (all) break;
  }
  if (!read) return {};
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {static_cast<double>(busy) / tick, static_cast<double>(steal) / tick};
}

inline double system_busy_s() { return cpu_times().busy_s; }

// This process's involuntary context switches, all its threads and its reaped children:
// getrusage, one syscall, rather than summing /proc/self/task/*/status (a file per thread,
// and a thread that exits between the edges would vanish from the sum). The same rule as
// stackcost.measure.counters.involuntary_switches.
inline int64_t involuntary_switches() {
  rusage self{}, children{};
  if (getrusage(RUSAGE_SELF, &self) != 0 || getrusage(RUSAGE_CHILDREN, &children) != 0) return -1;
  return static_cast<int64_t>(self.ru_nivcsw) + static_cast<int64_t>(children.ru_nivcsw);
}

// The counted CPUs' mean current frequency in MHz (-1 where unreadable): cpufreq's
// scaling_cur_freq where the kernel has a driver, else /proc/cpuinfo's "cpu MHz" where the
// kernel samples it (x86 flag aperfmperf; without it, as on most VMs, it is the fixed TSC
// frequency, not a reading). The same rule as stackcost.measure.counters.cpu_mhz.
inline double cpu_mhz() {
  static int source = -1;  // 0 none, 1 sysfs, 2 cpuinfo: found on first use
  const auto sysfs = [](int cpu) {
    return "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpufreq/scaling_cur_freq";
  };
  cpu_set_t allowed;
  const bool pinned = pinned_cpus(allowed);
  const auto counted = [&](int cpu) {
    return !pinned || (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &allowed));
  };
  const auto from_cpuinfo = [&](bool only_counted) {
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    int processor = -1, n = 0;
    double sum = 0;
    bool measured = only_counted;  // checked once, on first use
    while (std::getline(info, line)) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      key.erase(key.find_last_not_of(" \t") + 1);
      if (key == "processor") processor = std::atoi(line.c_str() + colon + 1);
      if (key == "flags" && !measured) {
        std::istringstream flags(line.substr(colon + 1));
        std::string flag;
        while (flags >> flag) measured = measured || flag == "aperfmperf";
        if (!measured) return -1.0;
      }
      if (key == "cpu MHz" && (!only_counted || counted(processor))) {
        sum += std::atof(line.c_str() + colon + 1);
        ++n;
      }
    }
    return n && measured ? sum / n : -1.0;
  };
  if (source < 0) {
    source = std::ifstream(sysfs(0)).good() ? 1 : (from_cpuinfo(false) > 0 ? 2 : 0);
  }
  if (source == 2) return from_cpuinfo(true);
  if (source == 0) return -1;
  double khz = 0;
  int n = 0;
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  for (int cpu = 0; cpu < cpus; ++cpu) {
    if (!counted(cpu)) continue;
    std::ifstream f(sysfs(cpu));
    int64_t value = 0;
    if (f >> value) {
      khz += static_cast<double>(value);
      ++n;
    }
  }
  return n ? khz / n / 1000 : -1;
}

// The counters at one edge of the timed loop, on the clocks Python reads: CLOCK_MONOTONIC
// (time.monotonic_ns), this process's CPU time over all threads (time.process_time), the
// busy and steal time of the CPUs it may run on (cpu_times), its involuntary context
// switches and those CPUs' frequency. With them Python's utilization over the loop is
// exact, however late its side-channel samples came. -1: unread.
struct Edge {
  int64_t t_ns = 0;
  double cpu_s = 0, system_busy_s = -1, steal_s = -1, cpu_mhz = -1;
  int64_t involuntary_switches = -1;

  static Edge now() {
    Edge e;
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e.t_ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    e.cpu_s = static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
    e.involuntary_switches = stackcost::involuntary_switches();
    const CpuTimes times = cpu_times();
    e.system_busy_s = times.busy_s;
    e.steal_s = times.steal_s;
    e.cpu_mhz = stackcost::cpu_mhz();
    return e;
  }
};

struct Measured {
  int64_t cold_ns = 0;
  std::vector<int64_t> samples;
  std::vector<int64_t> device_samples;  // DeviceTime's reading per timed call, when given
  int64_t warmup_iters = 0;
  bool settled = false;
  double warmup_s = 0, timed_s = 0;
  std::string stop_reason;
  Edge first, last;  // the timed loop's edges (Python: stackcost.measure.counters)
};

// Warmup and the timed loop, after the caller has timed the cold call itself (it may
// want that call's output). `device`, when given, is read after every timed call (not
// during warmup): the answer then carries "device_samples_ns" beside "samples_ns".
inline Measured measure_after_cold(const Step& step, const Protocol& p, int64_t cold_ns,
                                   const DeviceTime& device = nullptr) {
  Measured m;
  m.cold_ns = cold_ns;
  auto start = Clock::now();
  double estimate = static_cast<double>(cold_ns), previous = -1;
  while (true) {  // windows until two consecutive window medians agree
    std::vector<int64_t> w;
    run_n(step, window(estimate, p.check_interval_s, 2), w);
    m.warmup_iters += static_cast<int64_t>(w.size());
    const double current = median(w);
    estimate = current;
    if (previous >= 0 && std::abs(current - previous) <= p.warmup_tolerance * previous) {
      m.settled = true;
      break;
    }
    previous = current;
    if (seconds_since(start) >= p.warmup_max_time_s) break;
  }
  m.warmup_s = seconds_since(start);

  auto& samples = m.samples;  // timed batches; the stop rule runs between batches only
  m.first = Edge::now();
  start = Clock::now();
  estimate = static_cast<double>(cold_ns);
  while (true) {
    const auto n = static_cast<int64_t>(samples.size());
    int64_t batch = std::max(window(estimate, p.check_interval_s, 1), n / 4);
    const double left = p.max_time_s - seconds_since(start);
    batch = std::min(batch, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                                                     left * 1e9 / std::max(estimate, 1.0)))));
    run_n(step, std::min(p.max_iters - n, batch), samples, device, &m.device_samples);
    const double elapsed = seconds_since(start);
    const auto size = static_cast<int64_t>(samples.size());
    estimate = median(
        std::vector<int64_t>(samples.end() - std::min<int64_t>(size, 64), samples.end()));
    const bool at_cap = size >= p.max_iters;
    if (size >= p.min_iters && (elapsed >= p.min_time_s || at_cap) &&
        ci_half_width_rel(samples, p.z) <= p.target_ci) {
      m.stop_reason = "converged";
      break;
    }
    if (at_cap) {
      m.stop_reason = "iteration cap";
      break;
    }
    if (elapsed >= p.max_time_s && size >= std::min<int64_t>(p.min_iters, 3)) {
      m.stop_reason = "time cap";
      break;
    }
  }
  m.timed_s = seconds_since(start);
  m.last = Edge::now();
  return m;
}

// The answer's common fields; `details` is a JSON object's body written by the program.
inline std::string answer_json(const Measured& m, int64_t baseline_rss, const std::string& details) {
  std::ostringstream js;
  js << "{\"cold_ns\":" << m.cold_ns << ",\"samples_ns\":[";
  for (size_t i = 0; i < m.samples.size(); ++i) js << (i ? "," : "") << m.samples[i];
  js << "]";
  if (!m.device_samples.empty()) {  // only a program that passed a DeviceTime
    js << ",\"device_samples_ns\":[";
    for (size_t i = 0; i < m.device_samples.size(); ++i) {
      js << (i ? "," : "") << m.device_samples[i];
    }
    js << "]";
  }
  js << ",\"warmup_iters\":" << m.warmup_iters
     << ",\"warmup_settled\":" << (m.settled ? "true" : "false") << ",\"warmup_s\":" << m.warmup_s
     << ",\"timed_s\":" << m.timed_s << ",\"peak_rss_bytes\":" << vm_bytes("VmHWM:")
     << ",\"baseline_rss_bytes\":" << baseline_rss
     << ",\"stop_reason\":" << json_string(m.stop_reason)
     << ",\"window\":{\"start_ns\":" << m.first.t_ns << ",\"end_ns\":" << m.last.t_ns
     << ",\"cpu_s\":" << m.last.cpu_s - m.first.cpu_s << ",\"system_busy_s\":";
  const auto delta = [&js](auto first, auto last) {
    if (first >= 0 && last >= 0) {
      js << last - first;
    } else {
      js << "null";
    }
  };
  const auto value = [&js](double v) {
    if (v >= 0) {
      js << v;
    } else {
      js << "null";
    }
  };
  delta(m.first.system_busy_s, m.last.system_busy_s);
  js << ",\"steal_s\":";
  delta(m.first.steal_s, m.last.steal_s);
  js << ",\"involuntary_switches\":";
  delta(m.first.involuntary_switches, m.last.involuntary_switches);
  js << ",\"cpu_mhz_start\":";
  value(m.first.cpu_mhz);
  js << ",\"cpu_mhz_end\":";
  value(m.last.cpu_mhz);
  js << "},\"details\":{" << details
     << ",\"clock\":\"std::chrono::steady_clock\""
     << ",\"stop_ci\":\"order statistics, normal approximation\"}}";
  return js.str();
}

}  // namespace stackcost
