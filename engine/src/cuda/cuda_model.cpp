// CudaModel: loading (the layer walk of model/layout.h, the weight loaders of model/weights.h),
// slot resets, decode steps and speculative verify / accept steps. A step copies the rows' slot
// ids and tokens into fixed device buffers, then launches the step's CUDA graph for that batch
// size and token axis (captured on its second use; the first runs eagerly) or enqueues the same
// work eagerly, and copies the logits back. Verify steps lay a row's tokens out padded to the
// widest row (activation rows b * T + t), so the SSM ops read their [batch, T, ...] views
// directly; accept() then commits the ring cursors, rolls the conv states back and advances the
// positions on the device.
#include "cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "cuda/common/ring_device.h"
#include "cuda/device.h"
#include "cuda/launch_check.h"
#include "cuda/mixers.h"
#include "cuda/moe_kernels.h"
#include "model/checks.h"
#include "model/layout.h"
#include "model/state_store.h"
#include "replayssm/engine/checkpoint.h"

namespace replayssm::engine {
namespace {

using cuda::bf16;
using cuda::check_cuda;

/// The sizes the CUDA kernels run (their headers' contracts), checked before any upload.
void check_supported(const ModelConfig& cfg, const ModelOptions& opt) {
  // State modes: checks.cpp admits the ones the CUDA kernels run, on every SSM layer kind.
  check<UnsupportedError>(opt.emulate_state || cuda_state_native(cfg, opt.state), "state mode '",
                          opt.state, "' is not built on the CUDA engine: run it with --device cpu");
  check<UnsupportedError>(opt.max_slots <= 65535, "CUDA engine: max_slots ", opt.max_slots,
                          ", expected <= 65535 (kernel batch limit)");
  const int64_t rows = int64_t{opt.max_slots} * std::max(1, opt.spec_T);
  check<UnsupportedError>(rows <= 65535, "CUDA engine: max_slots ", opt.max_slots, " x spec_T ",
                          opt.spec_T, " = ", rows,
                          " token rows per verify step, expected <= 65535 (kernel grid limit)");
  const auto moe = [](BlockKind k) { return k == BlockKind::kMoe; };
  if (std::any_of(cfg.layers.begin(), cfg.layers.end(), moe) ||
      std::any_of(cfg.qwen_mlp.begin(), cfg.qwen_mlp.end(), moe)) {
    const MoeConfig& m = cfg.moe;
    check<UnsupportedError>(m.num_experts >= 1 && m.num_experts <= cuda::kMoeMaxExperts,
                            "CUDA engine: ", m.num_experts, " MoE experts, expected 1..",
                            cuda::kMoeMaxExperts, " (routing kernel; run with --device cpu)");
    check<UnsupportedError>(m.top_k >= 1 && m.top_k <= m.num_experts, "CUDA engine: top_k ",
                            m.top_k, ", expected 1..", m.num_experts);
  }
  for (const BlockKind k : cfg.layers) {
    if (k == BlockKind::kMamba2) {
      const Mamba2Config& m = cfg.mamba;
      check<UnsupportedError>(m.d_state == 64 || m.d_state == 128, "CUDA engine: Mamba-2 d_state ",
                              m.d_state, " is not supported by the CUDA kernels (64 or 128)");
      check<UnsupportedError>(m.conv_kernel >= 1 && m.conv_kernel <= 8,
                              "CUDA engine: conv_kernel ", m.conv_kernel, ", expected 1..8");
      check<ConfigError>(m.norm_group_size > 0 && m.d_inner() % m.norm_group_size == 0,
                         "gated norm group size ", m.norm_group_size, " does not divide d_inner ",
                         m.d_inner());
    }
    if (k == BlockKind::kGdn) {
      const GdnConfig& g = cfg.gdn;
      check<UnsupportedError>(g.head_k_dim == 64 || g.head_k_dim == 128,
                              "CUDA engine: GDN head_k_dim ", g.head_k_dim,
                              " is not supported by the CUDA kernels (64 or 128)");
      check<UnsupportedError>(g.conv_kernel >= 1 && g.conv_kernel <= 8,
                              "CUDA engine: linear_conv_kernel_dim ", g.conv_kernel,
                              ", expected 1..8");
    }
    if (k == BlockKind::kAttention) {
      const AttentionConfig& a = cfg.attn;
      check<UnsupportedError>(a.head_dim >= 1 && a.head_dim <= 256, "CUDA engine: head_dim ",
                              a.head_dim, ", expected 1..256");
      check<ConfigError>(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0,
                         "num_key_value_heads ", a.num_kv_heads,
                         " does not divide num_attention_heads ", a.num_heads);
      check<ConfigError>(a.rotary_dim <= a.head_dim, "rotary dim ", a.rotary_dim,
                         " exceeds head_dim ", a.head_dim);
    }
  }
}

/// A CUDA object released when the model goes (also when its constructor throws half-way).
template <class T, cudaError_t (*Free)(T)>
struct Owned {
  T v{};
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (v) Free(v);
  }
};
cudaError_t free_host(void* p) { return cudaFreeHost(p); }

class CudaModel final : public Model {
 public:
  CudaModel(const Checkpoint& ck, const ModelOptions& options);
  ~CudaModel() override;
  const ModelConfig& config() const override { return cfg_; }
  const ModelOptions& options() const override { return opt_; }
  void reset(std::span<const int32_t> slots) override;
  void step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
            std::span<float> logits) override;
  void step_greedy(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                   std::span<int32_t> next) override;
  int64_t position(int32_t slot) const override { return position_.at(slot); }
  void verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
              std::span<const int32_t> slots, std::span<float> logits) override;
  void verify_greedy(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                     std::span<const int32_t> slots, std::span<int32_t> next) override;
  void accept(std::span<const int32_t> accepted) override;
  void skip_to_position(std::span<const int32_t> slots, int64_t n) override;
  StepTiming time_steps(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                        int32_t steps, bool profile) override;
  StepTiming time_verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                         std::span<const int32_t> slots,
                         std::span<const std::vector<int32_t>> accepted, bool profile) override;
  int64_t device_bytes() const override { return static_cast<int64_t>(arena_.bytes()); }

 private:
  struct Sublayer {
    BlockKind kind = BlockKind::kMlp;
    const float* norm = nullptr;
    std::unique_ptr<cuda::CudaMixer> mixer;
  };
  /// A step's rows: B rows feeding T tokens each at most; speculative: a verify step.
  struct Shape {
    int64_t B = 0, T = 1;
    bool speculative = false;
    int64_t key() const { return (B * 16 + T) * 2 + (speculative ? 1 : 0); }
  };
  /// The step's device rows over io_: decode steps [ids B | tokens B]; verify steps [ids B |
  /// ntok B | tokens B*T | tok_slots B*T | tok_pos B*T] (verify_rows()).
  cuda::DeviceStep device_step(const Shape& sh) const;
  /// The step of sh's rows whose arrays are in io_. marks (profiling): records marks[0] first,
  /// marks[1] after the embedding, marks[2 + i] after sub-layer i and the last after the head,
  /// as external event nodes when captured.
  void enqueue(const Shape& sh, const std::vector<cudaEvent_t>* marks = nullptr);
  /// The step's graph (captured on first use); with marks, the profiled variant.
  cudaGraphExec_t graph_for(const Shape& sh, const std::vector<cudaEvent_t>* marks = nullptr);
  /// Captures what `work` enqueues on the stream into an instantiated graph.
  cudaGraphExec_t capture(const std::function<void()>& work);
  /// Runs accept() of the pending step from accepted_ (enqueue_accept): eagerly the first time for
  /// its (shape, discard), then from the graph captured for them.
  void launch_accept(bool discard);
  /// The accept graph of the pending shape and `discard` (captured on first use).
  cudaGraphExec_t accept_graph(bool discard);
  /// Runs a step: eagerly the first time for its shape (or always without graphs), then by
  /// replaying its graph.
  void launch_step(const Shape& sh);
  /// Copies the rows' slot ids and tokens into io_ (pinned staging, on the stream).
  void upload_rows(std::span<const int32_t> tokens, std::span<const int32_t> slots);
  /// Lays out and uploads a verify step's ids, counts and tokens (device_step) for rows padded to
  /// T tokens (enqueue derives each token row's slot and position on the device).
  void upload_verify_rows(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                          std::span<const int32_t> slots, int64_t T);
  /// Runs one step of `shape` with an event between sub-layers (StepTiming::kind_ms; the graph
  /// variant with marks), then, for a verify step (accepted: its device counts), its accept.
  void profile_step(const Shape& shape, const int32_t* accepted, bool discard, StepTiming& t);
  /// Enqueues accept() of the pending step's rows with the counts at `accepted` (device [B]):
  /// conv rollback, ring commit (and ring_discard where `discard`: some real row kept nothing),
  /// the snapshot baseline's buffer change, positions. No host synchronisation.
  void enqueue_accept(const int32_t* accepted, bool discard);
  /// Copies the first `rows` rows of the device logits to the host staging buffer and waits.
  void download_logits(int64_t rows);

  ModelConfig cfg_;
  ModelOptions opt_;
  // Declared first, released last: the stream, pinned staging, device memory.
  Owned<cudaStream_t, cudaStreamDestroy> stream_;
  Owned<void*, free_host> io_host_, logits_host_;
  cuda::DeviceArena arena_;
  std::unique_ptr<cuda::Blas> blas_;
  cuda::CudaShared sh_;
  std::vector<Sublayer> sub_;
  std::map<int64_t, cudaGraphExec_t> graphs_, profiled_graphs_;
  std::vector<cudaEvent_t> marks_;  ///< profiling events (created on first use)
  std::set<int64_t> eager_once_;  ///< step shapes (Shape::key) run at least once
  std::map<int64_t, cudaGraphExec_t> accept_graphs_;  ///< by Shape::key * 2 + discard
  std::set<int64_t> accept_eager_once_;
  bf16* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  cuda::DeviceLinear lm_head_;
  float *hidden_ = nullptr, *logits_ = nullptr;
  bf16* normed_ = nullptr;
  char* scratch_ = nullptr;
  int32_t* greedy_ = nullptr;  ///< [max_tokens] step_greedy's / verify_greedy's ids
  int32_t *io_ = nullptr, *reset_ids_ = nullptr, *ones_ = nullptr, *positions_ = nullptr;
  int32_t *accepted_ = nullptr, *snap_cur_ = nullptr;
  int64_t io_ints_ = 0;  ///< capacity of io_ and its pinned staging
  std::vector<int64_t> position_;
  // The pending verify step (accept() ends it).
  bool pending_ = false;
  // The device runs the real rows only (pad rows feed no token and touch nothing, and dropping
  // them bounds a step's rows by max_slots): pending_shape_.B rows, pending_real_[i] the caller's
  // row of device row i.
  Shape pending_shape_;
  std::vector<int32_t> pending_slots_, pending_ntok_;  ///< the caller's rows
  std::vector<int64_t> pending_real_;
  /// Starts a pending verify step of the caller's rows (pending_*), T its widest row.
  void begin_verify(std::span<const int32_t> num_tokens, std::span<const int32_t> slots);
  /// The values of the device rows, from the caller's rows (e.g. accept()'s counts).
  std::vector<int32_t> real_rows(std::span<const int32_t> per_row) const;
};

