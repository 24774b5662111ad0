// parse_config: Hugging Face config.json -> ModelConfig for Nemotron-H, Mamba2, Qwen3-Next and
// Qwen3.5. Key names, spellings and defaults follow the transformers config classes
// (NemotronHConfig, Mamba2Config, Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig); a
// key that is absent or null takes that class's default. Reference: models.md §1-§2.
#include "replayssm/engine/config.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "replayssm/engine/checkpoint.h"

namespace replayssm::engine {
namespace {

using json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw ConfigError(detail::concat("config: ", parts...));
}

/// A short rendering of a JSON value for error messages.
std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

/// Typed reads of one JSON object's keys. Errors name the key with the object's path prefix
/// (e.g. 'text_config.hidden_size') and give the actual and the expected value.
class Keys {
 public:
  Keys(const json& j, std::string prefix) : j_(j), prefix_(std::move(prefix)) {}

  /// The key as written in messages, quoted.
  std::string name(const std::string& key) const { return "'" + prefix_ + key + "'"; }
  const std::string& prefix() const { return prefix_; }
  /// The value, or nullptr when the key is absent or null (both mean "use the default").
  const json* get(const std::string& key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const std::string& key) const { return get(key) != nullptr; }
  /// The first of `keys` that is present ("" if none): current spelling first, aliases after.
  std::string pick(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (has(k)) return k;
    return "";
  }

  int64_t integer(const std::string& key, int64_t def) const {
    const json* v = get(key);
    if (!v) return def;
    return as_integer(*v, name(key));
  }
  double number(const std::string& key, double def) const {
    const json* v = get(key);
    if (!v) return def;
    return as_number(*v, name(key));
  }
  bool boolean(const std::string& key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(name(key), " is ", brief(*v), ", expected true or false");
    return v->get<bool>();
  }
  std::string string(const std::string& key, const std::string& def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) fail(name(key), " is ", brief(*v), ", expected a string");
    return v->get<std::string>();
  }

  static int64_t as_integer(const json& v, const std::string& what) {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(what, " is ", brief(v), ", expected an integer that fits in 64 bits");
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // e.g. 4096.0 from a hand-written config
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
        return static_cast<int64_t>(d);
    }
    fail(what, " is ", brief(v), ", expected an integer");
  }
  /// A number; also the strings "Infinity", "-Infinity", "NaN" (Python's json module writes
  /// those bare; Checkpoint::open quotes them before parsing), and {"__float__": "Infinity"}, the
  /// form newer transformers releases (5.2x) write non-finite floats in.
  static double as_number(const json& v, const std::string& what) {
    if (v.is_number()) return v.get<double>();
    const json* sv = &v;
    if (v.is_object() && v.size() == 1 && v.contains("__float__")) sv = &v["__float__"];
    if (sv->is_string()) {
      const std::string s = sv->get<std::string>();
      if (s == "Infinity" || s == "inf") return kInf;
      if (s == "-Infinity" || s == "-inf") return -kInf;
      if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    fail(what, " is ", brief(v), ", expected a number");
  }

 private:
  const json& j_;
  std::string prefix_;
};

void positive(const Keys& k, const std::string& key, int64_t v) {
  if (v <= 0) fail(k.name(key), " is ", v, ", expected > 0");
}

/// Fails unless `small` divides `big` (both already positive).
void divides(const Keys& k, const std::string& small_key, int64_t small, const std::string& big_key,
             int64_t big) {
  if (big % small != 0)
    fail(k.name(small_key), " is ", small, ", expected a divisor of ", k.name(big_key), " ", big);
}

bool uses(const ModelConfig& c, BlockKind kind) {
  for (BlockKind b : c.layers)
    if (b == kind) return true;
  for (BlockKind b : c.qwen_mlp)
    if (b == kind) return true;
  return false;
}

/// The activation named by `key` must be `expected`: the engine implements only that one.
void require_act(const Keys& k, const std::string& key, const std::string& expected) {
  const std::string act = k.string(key, expected);
  if (act != expected) fail(k.name(key), " is \"", act, "\", expected \"", expected, "\"");
}

