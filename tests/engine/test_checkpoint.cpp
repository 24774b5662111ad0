// Checkpoint::open on single-file and sharded directories, and the errors for missing or
// inconsistent pieces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "replayssm/engine/checkpoint.h"
#include "replayssm/engine/config.h"

namespace replayssm::engine {
namespace {

namespace fs = std::filesystem;

/// A fresh checkpoint directory per test, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() /
            ("rssm_ck_" + std::string(info->name()) + "_" + std::to_string(getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void text(const std::string& name, const std::string& body) const {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << body;
  }
  void config() const { text("config.json", R"({"model_type": "mamba2", "hidden_size": 8})"); }
  /// A two-shard checkpoint: a, b in shard 1; c in shard 2.
  void shards(const std::string& weight_map) const {
    config();
    write_safetensors(dir_ + "/model-00001-of-00002.safetensors",
                      {{"a", "F32", {2}, {1, 2}}, {"b", "BF16", {1, 2}, {3, 4}}});
    write_safetensors(dir_ + "/model-00002-of-00002.safetensors", {{"c", "F32", {3}, {5, 6, 7}}});
    text("model.safetensors.index.json",
         R"({"metadata": {"total_size": 24}, "weight_map": )" + weight_map + "}");
  }

  std::string dir_;
};

const char* kGoodMap = R"({"a": "model-00001-of-00002.safetensors",
                           "b": "model-00001-of-00002.safetensors",
                           "c": "model-00002-of-00002.safetensors"})";

/// The message of the CheckpointError that Checkpoint::open(dir) raises.
std::string open_error(const std::string& dir) {
  try {
    (void)Checkpoint::open(dir);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no CheckpointError for " << dir;
  return "";
}

void expect_has(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST_F(CheckpointTest, OpensSingleFile) {
  config();
  write_safetensors(dir_ + "/model.safetensors",
                    {{"backbone.norm_f.weight", "F32", {4}, {1, 2, 3, 4}},
                     {"backbone.embeddings.weight", "BF16", {2, 2}, {0.5f, -1, 2, 4}}});
  const Checkpoint ck = Checkpoint::open(dir_);
  EXPECT_EQ(ck.dir(), dir_);
  EXPECT_EQ(ck.config()["model_type"], "mamba2");
  EXPECT_TRUE(ck.has("backbone.norm_f.weight"));
  EXPECT_FALSE(ck.has("lm_head.weight"));
  EXPECT_EQ(ck.names(),
            (std::vector<std::string>{"backbone.embeddings.weight", "backbone.norm_f.weight"}));
  EXPECT_EQ(ck.info("backbone.embeddings.weight").dtype, StDType::kBF16);
  EXPECT_EQ(ck.load("backbone.norm_f.weight", {4}), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ck.load("backbone.embeddings.weight", {2, 2}), (std::vector<float>{0.5f, -1, 2, 4}));
}

TEST_F(CheckpointTest, LoadChecksTheShape) {
  config();
  write_safetensors(dir_ + "/model.safetensors", {{"backbone.norm_f.weight", "F32", {64}, std::vector<float>(64)}});
  const Checkpoint ck = Checkpoint::open(dir_);
  try {
    (void)ck.load("backbone.norm_f.weight", {128});
    ADD_FAILURE() << "shape mismatch accepted";
  } catch (const CheckpointError& e) {
    expect_has(e.what(), {"model.safetensors", "tensor 'backbone.norm_f.weight'", "shape [64]",
                          "expected [128]"});
  }
  EXPECT_THROW((void)ck.load("backbone.norm_f.weight", {64, 1}), CheckpointError);
  EXPECT_THROW((void)ck.load("backbone.norm_f.weight", {}), CheckpointError);
}

TEST_F(CheckpointTest, MissingTensorIsNamed) {
  config();
  write_safetensors(dir_ + "/model.safetensors", {{"x", "F32", {1}, {1}}});
  const Checkpoint ck = Checkpoint::open(dir_);
  for (auto f : {+[](const Checkpoint& c) { (void)c.info("lm_head.weight"); },
                 +[](const Checkpoint& c) { (void)c.load("lm_head.weight", {1}); }}) {
    try {
      f(ck);
      ADD_FAILURE() << "missing tensor found";
    } catch (const CheckpointError& e) {
      expect_has(e.what(), {"missing tensor 'lm_head.weight'"});
    }
  }
}

TEST_F(CheckpointTest, ConfigMissingOrNotJson) {
  write_safetensors(dir_ + "/model.safetensors", {{"x", "F32", {1}, {1}}});
  expect_has(open_error(dir_), {"config.json", "missing"});
  text("config.json", "{\"model_type\": ");
  expect_has(open_error(dir_), {"config.json", "not valid JSON"});
  text("config.json", "[1]");
  expect_has(open_error(dir_), {"config.json", "expected a JSON object"});
  expect_has(open_error(dir_ + "/nonexistent"), {"config.json", "missing"});
}

TEST_F(CheckpointTest, ConfigWithPythonInfinity) {
  // Python's json writes float('inf') as a bare Infinity (HF time_step_limit).
  text("config.json", R"({"model_type": "mamba2", "hidden_size": 64, "num_heads": 2,
      "head_dim": 64, "n_groups": 1, "num_hidden_layers": 2, "vocab_size": 16,
      "time_step_limit": [0.0, Infinity], "note": "Infinity stays a string: NaN"})");
  write_safetensors(dir_ + "/model.safetensors", {{"x", "F32", {1}, {1}}});
  const Checkpoint ck = Checkpoint::open(dir_);
  EXPECT_EQ(ck.config()["note"], "Infinity stays a string: NaN");
  const ModelConfig c = parse_config(ck.config());
  EXPECT_EQ(c.mamba.dt_min_clamp, 0.0);
  EXPECT_TRUE(std::isinf(c.mamba.dt_max_clamp));
}

TEST_F(CheckpointTest, NoWeights) {
  config();
  expect_has(open_error(dir_), {"no model.safetensors", "model.safetensors.index.json"});
}

TEST_F(CheckpointTest, OpensShards) {
  shards(kGoodMap);
  const Checkpoint ck = Checkpoint::open(dir_);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ck.load("a", {2}), (std::vector<float>{1, 2}));
  EXPECT_EQ(ck.load("b", {1, 2}), (std::vector<float>{3, 4}));
  EXPECT_EQ(ck.load("c", {3}), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(ck.info("c").numel(), 3);
}

TEST_F(CheckpointTest, SingleFileWinsOverIndex) {
  shards(kGoodMap);
  write_safetensors(dir_ + "/model.safetensors", {{"only", "F32", {1}, {9}}});
  EXPECT_EQ(Checkpoint::open(dir_).names(), std::vector<std::string>{"only"});
}

TEST_F(CheckpointTest, MissingShard) {
  shards(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
             "c": "model-00002-of-00002.safetensors", "d": "model-00003-of-00003.safetensors"})");
  expect_has(open_error(dir_), {"model.safetensors.index.json", "tensor 'd'",
                                "shard 'model-00003-of-00003.safetensors' is missing"});
}

TEST_F(CheckpointTest, TensorMappedToTheWrongShard) {
  // 'a' lives in shard 1 but the index sends it to shard 2.
  shards(R"({"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
             "c": "model-00002-of-00002.safetensors"})");
  expect_has(open_error(dir_), {"model-00001-of-00002.safetensors", "tensor 'a'",
                                "index maps it to 'model-00002-of-00002.safetensors'"});
}

