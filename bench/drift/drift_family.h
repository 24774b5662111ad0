// One family of the drift study (bench/drift/drift_study.cpp): a one-slot pool of `heads` heads
// per state mode plus the fp32 reference (the conventional float32 step: the fp32 recurrence),
// all fed the same token stream. Every mode runs through the public API of the CPU backend:
// split modes and fp32/fp32 through replay_step (ring length L, decode mode), shared baselines
// through conventional_step.
//
// Inputs are drawn to look like a trained model's (documented per family in drift_family.cpp):
// decays spread over (0, 1) across heads and tokens, unit-norm keys (GDN/KDA normalise k), and
// the parameter initialisations of the published models (A in [1, 16], dt in [1e-3, 1e-1]).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "replayssm/precision.h"

namespace replayssm::drift {

enum class Family { kMamba2, kGdn, kKda };
const char* family_name(Family f);

class FamilyRun {
 public:
  virtual ~FamilyRun() = default;
  /// Feeds one token to the reference and every mode; accumulates the output errors.
  virtual void step() = 0;
  /// ||S_mode - S_ref||_F / ||S_ref||_F of mode m's state (split modes: the checkpoint, exact
  /// right after a flush).
  virtual double state_rel_error(size_t m) const = 0;
  /// sqrt(sum ||y_mode - y_ref||^2 / sum ||y_ref||^2) over the steps since the last call, per mode;
  /// resets the window.
  std::vector<double> take_output_errors();
  const std::vector<StateMode>& modes() const { return modes_; }
  /// "nano-4b", "qwen3.5-4b", "kimi-linear": the per-head shape the study runs.
  virtual std::string shape() const = 0;

 protected:
  std::vector<StateMode> modes_;
  std::vector<double> num_;  // per mode: sum ||y - y_ref||^2 in the window
  double den_ = 0;           // sum ||y_ref||^2 in the window
  void add_output(size_t m, const float* y, const float* y_ref, int64_t n);
  void add_reference(const float* y_ref, int64_t n);
};

/// A run of `heads` heads at the family's real per-head shape, ring length L, input seed.
std::unique_ptr<FamilyRun> make_run(Family f, const std::vector<StateMode>& modes, int64_t heads,
                                    int L, uint64_t seed);

}  // namespace replayssm::drift
