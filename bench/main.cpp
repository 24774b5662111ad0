// replayssm_bench: the kernel benchmark program (issues 3, 4 and 5). `kernels` measures our CUDA
// decode kernels (Mamba-2, GDN, KDA), `verify` the speculative verify step against one decode step
// and the snapshot baseline, both with the method of DESIGN.md §4, writing the JSON of §4
// (bench/README.md).
// Errors print one line and exit non-zero.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_checks.h"
#include "cli_words.h"
#include "copy_ceiling.h"
#include "cuda/device.h"
#include "cuda_util.h"
#include "floors.h"
#include "gdn_kernels.h"
#include "mamba2_kernels.h"
#include "progress.h"
#include "results.h"
#include "run_info.h"
#include "verify_bench.h"

namespace replayssm::bench {
namespace {

struct KernelsArgs {
  std::string family = "mamba2";
  std::vector<std::string> shapes;  // empty: every shape of the family
  std::vector<int64_t> batches = {1, 8, 32, 64, 128, 256, 512};
  int L = 16;
  std::vector<int> sweep_L = {4, 8, 16, 32};
  std::vector<int64_t> sweep_batches = {64, 256};
  std::string state = "fp32";
  std::string out;
  std::string commit = "unknown";
  uint64_t seed = 20261130;
  int replays = 0;  // 0: 25 (quick: 10)
  bool quick = false;
  bool no_sweep = false;
  bool dense_slots = false;
};

constexpr const char* kStates =
    "fp32, fp16, bf16, fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, fp16sr/fp16sr or fp16sr/nvfp4";

DType state_dtype(const std::string& s) {
  if (s == "fp32" || s == "fp32/bf16" || s == "fp32/fp16" || s == "fp32/fp8" ||
      s == "fp32/nvfp4")
    return DType::kF32;
  if (s == "fp16" || s == "fp16sr/fp16sr" || s == "fp16sr/nvfp4") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  throw BenchError("--state " + s + ": expected " + kStates);
}

/// The read copy of a split mode (fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4; kFp16Sr for
/// fp16sr/fp16sr, whose checkpoint is its own read copy; kNvfp4 for fp16sr/nvfp4 too), else kFp32.
StateFormat read_format(const std::string& s) {
  return s.find('/') == std::string::npos ? StateFormat::kFp32 : parse_state_mode(s).read;
}

/// The families a --family value runs, in order.
std::vector<std::string> families(const std::string& f) {
  if (f == "all") return {"mamba2", "gdn", "kda"};
  return {f};
}

/// Shapes of `family`: all of them, or those of --shapes that belong to it.
std::vector<std::string> family_shapes(const std::string& family,
                                       const std::vector<std::string>& asked) {
  std::vector<std::string> all;
  if (family == "mamba2")
    for (const auto& s : mamba2_shapes()) all.push_back(s.name);
  else
    all = gdn_shape_names(family);
  if (asked.empty()) return all;
  std::vector<std::string> out;
  for (const std::string& s : asked)
    if (std::find(all.begin(), all.end(), s) != all.end()) out.push_back(s);
  return out;
}

/// Input description of the "method" object, per family; dense: each call's slots in order
/// (--dense-slots), else a random permutation of the pool.
std::string inputs_of(const std::string& family, bool dense = false) {
  const std::string slots = dense ? "dense slots (call r: r*batch ..)" : "random slots";
  if (family == "mamba2") return "bf16 x, dt, B, C, y; fp32 A_log, dt_bias, D; no z; " + slots;
  return "bf16 q, k, v, a, b, y; fp32 A_log, dt_bias; fp32 ring u, k^, g; " + slots;
}

/// The current device's properties; a BenchError saying so plainly where there is no GPU (the
/// library's device summary: a missing driver is told apart from an old one).
cudaDeviceProp require_device() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw BenchError(cuda::device_summary() +
                     ": replayssm_bench times CUDA kernels and needs a GPU");
  }
  int dev = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  return prop;
}

