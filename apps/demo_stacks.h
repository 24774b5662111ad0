// Layer stacks for the demo: each holds per-layer parameters and two copies of the decode state
// (conventional state, and ReplaySSM checkpoint + ring), decodes every step both ways on the same
// inputs and feeds each layer's RMS-normalised output to the next layer.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "replayssm/gdn.h"
#include "replayssm/mamba2.h"

namespace replayssm::cli {

struct DemoOptions {
  int batch = 8;
  int layers = 4;
  int steps = 512;
  int L = 16;
  uint64_t seed = 1;
  std::string shape = "small";
  std::string backend = "auto";
};

/// The layer sizes of each stack for --shape small / real.
mamba2::Dims mamba2_dims(const DemoOptions& o);
gdn::Dims gdn_dims(const DemoOptions& o, bool kda);

/// Per-sequence ring cursors shared by all layers of a stack, and the slot ids of the batch.
struct SharedCursors {
  std::vector<int32_t> origin, h, slot_ids, accepted;
  std::vector<int8_t> is_flush;
  RingCursors cursors;
  Rows rows;
  SharedCursors(int batch, int L);
  long flushing_rows() const;
  void commit_all();
};

class Mamba2Stack {
 public:
  explicit Mamba2Stack(const DemoOptions& o);
  std::string describe() const;
  void draw_inputs();
  void step_conventional();
  long step_replay();  ///< returns the number of rows that flushed this step
  double output_rel_err() const;

 private:
  struct LayerData {
    std::vector<float> A_log, dt_bias, D, dt, B, C, state, ckpt, ring_x, ring_dt, ring_B;
  };
  void run(bool replay);
  DemoOptions o_;
  mamba2::Dims d_;
  std::vector<LayerData> layers_;
  std::vector<float> x0_, x_, y_conv_, y_replay_;
  SharedCursors cur_;
  std::mt19937_64 rng_;
};

class GdnStack {
 public:
  GdnStack(const DemoOptions& o, bool kda);
  std::string describe() const;
  void draw_inputs();
  void step_conventional();
  long step_replay();
  double output_rel_err() const;

 private:
  struct LayerData {
    std::vector<float> A_log, dt_bias, q, k, a, b, state, ckpt, ring_u, ring_k, ring_g;
  };
  void run(bool replay);
  DemoOptions o_;
  gdn::Dims d_;
  std::vector<LayerData> layers_;
  std::vector<float> v0_, v_, y_conv_, y_replay_;
  SharedCursors cur_;
  std::mt19937_64 rng_;
};

}  // namespace replayssm::cli
