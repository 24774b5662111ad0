// State mode names, parsing, byte counts, and the typed errors of ops given a mode they cannot
// run (precision.h): the CUDA backend rejects every mode but fp32/fp32 by name, split modes do not
// run the conventional step, shared baselines do not replay, missing mode buffers are named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "replayssm/gdn.h"
#include "replayssm/mamba2.h"
#include "replayssm/precision.h"

namespace replayssm {
namespace {

/// The error message of f(), or "" when it does not throw E.
template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(StateModes, NamesRoundTripAndBadNamesAreNamed) {
  const std::vector<std::string> names = {"fp32/fp32",     "fp32/bf16",    "fp32/fp16",    "fp16sr/fp16sr",
                                          "fp32/nvfp4",    "fp16sr/nvfp4", "fp8/nvfp4",    "fp32/fp8",
                                          "shared-fp16",   "shared-bf16",  "shared-fp8",   "shared-nvfp4"};
  ASSERT_EQ(state_modes().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(state_modes()[i].name(), names[i]);
    EXPECT_EQ(parse_state_mode(names[i]), state_modes()[i]);
  }
  EXPECT_TRUE(parse_state_mode("fp32").is_default());
  EXPECT_TRUE(StateMode{}.is_default());
  for (const char* bad : {"fp8/fp8", "nvfp4", "fp32/", "shared-fp32", "FP32/NVFP4", ""}) {
    const std::string m = message_of<ConfigError>([&] { parse_state_mode(bad); });
    EXPECT_NE(m.find(std::string("'") + bad + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("fp32/nvfp4"), std::string::npos) << m;  // lists the valid names
  }
  const StateMode s = parse_state_mode("fp16sr/fp16sr");
  EXPECT_TRUE(s.is_split() && s.uses_sr() && !s.has_read_copy());
  EXPECT_TRUE(parse_state_mode("fp8/nvfp4").has_read_copy());
  EXPECT_FALSE(parse_state_mode("shared-nvfp4").is_split());
}

TEST(StateModes, BytesPerSequencePerLayer) {
  // Nemotron-3-Nano-4B Mamba-2 layer: H 96, P 80, N 128 -> 983040 elements.
  const mamba2::Dims nano{96, 80, 128, 8};
  const int64_t e = 96 * 80 * 128;
  EXPECT_EQ(mamba2::state_bytes(nano, parse_state_mode("fp32/fp32")).total(), 4 * e);
  EXPECT_EQ(mamba2::state_bytes(nano, parse_state_mode("fp32/bf16")).total(), 6 * e);
  EXPECT_EQ(mamba2::state_bytes(nano, parse_state_mode("fp16sr/fp16sr")).total(), 2 * e + 12);
  const StateBytes nv = mamba2::state_bytes(nano, parse_state_mode("fp32/nvfp4"));
  EXPECT_EQ(nv.checkpoint, 4 * e);
  EXPECT_EQ(nv.read_copy, e / 2 + e / 16 + 4 * 96);  // 0.5625 B/element + one scale per head
  EXPECT_EQ(mamba2::state_bytes(nano, parse_state_mode("fp8/nvfp4")).checkpoint, e + 4 * 96 * 80);
  EXPECT_EQ(mamba2::state_bytes(nano, parse_state_mode("shared-nvfp4")).total(), e / 2 + e / 16 + 4 * 96);
  // Qwen3.5-4B GDN layer: HV 32, V = K = 128.
  const gdn::Dims qwen{16, 32, 128, 128, gdn::Gate::kScalar};
  EXPECT_EQ(gdn::state_bytes(qwen, parse_state_mode("fp32/fp8")).read_copy, 32 * 128 * 128 + 4 * 32 * 128);
}

/// A fake CUDA view: the API must reject the mode before it reads any device memory.
TensorView cuda_view(DType t, std::initializer_list<int64_t> shape) {
  static float dummy[4];
  return make_view(dummy, t, shape, Device::kCUDA);
}

// On CUDA every mode but fp32/fp32 is rejected by name, except the split modes the CUDA group
// kernels run (replay and reset: fp32/bf16, fp32/fp16, fp32/fp8, fp32/nvfp4, Mamba-2 and GDN
// alike), which go on to check their buffers.
TEST(StateModes, CudaRejectsModesWithoutKernelsByName) {
  mamba2::Layer ml;
  ml.dims = {2, 4, 16, 1};
  ml.A_log = cuda_view(DType::kF32, {2});
  ml.dt_bias = cuda_view(DType::kF32, {2});
  mamba2::Cache mc{cuda_view(DType::kF32, {3, 2, 4, 16}), cuda_view(DType::kF32, {3, 2, 4, 4}),
                   cuda_view(DType::kF32, {3, 2, 4}), cuda_view(DType::kF32, {3, 1, 4, 16})};
  const mamba2::Tokens mt{cuda_view(DType::kF32, {1, 2, 4}), cuda_view(DType::kF32, {1, 2}),
                          cuda_view(DType::kF32, {1, 1, 16}), cuda_view(DType::kF32, {1, 1, 16}), {}};
  const Rows rows{cuda_view(DType::kI32, {1}), -1};
  const RingCursors cur{cuda_view(DType::kI32, {3}), cuda_view(DType::kI32, {3}), cuda_view(DType::kI8, {3}),
                        RingConfig{4, 1, RingMode::kDecode}};
  gdn::Layer gl;
  gl.dims = {1, 2, 16, 4, gdn::Gate::kScalar};
  gl.A_log = cuda_view(DType::kF32, {2});
  gl.dt_bias = cuda_view(DType::kF32, {2});
  gdn::Cache gc{cuda_view(DType::kF32, {3, 2, 4, 16}), cuda_view(DType::kF32, {3, 2, 4, 4}),
                cuda_view(DType::kF32, {3, 1, 4, 16}), cuda_view(DType::kF32, {3, 2, 4})};
  const gdn::Tokens gt{cuda_view(DType::kF32, {1, 1, 16}), cuda_view(DType::kF32, {1, 1, 16}),
                       cuda_view(DType::kF32, {1, 2, 4}), cuda_view(DType::kF32, {1, 2}),
                       cuda_view(DType::kF32, {1, 2})};
  for (const StateMode& m : state_modes()) {
    if (m.is_default()) continue;
    mc.mode = gc.mode = m;
    std::string name = "'";  // appended, not concatenated: GCC 12's -Wrestrict misfires there
    name += m.name();
    name += '\'';
    // fp16sr/fp16sr and fp16sr/nvfp4: a float16 checkpoint
    const bool sr16 = m.is_split() && m.recurrence == StateFormat::kFp16Sr &&
                      (m.read == StateFormat::kFp16Sr || m.read == StateFormat::kNvfp4);
    const bool on_cuda = (m.is_split() && m.recurrence == StateFormat::kFp32) || sr16;
    // Runs on CUDA: a missing buffer of the mode is what is reported (the fp16sr modes: the
    // float32 state given where their float16 checkpoint belongs).
    auto buffer_error = [&](auto&& f) {
      return sr16 ? message_of<DTypeError>(f) : message_of<ShapeError>(f);
    };
    std::vector<std::string> missing, rejected = {
        message_of<UnsupportedError>([&] { mamba2::conventional_step(ml, mc, mt, rows, cuda_view(DType::kF32, {1, 2, 4})); }),
        message_of<UnsupportedError>([&] { gdn::conventional_step(gl, gc, gt, rows, cuda_view(DType::kF32, {1, 2, 4})); })};
    if (on_cuda) {
      missing.push_back(buffer_error([&] { mamba2::replay_step(ml, mc, cur, mt, rows, cuda_view(DType::kF32, {1, 2, 4})); }));
      missing.push_back(buffer_error([&] { mamba2::reset_slots(mc, rows); }));
    } else {
      rejected.push_back(message_of<UnsupportedError>([&] { mamba2::replay_step(ml, mc, cur, mt, rows, cuda_view(DType::kF32, {1, 2, 4})); }));
      rejected.push_back(message_of<UnsupportedError>([&] { mamba2::reset_slots(mc, rows); }));
    }
    if (on_cuda) {  // GDN alike
      missing.push_back(buffer_error([&] { gdn::replay_step(gl, gc, cur, gt, rows, cuda_view(DType::kF32, {1, 2, 4})); }));
      missing.push_back(buffer_error([&] { gdn::reset_slots(gc, rows); }));
    } else {
      rejected.push_back(message_of<UnsupportedError>([&] { gdn::replay_step(gl, gc, cur, gt, rows, cuda_view(DType::kF32, {1, 2, 4})); }));
      rejected.push_back(message_of<UnsupportedError>([&] { gdn::reset_slots(gc, rows); }));
    }
    for (const std::string& msg : missing)
      EXPECT_NE(msg.find(sr16 ? "state (fp16sr): dtype float32, expected float16" : "missing"),
                std::string::npos)
          << m.name() << ": '" << msg << "'";
    for (const std::string& msg : rejected) {
      EXPECT_NE(msg.find(name), std::string::npos) << m.name() << ": '" << msg << "'";
      EXPECT_NE(msg.find("CUDA"), std::string::npos) << msg;
    }
  }
}

TEST(StateModes, OpsRejectModesTheyDoNotRunAndMissingBuffers) {
  std::vector<float> buf(4096, 0.0f);
  std::vector<int32_t> ids{0};
  auto v = [&](DType t, std::initializer_list<int64_t> shape) { return make_view(buf.data(), t, shape); };
  mamba2::Layer ml;
  ml.dims = {2, 4, 16, 1};
  ml.A_log = v(DType::kF32, {2});
  ml.dt_bias = v(DType::kF32, {2});
  mamba2::Cache mc{v(DType::kF32, {3, 2, 4, 16}), v(DType::kF32, {3, 2, 4, 4}), v(DType::kF32, {3, 2, 4}),
                   v(DType::kF32, {3, 1, 4, 16})};
  const mamba2::Tokens mt{v(DType::kF32, {1, 2, 4}), v(DType::kF32, {1, 2}), v(DType::kF32, {1, 1, 16}),
                          v(DType::kF32, {1, 1, 16}), {}};
  const Rows rows{make_view(ids.data(), DType::kI32, {1}), -1};
  std::vector<int32_t> zeros(3, 0);
  std::vector<int8_t> flags(3, 0);
  const RingCursors cur{make_view(zeros.data(), DType::kI32, {3}), make_view(zeros.data(), DType::kI32, {3}),
                        make_view(flags.data(), DType::kI8, {3}), RingConfig{4, 1, RingMode::kDecode}};
  const TensorView y = v(DType::kF32, {1, 2, 4});

  mc.mode = parse_state_mode("fp32/nvfp4");
  std::string m = message_of<ConfigError>([&] { mamba2::conventional_step(ml, mc, mt, rows, y); });
  EXPECT_NE(m.find("'fp32/nvfp4' is a ReplaySSM split mode"), std::string::npos) << m;
  m = message_of<ShapeError>([&] { mamba2::replay_step(ml, mc, cur, mt, rows, y); });
  EXPECT_NE(m.find("read (nvfp4)"), std::string::npos) << m;  // the read copy is missing

  mc.mode = parse_state_mode("shared-fp8");
  m = message_of<ConfigError>([&] { mamba2::replay_step(ml, mc, cur, mt, rows, y); });
  EXPECT_NE(m.find("'shared-fp8' is a shared baseline"), std::string::npos) << m;
  m = message_of<DTypeError>([&] { mamba2::conventional_step(ml, mc, mt, rows, y); });
  EXPECT_NE(m.find("state (fp8): dtype float32, expected uint8"), std::string::npos) << m;

  mc.mode = parse_state_mode("fp16sr/fp16sr");
  mc.state = v(DType::kF16, {3, 2, 4, 16});
  m = message_of<ShapeError>([&] { mamba2::replay_step(ml, mc, cur, mt, rows, y); });
  EXPECT_NE(m.find("sr.seeds"), std::string::npos) << m;

  const RingCursors spec{cur.origin, cur.h, cur.is_flush, RingConfig{4, 2, RingMode::kSpeculative}};
  mc.mode = parse_state_mode("fp32/bf16");
  m = message_of<UnsupportedError>([&] { mamba2::verify(ml, mc, spec, mt, rows, y); });
  EXPECT_NE(m.find("'fp32/bf16' is not built for verify"), std::string::npos) << m;

  // GDN split modes need the ring's v and beta.
  gdn::Layer gl;
  gl.dims = {1, 2, 16, 4, gdn::Gate::kScalar};
  gl.A_log = v(DType::kF32, {2});
  gl.dt_bias = v(DType::kF32, {2});
  gdn::Cache gc{v(DType::kF32, {3, 2, 4, 16}), v(DType::kF32, {3, 2, 4, 4}), v(DType::kF32, {3, 1, 4, 16}),
                v(DType::kF32, {3, 2, 4})};
  gc.mode = parse_state_mode("fp32/fp16");
  gc.read.values = v(DType::kF16, {3, 2, 4, 16});
  const gdn::Tokens gt{v(DType::kF32, {1, 1, 16}), v(DType::kF32, {1, 1, 16}), v(DType::kF32, {1, 2, 4}),
                       v(DType::kF32, {1, 2}), v(DType::kF32, {1, 2})};
  m = message_of<ShapeError>([&] { gdn::replay_step(gl, gc, cur, gt, rows, v(DType::kF32, {1, 2, 4})); });
  EXPECT_NE(m.find("ring_v (split mode): missing"), std::string::npos) << m;
}

}  // namespace
}  // namespace replayssm