/// The fields every results JSON starts with (DESIGN.md §4): commit, GPU, date, copy ceiling.
nlohmann::json results_header(const char* bench, const std::string& commit,
                              const cudaDeviceProp& prop, const CopyCeiling& copy) {
  nlohmann::json j;
  j["bench"] = bench;
  j["commit"] = commit;
  j["gpu"] = prop.name;
  j["date"] = cli::utc_now();
  j["copy_bandwidth_gbps"] = copy.best_gbps();
  j["copy"] = {{"bytes_per_copy", copy.bytes_per_copy},
               {"sm_kernel_gbps", copy.sm_kernel_gbps},
               {"memcpy_gbps", copy.memcpy_gbps},
               {"counted", "bytes read + bytes written, eager, median"}};
  j["device"] = {{"sms", prop.multiProcessorCount},
                 {"l2_bytes", prop.l2CacheSize},
                 {"memory_bytes", prop.totalGlobalMem},
                 {"cc", fmt::format("{}.{}", prop.major, prop.minor)}};
  return j;
}

/// A usage error: found before any device work, reported in one line with exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// --out must name a file that can be written, checked before the run rather than after it
/// (the CLI's check_writable, reported as a usage error).
void check_out_path(const std::string& out) {
  if (out.empty()) return;
  try {
    cli::check_writable(out, "--out");
  } catch (const ConfigError& e) {
    throw UsageError(e.what());
  }
}

void write_json(const nlohmann::json& j, const std::string& out) {
  const std::filesystem::path path(out);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) throw BenchError("could not write " + out);
}

/// The kernels command's usage errors, none of which needs a GPU: shapes of another family, a
/// read copy the family's benchmark does not run, an --out that cannot be written.
void check_kernels_usage(const KernelsArgs& a) {
  bool any = false;
  for (const std::string& f : families(a.family)) {
    if (family_shapes(f, a.shapes).empty()) continue;
    any = true;
    const StateFormat read = read_format(a.state);
    try {
      state_name(state_dtype(a.state), read);
    } catch (const BenchError& e) {
      throw UsageError(std::string("--state ") + a.state + ": " + e.what());
    }
  }
  if (!any) throw UsageError("--shapes: no shape of --family " + a.family);
  check_out_path(a.out);
}

