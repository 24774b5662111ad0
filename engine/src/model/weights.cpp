#include "model/weights.h"

#include <algorithm>

namespace replayssm::engine {

cpu::Linear load_linear(const Checkpoint& ck, const std::string& name, int64_t out, int64_t in,
                        bool with_bias) {
  cpu::Linear l;
  l.out = out;
  l.in = in;
  l.w = ck.load(name + ".weight", {out, in});
  if (with_bias) l.bias = ck.load(name + ".bias", {out});
  return l;
}

std::vector<float> load_conv(const Checkpoint& ck, const std::string& name, int64_t C, int64_t k) {
  return ck.load(name, {C, 1, k});
}

Mamba2Weights load_mamba2_weights(const Checkpoint& ck, const ModelConfig& cfg,
                                  const std::string& p) {
  const Mamba2Config& c = cfg.mamba;
  const int64_t H = cfg.hidden_size, di = c.d_inner(), cd = c.conv_dim();
  Mamba2Weights w;
  w.in_proj = load_linear(ck, p + "in_proj", 2 * di + 2 * c.ngroups * c.d_state + c.nheads, H,
                          c.proj_bias);
  w.conv_w = load_conv(ck, p + "conv1d.weight", cd, c.conv_kernel);
  if (c.use_conv_bias) w.conv_b = ck.load(p + "conv1d.bias", {cd});
  w.A_log = ck.load(p + "A_log", {c.nheads});
  w.dt_bias = ck.load(p + "dt_bias", {c.nheads});
  w.D = ck.load(p + "D", {c.nheads});
  w.norm_w = ck.load(p + "norm.weight", {di});
  w.out_proj = load_linear(ck, p + "out_proj", H, di, c.proj_bias);
  return w;
}

GdnWeights load_gdn_weights(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p) {
  const GdnConfig& c = cfg.gdn;
  const int64_t H = cfg.hidden_size, Hk = c.num_k_heads, Hv = c.num_v_heads;
  const int64_t dk = c.head_k_dim, dv = c.head_v_dim, cd = c.conv_dim();
  GdnWeights w;
  if (c.interleaved_proj) {
    w.qkvz = load_linear(ck, p + "in_proj_qkvz", 2 * Hk * dk + 2 * Hv * dv, H);
    w.ba = load_linear(ck, p + "in_proj_ba", 2 * Hv, H);
  } else {
    w.qkv = load_linear(ck, p + "in_proj_qkv", cd, H);
    w.z = load_linear(ck, p + "in_proj_z", Hv * dv, H);
    w.b = load_linear(ck, p + "in_proj_b", Hv, H);
    w.a = load_linear(ck, p + "in_proj_a", Hv, H);
  }
  w.conv_w = load_conv(ck, p + "conv1d.weight", cd, c.conv_kernel);
  w.A_log = ck.load(p + "A_log", {Hv});
  w.dt_bias = ck.load(p + "dt_bias", {Hv});
  w.norm_w = ck.load(p + "norm.weight", {dv});
  w.out_proj = load_linear(ck, p + "out_proj", H, Hv * dv);
  return w;
}

namespace {

/// The linear whose row i is row src_row[i] of l (bias likewise).
cpu::Linear permute_rows(const cpu::Linear& l, const std::vector<int64_t>& src_row) {
  cpu::Linear out;
  out.out = static_cast<int64_t>(src_row.size());
  out.in = l.in;
  out.w.resize(out.out * out.in);
  for (int64_t i = 0; i < out.out; ++i)
    std::copy_n(l.w.begin() + src_row[i] * l.in, l.in, out.w.begin() + i * l.in);
  if (!l.bias.empty())
    for (int64_t i = 0; i < out.out; ++i) out.bias.push_back(l.bias[src_row[i]]);
  return out;
}

}  // namespace

cpu::Linear deinterleave_qkvz(const cpu::Linear& qkvz, const GdnConfig& c) {
  const int64_t Hk = c.num_k_heads, r = c.num_v_heads / c.num_k_heads;
  const int64_t dk = c.head_k_dim, dv = c.head_v_dim, blk = 2 * dk + 2 * r * dv;
  // Per key head g the stored block is [q_g (dk) | k_g (dk) | v (r dv) | z (r dv)].
  std::vector<int64_t> rows;
  for (int64_t part = 0; part < 4; ++part)
    for (int64_t g = 0; g < Hk; ++g) {
      const int64_t off = part == 0 ? 0 : part == 1 ? dk : part == 2 ? 2 * dk : 2 * dk + r * dv;
      const int64_t len = part < 2 ? dk : r * dv;
      for (int64_t i = 0; i < len; ++i) rows.push_back(g * blk + off + i);
    }
  return permute_rows(qkvz, rows);
}

cpu::Linear deinterleave_ba(const cpu::Linear& ba, const GdnConfig& c) {
  const int64_t Hk = c.num_k_heads, r = c.num_v_heads / c.num_k_heads;
  // Per key head g the stored block is [b (r) | a (r)].
  std::vector<int64_t> rows;
  for (int64_t part = 0; part < 2; ++part)
    for (int64_t g = 0; g < Hk; ++g)
      for (int64_t i = 0; i < r; ++i) rows.push_back(g * 2 * r + part * r + i);
  return permute_rows(ba, rows);
}

AttentionWeights load_attention_weights(const Checkpoint& ck, const ModelConfig& cfg,
                                        const std::string& p) {
  const AttentionConfig& c = cfg.attn;
  const int64_t H = cfg.hidden_size, nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim;
  AttentionWeights w;
  w.q = load_linear(ck, p + "q_proj", nh * hd * (c.output_gate ? 2 : 1), H, c.bias);
  w.k = load_linear(ck, p + "k_proj", nkv * hd, H, c.bias);
  w.v = load_linear(ck, p + "v_proj", nkv * hd, H, c.bias);
  w.o = load_linear(ck, p + "o_proj", H, nh * hd, c.bias);
  if (c.qk_norm) {
    w.q_norm = ck.load(p + "q_norm.weight", {hd});
    w.k_norm = ck.load(p + "k_norm.weight", {hd});
  }
  return w;
}

MlpWeights load_mlp_weights(const Checkpoint& ck, const ModelConfig& cfg, const std::string& p) {
  const int64_t H = cfg.hidden_size, I = cfg.mlp.intermediate;
  MlpWeights w;
  w.up = load_linear(ck, p + "up_proj", I, H, cfg.mlp.bias);
  if (cfg.mlp.gated) w.gate = load_linear(ck, p + "gate_proj", I, H, cfg.mlp.bias);
  w.down = load_linear(ck, p + "down_proj", H, I, cfg.mlp.bias);
  return w;
}

}  // namespace replayssm::engine
