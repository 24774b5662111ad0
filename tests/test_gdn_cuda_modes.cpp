// Split state modes on the CUDA GDN/KDA replay step (precision.h): fp32/bf16 and fp32/fp16 (a
// 16-bit read copy), fp32/fp8 and fp32/nvfp4 (a quantised one). A split pool and an fp32/fp32
// replay pool of the same L decode the same token streams through the public API over many
// flushes. The split flush recomputes every record's u from the fp32 checkpoint and the ring's v
// and beta as the fp32 mode's ordinary steps computed it (flush.cuh), so, checked after every
// step:
//   - a flushed checkpoint equals the fp32 mode's bit for bit, and the flush row's output equals
//     the fp32 mode's bit for bit: nothing read from the copy entered the recurrence;
//   - the read copy is the new checkpoint rounded to nearest even, element for element (16-bit),
//     or byte for byte the CPU codec's encoding of it (codes and scales; quantised); reset_slots
//     zeroes every byte of it; slots that did not flush keep theirs;
//   - 16-bit copies: ordinary rows' outputs differ from the fp32 mode's only by reading the
//     rounded copy (and the u of earlier ordinary steps computed from it): within 2^-5 of the
//     step's output scale for bf16, 2^-8 for fp16 — far below a real divergence, far above fp32
//     noise;
//   - quantised copies: ordinary rows' outputs and appended u against the fp64 oracle started
//     from what the GPU stored (checkpoint, ring, cursor and the decoded copy), within the
//     one-step float32 bound of test_gdn_cuda.cpp (bf16 outputs adding 2^-8);
//   - pad rows give y = 0; slots outside the batch keep their checkpoint and copy; guard bytes.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#ifdef RSSM_WITH_CUDA
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "replayssm/errors.h"
#include "replayssm/gdn.h"
#include "replayssm/precision.h"
#include "cuda_quant_copy.h"
#include "test_gdn_cuda_util.h"

