// Uses the installed headers and libraries: one conventional Mamba-2 step on a 1-slot pool, and
// the engine's config parser and byte tokenizer.
#include <replayssm/engine/config.h>
#include <replayssm/engine/tokenizer.h>
#include <replayssm/mamba2.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace replayssm;
  const int64_t H = 2, P = 4, N = 8, G = 1;
  std::vector<float> A_log(H, 0.5f), dt_bias(H, 0.1f), x(H * P, 0.5f), dt(H, -1.0f),
      B(G * N, 0.25f), C(G * N, 0.5f), state(H * P * N, 0.0f), y(H * P, -1.0f);
  std::vector<int32_t> ids = {0};
  mamba2::Layer layer{{H, P, N, G}, make_view(A_log.data(), DType::kF32, {H}),
                      make_view(dt_bias.data(), DType::kF32, {H}), {}, true};
  mamba2::Cache cache{make_view(state.data(), DType::kF32, {1, H, P, N}), {}, {}, {}};
  mamba2::Tokens in{make_view(x.data(), DType::kF32, {1, H, P}), make_view(dt.data(), DType::kF32, {1, H}),
                    make_view(B.data(), DType::kF32, {1, G, N}), make_view(C.data(), DType::kF32, {1, G, N}), {}};
  Rows rows{make_view(ids.data(), DType::kI32, {1})};
  mamba2::conventional_step(layer, cache, in, rows, make_view(y.data(), DType::kF32, {1, H, P}));
  // From a zero state: y = delta * x * (B.C) with delta = softplus(-0.9) > 0.
  std::printf("consumer: y[0] = %g\n", y[0]);
  const auto cfg = engine::parse_config(nlohmann::json::parse(
      R"({"model_type": "mamba2", "num_heads": 4, "head_dim": 16, "hidden_size": 32,
          "state_size": 16, "n_groups": 1, "num_hidden_layers": 2, "vocab_size": 256})"));
  const bool engine_ok = cfg.num_layers == 2 && engine::byte_decode(engine::byte_encode("ok")) == "ok";
  std::printf("consumer: engine parsed %lld layers\n", static_cast<long long>(cfg.num_layers));
  return y[0] > 0.0f && engine_ok ? 0 : 1;
}