/// time_step_limit [min, max] (default (0, inf)): the clamp applied to dt after softplus.
void read_dt_limit(const Keys& k, const std::string& key, Mamba2Config& m) {
  m.dt_min_clamp = 0.0;
  m.dt_max_clamp = kInf;
  if (key.empty() || !k.has(key)) return;
  const json& v = *k.get(key);
  if (!v.is_array() || v.size() != 2)
    fail(k.name(key), " is ", brief(v), ", expected [min, max]");
  m.dt_min_clamp = Keys::as_number(v[0], k.name(key) + "[0]");
  m.dt_max_clamp = Keys::as_number(v[1], k.name(key) + "[1]");
  if (!(m.dt_min_clamp >= 0.0) || !(m.dt_max_clamp >= m.dt_min_clamp))
    fail(k.name(key), " is ", brief(v), ", expected 0 <= min <= max");
}

void validate_mamba(const Keys& k, const Mamba2Config& m, const char* heads_key,
                    const char* headdim_key, const char* state_key, const std::string& groups_key,
                    const std::string& conv_key) {
  positive(k, heads_key, m.nheads);
  positive(k, headdim_key, m.headdim);
  positive(k, state_key, m.d_state);
  positive(k, groups_key, m.ngroups);
  positive(k, conv_key, m.conv_kernel);
  divides(k, groups_key, m.ngroups, heads_key, m.nheads);
}

void validate_attention(const Keys& k, const AttentionConfig& a) {
  positive(k, "num_attention_heads", a.num_heads);
  positive(k, "num_key_value_heads", a.num_kv_heads);
  positive(k, "head_dim", a.head_dim);
  divides(k, "num_key_value_heads", a.num_kv_heads, "num_attention_heads", a.num_heads);
}

void validate_moe(const Keys& k, const MoeConfig& m, const char* experts_key,
                  const char* shared_key) {
  positive(k, experts_key, m.num_experts);
  positive(k, "num_experts_per_tok", m.top_k);
  if (m.top_k > m.num_experts)
    fail(k.name("num_experts_per_tok"), " is ", m.top_k, ", expected <= ", k.name(experts_key),
         " ", m.num_experts);
  positive(k, "moe_intermediate_size", m.expert_intermediate);
  if (m.shared_intermediate < 0)
    fail(k.name(shared_key), " is ", m.shared_intermediate, ", expected >= 0");
  if (m.latent_size < 0) fail(k.name("moe_latent_size"), " is ", m.latent_size, ", expected >= 0");
  positive(k, "n_group", m.n_group);
  divides(k, "n_group", m.n_group, experts_key, m.num_experts);
  if (m.topk_group < 1 || m.topk_group > m.n_group)
    fail(k.name("topk_group"), " is ", m.topk_group, ", expected 1..", m.n_group, " (n_group)");
}

/// Sizes every architecture has.
void check_common(const Keys& k, const ModelConfig& c, const char* eps_key) {
  positive(k, "vocab_size", c.vocab_size);
  positive(k, "hidden_size", c.hidden_size);
  if (!(c.norm_eps > 0)) fail(k.name(eps_key), " is ", c.norm_eps, ", expected > 0");
  if (c.max_position < 0)
    fail(k.name("max_position_embeddings"), " is ", c.max_position, ", expected >= 0");
}

// ---- Nemotron-H ------------------------------------------------------------------------------

BlockKind nemotron_letter(char ch, size_t i, const Keys& k) {
  switch (ch) {
    case 'M': return BlockKind::kMamba2;
    case '*': return BlockKind::kAttention;
    case '-': return BlockKind::kMlp;
    case 'E': return BlockKind::kMoe;
    default:
      fail(k.name("hybrid_override_pattern"), " has '", std::string(1, ch), "' at position ", i,
           ", expected one of M (mamba), * (attention), - (mlp), E (moe)");
  }
}

BlockKind nemotron_word(const json& v, size_t i, const Keys& k) {
  const std::string what = k.name("layers_block_type") + "[" + std::to_string(i) + "]";
  if (!v.is_string()) fail(what, " is ", brief(v), ", expected a string");
  const std::string s = v.get<std::string>();
  if (s == "mamba" || s == "linear_attention") return BlockKind::kMamba2;
  if (s == "attention" || s == "full_attention") return BlockKind::kAttention;
  if (s == "mlp") return BlockKind::kMlp;
  if (s == "moe") return BlockKind::kMoe;
  fail(what, " is \"", s,
       "\", expected one of mamba, linear_attention, attention, full_attention, mlp, moe");
}