TEST_F(CheckpointTest, MappedTensorAbsentFromItsShard) {
  shards(R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
             "c": "model-00002-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"})");
  expect_has(open_error(dir_), {"model-00002-of-00002.safetensors", "tensor 'z'", "not in this shard"});
}

TEST_F(CheckpointTest, ShardTensorMissingFromIndex) {
  shards(R"({"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})");
  expect_has(open_error(dir_), {"model-00001-of-00002.safetensors", "tensor 'b'", "not in"});
}

TEST_F(CheckpointTest, BadIndex) {
  shards(R"({"a": 3})");
  expect_has(open_error(dir_), {"tensor 'a'", "expected a file name"});
  shards(R"({"a": "../model-00001-of-00002.safetensors"})");
  expect_has(open_error(dir_), {"tensor 'a'", "not a file name inside"});
  shards("[]");
  expect_has(open_error(dir_), {"weight_map"});
  text("model.safetensors.index.json", "{oops");
  expect_has(open_error(dir_), {"model.safetensors.index.json", "not valid JSON"});
}

TEST_F(CheckpointTest, CorruptShardNamesTheShard) {
  shards(kGoodMap);
  std::ofstream(dir_ + "/model-00002-of-00002.safetensors", std::ios::binary | std::ios::app) << "xx";
  expect_has(open_error(dir_), {"model-00002-of-00002.safetensors", "trailing bytes"});
}

}  // namespace
}  // namespace replayssm::engine