namespace replayssm::testing::gdn_cuda {
namespace {

bool quantised(StateFormat f) { return f == StateFormat::kFp8 || f == StateFormat::kNvfp4; }

/// `plan` (kernel != 0): the split pool's steps run cuda::gdn::replay_step with it (a forced
/// plan: the shapes the dispatcher picks at large batches, here at batch 6).
void run_split(const Shape& shape, Gate gate, DType in, StateFormat read, int L, int steps,
               uint64_t seed, const cg::Plan& plan = {}) {
  const StateMode mode{StateFormat::kFp32, read, false};
  const bool quant = quantised(read);
  GpuCfg s = make_setup(shape, gate, in, kF32, L, 9);
  s.beta_bf16 = in == kBF16;
  SCOPED_TRACE(s.describe() + ", mode " + mode.name() + ", seed " + std::to_string(seed) +
               (plan.kernel ? ", forced plan rpt " + std::to_string(plan.rows_per_thread) +
                                  " hpb " + std::to_string(plan.heads_per_block) + " uph " +
                                  std::to_string(plan.units_per_head) + " stages " +
                                  std::to_string(plan.stages)
                            : std::string()));
  Rng rng(seed);
  const DevLayer layer(s, rng);
  DevPool fp32(s, L, rng), split(s, L, rng);
  const Shape& sh = s.shape;
  // The read copy: 16-bit values, or codes and scales (one slot's bytes per tensor: slot_of).
  const DType rd = read == StateFormat::kBf16 ? kBF16 : kF16;
  DeviceBuffer copy(quant ? DType::kU8 : rd, {quant ? 1 : s.slots, sh.HV, sh.V, sh.K}, 191);
  cuda_test::DevCopy qcopy(quant ? read : StateFormat::kFp8, s.slots, sh.HV, sh.V, sh.K);
  auto copy_bytes = [&] {
    return quant ? qcopy.download() : std::vector<std::vector<uint8_t>>{copy.download()};
  };
  // One slot's bytes of each tensor (16-bit copies too: DevCopy::slot_of splits any list).
  auto copy_slot = [&](const std::vector<std::vector<uint8_t>>& all, int32_t slot) {
    return qcopy.slot_of(all, slot);
  };
  DeviceBuffer ring_v(kF32, {s.slots, sh.HV, L, sh.V}, 192), ring_beta(kF32, {s.slots, sh.HV, L}, 193);
  auto split_cache = [&] {
    gdn::Cache c = split.cache();
    c.mode = mode;
    c.read = quant ? qcopy.buffer() : StateBuffer{copy.view(), {}};
    c.ring_v = ring_v.view();
    c.ring_beta = ring_beta.view();
    return c;
  };
  const std::vector<int32_t> owned{1, 3, 5, 7};  // slots 0, 2, 4, 6, 8 are never in a batch
  reset_slots(fp32, owned);
  cuda_test::start_sequences(split_cache(), split.cursors(), owned);
  for (int32_t slot : owned)  // reset_slots zeroes every byte of the copy (codes and scales)
    for (const auto& t : copy_slot(copy_bytes(), slot))
      for (uint8_t byte : t) ASSERT_EQ(byte, 0) << "reset_slots left a byte of slot " << slot;
  const int64_t n = sh.HV * sh.V * sh.K, HVV = sh.HV * sh.V;
  const double tol = read == StateFormat::kBf16 ? 0x1p-5 : 0x1p-8;
  const gdnt::Tolerance kTol;
  int flush_rows = 0, ordinary_rows = 0;
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<int> order = cuda_test::split_walk_order(step, rng);
    const int64_t batch = static_cast<int64_t>(order.size());
    std::vector<ref::GdnToken> toks(batch);
    std::vector<const ref::GdnToken*> tp(batch, nullptr);
    std::vector<int32_t> ids(batch, -1);
    for (int64_t b = 0; b < batch; ++b)
      if (order[b] >= 0) toks[b] = gdnt::random_token(rng, s), tp[b] = &toks[b], ids[b] = owned[order[b]];
    DevStep sa(s, batch), sb(s, batch);
    sa.put(tp, ids), sb.put(tp, ids);
    sa.y.poison(), sb.y.poison();
    const DevPool::Snapshot before = split.snapshot();
    const std::vector<uint8_t>& flush_before = before[6];
    const std::vector<uint8_t>& S_before = before[0];
    const std::vector<std::vector<uint8_t>> C_before = copy_bytes();
    gdn::Cache ca = fp32.cache(), cb = split_cache();
    gdn::replay_step(layer.layer, ca, fp32.cursors(), sa.tokens(), sa.rows(-1), sa.y.view());
    if (plan.kernel)
      cg::replay_step(layer.layer, cb, split.cursors(), sb.tokens(), sb.rows(-1), sb.y.view(), plan);
    else
      gdn::replay_step(layer.layer, cb, split.cursors(), sb.tokens(), sb.rows(-1), sb.y.view());
    cuda::device_synchronize();
    const DevPool::Snapshot after = split.snapshot();
    commit_step(fp32, ids, -1);
    commit_step(split, ids, -1);
    const std::vector<uint8_t> Sa = fp32.state.download(), Sb = split.state.download();
    const std::vector<double> S = split.state.values();
    const std::vector<double> Cv = quant ? std::vector<double>{} : copy.values();
    const std::vector<std::vector<uint8_t>> C_after = copy_bytes();
    const std::vector<double> ya = sa.y.values(), yb = sb.y.values();
    // Quantised modes: the rings before and after the step, for the oracle of ordinary rows.
    std::vector<std::vector<double>> ring_before, ring_after;
    if (quant)
      for (int k = 1; k <= 3; ++k) {
        ring_before.push_back(cuda_test::decode_all(kF32, before[k]));
        ring_after.push_back(cuda_test::decode_all(kF32, after[k]));
      }
    double scale = 0.0;
    for (int64_t i = 0; i < batch * HVV; ++i)
      if (order[i / HVV] >= 0) scale = std::max(scale, std::abs(ya[i]));
    for (int64_t b = 0; b < batch; ++b) {
      if (order[b] < 0) {
        for (int64_t i = 0; i < HVV; ++i) ASSERT_EQ(yb[b * HVV + i], 0.0) << "pad row " << b;
        continue;
      }
      const int32_t slot = ids[b];
      const bool flush = flush_before[slot] != 0;
      (flush ? flush_rows : ordinary_rows) += 1;
      if (flush) {
        ASSERT_EQ(std::memcmp(Sa.data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
            << "row " << b << ": the flushed checkpoint differs from the fp32 mode's";
        if (quant) {  // the CPU codec's encoding of the new checkpoint, byte for byte
          std::vector<float> Sf(n);
          std::memcpy(Sf.data(), Sb.data() + slot * n * 4, n * 4);
          const auto want = qcopy.encode(Sf), got = copy_slot(C_after, slot);
          for (size_t t = 0; t < want.size(); ++t)
            for (size_t i = 0; i < want[t].size(); ++i)
              ASSERT_EQ(got[t][i], want[t][i]) << "slot " << slot << " read copy tensor " << t
                                               << " byte " << i << " is not the codec's encoding";
        } else {
          for (int64_t i = slot * n; i < (slot + 1) * n; ++i)
            ASSERT_EQ(Cv[i], cuda_test::round_to(rd, S[i]))
                << "read copy element " << i - slot * n << " of slot " << slot;
        }
      } else if (quant) {
        ASSERT_EQ(copy_slot(C_after, slot), copy_slot(C_before, slot))
            << "read copy of slot " << slot << " changed without a flush";
        // The oracle from what the GPU stored: ring, cursor and the decoded copy (an ordinary
        // step reads no checkpoint); nothing but float32 sums lies between them (the decoded
        // elements are exact). Rows before a sequence's first flush read its zeroed copy.
        ref::GdnSeq q = ref::gdn_new_seq(layer.ref, s.ring);
        for (int64_t r = 0; r < split.R; ++r)
          q.ring[r] = split.record(ring_before[0], ring_before[1], ring_before[2], slot, r);
        q.cursor = split.cursor(before, slot);
        q.prec.mode = mode;
        q.prec.read = qcopy.decode_slot(copy_slot(C_before, slot));
        const Vec y_ref = ref::gdn_replay_step(layer.ref, s.ring, q, toks[b]);
        const Vec y_got(yb.begin() + b * HVV, yb.begin() + (b + 1) * HVV);
        ASSERT_LE(gdnt::head_err(y_got, y_ref, sh.HV),
                  kTol.y + (in == kBF16 ? gdnt::kBf16Out : 0.0))
            << "ordinary row " << b << " (slot " << slot << ", h " << q.cursor.h << ")";
        const int64_t row = ref::ring_row(q.cursor, q.cursor.h, s.ring);
        const ref::GdnRecord got = split.record(ring_after[0], ring_after[1], ring_after[2], slot, row);
        ASSERT_LE(gdnt::head_err(got.u, q.ring[row].u, sh.HV), kTol.u) << "record u, row " << b;
      }
      for (int64_t i = 0; i < HVV; ++i) {
        const double d = std::abs(ya[b * HVV + i] - yb[b * HVV + i]);
        if (flush) {
          ASSERT_EQ(d, 0.0) << "flush row " << b << " output " << i << " differs from the fp32 mode's";
        } else if (!quant) {
          ASSERT_LE(d, tol * scale + (in == kBF16 ? 0x1p-7 * scale : 0.0))
              << "ordinary row " << b << " output " << i << " (scale " << scale << ")";
        }
      }
    }
    for (int32_t slot = 0; slot < s.slots; ++slot) {
      bool in_batch = false;
      for (int32_t id : ids) in_batch |= id == slot;
      if (in_batch) continue;
      ASSERT_EQ(std::memcmp(S_before.data() + slot * n * 4, Sb.data() + slot * n * 4, n * 4), 0)
          << "checkpoint of slot " << slot << " (not in the batch) changed";
      ASSERT_EQ(copy_slot(C_before, slot), copy_slot(C_after, slot))
          << "read copy of slot " << slot << " (not in the batch) changed";
    }
    ASSERT_TRUE(sb.guards_intact()) << "step buffers' guard bytes";
  }
  EXPECT_GT(flush_rows, 0);
  EXPECT_GT(ordinary_rows, 0);
  EXPECT_TRUE(fp32.guards_intact() && split.guards_intact() && copy.guards_intact() &&
              qcopy.guards_intact() && ring_v.guards_intact() && ring_beta.guards_intact() &&
              layer.guards_intact())
      << "guard bytes";
}

TEST(GdnCudaModes, SplitSixteenBitReadCopiesFlushTheFp32Recurrence) {
  RSSM_SKIP_WITHOUT_CUDA();
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (StateFormat read : {StateFormat::kBf16, StateFormat::kFp16}) {
      run_split(kGpuSmall, gate, kBF16, read, 4, 30, test_seed(16001));
      run_split(kOdd, gate, kF32, read, 8, 30, test_seed(16002));
      if (::testing::Test::HasFailure()) return;
    }
  run_split(kQwen4B, Gate::kScalar, kBF16, StateFormat::kBf16, 16, 36, test_seed(16003));
  run_split(kKimi, Gate::kChannel, kBF16, StateFormat::kBf16, 16, 36, test_seed(16004));
  run_split(kKimi, Gate::kChannel, kF32, StateFormat::kFp16, 8, 30, test_seed(16005));
  // L = 64: flushes with more than 17 records (the flush's u beyond its 16 registers, its pair
  // dots over more than one butterfly) and its largest shared memory.
  run_split(kQwen4B, Gate::kScalar, kBF16, StateFormat::kBf16, 64, 150, test_seed(16006));
  run_split(kKimi, Gate::kChannel, kBF16, StateFormat::kFp16, 64, 150, test_seed(16007));
}

TEST(GdnCudaModes, QuantisedReadCopiesMatchTheOracleAndKeepTheFp32Recurrence) {
  RSSM_SKIP_WITHOUT_CUDA();
  // Every ordinary row is checked against the fp64 oracle on the host: the real shapes run the
  // fewest steps that still flush every sequence (sequence 3 joins at step 6, flushes L - 1
  // steps later).
  for (Gate gate : {Gate::kScalar, Gate::kChannel})
    for (StateFormat read : {StateFormat::kNvfp4, StateFormat::kFp8}) {
      run_split(kGpuSmall, gate, kBF16, read, 4, 24, test_seed(16011));
      run_split(kOdd, gate, kF32, read, 8, 24, test_seed(16012));
      if (::testing::Test::HasFailure()) return;
    }
  run_split(kQwen4B, Gate::kScalar, kBF16, StateFormat::kNvfp4, 16, 24, test_seed(16013));
  run_split(kKimi, Gate::kChannel, kF32, StateFormat::kFp8, 8, 16, test_seed(16015));
  run_split(kKimi, Gate::kChannel, kBF16, StateFormat::kNvfp4, 8, 16, test_seed(16017));
  // The plans of the batches the dispatcher replays these modes at (bandwidth-bound: two value
  // heads per block, two units each, two stages), and 8 rows per thread.
  cg::Plan wide;
  wide.kernel = 2, wide.rows_per_thread = 4, wide.heads_per_block = 2, wide.units_per_head = 2;
  wide.stages = 2, wide.prefetch_ring = 0;
  run_split(kQwen4B, Gate::kScalar, kBF16, StateFormat::kFp8, 16, 24, test_seed(16018), wide);
  cg::Plan rpt8 = wide;
  rpt8.rows_per_thread = 8, rpt8.units_per_head = 1;
  run_split(kQwen4B, Gate::kScalar, kF32, StateFormat::kNvfp4, 16, 24, test_seed(16019), rpt8);
}

TEST(GdnCudaModes, MisshapenMisalignedOrMisroutedQuantisedCopiesAreRejected) {
  RSSM_SKIP_WITHOUT_CUDA();
  Rng rng(test_seed(16016));
  const GpuCfg s = make_setup(kGpuSmall, Gate::kScalar, kF32, kF32, 4, 3);
  const Shape& sh = s.shape;
  const DevLayer layer(s, rng);
  DevPool pool(s, 4, rng);
  cuda_test::DevCopy nv(StateFormat::kNvfp4, s.slots, sh.HV, sh.V, sh.K),
      f8(StateFormat::kFp8, s.slots, sh.HV, sh.V, sh.K);
  DeviceBuffer wrong(DType::kU8, {s.slots, sh.HV, sh.V, sh.K / 8}, 74);
  DeviceBuffer ring_v(kF32, {s.slots, sh.HV, 4, sh.V}, 192), ring_beta(kF32, {s.slots, sh.HV, 4}, 193);
  DevStep st(s, 1);
  st.put({nullptr}, {-1});
  // Runs a step of `mode` over `read` with `plan`; returns the error's message ("" if none).
  auto message = [&](const char* mode, const StateBuffer& read, const cg::Plan& plan,
                     auto error_tag) -> std::string {
    using E = decltype(error_tag);
    gdn::Cache c = pool.cache();
    c.mode = parse_state_mode(mode);
    c.read = read;
    c.ring_v = ring_v.view();
    c.ring_beta = ring_beta.view();
    try {
      cg::replay_step(layer.layer, c, pool.cursors(), st.tokens(), st.rows(-1), st.y.view(), plan);
    } catch (const E& e) {
      return e.what();
    }
    return "";
  };
  const cg::Plan autop;
  StateBuffer bad = nv.buffer();
  bad.scales.blocks = wrong.view();
  EXPECT_NE(message("fp32/nvfp4", bad, autop, ShapeError("")).find("scales.blocks"),
            std::string::npos) << "a block-scale tensor of the wrong shape";
  for (const char* what : {"values", "scales.blocks", "scales.global"}) {
    StateBuffer b = nv.buffer();
    TensorView& t = std::string(what) == "values"          ? b.values
                    : std::string(what) == "scales.blocks" ? b.scales.blocks
                                                           : b.scales.global;
    t = cuda_test::shifted(t, std::string(what) == "values" ? 1 : 2);
    const std::string m = message("fp32/nvfp4", b, autop, ConfigError(""));
    EXPECT_NE(m.find(what), std::string::npos) << what << ": '" << m << "'";
    EXPECT_NE(m.find("aligned"), std::string::npos) << m;
  }
  StateBuffer rows = f8.buffer();
  rows.scales.rows = cuda_test::shifted(rows.scales.rows, 2);
  EXPECT_NE(message("fp32/fp8", rows, autop, ConfigError("")).find("scales.rows"),
            std::string::npos);
  // A quantised copy is read output-only: a forced state-and-output route is refused.
  cg::Plan st_route;
  st_route.route = cg::Route::kStateAndOutput;
  EXPECT_NE(message("fp32/nvfp4", nv.buffer(), st_route, ConfigError("")).find("output-only"),
            std::string::npos);
  EXPECT_TRUE(nv.guards_intact() && f8.guards_intact() && pool.guards_intact());
}

}  // namespace
}  // namespace replayssm::testing::gdn_cuda
#endif  // RSSM_WITH_CUDA
