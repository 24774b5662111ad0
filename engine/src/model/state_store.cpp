#include "model/state_store.h"

#include "replayssm/engine/errors.h"

namespace replayssm::engine {

StateMode engine_state_mode(const std::string& name) {
  if (name == "fp32" || name == "bf16" || name == "fp16") return StateMode{};
  try {
    return parse_state_mode(name);
  } catch (const ConfigError& e) {  // the engine also takes the 16-bit checkpoint names
    throw ConfigError(std::string(e.what()) + ", or bf16 / fp16 (16-bit checkpoints, CUDA)");
  }
}

namespace {
DType values_dtype(StateFormat f) {
  switch (f) {
    case StateFormat::kFp32: return DType::kF32;
    case StateFormat::kBf16: return DType::kBF16;
    case StateFormat::kFp16: case StateFormat::kFp16Sr: return DType::kF16;
    case StateFormat::kFp8: case StateFormat::kNvfp4: return DType::kU8;
  }
  return DType::kF32;
}
}  // namespace

void FormatStore::allocate(StateFormat f, int64_t slots, int64_t heads, int64_t rows, int64_t n) {
  f_ = f, slots_ = slots, heads_ = heads, rows_ = rows, n_ = n;
  const int64_t m = slots * heads * rows * n;
  const int64_t bytes = f == StateFormat::kNvfp4 ? m / 2 : m * int64_t(dtype_size(values_dtype(f)));
  values_.assign((bytes + 7) / 8, 0);  // zero = a reset state in every format (scales 0 too)
  if (f == StateFormat::kFp8) row_scales_.assign(slots * heads * rows, 0.0f);
  if (f == StateFormat::kNvfp4) {
    check<ConfigError>(n % 16 == 0, "state format nvfp4 needs a state width that is a multiple "
                       "of 16 (blocks of 16 along it); this layer's is ", n);
    blocks_.assign(m / 16, 0);
    global_.assign(slots * heads, 0.0f);
  }
}

StateBuffer FormatStore::buffer() {
  StateBuffer b;
  const int64_t nv = f_ == StateFormat::kNvfp4 ? n_ / 2 : n_;
  b.values = make_view(values_.data(), values_dtype(f_), {slots_, heads_, rows_, nv});
  if (f_ == StateFormat::kFp8)
    b.scales.rows = make_view(row_scales_.data(), DType::kF32, {slots_, heads_, rows_});
  if (f_ == StateFormat::kNvfp4) {
    b.scales.blocks = make_view(blocks_.data(), DType::kU8, {slots_, heads_, rows_, n_ / 16});
    b.scales.global = make_view(global_.data(), DType::kF32, {slots_, heads_});
  }
  return b;
}

int64_t sr_seed(int64_t layer, int64_t slot) {
  uint64_t z = 0x5eed5eed12345678ull ^ (uint64_t(layer) << 32) ^ uint64_t(slot);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return int64_t(z ^ (z >> 31));
}

void ModeStore::allocate(const StateMode& m, int64_t slots, int64_t heads, int64_t rows, int64_t n,
                         int64_t layer) {
  mode = m;
  if (m.is_default()) return;
  state.allocate(m.state_format(), slots, heads, rows, n);
  if (m.has_read_copy()) read.allocate(m.read, slots, heads, rows, n);
  if (m.uses_sr()) {
    seeds.resize(slots);
    for (int64_t s = 0; s < slots; ++s) seeds[s] = sr_seed(layer, s);
    steps.assign(slots, 0);
  }
}

SrKeys ModeStore::sr() {
  if (!mode.uses_sr()) return {};
  const int64_t S = int64_t(seeds.size());
  return SrKeys{make_view(seeds.data(), DType::kI64, {S}), make_view(steps.data(), DType::kI32, {S})};
}

}  // namespace replayssm::engine
