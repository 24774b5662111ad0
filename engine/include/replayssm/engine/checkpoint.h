// A Hugging Face checkpoint directory as published: config.json plus model.safetensors, or
// sharded *.safetensors listed in model.safetensors.index.json ({"weight_map": {name: file}}).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replayssm/engine/safetensors.h"

namespace replayssm::engine {

class Checkpoint {
 public:
  /// Opens dir/config.json and the weights. Throws CheckpointError if config.json is missing or
  /// not JSON, if neither model.safetensors nor model.safetensors.index.json exists, if the index
  /// names a missing file, or if a shard lists a tensor the index maps to another shard.
  /// model.safetensors wins when both it and an index exist (as in transformers). Every shard
  /// is validated by SafetensorsFile; the index and the shards must agree exactly: each mapped
  /// tensor is in its shard, and each tensor stored in a shard is mapped to that shard.
  /// config.json may carry Python's bare Infinity / -Infinity / NaN (json.dumps writes them,
  /// e.g. time_step_limit [0.0, Infinity]); they are kept as the strings "Infinity",
  /// "-Infinity", "NaN", which parse_config reads as numbers.
  static Checkpoint open(const std::string& dir);

  /// A synthetic checkpoint for timing (`replayssm bench e2e --random-weights`): `config` as
  /// config.json, and every tensor a loader asks for exists with the shape it asks for, filled
  /// with reproducible pseudo-random values of a trained model's scale (random_weights.cpp:
  /// linear and embedding weights uniform with std 1/sqrt(fan-in), norms near their identity,
  /// A_log, dt_bias and D in the ranges published Mamba-2 / GDN layers use). The values are a
  /// function of (seed, tensor name, index) only. dir() is "random-weights:<label>".
  /// Decode timing does not depend on the values; the model's outputs are meaningless.
  static Checkpoint random(const nlohmann::json& config, uint64_t seed, const std::string& label);

  /// The directory as given to open().
  const std::string& dir() const { return dir_; }
  /// config.json, parsed (see open() for non-finite numbers).
  const nlohmann::json& config() const { return config_; }
  /// Whether any file of the checkpoint holds tensor `name` (a random() checkpoint holds every
  /// tensor a loader asks for, MoE experts one by one: random_weights.h random_has).
  bool has(const std::string& name) const;
  /// Header entry of a tensor; CheckpointError "missing tensor 'name'" if absent (and for every
  /// name of a random() checkpoint, which has no files).
  const StTensor& info(const std::string& name) const;
  /// The tensor as float32 after checking its shape equals `shape` (CheckpointError naming the
  /// tensor, the actual and the expected shape otherwise).
  std::vector<float> load(const std::string& name, const std::vector<int64_t>& shape) const;
  /// All tensor names across shards, sorted (empty for a random() checkpoint).
  std::vector<std::string> names() const;

 private:
  const SafetensorsFile& file_of(const std::string& name) const;
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
  bool random_ = false;                  // random(): tensors made on demand
  uint64_t seed_ = 0;
};

}  // namespace replayssm::engine