CudaModel::CudaModel(const Checkpoint& ck, const ModelOptions& opt) : opt_(opt) {
  cfg_ = parse_config_of(ck);
  opt_ = resolve_options(cfg_, opt);
  check_cuda_model(cfg_, opt_);
  const ModelLayout layout = model_layout(ck, cfg_);

  check_cuda(cudaStreamCreateWithFlags(&stream_.v, cudaStreamNonBlocking), "cudaStreamCreate");
  blas_ = std::make_unique<cuda::Blas>(stream_.v, arena_);
  const int64_t S = opt.max_slots, V = cfg_.vocab_size, H = cfg_.hidden_size;
  sh_.mode = opt.ssm;
  sh_.dt_floor = opt.dt_floor;
  sh_.state_mode = engine_state_mode(opt_.state);  // as checks.cpp admitted it (native or emulated)
  // The kernels' state dtype: the 16-bit states, the fp16sr modes' float16 checkpoint when they
  // run natively, else float32 (fp32 checkpoints of the split modes; emulated modes' storage).
  const bool sr16 = cuda_mode_native(sh_.state_mode) && sh_.state_mode.uses_sr();
  sh_.state_dtype = opt_.state == "bf16"                 ? DType::kBF16
                    : opt_.state == "fp16" || sr16 ? DType::kF16
                                                         : DType::kF32;
  sh_.slots = S;
  sh_.context = opt.max_context;
  sh_.spec_T = opt_.spec_T;
  const int64_t Tm = std::max(1, opt_.spec_T);
  sh_.max_tokens = S * Tm;
  sh_.arena = &arena_;
  sh_.cursors.config = opt_.spec_T > 0
                           ? RingConfig{opt_.ring_L, opt_.spec_T, RingMode::kSpeculative}
                           : RingConfig{opt_.ring_L, 1, RingMode::kDecode};
  sh_.cursors.config.validate();
  sh_.cursors.origin = cuda::device_view(arena_.alloc_n<int32_t>(S), DType::kI32, {S});
  sh_.cursors.h = cuda::device_view(arena_.alloc_n<int32_t>(S), DType::kI32, {S});
  sh_.cursors.is_flush = cuda::device_view(arena_.alloc_n<int8_t>(S), DType::kI8, {S});
  if (sh_.snapshots()) {
    snap_cur_ = arena_.alloc_n<int32_t>(S);
    sh_.snap_src = arena_.alloc_n<int32_t>(S);
    sh_.snap_dst = arena_.alloc_n<int32_t>(S * opt_.spec_T);
  }

  embed_ = arena_.upload_bf16(ck.load(layout.embed, {V, H}));
  for (const SublayerSpec& spec : layout.sub) {
    Sublayer s;
    s.kind = spec.kind;
    s.norm = arena_.upload_f32(ck.load(spec.norm, {H}));
    switch (spec.kind) {
      case BlockKind::kMamba2: s.mixer = cuda::make_cuda_mamba2(ck, cfg_, spec.prefix, sh_); break;
      case BlockKind::kGdn: s.mixer = cuda::make_cuda_gdn(ck, cfg_, spec.prefix, sh_); break;
      case BlockKind::kAttention:
        s.mixer = cuda::make_cuda_attention(ck, cfg_, spec.prefix, sh_);
        break;
      case BlockKind::kMlp: s.mixer = cuda::make_cuda_mlp(ck, cfg_, spec.prefix, sh_); break;
      case BlockKind::kMoe: s.mixer = cuda::make_cuda_moe(ck, cfg_, spec.prefix, sh_); break;
    }
    sub_.push_back(std::move(s));
  }
  final_norm_ = arena_.upload_f32(ck.load(layout.final_norm, {H}));
  if (layout.lm_head.empty()) {
    lm_head_ = cuda::DeviceLinear{embed_, nullptr, V, H};
  } else {
    cpu::Linear head;
    head.out = V;
    head.in = H;
    head.w = ck.load(layout.lm_head, {V, H});
    lm_head_ = arena_.upload_linear({&head});
  }

  size_t scratch = 0;
  for (const Sublayer& s : sub_) scratch = std::max(scratch, s.mixer->scratch_bytes());
  scratch_ = static_cast<char*>(arena_.alloc(scratch));
  const int64_t NT = sh_.max_tokens;
  hidden_ = arena_.alloc_n<float>(NT * H);
  normed_ = arena_.alloc_n<bf16>(NT * H);
  logits_ = arena_.alloc_n<float>(NT * V);
  io_ints_ = 2 * S + 3 * NT;
  io_ = arena_.alloc_n<int32_t>(io_ints_);
  reset_ids_ = arena_.alloc_n<int32_t>(S);
  greedy_ = arena_.alloc_n<int32_t>(NT);
  positions_ = arena_.alloc_n<int32_t>(S);
  ones_ = arena_.alloc_n<int32_t>(S);
  accepted_ = arena_.alloc_n<int32_t>(S);
  const std::vector<int32_t> ones(static_cast<size_t>(S), 1);
  check_cuda(cudaMemcpy(ones_, ones.data(), S * sizeof(int32_t), cudaMemcpyHostToDevice),
             "cudaMemcpy (engine ones)");
  // Pinned staging: io_'s contents, then accept()'s counts (apart: accept() does not wait for
  // its upload, and the next verify() rewrites the first part).
  check_cuda(cudaMallocHost(&io_host_.v, (io_ints_ + S) * sizeof(int32_t)), "cudaMallocHost");
  check_cuda(cudaMallocHost(&logits_host_.v, NT * V * sizeof(float)), "cudaMallocHost");
  position_.assign(S, 0);
  // The arena's zero-fills run on the legacy default stream, which the model's non-blocking
  // stream does not wait for.
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (engine load)");
  // Every slot starts fresh (cursors as reset_cursor(), not zeros).
  std::vector<int32_t> all(static_cast<size_t>(S));
  for (int32_t s = 0; s < S; ++s) all[s] = s;
  reset(all);
}

