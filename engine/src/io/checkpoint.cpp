// Opening a Hugging Face checkpoint directory: config.json plus one safetensors file or a sharded
// set listed in model.safetensors.index.json.
#include "replayssm/engine/checkpoint.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "io/random_weights.h"

namespace replayssm::engine {
namespace {

using json = nlohmann::json;

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

/// Python's json module writes float('inf') / float('nan') as the bare words Infinity,
/// -Infinity and NaN (Hugging Face configs do, e.g. time_step_limit [0.0, Infinity]); strict
/// JSON parsers reject them. This turns each such word outside a string into a JSON string
/// ("Infinity", "-Infinity", "NaN"), which parse_config reads back as the number.
std::string quote_nonfinite_words(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[i + 1];
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      ++i;
      continue;
    }
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const size_t len = std::strlen(word);
      if (text.compare(i, len, word) == 0) {
        out += '"';
        out += word;
        out += '"';
        i += len;
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      out += c;
      ++i;
    }
  }
  return out;
}

/// Reads and parses a JSON file; CheckpointError naming the file if it is missing or invalid.
json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!is_file(path) || !f) throw CheckpointError(path + ": missing or not a readable file");
  std::stringstream ss;
  ss << f.rdbuf();
  json j;
  try {
    j = json::parse(quote_nonfinite_words(ss.str()));
  } catch (const json::exception& e) {
    throw CheckpointError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw CheckpointError(path + ": expected a JSON object, got " + j.type_name());
  return j;
}

/// A shard file name from the index must name a file inside the directory.
bool plain_relative(const std::string& f) {
  if (f.empty() || f[0] == '/') return false;
  std::stringstream ss(f);
  std::string part;
  while (std::getline(ss, part, '/'))
    if (part == "..") return false;
  return true;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint ck;
  ck.dir_ = dir;
  ck.config_ = read_json(dir + "/config.json");

  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (is_file(single)) {
    ck.files_.push_back(std::make_shared<SafetensorsFile>(single));
    for (const auto& [name, t] : ck.files_[0]->tensors()) ck.where_[name] = 0;
    return ck;
  }
  if (!is_file(index_path))
    throw CheckpointError(dir + ": no model.safetensors and no model.safetensors.index.json");

  const json index = read_json(index_path);
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    throw CheckpointError(index_path + ": 'weight_map' is missing or not an object");
  std::map<std::string, std::vector<std::string>> by_file;  // shard -> tensor names
  std::map<std::string, std::string> shard_of;              // tensor name -> shard
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string())
      throw CheckpointError(index_path + ": tensor '" + name + "': weight_map value is " +
                            file.dump() + ", expected a file name");
    const std::string f = file.get<std::string>();
    if (!plain_relative(f))
      throw CheckpointError(index_path + ": tensor '" + name + "': shard '" + f +
                            "' is not a file name inside " + dir);
    by_file[f].push_back(name);
    shard_of[name] = f;
  }
  for (const auto& [file, names] : by_file) {
    const std::string path = dir + "/" + file;
    if (!is_file(path))
      throw CheckpointError(index_path + ": tensor '" + names.front() + "': shard '" + file +
                            "' is missing (" + path + " not found)");
    auto st = std::make_shared<SafetensorsFile>(path);
    for (const auto& name : names)
      if (!st->has(name))
        throw CheckpointError(path + ": tensor '" + name +
                              "': not in this shard, but the index maps it here");
    for (const auto& [name, t] : st->tensors()) {
      auto it = shard_of.find(name);
      if (it == shard_of.end())
        throw CheckpointError(path + ": tensor '" + name + "': in this shard but not in " +
                              index_path + " (expected every stored tensor in the weight_map)");
      if (it->second != file)
        throw CheckpointError(path + ": tensor '" + name + "': in this shard, but the index maps it to '" +
                              it->second + "'");
    }
    const size_t k = ck.files_.size();
    ck.files_.push_back(std::move(st));
    for (const auto& name : names) ck.where_[name] = k;
  }
  return ck;
}

Checkpoint Checkpoint::random(const nlohmann::json& config, uint64_t seed,
                              const std::string& label) {
  Checkpoint ck;
  ck.dir_ = "random-weights:" + label;
  ck.config_ = config;
  ck.random_ = true;
  ck.seed_ = seed;
  return ck;
}

bool Checkpoint::has(const std::string& name) const {
  return random_ ? random_has(name) : where_.count(name) != 0;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw CheckpointError(dir_ + ": missing tensor '" + name + "'");
  return *files_[it->second];
}

const StTensor& Checkpoint::info(const std::string& name) const { return file_of(name).info(name); }

std::vector<float> Checkpoint::load(const std::string& name, const std::vector<int64_t>& shape) const {
  if (random_) {
    // Qwen configs (model_type qwen3_next, qwen3_5*, or a VLM wrapper) scale RMSNorms by (1 + w).
    const std::string type = config_.value("model_type", std::string());
    return random_tensor(name, shape, seed_, type.rfind("qwen", 0) == 0);
  }
  const SafetensorsFile& f = file_of(name);
  const StTensor& t = f.info(name);
  if (t.shape != shape)
    throw CheckpointError(f.path() + ": tensor '" + name + "': shape " + shape_str(t.shape) +
                          ", expected " + shape_str(shape));
  return f.to_float32(name);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, k] : where_) out.push_back(name);
  return out;
}

}  // namespace replayssm::engine