std::vector<BlockKind> nemotron_layers(const Keys& k) {
  std::vector<BlockKind> from_list, from_pattern;
  const bool has_list = k.has("layers_block_type"), has_pattern = k.has("hybrid_override_pattern");
  if (has_list) {
    const json& v = *k.get("layers_block_type");
    if (!v.is_array()) fail(k.name("layers_block_type"), " is ", brief(v), ", expected a list");
    for (size_t i = 0; i < v.size(); ++i) from_list.push_back(nemotron_word(v[i], i, k));
  }
  if (has_pattern) {
    const std::string p = k.string("hybrid_override_pattern", "");
    for (size_t i = 0; i < p.size(); ++i) from_pattern.push_back(nemotron_letter(p[i], i, k));
  }
  if (!has_list && !has_pattern)
    fail("neither ", k.name("hybrid_override_pattern"), " nor ", k.name("layers_block_type"),
         " is given, expected one of them");
  if (has_list && has_pattern && from_list != from_pattern)
    fail(k.name("layers_block_type"), " (", from_list.size(), " layers) disagrees with ",
         k.name("hybrid_override_pattern"), " (", from_pattern.size(),
         " layers), expected the same layers");
  std::vector<BlockKind> layers = has_list ? from_list : from_pattern;
  const char* src = has_list ? "layers_block_type" : "hybrid_override_pattern";
  if (layers.empty()) fail(k.name(src), " is empty, expected at least one layer");
  if (k.has("num_hidden_layers")) {
    const int64_t n = k.integer("num_hidden_layers", 0);
    if (n != static_cast<int64_t>(layers.size()))
      fail(k.name(src), " has ", layers.size(), " layers, expected num_hidden_layers ", n);
  }
  return layers;
}

ModelConfig parse_nemotron_h(const json& j) {
  const Keys k(j, "");
  ModelConfig c;
  c.arch = Arch::kNemotronH;
  c.weight_prefix = "backbone.";
  c.vocab_size = k.integer("vocab_size", 131072);
  c.hidden_size = k.integer("hidden_size", 4096);
  c.tie_word_embeddings = k.boolean("tie_word_embeddings", false);
  const char* eps_key = k.has("layer_norm_epsilon") ? "layer_norm_epsilon" : "rms_norm_eps";
  c.norm_eps = k.number(eps_key, 1e-5);
  c.residual_in_fp32 = k.boolean("residual_in_fp32", false);
  c.max_position = k.integer("max_position_embeddings", 4096);
  check_common(k, c, eps_key);
  c.layers = nemotron_layers(k);
  c.num_layers = static_cast<int64_t>(c.layers.size());

  // Mamba-2 mixer; the HF __init__ spellings (mamba_n_groups ...) are accepted as aliases.
  Mamba2Config& m = c.mamba;
  const std::string groups_key = k.pick({"n_groups", "mamba_n_groups"});
  const std::string conv_key = k.pick({"conv_kernel", "mamba_d_conv"});
  const std::string conv_bias_key = k.pick({"use_conv_bias", "mamba_conv_bias"});
  m.nheads = k.integer("mamba_num_heads", 128);
  m.headdim = k.integer("mamba_head_dim", 64);
  m.d_state = k.integer("ssm_state_size", 128);
  m.ngroups = groups_key.empty() ? 8 : k.integer(groups_key, 8);
  m.conv_kernel = conv_key.empty() ? 4 : k.integer(conv_key, 4);
  m.use_conv_bias = conv_bias_key.empty() ? true : k.boolean(conv_bias_key, true);
  m.proj_bias = k.boolean("mamba_proj_bias", false);
  read_dt_limit(k, k.pick({"time_step_limit", "mamba_dt_limit"}), m);

  AttentionConfig& a = c.attn;
  a.num_heads = k.integer("num_attention_heads", 32);
  // Present but null: HF derives them (kv heads = heads, head_dim = hidden / heads).
  const bool kv_null = j.contains("num_key_value_heads") && !k.has("num_key_value_heads");
  const bool hd_null = j.contains("head_dim") && !k.has("head_dim");
  a.num_kv_heads = kv_null ? a.num_heads : k.integer("num_key_value_heads", 8);
  a.head_dim = hd_null ? (a.num_heads > 0 ? c.hidden_size / a.num_heads : 0)
                       : k.integer("head_dim", 128);
  a.bias = k.boolean("attention_bias", false);
  a.rotary_dim = 0;  // NemotronHAttention applies no positional encoding

  c.mlp.intermediate = k.integer("intermediate_size", 21504);
  c.mlp.gated = false;
  c.mlp.bias = k.boolean("mlp_bias", false);

  MoeConfig& e = c.moe;
  e.num_experts = k.integer("n_routed_experts", 8);
  e.top_k = k.integer("num_experts_per_tok", 2);
  e.expert_intermediate = k.integer("moe_intermediate_size", 7688);
  const int64_t n_shared = k.integer("n_shared_experts", 1);
  if (n_shared < 0) fail(k.name("n_shared_experts"), " is ", n_shared, ", expected >= 0");
  e.shared_intermediate = n_shared * k.integer("moe_shared_expert_intermediate_size", 7688);
  e.norm_topk_prob = k.boolean("norm_topk_prob", true);
  e.sigmoid_router = true;
  e.routed_scaling_factor = k.number("routed_scaling_factor", 1.0);
  e.latent_size = k.integer("moe_latent_size", 0);
  e.n_group = k.integer("n_group", 1);
  e.topk_group = k.integer("topk_group", 1);

  if (uses(c, BlockKind::kMamba2)) {
    validate_mamba(k, m, "mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                   groups_key.empty() ? "n_groups" : groups_key,
                   conv_key.empty() ? "conv_kernel" : conv_key);
    require_act(k, "mamba_hidden_act", "silu");
  }
  m.norm_group_size = m.ngroups > 0 ? m.d_inner() / m.ngroups : 0;
  if (uses(c, BlockKind::kAttention)) validate_attention(k, a);
  if (uses(c, BlockKind::kMlp) || uses(c, BlockKind::kMoe)) require_act(k, "mlp_hidden_act", "relu2");
  if (uses(c, BlockKind::kMlp)) positive(k, "intermediate_size", c.mlp.intermediate);
  if (uses(c, BlockKind::kMoe)) validate_moe(k, e, "n_routed_experts", "moe_shared_expert_intermediate_size");
  return c;
}