CudaModel::~CudaModel() {
  if (stream_.v) cudaStreamSynchronize(stream_.v);
  for (auto& [B, g] : graphs_) cudaGraphExecDestroy(g);
  for (auto& [B, g] : profiled_graphs_) cudaGraphExecDestroy(g);
  for (auto& [B, g] : accept_graphs_) cudaGraphExecDestroy(g);
  for (cudaEvent_t e : marks_) cudaEventDestroy(e);
  blas_.reset();  // before the stream goes
}

void CudaModel::reset(std::span<const int32_t> slots) {
  check<ProtocolError>(!pending_, "reset: a verify step awaits accept()");
  check_slot_ids(slots, opt_.max_slots);
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return;
  cudaStream_t s = stream_.v;
  auto* host = static_cast<int32_t*>(io_host_.v);
  std::copy(slots.begin(), slots.end(), host);
  check_cuda(cudaMemcpyAsync(reset_ids_, host, n * sizeof(int32_t), cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync (reset ids)");
  Rows rows;
  rows.slot_ids = cuda::device_view(reset_ids_, DType::kI32, {n});
  rows.stream = s;
  rows.check_device_ids = false;  // checked above, on the host
  const int32_t S = static_cast<int32_t>(opt_.max_slots);
  if (sh_.snapshots())  // a fresh slot's state is its buffer 0 (the mixers zero all of them)
    cuda::zero_slot_rows(snap_cur_, sizeof(int32_t), reset_ids_, n, S, s);
  for (auto& sub : sub_) sub.mixer->reset(rows);
  if (sh_.mode == SsmMode::kReplay) replayssm::reset(sh_.cursors, rows);
  cuda::zero_slot_rows(positions_, sizeof(int32_t), reset_ids_, n,
                       static_cast<int32_t>(opt_.max_slots), s);
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (reset)");
  for (int32_t slot : slots) position_[slot] = 0;
}

cuda::DeviceStep CudaModel::device_step(const Shape& sh) const {
  const int64_t B = sh.B, NT = sh.B * sh.T;
  cuda::DeviceStep st;
  st.n = B;
  st.T = sh.T;
  st.tokens = NT;
  st.speculative = sh.speculative;
  st.rows.slot_ids = cuda::device_view(io_, DType::kI32, {B});
  st.rows.stream = stream_.v;
  st.rows.check_device_ids = false;  // checked on the host before the upload
  st.slots = io_;
  st.positions = positions_;
  if (sh.speculative) {
    st.ntok = io_ + B;
    st.rows.num_tokens = cuda::device_view(io_ + B, DType::kI32, {B});
    st.tok_slots = io_ + 2 * B + NT;
    st.tok_pos = io_ + 2 * B + 2 * NT;
  } else {
    st.tok_slots = io_;
  }
  st.stream = stream_.v;
  st.blas = blas_.get();
  st.scratch = scratch_;
  return st;
}

void CudaModel::enqueue(const Shape& shape, const std::vector<cudaEvent_t>* marks) {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  const float eps = static_cast<float>(cfg_.norm_eps);
  cudaStream_t s = stream_.v;
  const cuda::DeviceStep st = device_step(shape);
  const int64_t B = st.n, NT = st.tokens;
  const int32_t* tokens = io_ + (shape.speculative ? 2 * B : B);
  const int32_t S = static_cast<int32_t>(opt_.max_slots);
  size_t next_mark = 0;
  const auto mark = [&] {
    if (marks)
      check_cuda(cudaEventRecordWithFlags((*marks)[next_mark++], s, cudaEventRecordExternal),
                 "cudaEventRecordWithFlags (profile)");
  };
  mark();
  if (shape.speculative)  // each token row's slot and position (io_ after the tokens)
    cuda::verify_rows(st.slots, st.ntok, positions_, B, static_cast<int32_t>(shape.T), S,
                      const_cast<int32_t*>(st.tok_slots), const_cast<int32_t*>(st.tok_pos), s);
  if (shape.speculative && sh_.snapshots())  // which buffers the SSM layers read and write
    cuda::snapshot_rows(st.slots, snap_cur_, B, static_cast<int32_t>(shape.T),
                        sh_.state_buffers(), S, sh_.snap_src, sh_.snap_dst, s);
  cuda::embed(embed_, tokens, NT, H, V, hidden_, s);
  mark();
  for (auto& sub : sub_) {
    cuda::rms_norm(hidden_, sub.norm, NT, H, eps, cfg_.qwen_norm, normed_, s);
    sub.mixer->forward(normed_, hidden_, st);
    mark();
  }
  cuda::rms_norm(hidden_, final_norm_, NT, H, eps, cfg_.qwen_norm, normed_, s);
  blas_->linear(lm_head_, normed_, NT, logits_, false);
  if (!shape.speculative) {  // verify steps commit in accept()
    if (sh_.mode == SsmMode::kReplay)
      replayssm::commit(sh_.cursors, st.rows, cuda::device_view(ones_, DType::kI32, {B}));
    cuda::advance_positions(positions_, st.slots, nullptr, B, S, s);
  }
  mark();
}

cudaGraphExec_t CudaModel::graph_for(const Shape& shape, const std::vector<cudaEvent_t>* marks) {
  std::map<int64_t, cudaGraphExec_t>& graphs = marks ? profiled_graphs_ : graphs_;
  if (auto it = graphs.find(shape.key()); it != graphs.end()) return it->second;
  const cudaGraphExec_t exec = capture([&] { enqueue(shape, marks); });
  graphs.emplace(shape.key(), exec);
  return exec;
}

void CudaModel::launch_accept(bool discard) {
  // As launch_step: eagerly the first time for (shape, discard), then from its graph.
  const int64_t key = pending_shape_.key() * 2 + (discard ? 1 : 0);
  if (!opt_.cuda_graphs || accept_eager_once_.insert(key).second)
    enqueue_accept(accepted_, discard);
  else
    check_cuda(cudaGraphLaunch(accept_graph(discard), stream_.v), "cudaGraphLaunch (accept)");
}

cudaGraphExec_t CudaModel::accept_graph(bool discard) {
  const int64_t key = pending_shape_.key() * 2 + (discard ? 1 : 0);
  auto it = accept_graphs_.find(key);
  if (it == accept_graphs_.end())
    it = accept_graphs_.emplace(key, capture([&] { enqueue_accept(accepted_, discard); })).first;
  return it->second;
}

cudaGraphExec_t CudaModel::capture(const std::function<void()>& work) {
  cudaStream_t s = stream_.v;
  check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
             "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  check_cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(err, "cudaGraphInstantiate");
  return exec;
}

void CudaModel::upload_rows(std::span<const int32_t> tokens, std::span<const int32_t> slots) {
  const int64_t B = static_cast<int64_t>(slots.size());
  auto* host = static_cast<int32_t*>(io_host_.v);
  std::copy(slots.begin(), slots.end(), host);
  std::copy(tokens.begin(), tokens.end(), host + B);
  check_cuda(cudaMemcpyAsync(io_, host, 2 * B * sizeof(int32_t), cudaMemcpyHostToDevice,
                             stream_.v),
             "cudaMemcpyAsync (step rows)");
}

void CudaModel::upload_verify_rows(std::span<const int32_t> tokens,
                                   std::span<const int32_t> num_tokens,
                                   std::span<const int32_t> slots, int64_t T) {
  const int64_t B = static_cast<int64_t>(slots.size()), NT = B * T;
  auto* host = static_cast<int32_t*>(io_host_.v);
  int32_t *ids = host, *ntok = host + B, *tok = host + 2 * B;
  int64_t next = 0;  // packed index of the row's first token
  for (int64_t b = 0; b < B; ++b) {
    ids[b] = slots[b];
    ntok[b] = num_tokens[b];
    for (int64_t t = 0; t < T; ++t) tok[b * T + t] = t < num_tokens[b] ? tokens[next + t] : 0;
    next += num_tokens[b];
  }
  check_cuda(cudaMemcpyAsync(io_, host, (2 * B + NT) * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream_.v),
             "cudaMemcpyAsync (verify rows)");
}

void CudaModel::download_logits(int64_t rows) {
  const int64_t V = cfg_.vocab_size;
  check_cuda(cudaMemcpyAsync(logits_host_.v, logits_, rows * V * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_.v),
             "cudaMemcpyAsync (logits)");
  check_cuda(cudaStreamSynchronize(stream_.v), "cudaStreamSynchronize (step)");
}

void CudaModel::launch_step(const Shape& shape) {
  // The first step of a shape runs eagerly (kernels load, cuBLAS and the SSM dispatchers
  // settle), later ones replay its graph: the same work, so the same results.
  if (opt_.cuda_graphs && !eager_once_.insert(shape.key()).second)
    check_cuda(cudaGraphLaunch(graph_for(shape), stream_.v), "cudaGraphLaunch");
  else
    enqueue(shape);
}

void CudaModel::step(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                     std::span<float> logits) {
  check<ProtocolError>(!pending_, "step: a verify step awaits accept()");
  const int64_t B = static_cast<int64_t>(slots.size()), V = cfg_.vocab_size;
  check_step(cfg_, opt_, position_, tokens, slots, logits);
  if (B == 0) return;
  if (opt_.spec_T > 0) {
    // A model built for verify steps runs every step as one (T_b = 1, all accepted): its SSM
    // rings are in speculative mode and the snapshot baseline keeps its state in buffers.
    const std::vector<int32_t> ones(static_cast<size_t>(B), 1);
    verify(tokens, ones, slots, logits);
    accept(ones);
    return;
  }
  upload_rows(tokens, slots);
  launch_step(Shape{B, 1, false});
  download_logits(B);
  std::memcpy(logits.data(), logits_host_.v, B * V * sizeof(float));
  for (int32_t slot : slots) ++position_[slot];
}

void CudaModel::step_greedy(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                            std::span<int32_t> next) {
  check<ProtocolError>(!pending_, "step_greedy: a verify step awaits accept()");
  check_step_greedy(cfg_, opt_, position_, tokens, slots, next);
  const int64_t B = static_cast<int64_t>(slots.size());
  if (B == 0) return;
  if (opt_.spec_T > 0) {  // a model built for verify steps runs its steps as verify + accept
    const std::vector<int32_t> ones(static_cast<size_t>(B), 1);
    verify_greedy(tokens, ones, slots, next);
    accept(ones);
    return;
  }
  upload_rows(tokens, slots);
  launch_step(Shape{B, 1, false});
  cuda::greedy_rows(logits_, B, cfg_.vocab_size, greedy_, stream_.v);
  // Into the pinned staging the rows were uploaded from: the copy is ordered after that upload.
  auto* host = static_cast<int32_t*>(io_host_.v);
  check_cuda(cudaMemcpyAsync(host, greedy_, B * sizeof(int32_t), cudaMemcpyDeviceToHost,
                             stream_.v),
             "cudaMemcpyAsync (greedy ids)");
  check_cuda(cudaStreamSynchronize(stream_.v), "cudaStreamSynchronize (greedy step)");
  std::copy(host, host + B, next.begin());
  for (int32_t slot : slots) ++position_[slot];
}

void CudaModel::verify(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                       std::span<const int32_t> slots, std::span<float> logits) {
  check_verify(cfg_, opt_, pending_, position_, tokens, num_tokens, slots, logits);
  begin_verify(num_tokens, slots);
  const Shape& shape = pending_shape_;
  const int64_t B = shape.B, T = shape.T, V = cfg_.vocab_size;
  if (B > 0) {  // (pad rows only: nothing to run)
    const std::vector<int32_t> ids = real_rows(slots), ntok = real_rows(num_tokens);
    upload_verify_rows(tokens, ntok, ids, T);  // pad rows feed no token: `tokens` as it is
    launch_step(shape);
    download_logits(B * T);
    const auto* host = static_cast<const float*>(logits_host_.v);
    int64_t next = 0;
    for (int64_t b = 0; b < B; ++b) {  // padded rows b * T + t -> packed
      std::memcpy(logits.data() + next * V, host + b * T * V, ntok[b] * V * sizeof(float));
      next += ntok[b];
    }
  }
  pending_ = true;
}

void CudaModel::verify_greedy(std::span<const int32_t> tokens, std::span<const int32_t> num_tokens,
                              std::span<const int32_t> slots, std::span<int32_t> next) {
  check_verify_greedy(cfg_, opt_, pending_, position_, tokens, num_tokens, slots, next);
  begin_verify(num_tokens, slots);
  const Shape& shape = pending_shape_;
  const int64_t B = shape.B, T = shape.T;
  if (B > 0) {  // (pad rows only: nothing to run)
    const std::vector<int32_t> ids = real_rows(slots), ntok = real_rows(num_tokens);
    upload_verify_rows(tokens, ntok, ids, T);
    launch_step(shape);
    cuda::greedy_rows(logits_, B * T, cfg_.vocab_size, greedy_, stream_.v);
    // Into the pinned staging past the rows just uploaded (and before accept()'s counts).
    auto* host = static_cast<int32_t*>(io_host_.v) + 2 * B + B * T;
    check_cuda(cudaMemcpyAsync(host, greedy_, B * T * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               stream_.v),
               "cudaMemcpyAsync (greedy ids)");
    check_cuda(cudaStreamSynchronize(stream_.v), "cudaStreamSynchronize (greedy verify)");
    int64_t out = 0;
    for (int64_t b = 0; b < B; ++b)  // padded rows b * T + t -> packed
      for (int64_t t = 0; t < ntok[b]; ++t) next[out++] = host[b * T + t];
  }
  pending_ = true;
}

void CudaModel::begin_verify(std::span<const int32_t> num_tokens, std::span<const int32_t> slots) {
  pending_slots_.assign(slots.begin(), slots.end());
  pending_ntok_.assign(num_tokens.begin(), num_tokens.end());
  pending_real_.clear();
  int64_t T = 1;
  for (size_t b = 0; b < slots.size(); ++b) {
    if (slots[b] < 0) continue;
    pending_real_.push_back(static_cast<int64_t>(b));
    T = std::max<int64_t>(T, num_tokens[b]);
  }
  pending_shape_ = Shape{static_cast<int64_t>(pending_real_.size()), T, true};
}

std::vector<int32_t> CudaModel::real_rows(std::span<const int32_t> per_row) const {
  std::vector<int32_t> out;
  out.reserve(pending_real_.size());
  for (int64_t b : pending_real_) out.push_back(per_row[b]);
  return out;
}

void CudaModel::enqueue_accept(const int32_t* accepted, bool discard) {
  const cuda::DeviceStep st = device_step(pending_shape_);
  const int64_t B = st.n;
  const int32_t S = static_cast<int32_t>(opt_.max_slots);
  cudaStream_t s = stream_.v;
  for (auto& sub : sub_) sub.mixer->accept(st, accepted);
  const TensorView counts = cuda::device_view(const_cast<int32_t*>(accepted), DType::kI32, {B});
  if (sh_.mode == SsmMode::kReplay) {
    // One commit for every SSM layer (rows keeping 1..T_b tokens); rows that kept nothing move by
    // ring.h's rule with n = 0 (ring_discard: a flush step's fold still rebases the origin).
    replayssm::commit(sh_.cursors, st.rows, counts);
    if (discard) replayssm::cuda::ring_discard(sh_.cursors, st.rows, counts);
  } else if (sh_.snapshots()) {
    cuda::snapshot_advance(st.slots, accepted, B, sh_.state_buffers(), S, snap_cur_, s);
  }
  cuda::advance_positions(positions_, st.slots, accepted, B, S, s);
}

void CudaModel::accept(std::span<const int32_t> accepted) {
  check<ProtocolError>(pending_, "accept: no verify step is pending");
  check_accepted(pending_slots_.data(), pending_ntok_.data(),
                 static_cast<int64_t>(pending_slots_.size()), accepted);
  const std::vector<int32_t> counts = real_rows(accepted);
  const int64_t B = pending_shape_.B;
  if (B > 0) {  // io_ still holds the verify step's rows (nothing else ran since: pending_)
    int32_t* host = static_cast<int32_t*>(io_host_.v) + io_ints_;
    std::copy(counts.begin(), counts.end(), host);
    check_cuda(cudaMemcpyAsync(accepted_, host, B * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_.v),
               "cudaMemcpyAsync (accepted)");
    const bool discard = std::find(counts.begin(), counts.end(), 0) != counts.end();
    launch_accept(discard);
    // No synchronisation: the next accept() rewrites the counts' staging only after the next
    // verify(), whose logits download waits for this stream's work, this copy included.
  }
  for (size_t b = 0; b < pending_slots_.size(); ++b)
    if (pending_slots_[b] >= 0) position_[pending_slots_[b]] += accepted[b];
  pending_ = false;
}

StepTiming CudaModel::time_verify(std::span<const int32_t> tokens,
                                  std::span<const int32_t> num_tokens,
                                  std::span<const int32_t> slots,
                                  std::span<const std::vector<int32_t>> accepted, bool profile) {
  check<UnsupportedError>(opt_.spec_T > 0,
                          "time_verify: the model was loaded without speculative steps (spec_T 0)");
  check<ProtocolError>(!pending_, "time_verify: a verify step awaits accept()");
  check_verify_rows(cfg_, opt_, position_, tokens, num_tokens, slots);
  begin_verify(num_tokens, slots);  // the device rows (pending_ stays false: nothing awaits accept)
  const Shape shape = pending_shape_;
  const int64_t B = shape.B, T = shape.T;
  // A shape never run before gets one eager, untimed step first (launch_step's rule): it keeps
  // accepted[0]'s counts.
  const bool warm = !opt_.cuda_graphs || eager_once_.count(shape.key()) != 0;
  std::vector<std::vector<int32_t>> run;
  if (!warm && !accepted.empty()) run.push_back(accepted[0]);
  run.insert(run.end(), accepted.begin(), accepted.end());
  if (profile && !accepted.empty()) run.push_back(accepted.back());  // the profiled step
  const int64_t steps = static_cast<int64_t>(run.size());
  // Every step's checks first, on a copy of the positions: nothing runs unless all would.
  const int64_t rows = static_cast<int64_t>(slots.size());
  std::vector<int64_t> pos = position_;
  for (const std::vector<int32_t>& a : run) {
    check_verify_rows(cfg_, opt_, pos, tokens, num_tokens, slots);
    check_accepted(slots.data(), num_tokens.data(), rows, a);
    for (int64_t b = 0; b < rows; ++b)
      if (slots[b] >= 0) pos[slots[b]] += a[b];
  }
  StepTiming t;
  if (B == 0) t.step_ms.assign(accepted.size(), 0.0);  // pad rows only: nothing to run
  if (B == 0 || steps == 0) return t;
  cudaStream_t s = stream_.v;
  // The counts of every step on the device before the clock starts.
  int32_t* counts = nullptr;
  check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&counts), steps * B * sizeof(int32_t), s),
             "cudaMallocAsync (time_verify counts)");
  std::vector<int32_t> flat;
  bool discard = false;
  for (const std::vector<int32_t>& a : run) {
    const std::vector<int32_t> c = real_rows(a);
    discard = discard || std::find(c.begin(), c.end(), 0) != c.end();
    flat.insert(flat.end(), c.begin(), c.end());
  }
  // The timed steps: run[first, last).
  const int64_t first = warm ? 0 : 1, last = steps - (profile ? 1 : 0);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(last - first) + 1, nullptr);
  const auto release = [&] {
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
    cudaFreeAsync(counts, s);
    cudaStreamSynchronize(s);
  };
  try {
    check_cuda(cudaMemcpyAsync(counts, flat.data(), flat.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync (time_verify counts)");
    upload_verify_rows(tokens, real_rows(num_tokens), real_rows(slots), T);
    // Step i's counts go to accepted_ (a device copy inside the timed work, as accept()'s upload)
    // so that its accept runs from the same graph as accept()'s.
    const auto accept_step = [&](int64_t i) {
      check_cuda(cudaMemcpyAsync(accepted_, counts + i * B, B * sizeof(int32_t),
                                 cudaMemcpyDeviceToDevice, s),
                 "cudaMemcpyAsync (time_verify counts)");
      launch_accept(discard);
    };
    if (!warm) {
      launch_step(shape);  // eager: the shape's first run
      accept_step(0);
      t.warmup_steps = 1;
    }
    if (opt_.cuda_graphs) {  // both graphs captured before the clock starts
      graph_for(shape);
      accept_graph(discard);
      accept_eager_once_.insert(shape.key() * 2 + (discard ? 1 : 0));
    }
    for (cudaEvent_t& e : ev) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
    check_cuda(cudaEventRecord(ev[0], s), "cudaEventRecord");
    for (int64_t i = first; i < last; ++i) {
      launch_step(shape);
      accept_step(i);
      check_cuda(cudaEventRecord(ev[i - first + 1], s), "cudaEventRecord");
    }
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (timed verify steps)");
    for (int64_t i = 0; i + first < last; ++i) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "cudaEventElapsedTime");
      t.step_ms.push_back(ms);
    }
    if (profile) profile_step(shape, counts + last * B, discard, t);
  } catch (...) {
    release();
    throw;
  }
  release();
  position_ = pos;
  return t;
}

