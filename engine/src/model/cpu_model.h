// The float32 CPU implementation of Model (BLAS GEMMs, library SSM ops on host tensors).
#pragma once
#include <vector>

#include "cpu/ops.h"
#include "model/mixer.h"
#include "replayssm/engine/model.h"

namespace replayssm::engine {

class CpuModel final : public Model {
 public:
  CpuModel(const std::string& dir, const ModelOptions& options);
  const ModelConfig& config() const override { return cfg_; }
  const ModelOptions& options() const override { return opt_; }
  void reset(std::span<const int32_t> slots) override;
  void step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
            std::span<float> logits) override;
  int64_t position(int32_t slot) const override { return position_.at(slot); }

 private:
  struct Sublayer {
    std::vector<float> norm;
    std::unique_ptr<Mixer> mixer;
  };

  ModelConfig cfg_;
  ModelOptions opt_;
  SsmShared ssm_;
  std::vector<int32_t> cur_origin_, cur_h_;
  std::vector<int8_t> cur_flush_;
  std::vector<int64_t> position_;
  std::vector<float> embed_, final_norm_;
  cpu::Linear lm_head_;
  std::vector<Sublayer> sub_;
  std::vector<int32_t> slot_buf_, accepted_;
  std::vector<int64_t> pos_buf_;
  std::vector<float> hidden_, normed_, delta_;
};

}  // namespace replayssm::engine