// ---- Mamba2 ------------------------------------------------------------------------------------

ModelConfig parse_mamba2(const json& j) {
  const Keys k(j, "");
  ModelConfig c;
  c.arch = Arch::kMamba2;
  c.weight_prefix = "backbone.";
  c.vocab_size = k.integer("vocab_size", 32768);
  c.hidden_size = k.integer("hidden_size", 4096);
  c.num_layers = k.integer("num_hidden_layers", 64);
  c.tie_word_embeddings = k.boolean("tie_word_embeddings", false);
  c.norm_eps = k.number("layer_norm_epsilon", 1e-5);
  c.residual_in_fp32 = k.boolean("residual_in_fp32", true);
  c.max_position = k.integer("max_position_embeddings", 0);  // no KV cache: unbounded
  positive(k, "num_hidden_layers", c.num_layers);
  check_common(k, c, "layer_norm_epsilon");
  c.layers.assign(static_cast<size_t>(c.num_layers), BlockKind::kMamba2);

  Mamba2Config& m = c.mamba;
  m.nheads = k.integer("num_heads", 128);
  m.headdim = k.integer("head_dim", 64);
  m.d_state = k.integer("state_size", 128);
  m.ngroups = k.integer("n_groups", 8);
  m.conv_kernel = k.integer("conv_kernel", 4);
  m.use_conv_bias = k.boolean("use_conv_bias", true);
  m.proj_bias = k.boolean("use_bias", false);
  read_dt_limit(k, "time_step_limit", m);
  validate_mamba(k, m, "num_heads", "head_dim", "state_size", "n_groups", "conv_kernel");
  require_act(k, "hidden_act", "silu");
  // HF sizes the mixer with expand * hidden_size and reshapes it by num_heads * head_dim.
  const double expand = k.number("expand", 2.0);
  const double inner = expand * static_cast<double>(c.hidden_size);
  if (inner != static_cast<double>(m.d_inner()))
    fail(k.name("num_heads"), " ", m.nheads, " x ", k.name("head_dim"), " ", m.headdim, " = ",
         m.d_inner(), ", expected ", k.name("expand"), " ", expand, " x ", k.name("hidden_size"),
         " ", c.hidden_size, " = ", inner);
  m.norm_group_size = m.d_inner();  // HF Mamba2's gated norm spans the whole d_inner
  return c;
}