void CudaModel::skip_to_position(std::span<const int32_t> slots, int64_t n) {
  check<ProtocolError>(!pending_, "skip_to_position: a verify step awaits accept()");
  check_skip(opt_, slots, n);
  for (int32_t slot : slots) position_[slot] = n;
  // The host mirror is exact (step() advances both), so the device copy is rewritten whole.
  std::vector<int32_t> pos(position_.begin(), position_.end());
  check_cuda(cudaMemcpyAsync(positions_, pos.data(), pos.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream_.v),
             "cudaMemcpyAsync (positions)");
  check_cuda(cudaStreamSynchronize(stream_.v), "cudaStreamSynchronize (positions)");
}

StepTiming CudaModel::time_steps(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                                 int32_t steps, bool profile) {
  check<ProtocolError>(!pending_, "time_steps: a verify step awaits accept()");
  check<UnsupportedError>(opt_.spec_T == 0,
                          "time_steps: the model was loaded for verify steps (spec_T ",
                          opt_.spec_T, "); time decode steps on a model with spec_T 0");
  const int64_t B = static_cast<int64_t>(slots.size());
  const Shape shape{B, 1, false};
  const bool warm = !opt_.cuda_graphs || eager_once_.count(shape.key()) != 0;
  check_time_steps(cfg_, opt_, position_, tokens, slots, steps, (profile ? 1 : 0) + (warm ? 0 : 1));
  StepTiming t;
  if (B == 0) return t;
  cudaStream_t s = stream_.v;
  upload_rows(tokens, slots);
  const auto advance = [&] {
    for (int32_t slot : slots) ++position_[slot];
  };
  if (!warm) {  // the batch size's eager first step (launch_step), untimed
    launch_step(shape);
    advance();
    t.warmup_steps = 1;
  }
  if (opt_.cuda_graphs) graph_for(shape);  // captured before the clock starts
  std::vector<cudaEvent_t> ev(static_cast<size_t>(steps) + 1, nullptr);
  const auto destroy = [&] {
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);
  };
  try {
    for (cudaEvent_t& e : ev) check_cuda(cudaEventCreate(&e), "cudaEventCreate");
    check_cuda(cudaEventRecord(ev[0], s), "cudaEventRecord");
    for (int32_t i = 0; i < steps; ++i) {
      launch_step(shape);
      check_cuda(cudaEventRecord(ev[i + 1], s), "cudaEventRecord");
      advance();
    }
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (timed steps)");
    for (int32_t i = 0; i < steps; ++i) {
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "cudaEventElapsedTime");
      t.step_ms.push_back(ms);
    }
  } catch (...) {
    destroy();
    throw;
  }
  destroy();
  if (!profile) return t;
  profile_step(shape, nullptr, false, t);
  advance();
  return t;
}

