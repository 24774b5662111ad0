// The float32 CPU implementation of Model (BLAS GEMMs, library SSM ops on host tensors).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "cpu/ops.h"
#include "model/mixer.h"
#include "replayssm/engine/model.h"

namespace replayssm::engine {

class CpuModel final : public Model {
 public:
  CpuModel(const Checkpoint& ck, const ModelOptions& options);
  const ModelConfig& config() const override { return cfg_; }
  const ModelOptions& options() const override { return opt_; }
  void reset(std::span<const int32_t> slots) override;
  void step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
            std::span<float> logits) override;
  int64_t position(int32_t slot) const override { return position_.at(slot); }
  void verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
              std::span<const int32_t> slots, std::span<float> logits) override;
  void accept(std::span<const int32_t> accepted) override;
  void skip_to_position(std::span<const int32_t> slots, int64_t n) override;
  StepTiming time_steps(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                        int32_t steps, bool profile) override;
  StepTiming time_verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                         std::span<const int32_t> slots,
                         std::span<const std::vector<int32_t>> accepted,
                         bool profile) override;

 private:
  /// Fills batch_ for rows feeding ntok_ tokens (pad rows: slot -1, 0 tokens).
  void make_batch(std::span<const int32_t> slots, bool speculative);
  /// Embeds the packed tokens, runs every sub-layer and the head: logits [batch_.tokens, vocab].
  /// kind_ms (profiling): adds each part's host time (StepTiming::kind_ms keys).
  void forward(std::span<const int32_t> tokens, std::span<float> logits,
               std::map<std::string, double>* kind_ms = nullptr);
  /// One token per row (checked by the caller): forward, commit the rings, advance positions.
  void decode_step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                   std::span<float> logits, std::map<std::string, double>* kind_ms);

  struct Sublayer {
    BlockKind kind = BlockKind::kMlp;
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
  std::vector<int32_t> slot_buf_, ntok_, accepted_, commit_ids_;
  std::vector<int64_t> pos_buf_, off_;
  Batch batch_;
  bool pending_ = false;  ///< a verify() awaits accept()
  std::vector<float> hidden_, normed_, delta_;
};

}  // namespace replayssm::engine