// ---- Qwen3-Next / Qwen3.5 ----------------------------------------------------------------------

/// Defaults of one Qwen config class.
struct QwenDefaults {
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads;
  int64_t experts, top_k, moe_intermediate, shared_intermediate;
};
constexpr QwenDefaults kQwen3Next{151936, 2048, 5632, 48, 16, 2, 512, 10, 512, 512};
constexpr QwenDefaults kQwen35{248320, 4096, 12288, 32, 16, 4, 0, 0, 0, 0};
constexpr QwenDefaults kQwen35Moe{248320, 2048, 0, 40, 16, 2, 256, 8, 512, 512};

std::vector<BlockKind> qwen_layers(const Keys& k, int64_t n) {
  std::vector<BlockKind> layers;
  if (k.has("layer_types")) {
    const json& v = *k.get("layer_types");
    if (!v.is_array()) fail(k.name("layer_types"), " is ", brief(v), ", expected a list");
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string what = k.name("layer_types") + "[" + std::to_string(i) + "]";
      if (!v[i].is_string()) fail(what, " is ", brief(v[i]), ", expected a string");
      const std::string s = v[i].get<std::string>();
      if (s == "linear_attention") layers.push_back(BlockKind::kGdn);
      else if (s == "full_attention" || s == "attention") layers.push_back(BlockKind::kAttention);
      else fail(what, " is \"", s, "\", expected linear_attention or full_attention");
    }
    if (static_cast<int64_t>(layers.size()) != n)
      fail(k.name("layer_types"), " has ", layers.size(), " layers, expected num_hidden_layers ", n);
    return layers;
  }
  const int64_t interval = k.integer("full_attention_interval", 4);
  positive(k, "full_attention_interval", interval);
  for (int64_t i = 0; i < n; ++i)
    layers.push_back((i + 1) % interval ? BlockKind::kGdn : BlockKind::kAttention);
  return layers;
}

/// rotary_dim and rope_theta from rope_parameters (transformers v5, Qwen3.5) or the older
/// top-level rope_theta / partial_rotary_factor / rope_scaling.
void qwen_rope(const Keys& k, AttentionConfig& a) {
  double theta = k.number("rope_theta", 10000.0), factor = k.number("partial_rotary_factor", 0.25);
  std::string theta_name = k.name("rope_theta"), factor_name = k.name("partial_rotary_factor");
  std::string type = "default", type_name = k.name("rope_scaling");
  if (const json* rp = k.get("rope_parameters")) {
    if (!rp->is_object()) fail(k.name("rope_parameters"), " is ", brief(*rp), ", expected an object");
    const Keys r(*rp, k.prefix() + "rope_parameters.");
    if (r.has("rope_theta")) theta = r.number("rope_theta", theta), theta_name = r.name("rope_theta");
    if (r.has("partial_rotary_factor"))
      factor = r.number("partial_rotary_factor", factor), factor_name = r.name("partial_rotary_factor");
    type = r.string("rope_type", r.string("type", "default"));
    type_name = k.name("rope_parameters");
  } else if (const json* rs = k.get("rope_scaling")) {
    if (!rs->is_object()) fail(k.name("rope_scaling"), " is ", brief(*rs), ", expected an object");
    const Keys r(*rs, k.prefix() + "rope_scaling.");
    type = r.string("rope_type", r.string("type", "default"));
  }
  // mrope with equal position rows (text only) is ordinary partial RoPE (models.md §2.5).
  if (type != "default" && type != "mrope")
    fail(type_name, " has rope_type \"", type, "\", expected \"default\" (no RoPE scaling)");
  if (!(theta > 0)) fail(theta_name, " is ", theta, ", expected > 0");
  if (!(factor > 0 && factor <= 1)) fail(factor_name, " is ", factor, ", expected in (0, 1]");
  a.rope_theta = theta;
  a.rotary_dim = static_cast<int64_t>(std::floor(static_cast<double>(a.head_dim) * factor + 1e-9));
  if (a.rotary_dim <= 0 || a.rotary_dim % 2 != 0)
    fail(factor_name, " ", factor, " x head_dim ", a.head_dim, " = rotary dim ", a.rotary_dim,
         ", expected a positive even number");
}

