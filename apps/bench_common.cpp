#include "bench_common.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>

#include "replayssm/engine/memory.h"
#include "replayssm/engine/published.h"
#include "replayssm/errors.h"

namespace replayssm::cli {

BenchSource bench_source(const std::string& arch, const std::string& model, bool random_weights,
                         uint64_t seed, const char* command) {
  check<ConfigError>(arch.empty() != model.empty(), command,
                     ": give exactly one of --arch NAME and --model DIR");
  check<ConfigError>(arch.empty() || random_weights, command,
                     " --arch builds a published architecture without its weights: add "
                     "--random-weights (decode timing does not depend on the values), or give "
                     "--model DIR");
  if (!arch.empty()) {
    nlohmann::json config = engine::published_config(arch);
    engine::ModelConfig cfg = engine::parse_config(config);
    engine::Checkpoint ck = engine::Checkpoint::random(config, seed, arch);
    return BenchSource{std::move(config), std::move(cfg), std::move(ck), arch, "random"};
  }
  std::filesystem::path p(model);
  if (!p.has_filename()) p = p.parent_path();
  const std::string label = p.filename().string();
  engine::Checkpoint ck = engine::Checkpoint::open(model);
  nlohmann::json config = ck.config();
  engine::ModelConfig cfg = engine::parse_config(config);
  if (random_weights) ck = engine::Checkpoint::random(config, seed, label);
  return BenchSource{std::move(config), std::move(cfg), std::move(ck), label,
                     random_weights ? "random" : model};
}

std::string ssm_family(const engine::ModelConfig& cfg) {
  bool m = false, g = false;
  for (const engine::BlockKind k : cfg.layers) {
    m = m || k == engine::BlockKind::kMamba2;
    g = g || k == engine::BlockKind::kGdn;
  }
  return m && g ? "mamba2+gdn" : m ? "mamba2" : g ? "gdn" : "none";
}

double host_available_bytes() {
  std::ifstream f("/proc/meminfo");
  double available = 0;
  for (std::string key; f >> key;) {
    double kib = 0;
    f >> kib;
    if (key == "MemAvailable:") available = kib * 1024.0;
    f.ignore(64, '\n');
  }
  return available;
}

void check_host_memory(const engine::ModelConfig& cfg, int64_t per_slot, int64_t kv_per_slot,
                       int64_t slots, const char* command, bool cuda_runs) {
  const double available = host_available_bytes();
  if (available <= 0) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double weights = 4.0 * static_cast<double>(engine::parameter_count(cfg));
  // The CPU KV cache is float32: twice the bf16 bytes sequence_bytes counts.
  const double state = static_cast<double>(slots) * static_cast<double>(per_slot + kv_per_slot);
  check<ConfigError>(weights + state < 0.9 * available, command, ": the CPU engine would need ~",
                     fmt::format("{:.1f}", (weights + state) / gib), " GiB (",
                     fmt::format("{:.2g}", weights / 4.0), " float32 parameters + ",
                     fmt::format("{:.1f}", state / gib), " GiB for ", slots,
                     " sequences), this machine has ", fmt::format("{:.1f}", available / gib),
                     " GiB available: use ", cuda_runs ? "--device cuda, " : "",
                     "fewer or shorter sequences (--batch, --context) or a smaller model");
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace replayssm::cli