int run_kernels(const KernelsArgs& a, const CLI::App& cmd) {
  const cudaDeviceProp prop = require_device();

  KernelConfig cfg;
  cfg.batches = a.batches;
  cfg.L = a.L;
  cfg.sweep_L = a.sweep_L;
  cfg.sweep_batches = a.sweep_batches;
  // --quick: fewer batches, a two-point sweep at one batch and fewer replays, unless given.
  if (a.quick) {
    if (cmd.count("--batch") == 0) cfg.batches = {1, 64, 256};
    if (cmd.count("--L-sweep") == 0) cfg.sweep_L = {4, 32};
    if (cmd.count("--L-sweep-batch") == 0) cfg.sweep_batches = {64};
    cfg.timing = TimingConfig{1, 2, 10};
  }
  if (a.no_sweep) cfg.sweep_L.clear(), cfg.sweep_batches.clear();
  if (a.replays > 0) cfg.timing.timed_replays = a.replays;
  cfg.state = state_dtype(a.state);
  cfg.read = read_format(a.state);
  cfg.seed = a.seed;
  cfg.dense_slots = a.dense_slots;

  // One config per family run (same points, its own shapes).
  std::vector<std::pair<std::string, KernelConfig>> runs;
  long graphs = 0;
  double bytes = 0;
  std::vector<std::string> shapes_run;
  for (const std::string& f : families(a.family)) {
    KernelConfig c = cfg;
    c.shapes = family_shapes(f, a.shapes);
    if (c.shapes.empty()) continue;
    graphs += f == "mamba2" ? mamba2_graph_count(c) : gdn_graph_count(c);
    bytes += f == "mamba2" ? mamba2_run_bytes(c) : gdn_run_bytes(c);
    shapes_run.insert(shapes_run.end(), c.shapes.begin(), c.shapes.end());
    runs.emplace_back(f, std::move(c));
  }
  if (runs.empty()) throw BenchError("--shapes: no shape of --family " + a.family);

  std::fprintf(stderr, "replayssm_bench kernels: %s (%d SMs, %d MB L2), seed %llu%s\n", prop.name,
               prop.multiProcessorCount, prop.l2CacheSize >> 20,
               static_cast<unsigned long long>(a.seed),
               a.dense_slots ? ", dense slots (each call's slots in order)" : "");
  const int64_t copy_bytes = a.quick ? (int64_t{1} << 30) : (int64_t{4} << 30);
  const CopyCeiling copy = measure_copy_ceiling(copy_bytes, 2, a.quick ? 5 : 10);
  cfg.copy_gbps = copy.best_gbps();
  for (auto& [f, c] : runs) c.copy_gbps = cfg.copy_gbps;
  std::fprintf(stderr,
               "copy ceiling (%lld MiB, read + write): SM copy kernel %.0f GB/s, "
               "cudaMemcpyAsync %.0f GB/s\n",
               static_cast<long long>(copy_bytes >> 20), copy.sm_kernel_gbps, copy.memcpy_gbps);

  // The run's traffic at the copy ceiling: a lower bound of its time (setup and checks excluded).
  if (a.family != "mamba2")
    std::fprintf(stderr, "%ld graphs moving %.0f GB: >= %.0f s at the copy ceiling\n", graphs,
                 bytes / 1e9, bytes / (cfg.copy_gbps * 1e9));

  const bool tty = isatty(fileno(stderr)) != 0;
  cli::Progress progress(a.family + " kernels", graphs);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  for (auto& [f, c] : runs) {
    c.on_graph = [&] { progress.tick(); };
    c.on_point = [&](const std::string& line) {
      if (!tty) std::fprintf(stderr, "%s\n", line.c_str());
    };
    const std::vector<Row> r = f == "mamba2" ? run_mamba2(c) : run_gdn(c);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  progress.done();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (!a.out.empty()) {
    nlohmann::json j = results_header("kernels", a.commit, prop, copy);
    j["method"] = {
        {"calls_per_graph", "R = ceil(512 MiB / bytes of an ordinary step with no history), 2..64"},
        {"eager_passes", cfg.timing.eager_passes},
        {"warm_replays", cfg.timing.warm_replays},
        {"timed_replays", cfg.timing.timed_replays},
        {"us", "median graph replay time / (R calls x steps per call)"},
        {"inputs", inputs_of(a.family, a.dense_slots)}};
    if (a.family == "all") {
      nlohmann::json in;
      for (const auto& [f, c] : runs) in[f] = inputs_of(f, a.dense_slots);
      j["method"]["inputs"] = in;
    }
    j["args"] = {{"family", a.family},   {"shapes", shapes_run},
                 {"batch", cfg.batches}, {"L", cfg.L},
                 {"L_sweep", cfg.sweep_L}, {"L_sweep_batch", cfg.sweep_batches},
                 {"state", a.state},     {"quick", a.quick},
                 {"seed", a.seed},       {"dense_slots", a.dense_slots}};
    j["seconds"] = secs;
    j["rows"] = nlohmann::json::array();
    for (const Row& r : rows) j["rows"].push_back(row_json(r));
    write_json(j, a.out);
    std::fprintf(stderr, "wrote %zu rows to %s (%.0f s)\n", rows.size(), a.out.c_str(), secs);
  }
  print_table(rows, cfg.copy_gbps);
  return 0;
}

struct VerifyArgs {
  std::vector<std::string> shapes = {"nano-4b", "super-120b", "qwen3.5-4b", "qwen3.5-122b",
                                     "kimi-linear"};
  std::vector<int64_t> batches = {64, 128, 256, 512};
  std::vector<int> Ts = {2, 4, 6, 8};
  int L = 16;
  std::string out;
  std::string commit = "unknown";
  uint64_t seed = 20261130;
  int replays = 0;
  bool quick = false;
  std::string inputs = "bf16";
};

/// The Mamba-2 shapes' names.
std::vector<std::string> mamba2_shape_names() {
  std::vector<std::string> names;
  for (const Mamba2Shape& m : mamba2_shapes()) names.push_back(m.name);
  return names;
}

/// The verify command's usage errors, none of which needs a GPU: f32 inputs on a GDN/KDA shape,
/// an --out that cannot be written.
void check_verify_usage(const VerifyArgs& a, const CLI::App& cmd) {
  if (a.inputs == "f32" && cmd.count("--shapes") > 0) {
    const std::vector<std::string> mamba2 = mamba2_shape_names();
    std::string names;
    for (const std::string& m : mamba2) names += (names.empty() ? "" : ", ") + m;
    for (const std::string& s : a.shapes)
      if (std::find(mamba2.begin(), mamba2.end(), s) == mamba2.end())
        throw UsageError("--inputs f32 is for the Mamba-2 shapes (" + names + "); " + s +
                         " runs bf16 inputs only");
  }
  check_out_path(a.out);
}

int run_verify_cmd(const VerifyArgs& a, const CLI::App& cmd) {
  VerifyConfig cfg;
  cfg.inputs = a.inputs == "f32" ? DType::kF32 : DType::kBF16;
  cfg.shapes = a.shapes;
  if (cfg.inputs != DType::kBF16 && cmd.count("--shapes") == 0) cfg.shapes = mamba2_shape_names();
  const cudaDeviceProp prop = require_device();
  cfg.batches = a.batches;
  cfg.Ts = a.Ts;
  cfg.L = a.L;
  if (a.quick) {
    if (cmd.count("--batch") == 0) cfg.batches = {64, 256};
    if (cmd.count("--T") == 0) cfg.Ts = {4, 8};
    cfg.timing.timing = TimingConfig{1, 2, 10};
  }
  if (a.replays > 0) cfg.timing.timing.timed_replays = a.replays;
  cfg.timing.seed = a.seed;
  std::fprintf(stderr, "replayssm_bench verify: %s (%d SMs, %d MB L2), seed %llu\n", prop.name,
               prop.multiProcessorCount, prop.l2CacheSize >> 20,
               static_cast<unsigned long long>(a.seed));
  const CopyCeiling copy = measure_copy_ceiling(a.quick ? (int64_t{1} << 30) : (int64_t{4} << 30),
                                                2, a.quick ? 5 : 10);
  cfg.timing.copy_gbps = copy.best_gbps();
  const bool tty = isatty(fileno(stderr)) != 0;
  cli::Progress progress("verify", verify_graph_count(cfg));
  cfg.timing.on_graph = [&] { progress.tick(); };
  std::vector<std::string> lines;
  cfg.timing.on_point = [&](const std::string& line) {
    lines.push_back(line);
    if (!tty) std::fprintf(stderr, "%s\n", line.c_str());
  };
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<nlohmann::json> rows = run_verify(cfg);
  progress.done();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.out.empty()) {
    nlohmann::json j = results_header("verify", a.commit, prop, copy);
    j["method"] = {
        {"calls_per_graph", "R = ceil(512 MiB / checkpoint bytes of one call), 2..64"},
        {"timed_replays", cfg.timing.timing.timed_replays},
        {"decode-step", "one ordinary replay_step, every row at h = L/2 - 1"},
        {"replay", "L steps of verify + device commit (accepting T or 1), per step"},
        {"snapshot", "snapshot_verify (one fp32 snapshot per token) + snapshot_select, per step"},
        {"bytes", "replay: checkpoint (plus the flush write fraction), mean history and T records "
                  "and token io; snapshot: state + T snapshots + T token io"},
        {"inputs", {{"mamba2", a.inputs == "f32" ? "fp32 x, dt, B, C, y and ring x, B (the "
                                                   "engine's); fp32 A_log, dt_bias, D; no z; "
                                                   "random slots"
                                                 : inputs_of("mamba2")},
                    {"gdn", inputs_of("gdn")}}}};
    j["args"] = {{"shapes", cfg.shapes}, {"batch", cfg.batches}, {"T", cfg.Ts},
                 {"L", cfg.L},           {"quick", a.quick},     {"seed", a.seed},
                 {"inputs", a.inputs}};
    j["seconds"] = secs;
    j["rows"] = rows;
    write_json(j, a.out);
    std::fprintf(stderr, "wrote %zu rows to %s (%.0f s)\n", rows.size(), a.out.c_str(), secs);
  }
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  return 0;
}