ModelConfig parse_qwen(const json& j, const std::string& model_type) {
  const bool next = model_type == "qwen3_next";
  const bool wrapped = model_type == "qwen3_5" || model_type == "qwen3_5_moe";
  const json* text = &j;
  if (wrapped) {
    auto it = j.find("text_config");
    if (it == j.end() || !it->is_object())
      fail("'text_config' is ", it == j.end() ? std::string("missing") : brief(*it),
           ", expected the text model's config object (model_type ", model_type, ")");
    text = &*it;
  }
  const Keys k(*text, wrapped ? "text_config." : "");
  const std::string text_type = k.string("model_type", model_type);
  const bool moe_variant = model_type == "qwen3_5_moe" || model_type == "qwen3_5_moe_text" ||
                           text_type == "qwen3_5_moe_text";
  const QwenDefaults& d = next ? kQwen3Next : moe_variant ? kQwen35Moe : kQwen35;

  ModelConfig c;
  c.arch = next ? Arch::kQwen3Next : Arch::kQwen35;
  c.weight_prefix = wrapped ? "model.language_model." : "model.";
  c.vocab_size = k.integer("vocab_size", d.vocab);
  c.hidden_size = k.integer("hidden_size", d.hidden);
  c.num_layers = k.integer("num_hidden_layers", d.layers);
  // The wrapper class also has tie_word_embeddings; the text config's value wins when present.
  c.tie_word_embeddings = k.has("tie_word_embeddings") ? k.boolean("tie_word_embeddings", false)
                          : wrapped ? Keys(j, "").boolean("tie_word_embeddings", false)
                                    : false;
  c.norm_eps = k.number("rms_norm_eps", 1e-6);
  c.qwen_norm = true;
  c.residual_in_fp32 = false;
  c.max_position = k.integer("max_position_embeddings", 32768);
  positive(k, "num_hidden_layers", c.num_layers);
  check_common(k, c, "rms_norm_eps");
  c.layers = qwen_layers(k, c.num_layers);
  require_act(k, "hidden_act", "silu");

  GdnConfig& g = c.gdn;
  g.num_k_heads = k.integer("linear_num_key_heads", 16);
  g.num_v_heads = k.integer("linear_num_value_heads", 32);
  g.head_k_dim = k.integer("linear_key_head_dim", 128);
  g.head_v_dim = k.integer("linear_value_head_dim", 128);
  g.conv_kernel = k.integer("linear_conv_kernel_dim", 4);
  g.interleaved_proj = next;
  if (uses(c, BlockKind::kGdn)) {
    positive(k, "linear_num_key_heads", g.num_k_heads);
    positive(k, "linear_num_value_heads", g.num_v_heads);
    positive(k, "linear_key_head_dim", g.head_k_dim);
    positive(k, "linear_value_head_dim", g.head_v_dim);
    positive(k, "linear_conv_kernel_dim", g.conv_kernel);
    divides(k, "linear_num_key_heads", g.num_k_heads, "linear_num_value_heads", g.num_v_heads);
  }

  AttentionConfig& a = c.attn;
  a.num_heads = k.integer("num_attention_heads", d.heads);
  a.num_kv_heads = k.integer("num_key_value_heads", d.kv_heads);
  a.head_dim = k.integer("head_dim", 256);
  a.bias = k.boolean("attention_bias", false);
  a.output_gate = k.boolean("attn_output_gate", true);
  a.qk_norm = true;
  if (uses(c, BlockKind::kAttention)) {
    validate_attention(k, a);
    qwen_rope(k, a);
  }

  c.mlp.intermediate = k.integer("intermediate_size", d.intermediate);
  c.mlp.gated = true;
  c.mlp.bias = false;

  MoeConfig& e = c.moe;
  std::set<int64_t> mlp_only;
  int64_t step = 1;
  if (next || moe_variant) {
    e.num_experts = k.integer("num_experts", d.experts);
    e.top_k = k.integer("num_experts_per_tok", d.top_k);
    e.expert_intermediate = k.integer("moe_intermediate_size", d.moe_intermediate);
    e.shared_intermediate = k.integer("shared_expert_intermediate_size", d.shared_intermediate);
    e.norm_topk_prob = k.boolean("norm_topk_prob", true);
    e.sigmoid_router = false;
    e.routed_scaling_factor = 1.0;
    step = k.integer("decoder_sparse_step", 1);
    if (const json* v = k.get("mlp_only_layers")) {
      if (!v->is_array()) fail(k.name("mlp_only_layers"), " is ", brief(*v), ", expected a list");
      for (size_t i = 0; i < v->size(); ++i) {
        const std::string what = k.name("mlp_only_layers") + "[" + std::to_string(i) + "]";
        const int64_t l = Keys::as_integer((*v)[i], what);
        if (l < 0 || l >= c.num_layers)
          fail(what, " is ", l, ", expected a layer index in [0, ", c.num_layers, ")");
        mlp_only.insert(l);
      }
    }
  }
  if (e.num_experts < 0) fail(k.name("num_experts"), " is ", e.num_experts, ", expected >= 0");
  if (e.num_experts > 0) positive(k, "decoder_sparse_step", step);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.qwen_mlp.push_back(e.num_experts > 0 && !mlp_only.count(i) && (i + 1) % step == 0
                             ? BlockKind::kMoe
                             : BlockKind::kMlp);
  if (uses(c, BlockKind::kMlp)) positive(k, "intermediate_size", c.mlp.intermediate);
  if (uses(c, BlockKind::kMoe)) validate_moe(k, e, "num_experts", "shared_expert_intermediate_size");
  return c;
}

