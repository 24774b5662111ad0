// The config.json of published checkpoints whose exact layer structure and sizes the end-to-end
// benchmark builds with random weights (`replayssm bench e2e --arch NAME --random-weights`).
// Values: reference models.md §1 (each section names its sources).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace replayssm::engine {

/// The names published_config() knows: "nemotron-3-nano-4b" (nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16:
/// 21 Mamba-2, 4 attention, 17 MLP layers, hidden 3136) and "qwen3.5-4b" (Qwen/Qwen3.5-4B text
/// model: 24 Gated DeltaNet and 8 gated-attention layers, each with a SwiGLU MLP, hidden 2560).
std::vector<std::string> published_config_names();

/// The config.json (as parse_config reads it) of a published checkpoint. ConfigError naming the
/// known names for any other name.
nlohmann::json published_config(const std::string& name);

}  // namespace replayssm::engine