/// `floors`: the table to stdout, the rows as JSON to `out` when given.
int run_floors_cmd(const FloorsConfig& cfg, const std::string& out, const std::string& commit) {
  const std::vector<nlohmann::json> rows = run_floors(cfg);
  std::printf("%s", floors_table(rows).c_str());
  if (!out.empty()) {
    const nlohmann::json j = {
        {"bench", "floors"},
        {"commit", commit},
        {"date", cli::utc_now()},
        {"method", "byte_model.h counts of both sides of each target; bound = their ratio at "
                   "equal bandwidth"},
        {"args", {{"L", cfg.L}}},
        {"rows", rows}};
    write_json(j, out);
    std::fprintf(stderr, "wrote %zu rows to %s\n", rows.size(), out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace replayssm::bench

int main(int argc, char** argv) {
  using namespace replayssm::bench;
  namespace cli = replayssm::cli;
  CLI::App app{"replayssm_bench: kernel benchmarks of replayssm (CUDA events, graph replays, "
               "state pools larger than L2, random slots)"};
  app.require_subcommand(1);
  KernelsArgs a;
  CLI::App* k = app.add_subcommand("kernels", "decode-step kernels: conventional vs ReplaySSM");
  k->add_option("--family", a.family, "op family (all: mamba2, then gdn, then kda)")
      ->check(CLI::IsMember({"mamba2", "gdn", "kda", "all"}))
      ->required();
  k->add_option("--shapes", a.shapes, "model shapes (default: every shape of the family)")
      ->delimiter(',')
      ->check(CLI::IsMember({"nano-4b", "super-120b", "qwen3.5-4b", "qwen3.5-122b",
                             "kimi-linear"}));
  k->add_option("--batch", a.batches, "batch sizes")
      ->delimiter(',')
      ->check(cli::in_range(int64_t{1}, int64_t{65535}))
      ->capture_default_str();
  k->add_option("-L,--L", a.L, "ring length of the main points")
      ->check(cli::in_range(3, 64))
      ->capture_default_str();
  k->add_option("--L-sweep", a.sweep_L, "ring lengths of the L sweep")
      ->delimiter(',')
      ->check(cli::in_range(3, 64))
      ->capture_default_str();
  k->add_option("--L-sweep-batch", a.sweep_batches, "batch sizes of the L sweep")
      ->delimiter(',')
      ->check(cli::in_range(int64_t{1}, int64_t{65535}))
      ->capture_default_str();
  k->add_flag("--no-sweep", a.no_sweep, "skip the L sweep");
  k->add_flag("--dense-slots", a.dense_slots,
              "slots in order: the r-th call of a graph takes slot ids r*batch .. r*batch + "
              "batch - 1 (a peer's dense batch, e.g. FLA's) instead of a random permutation of "
              "the pool");
  k->add_option("--state", a.state,
                "state / checkpoint dtype, a split mode with a read copy (fp32/bf16, "
                "fp32/fp16, fp32/fp8, fp32/nvfp4), or fp16sr/fp16sr / fp16sr/nvfp4 (a float16 "
                "checkpoint written with stochastic rounding, read as it is or through an NVFP4 "
                "copy)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp32/bf16", "fp32/fp16", "fp32/fp8",
                             "fp32/nvfp4", "fp16sr/fp16sr", "fp16sr/nvfp4"}));
  k->add_option("--out", a.out, "write the results JSON here (DESIGN.md §4)");
  k->add_option("--commit", a.commit, "commit recorded in the JSON (git rev-parse HEAD)");
  k->add_option("--seed", a.seed, "random seed of inputs, slots and phases")
      ->check(cli::seed_validator())
      ->capture_default_str();
  k->add_option("--replays", a.replays, "timed graph replays (default 25, quick 10)")
      ->check(cli::in_range(1, 10000));
  k->add_flag("--quick", a.quick, "smoke run: batches 1,64,256, L sweep 4,32 at 64, 10 replays");
  VerifyArgs v;
  CLI::App* vc = app.add_subcommand(
      "verify", "speculative verify vs one decode step and the snapshot baseline");
  vc->add_option("--shapes", v.shapes, "model shapes (Mamba-2, GDN, KDA)")
      ->delimiter(',')
      ->check(CLI::IsMember({"nano-4b", "super-120b", "qwen3.5-4b", "qwen3.5-122b",
                             "kimi-linear"}));
  vc->add_option("--batch", v.batches, "batch sizes")
      ->delimiter(',')
      ->check(cli::in_range(int64_t{1}, int64_t{65535}))
      ->capture_default_str();
  vc->add_option("--T", v.Ts, "tokens per verify step")
      ->delimiter(',')
      ->check(cli::in_range(1, 8))
      ->capture_default_str();
  vc->add_option("-L,--L", v.L, "ring length of the decode step; T tokens verify with max(L, 4T)")
      ->check(cli::in_range(2, 64))
      ->capture_default_str();
  vc->add_option("--out", v.out, "write the results JSON here (DESIGN.md §4)");
  vc->add_option("--commit", v.commit, "commit recorded in the JSON (git rev-parse HEAD)");
  vc->add_option("--seed", v.seed, "random seed of inputs, slots and phases")
      ->check(cli::seed_validator())
      ->capture_default_str();
  vc->add_option("--replays", v.replays, "timed graph replays (default 25, quick 10)")
      ->check(cli::in_range(1, 10000));
  vc->add_flag("--quick", v.quick, "smoke run: batches 64,256, T 4,8, 10 replays");
  vc->add_option("--inputs", v.inputs,
                 "dtype of the Mamba-2 inputs, outputs and ring x / B: bf16 (default) or f32 (as "
                 "the engine feeds them; Mamba-2 shapes only)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  FloorsConfig fl;
  std::string floors_out, floors_commit;
  CLI::App* fc = app.add_subcommand(
      "floors", "byte floors of the verify (issue 5) and read-copy (issue 6) speed targets, from "
                "the byte model (no GPU)");
  fc->footer(
      "One line per target point. 'compares': ratio = verify latency / one decode step at h = "
      "L/2 - 1 (lower is better), speedup = the other side's latency / the replay side's (the "
      "snapshot baseline over the verify, or the fp32-read ordinary step over one reading the "
      "copy; higher is better). 'bound': that quantity when both sides move their bytes at the "
      "same bandwidth: a floor of a ratio, a ceiling of a speedup. 'target': the issue's value. "
      "'needs bw': the replay side's bandwidth, as a fraction of the other side's, that the "
      "target asks for (above 100%: out of reach for any kernel). Verify rows of T tokens use "
      "the ring max(L, 4T), as `verify` does. bench/README.md \"Byte floors\" says more.");
  fc->add_option("-L,--L", fl.L, "ring length of the decode and ordinary steps (verify: max(L, 4T))")
      ->check(cli::in_range(5, 64))
      ->capture_default_str();
  fc->add_option("--out", floors_out, "write the rows as JSON here")->check(cli::non_empty());
  fc->add_option("--commit", floors_commit, "commit recorded in the JSON (git rev-parse HEAD)");
  const std::string errs[] = {
      cli::unknown_command(app, argc, argv, "replayssm_bench"),
      cli::empty_list_element(argc, argv,
                              {"--batch", "--shapes", "--L-sweep", "--L-sweep-batch", "--T"})};
  for (const std::string& err : errs)
    if (!err.empty()) {
      std::fprintf(stderr, "replayssm_bench: error: %s (see --help)\n", err.c_str());
      return 2;
    }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "replayssm_bench: error: %s (see --help)\n", e.what());
    return 2;
  }
  // Usage errors and a missing GPU before any output; errors of a run after its progress line.
  try {
    if (fc->parsed()) {
      check_out_path(floors_out);  // (the byte model only: no device)
    } else {
      if (vc->parsed())
        check_verify_usage(v, *vc);
      else
        check_kernels_usage(a);
      require_device();
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "replayssm_bench: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replayssm_bench: error: %s\n", e.what());
    return 1;
  }
  try {
    if (fc->parsed()) return run_floors_cmd(fl, floors_out, floors_commit);
    if (vc->parsed()) return run_verify_cmd(v, *vc);
    return run_kernels(a, *k);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nreplayssm_bench: error: %s\n", e.what());
  }
  return 1;
}