void CudaModel::profile_step(const Shape& shape, const int32_t* accepted, bool discard,
                             StepTiming& t) {
  cudaStream_t s = stream_.v;
  const size_t n_marks = sub_.size() + 4;  // enqueue's marks, then one after accept
  while (marks_.size() < n_marks) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreate(&e), "cudaEventCreate (profile)");
    marks_.push_back(e);
  }
  if (opt_.cuda_graphs)
    check_cuda(cudaGraphLaunch(graph_for(shape, &marks_), s), "cudaGraphLaunch (profile)");
  else
    enqueue(shape, &marks_);
  const size_t end = sub_.size() + 2;  // enqueue's last mark
  if (accepted) {
    enqueue_accept(accepted, discard);
    check_cuda(cudaEventRecord(marks_[end + 1], s), "cudaEventRecord (profile)");
  }
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize (profile)");
  const auto between = [&](size_t a, size_t b) {
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, marks_[a], marks_[b]), "cudaEventElapsedTime");
    return static_cast<double>(ms);
  };
  t.kind_ms["embed+head"] = between(0, 1) + between(end - 1, end);
  for (size_t i = 0; i < sub_.size(); ++i)
    t.kind_ms[block_name(sub_[i].kind)] += between(i + 1, i + 2);
  t.profiled_ms = between(0, end);
  if (accepted) {
    t.kind_ms["accept"] = between(end, end + 1);
    t.profiled_ms += t.kind_ms["accept"];
  }
}

}  // namespace

void check_cuda_model(const ModelConfig& cfg, const ModelOptions& options) {
  check<UnsupportedError>(replayssm::cuda::device_count() > 0,
                          "the CUDA engine needs a CUDA device (",
                          replayssm::cuda::device_summary(), "): run with --device cpu");
  check_supported(cfg, options);
}

std::unique_ptr<Model> make_cuda_model(const Checkpoint& ck, const ModelOptions& options) {
  return std::make_unique<CudaModel>(ck, options);
}
}  // namespace replayssm::engine