/// model_type from the key, else from architectures[0] (older exports).
std::string model_type_of(const json& j) {
  if (auto it = j.find("model_type"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) fail("'model_type' is ", brief(*it), ", expected a string");
    return it->get<std::string>();
  }
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() &&
                                         (*it)[0].is_string()) {
    const std::string a = (*it)[0].get<std::string>();
    if (a == "NemotronHForCausalLM") return "nemotron_h";
    if (a == "Mamba2ForCausalLM") return "mamba2";
    if (a == "Qwen3NextForCausalLM") return "qwen3_next";
    if (a == "Qwen3_5ForConditionalGeneration") return "qwen3_5";
    if (a == "Qwen3_5ForCausalLM") return "qwen3_5_text";
    if (a == "Qwen3_5MoeForConditionalGeneration") return "qwen3_5_moe";
    if (a == "Qwen3_5MoeForCausalLM") return "qwen3_5_moe_text";
    fail("'architectures'[0] is \"", a, "\" and 'model_type' is missing, expected one of "
         "NemotronHForCausalLM, Mamba2ForCausalLM, Qwen3NextForCausalLM, Qwen3_5*");
  }
  fail("'model_type' is missing, expected one of nemotron_h, mamba2, qwen3_next, qwen3_5, "
       "qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text");
}

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kNemotronH: return "nemotron_h";
    case Arch::kMamba2: return "mamba2";
    case Arch::kQwen3Next: return "qwen3_next";
    case Arch::kQwen35: return "qwen3_5";
  }
  return "unknown";
}

const char* block_name(BlockKind k) {
  switch (k) {
    case BlockKind::kMamba2: return "mamba2";
    case BlockKind::kGdn: return "gdn";
    case BlockKind::kAttention: return "attention";
    case BlockKind::kMlp: return "mlp";
    case BlockKind::kMoe: return "moe";
  }
  return "unknown";
}

ModelConfig parse_config(const json& j) {
  if (!j.is_object()) fail("expected a JSON object, got ", j.type_name());
  const std::string type = model_type_of(j);
  ModelConfig c;
  if (type == "nemotron_h") c = parse_nemotron_h(j);
  else if (type == "mamba2") c = parse_mamba2(j);
  else if (type == "qwen3_next" || type == "qwen3_5" || type == "qwen3_5_text" ||
           type == "qwen3_5_moe" || type == "qwen3_5_moe_text")
    c = parse_qwen(j, type);
  else
    fail("'model_type' is \"", type, "\", expected one of nemotron_h, mamba2, qwen3_next, "
         "qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text");
  c.model_type = type;
  return c;
}

ModelConfig parse_config_of(const Checkpoint& ck) {
  try {
    return parse_config(ck.config());
  } catch (const ConfigError& e) {
    std::string m = e.what();
    if (m.rfind("config: ", 0) == 0) m.erase(0, 8);
    const bool synthetic = ck.dir().rfind("random-weights:", 0) == 0;  // Checkpoint::random
    throw ConfigError(ck.dir() + (synthetic ? " config: " : "/config.json: ") + m);
  }
}

}  // namespace replayssm::engine
