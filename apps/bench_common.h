// What the whole-model benchmarks (bench e2e, bench spec) share: where the model comes from
// (--arch NAME --random-weights, --model DIR [--random-weights]) and how timings are summarised.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"
#include "replayssm/errors.h"

namespace replayssm::cli {

/// The model a benchmark builds.
struct BenchSource {
  nlohmann::json config;           ///< config.json
  engine::ModelConfig cfg;         ///< parsed
  engine::Checkpoint ck;           ///< Checkpoint::random or the directory's
  std::string label;               ///< the --arch name or the directory's name
  std::string weights;             ///< "random" or the directory
};

/// Resolves --arch / --model / --random-weights. ConfigError (one line) for neither or both of
/// arch and model, --arch without --random-weights, an unknown arch; checkpoint errors as
/// Checkpoint::open.
BenchSource bench_source(const std::string& arch, const std::string& model, bool random_weights,
                         uint64_t seed, const char* command);

/// "mamba2", "gdn", "mamba2+gdn" or "none": the kinds of SSM layers of a model.
std::string ssm_family(const engine::ModelConfig& cfg);

/// The host's available memory in bytes (/proc/meminfo MemAvailable), or 0 where unknown.
double host_available_bytes();

/// On the CPU, ConfigError (one line) when a model of `cfg` with per-slot memory `per_slot` for
/// `slots` slots would not fit the host's available memory (/proc/meminfo MemAvailable): the CPU
/// engine holds the weights as float32 (memory.h parameter_count) and its KV cache as float32.
/// No check where MemAvailable cannot be read. `cuda_runs`: the command can run on CUDA (the
/// message then suggests --device cuda).
void check_host_memory(const engine::ModelConfig& cfg, int64_t per_slot, int64_t kv_per_slot,
                       int64_t slots, const char* command, bool cuda_runs);

/// Sorts `values` and raises ConfigError "<option>: <v> given twice" for a repeated value.
template <class T>
void sort_unique_or_throw(std::vector<T>& values, const char* option) {
  std::sort(values.begin(), values.end());
  for (size_t i = 1; i < values.size(); ++i)
    check<ConfigError>(values[i] != values[i - 1], option, ": ", values[i], " given twice");
}

/// Percentile q in [0, 1] of the samples (linear interpolation between order statistics).
double percentile(std::vector<double> v, double q);

}  // namespace replayssm::cli
