// Peer benchmark: FlashInfer's CUDA Mamba-2 decode kernels, timed as replayssm_bench kernels and
// peers/mamba_ssm_ssu.py time (DESIGN.md §4; anchors-h200.md "How it was measured"): R*batch fp32
// slots addressed through a random permutation, R calls in one CUDA graph, µs = median replay / R,
// the copy ceiling of the same run, an fp64 check first and a finiteness check after timing.
// One kernel per executable: FI_KERNEL_SSU, selective_state_update (invokeSelectiveStateUpdate,
// algorithm Auto); FI_KERNEL_CKPT, checkpointing_ssu (FlashInfer's ReplaySSM, NPREDICTED 1, ring
// L = FI_MAX_WINDOW + 1) through launchCheckpointingSsuImpl, monolith or two-kernel split. Why one
// per executable: FlashInfer's launchers are templates keyed on dtypes only that read DIM,
// MAX_WINDOW, ... from file-scope constexprs declared before its headers (its JIT writes them into
// a config.inc); two configurations in one binary share one launcher (anchors-h200.md, deviation
// 2). build_flashinfer.sh builds each from FLASHINFER_DIR; no FlashInfer code is in this repo.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#if defined(FI_SHAPE_NANO)  // reference/models.md
#define FI_SHAPE_NAME "nano-4b"
constexpr int kH = 96, kP = 80, kN = 128, kG = 8;
#elif defined(FI_SHAPE_SUPER)
#define FI_SHAPE_NAME "super-120b"
constexpr int kH = 128, kP = 64, kN = 128, kG = 8;
#else
#error "define FI_SHAPE_NANO or FI_SHAPE_SUPER"
#endif
#ifndef FI_COMMIT
#define FI_COMMIT "unknown"
#endif

// The file-scope names FlashInfer's headers expect (csrc/*_customize_config.jinja), set as the
// anchors: fp32 state; bf16 x, B, C, y, dt, D, dt_bias (FlashInfer reads D and dt_bias as weight_t,
// dt's dtype); fp32 A; int32 slot ids; and, at the call sites, no z, dt_softplus, no PDL, no
// stochastic rounding.
using state_t = float;
using input_t = __nv_bfloat16;
using weight_t = __nv_bfloat16;
using matrixA_t = float;
using stateIndex_t = int32_t;
using state_scale_t = void;
constexpr int DIM = kP, DSTATE = kN, PHILOX_ROUNDS = 0;
#if defined(FI_KERNEL_CKPT)
using dt_t = __nv_bfloat16;
constexpr int NPREDICTED = 1, MAX_WINDOW = FI_MAX_WINDOW, HEADS_PER_GROUP = kH / kG, NGROUPS = kG;
constexpr bool ENABLE_PDL = false;
#include <flashinfer/mamba/checkpointing_ssu.cuh>
#include <flashinfer/mamba/launch_checkpointing_ssu.cuh>
#define FI_KERNEL_NAME "checkpointing"
constexpr int kL = MAX_WINDOW + NPREDICTED;  // ring rows; a step at pnat = L-1 flushes
#elif defined(FI_KERNEL_SSU)
using cuSeqlensIndex_t = int32_t;
using numAcceptedIndex_t = int32_t;
[[maybe_unused]] constexpr int NTOKENS_MTP = 1;
#include <flashinfer/mamba/selective_state_update.cuh>
#define FI_KERNEL_NAME "ssu"
constexpr int kL = 0;
#else
#error "define FI_KERNEL_SSU, or FI_KERNEL_CKPT and FI_MAX_WINDOW"
#endif

namespace {

constexpr int64_t kHPN = int64_t(kH) * kP * kN, kPN = kP * kN, kHP = kH * kP, kGN = kG * kN;

#define CK(call) check_cuda((call), #call, __LINE__)
void check_cuda(cudaError_t e, const char* call, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "flashinfer_mamba2: error: %s (line %d): %s\n", call, line,
               cudaGetErrorString(e));
  std::exit(1);
}
[[noreturn]] void fail(int code, const std::string& msg) {
  std::fprintf(stderr, "flashinfer_mamba2: error: %s\n", msg.c_str());
  std::exit(code);
}

template <class T>
struct Dev {  // a device array owned by one check or one point
  T* p = nullptr;
  size_t n;
  explicit Dev(size_t count) : n(count) { CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const {
    std::vector<T> v(n);
    CK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void put(const std::vector<T>& v) {
    CK(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
};
__host__ __device__ inline float to_f(float v) { return v; }
__host__ __device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline void set_f(float& d, float v) { d = v; }
__device__ inline void set_f(__nv_bfloat16& d, float v) { d = __float2bfloat16(v); }
template <class T>
std::vector<double> host(const Dev<T>& d) {  // the values as fp64, for the reference
  std::vector<T> v = d.get();
  return std::vector<double>(v.begin(), v.end());
}

// Counter-based uniform fill, a pure function of (seed, index): multi-GB pools need no host copy.
template <class T>
__global__ void fill_kernel(T* p, size_t n, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    set_f(p[i], lo + (hi - lo) * float((z ^ (z >> 31)) >> 40) * (1.0f / 16777216.0f));
  }
}
uint64_t g_seed = 20261130, g_fills = 0;
template <class T>
void fill(Dev<T>& d, float lo, float hi) {
  unsigned blocks = unsigned(std::clamp<size_t>((d.n + 255) / 256, 1, 8192));
  fill_kernel<<<blocks, 256>>>(d.p, d.n, lo, hi, g_seed * 1000003 + ++g_fills);
  CK(cudaGetLastError());
}
template <class T>
__global__ void count_nonfinite(const T* p, size_t n, unsigned long long* bad) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    if (!isfinite(to_f(p[i]))) atomicAdd(bad, 1ull);
}
template <class T>
unsigned long long nonfinite(const Dev<T>& d) {
  Dev<unsigned long long> bad(1);
  CK(cudaMemset(bad.p, 0, sizeof(unsigned long long)));
  count_nonfinite<<<4096, 256>>>(d.p, d.n, bad.p);
  CK(cudaGetLastError());
  return bad.get()[0];
}
double percentile(std::vector<float> s, double q) {  // linear between order statistics
  std::sort(s.begin(), s.end());
  double pos = q * (s.size() - 1);
  size_t lo = size_t(pos), hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (pos - lo) * (s[hi] - s[lo]);
}

int g_sms = 0;
// Byte models per sequence and step (anchors-h200.md "Minimal byte models", bench/byte_model.h).
constexpr double kRecord = kHP * 2 + kGN * 2 + kH * 4;          // ring x, B, processed fp32 dt
constexpr double kIo = 2.0 * kHP * 2 + kH * 2 + 2.0 * kGN * 2;  // x, dt, B, C in; y out
// SSU: state read + written, slot id. ReplaySSM at pnat p: state read, p records replayed, one
// appended, slot/start/pnat ids, and the state written on a flush (p = L-1).
[[maybe_unused]] double ssu_bytes() { return 2.0 * kHPN * 4 + kIo + 4; }
[[maybe_unused]] double ckpt_bytes(int p) {
  return kHPN * 4.0 + (p + 1) * kRecord + kIo + 12 + (p >= kL - 1 ? kHPN * 4.0 : 0);
}
// R as replayssm_bench picks it (mamba_ssm_ssu.py too): ceil(512 MiB / bytes of its smallest call,
// a replay step with no history), 2..64, so a graph moves >= 8x the 60 MB L2 between two touches.
int calls_per_graph(int batch) {
  double smallest = kHPN * 4.0 + kRecord + kIo + 4 + 9;
  return std::clamp(int(std::ceil(512.0 * (1 << 20) / (smallest * batch))), 2, 64);
}

struct Layer {  // per-head parameters in the anchors' ranges
  Dev<matrixA_t> A{kH};
  Dev<weight_t> dt_bias{kH}, D{kH};
  Layer() { fill(A, -8, -1), fill(dt_bias, 0, 0.5f), fill(D, 0.5f, 1.5f); }
};
struct Io {  // inputs, outputs and slot ids of R calls, [R][batch][...]
  int R, batch;
  Dev<input_t> x, B, C, y;
  Dev<weight_t> dt;
  Dev<int32_t> ids;
  Io(int r, int b)
      : R(r), batch(b), x(size_t(r) * b * kHP), B(size_t(r) * b * kGN), C(B.n), y(x.n),
        dt(size_t(r) * b * kH), ids(size_t(r) * b) {
    fill(x, -1, 1), fill(B, -1, 1), fill(C, -1, 1), fill(dt, -3, -1);
  }
};

// Relative L2 error over many elements; the worst element goes into the message.
struct Cmp {
  const char* what;
  double num = 0, den = 0, worst = -1, got = 0, want = 0;
  int row = 0, head = 0, k = 0;
  void add(double g, double w, int r, int h, int kk) {
    num += (g - w) * (g - w), den += w * w;
    if (std::isnan(worst) || std::fabs(g - w) <= worst) return;  // a NaN stays the worst
    worst = std::fabs(g - w), got = g, want = w, row = r, head = h, k = kk;
  }
  bool ok(double tol) const {
    double rel = std::sqrt(num / std::max(den, 1e-300));
    std::fprintf(stderr, "  %-24s rel L2 err %.2e (tol %.0e)%s; worst: row %d head %d elem %d "
                 "got %.6g want %.6g\n", what, rel, tol, rel < tol ? "" : " FAILED", row, head, k,
                 got, want);
    return rel < tol;  // false for NaN
  }
};
template <class T>
bool same(const char* what, const std::vector<T>& a, const std::vector<T>& b) {  // bit-exact
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T))) {
      std::fprintf(stderr, "  %s: FAILED, element %zu changed (%.6g -> %.6g)\n", what, i,
                   to_f(a[i]), to_f(b[i]));
      return false;
    }
  return true;
}
double softplus(double v) { return v > 20 ? v : std::log1p(std::exp(v)); }
// One Mamba-2 decode step of one head in fp64: h (P x N) <- exp(delta A) h + delta x B^T.
void ref_step(double* h, const double* x, const double* B, double delta, double A) {
  double a = std::exp(delta * A);
  for (int i = 0; i < kPN; ++i) h[i] = a * h[i] + delta * x[i / kN] * B[i % kN];
}
// The kernel's y of one head against h C + D x.
void ref_out(Cmp& c, const double* h, const double* C, double D, const double* x, const double* y,
             int r, int hd) {
  for (int p = 0; p < kP; ++p) {
    double s = D * x[p];
    for (int n = 0; n < kN; ++n) s += h[p * kN + n] * C[n];
    c.add(y[p], s, r, hd, p);
  }
}

#if defined(FI_KERNEL_SSU)
flashinfer::mamba::SelectiveStateUpdateParams params(Io& io, int r, Dev<state_t>& state,
                                                     Layer& ly) {
  flashinfer::mamba::SelectiveStateUpdateParams p;
  p.batch = io.batch, p.nheads = kH, p.dim = kP, p.dstate = kN, p.ngroups = kG;
  p.state_cache_size = state.n / kHPN, p.state_stride_batch = kHPN;
  p.x_stride_batch = p.out_stride_batch = kHP, p.dt_stride_batch = kH;
  p.B_stride_batch = p.C_stride_batch = kGN;
  size_t b0 = size_t(r) * io.batch;
  p.state = state.p, p.x = io.x.p + b0 * kHP, p.dt = io.dt.p + b0 * kH, p.B = io.B.p + b0 * kGN;
  p.C = io.C.p + b0 * kGN, p.output = io.y.p + b0 * kHP, p.state_batch_indices = io.ids.p + b0;
  p.A = ly.A.p, p.D = ly.D.p, p.dt_bias = ly.dt_bias.p, p.dt_softplus = true;
  return p;
}
void launch(flashinfer::mamba::SelectiveStateUpdateParams p, cudaStream_t s) {
  flashinfer::mamba::invokeSelectiveStateUpdate<input_t, weight_t, matrixA_t, state_t,
                                                stateIndex_t, state_scale_t>(
      p, flashinfer::mamba::SSUAlgorithm::kAuto, s);
}
// What Auto picks on sm_90 (FlashInfer's rule): the tiled simple kernel below 2 blocks per SM.
const char* ssu_route(int batch) { return batch * kH < 2 * g_sms ? "simple" : "vertical"; }

// Rows into a pool of 7 slots, pad rows (-1) among them: y of the real rows and their slots
// against fp64, every other slot bit-exact (a pad row's y is FlashInfer's zero-state step, not a
// contract: unchecked). Tolerances: y is stored in bf16 (2^-9 relative rounding): 1e-2 on the
// relative L2 error leaves ~5x margin (anchors saw 1.6-2.2e-3). The state is a few fp32 operations
// per element plus fast-math exp and softplus (anchors saw <= 3e-7): 1e-5.
bool check(const std::vector<int32_t>& ids) {
  int b = int(ids.size());
  Layer ly;
  Io io(1, b);
  Dev<state_t> pool(7 * kHPN);
  fill(pool, -1, 1);
  io.ids.put(ids);
  auto before = pool.get();
  launch(params(io, 0, pool, ly), 0);
  CK(cudaGetLastError()), CK(cudaDeviceSynchronize());
  auto after = pool.get();
  auto x = host(io.x), B = host(io.B), C = host(io.C), y = host(io.y), dt = host(io.dt);
  auto A = host(ly.A), db = host(ly.dt_bias), D = host(ly.D);
  Cmp cy{"y (real rows)"}, cs{"updated slots"};
  std::vector<double> h(kPN);
  for (int r = 0; r < b; ++r)
    for (int hd = 0; ids[r] >= 0 && hd < kH; ++hd) {
      int g = hd / (kH / kG);
      size_t so = ids[r] * kHPN + hd * kPN;
      std::copy(&before[so], &before[so] + kPN, h.begin());
      ref_step(h.data(), &x[(r * kH + hd) * kP], &B[(r * kG + g) * kN],
               softplus(dt[r * kH + hd] + db[hd]), A[hd]);
      for (int i = 0; i < kPN; ++i) cs.add(after[so + i], h[i], r, hd, i);
      std::copy(&before[so], &before[so] + kPN, &after[so]);
      ref_out(cy, h.data(), &C[(r * kG + g) * kN], D[hd], &x[(r * kH + hd) * kP],
              &y[(r * kH + hd) * kP], r, hd);
    }
  std::fprintf(stderr, "check, batch %d (Auto: %s), slots", b, ssu_route(b));
  for (int i : ids) std::fprintf(stderr, " %d", i);
  std::fprintf(stderr, ":\n");
  bool ok = cy.ok(1e-2) & cs.ok(1e-5);
  return same("other slots untouched", before, after) && ok;
}
#else
constexpr int kOldHalf = (MAX_WINDOW + 7) / 8 * 8 / 2;  // cb_old registers per lane: K_old / 2
constexpr int kTPad = (NPREDICTED + 15) / 16 * 16;      // cumAdt_vec entries per head
struct Ring {  // slots of fp32 state, FlashInfer's ring (x, B, processed dt) and cursors
  int slots;
  Dev<state_t> state;
  Dev<input_t> xc, Bc;
  Dev<float> dtc;
  Dev<int32_t> start, pnat;
  explicit Ring(int n)
      : slots(n), state(n * kHPN), xc(size_t(n) * kH * kL * kP), Bc(size_t(n) * kG * kL * kN),
        dtc(size_t(n) * kH * kL), start(n), pnat(n) {  // ring dt: softplus(-3 .. -0.5)
    fill(state, -1, 1), fill(xc, -1, 1), fill(Bc, -1, 1), fill(dtc, 0.04859f, 0.47408f);
  }
};
struct Scratch {  // the two-kernel split's caller-allocated scratch (checkpointing_ssu.cu's sizes)
  Dev<input_t> cb, cbo;
  Dev<float> cum;
  explicit Scratch(size_t rows)
      : cb(rows * kH * 32 * 8), cbo(rows * kH * 32 * kOldHalf), cum(rows * kH * kTPad) {}
};
struct Route {
  const char* name;
  int d_split;
  bool split;
};
// FlashInfer's wrapper (flashinfer/mamba/checkpointing_ssu.py): "auto" takes the split iff
// batch*nheads >= SMs; the monolith takes d_split 2 iff fp32 state, dim/2 >= 32 and
// batch*nheads <= 8*SMs.
Route route(const std::string& path, int batch) {
  if (path == "split" || (path == "auto" && batch * kH >= g_sms)) return {"two-kernel", 1, true};
  bool ds2 = kP % 2 == 0 && kP / 2 >= 32 && batch * kH <= 8 * g_sms;
  return ds2 ? Route{"monolith-ds2", 2, false} : Route{"monolith-ds1", 1, false};
}
using Params = flashinfer::mamba::checkpointing::CheckpointingSsuParams;
Params params(Io& io, int r, Ring& g, Layer& ly, Scratch* sc) {  // strides as checkpointing_ssu.cu
  Params p;
  p.batch = io.batch, p.nheads = kH, p.dim = kP, p.dstate = kN, p.ngroups = kG;
  p.state_cache_size = g.slots, p.npredicted = NPREDICTED, p.max_window = MAX_WINDOW;
  p.ring_buffer_len = kL, p.dt_softplus = true;
  size_t b0 = size_t(r) * io.batch;  // x, B, C, y: (batch, 1, ...); dt (batch, 1, H, P) tie_hdim
  p.x = io.x.p + b0 * kHP, p.dt = io.dt.p + b0 * kH, p.B = io.B.p + b0 * kGN;
  p.C = io.C.p + b0 * kGN, p.output = io.y.p + b0 * kHP, p.state_batch_indices = io.ids.p + b0;
  p.x_stride_seq = p.x_stride_token = p.out_stride_seq = p.out_stride_token = kHP;
  p.dt_stride_seq = p.dt_stride_token = kH;
  p.B_stride_seq = p.B_stride_token = p.C_stride_seq = p.C_stride_token = kGN;
  p.A = ly.A.p, p.D = ly.D.p, p.dt_bias = ly.dt_bias.p;  // tie_hdim: the kernel reads [head]
  p.state = g.state.p, p.state_stride_seq = kHPN;
  p.x_cache = g.xc.p, p.x_cache_stride_seq = int64_t(kH) * kL * kP;
  p.x_cache_stride_head = kL * kP, p.x_cache_stride_pos = kP;
  p.B_cache = g.Bc.p, p.B_cache_stride_seq = int64_t(kG) * kL * kN;
  p.B_cache_stride_group = kL * kN, p.B_cache_stride_pos = kN;
  p.dt_cache = g.dtc.p, p.dt_cache_stride_seq = kH * kL, p.dt_cache_stride_head = kL;
  p.ring_start = g.start.p, p.prev_num_accepted = g.pnat.p;
  if (sc) {  // present: the launcher takes the two-kernel path
    p.cb_scaled = sc->cb.p + b0 * kH * 32 * 8, p.cb_old = sc->cbo.p + b0 * kH * 32 * kOldHalf;
    p.cumAdt_vec = sc->cum.p + b0 * kH * kTPad;
  }
  return p;
}
// FlashInfer's dispatcher (launchCheckpointingSsu) minus its varlen specialisations, which would
// double the compile time; precompute_heads_per_cta 0: the launcher's heuristic.
void launch(Params p, const Route& rt, cudaStream_t s) {
  using namespace flashinfer::mamba::checkpointing;
  p.d_split = rt.d_split;
  if (rt.d_split == 2)
    launchCheckpointingSsuImpl<input_t, dt_t, weight_t, matrixA_t, state_t, stateIndex_t,
                               state_scale_t, 2, false>(p, 0, s);
  else
    launchCheckpointingSsuImpl<input_t, dt_t, weight_t, matrixA_t, state_t, stateIndex_t,
                               state_scale_t, 1, false>(p, 0, s);
}

// Batch 4 into 7 slots, rows at pnat 3 (its records wrap round the ring), pad, L-1 (flush) and 0,
// from known states and rings: y against fp64 (the old records replayed, then the token); the flush
// row's checkpoint against the state after its L-1 OLD records (the token stays in the ring,
// anchors-h200.md); other states bit-exact; each row's record (x, B exact; dt = softplus(dt +
// dt_bias)) appended at ring row (start + pnat) % L, and nothing else written to any ring.
// Tolerances: y 1e-2 as for the SSU; the checkpoint 1e-2 too (FlashInfer replays through bf16
// tensor-core MMAs; anchors saw 1.6e-3); dt 1e-4 (its softplus is __logf(1 + __expf(x)), ~1e-5
// relative at delta ~0.05; a wrong row would be O(1)).
bool check(const Route& rt) {
  const std::vector<int32_t> ids = {5, -1, 2, 6}, st = {0, 3, 3, 1, 2, kL - 2, 0},  // per slot:
      pn = {1, 4, kL - 1, 0, 2, 3, 0};                                               // start, pnat
  Layer ly;
  Io io(1, 4);
  Ring g(7);
  Scratch sc(4);
  io.ids.put(ids), g.pnat.put(pn), g.start.put(st);
  auto s0 = g.state.get(), dc0 = g.dtc.get();
  auto xc0 = g.xc.get(), bc0 = g.Bc.get();
  launch(params(io, 0, g, ly, rt.split ? &sc : nullptr), rt, 0);
  CK(cudaGetLastError()), CK(cudaDeviceSynchronize());
  auto s1 = g.state.get(), dc1 = g.dtc.get();
  auto xc1 = g.xc.get(), bc1 = g.Bc.get(), xin = io.x.get(), bin = io.B.get();
  auto x = host(io.x), B = host(io.B), C = host(io.C), y = host(io.y), dt = host(io.dt);
  auto A = host(ly.A), db = host(ly.dt_bias), D = host(ly.D);
  std::vector<double> xr(xc0.begin(), xc0.end()), br(bc0.begin(), bc0.end());  // rings before
  Cmp cy{"y (real rows)"}, cs{"checkpoint (flush row)"}, cd{"appended dt"};
  std::vector<double> h(kPN);
  for (int r = 0; r < 4; ++r) {
    int slot = ids[r], p = slot < 0 ? 0 : pn[slot], app = slot < 0 ? 0 : (st[slot] + p) % kL;
    for (int hd = 0; slot >= 0 && hd < kH; ++hd) {
      int gr = hd / (kH / kG);
      size_t so = slot * kHPN + hd * kPN, ro = (size_t(slot) * kH + hd) * kL;
      std::copy(&s0[so], &s0[so] + kPN, h.begin());
      for (int j = 0; j < p; ++j) {  // the old records, oldest first
        int row = (st[slot] + j) % kL;
        ref_step(h.data(), &xr[(ro + row) * kP], &br[((size_t(slot) * kG + gr) * kL + row) * kN],
                 dc0[ro + row], A[hd]);
      }
      if (p + NPREDICTED > MAX_WINDOW) {
        for (int i = 0; i < kPN; ++i) cs.add(s1[so + i], h[i], r, hd, i);
        std::copy(&s0[so], &s0[so] + kPN, &s1[so]);
      }
      double delta = softplus(dt[r * kH + hd] + db[hd]);
      cd.add(dc1[ro + app], delta, r, hd, app), dc1[ro + app] = dc0[ro + app];
      ref_step(h.data(), &x[(r * kH + hd) * kP], &B[(r * kG + gr) * kN], delta, A[hd]);
      ref_out(cy, h.data(), &C[(r * kG + gr) * kN], D[hd], &x[(r * kH + hd) * kP],
              &y[(r * kH + hd) * kP], r, hd);
      std::copy_n(&xin[(r * kH + hd) * kP], kP, &xc0[(ro + app) * kP]);  // the expected record
    }
    for (int gr = 0; slot >= 0 && gr < kG; ++gr)
      std::copy_n(&bin[(r * kG + gr) * kN], kN, &bc0[((size_t(slot) * kG + gr) * kL + app) * kN]);
  }
  std::fprintf(stderr, "check %s, L %d, batch 4 (pnat 3, pad, %d, 0):\n", rt.name, kL, kL - 1);
  bool ok = cy.ok(1e-2) & cs.ok(1e-2) & cd.ok(1e-4) & same("other states", s0, s1);
  ok &= same("ring x", xc0, xc1) & same("ring B", bc0, bc1);
  return same("ring dt", dc0, dc1) && ok;
}
#endif

// R calls in one graph: 2 eager passes (synchronised, so an error surfaces outside the graph),
// capture, outputs poisoned with NaN (the finiteness check after timing then also proves every
// output was written), 3 warm replays, `replays` timed back to back with an event between.
template <class Enqueue>
std::vector<float> time_graph(cudaStream_t s, Enqueue&& enqueue, Dev<input_t>& out, int replays) {
  CK(cudaDeviceSynchronize());  // the fills ran on the legacy stream, s does not wait for it
  for (int i = 0; i < 2; ++i) enqueue(s), CK(cudaGetLastError()), CK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  // Relaxed: FlashInfer's launchers set function attributes and query the device while capturing.
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  enqueue(s);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaMemsetAsync(out.p, 0xFF, out.n * sizeof(input_t), s));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, s));
  std::vector<cudaEvent_t> ev(replays + 1);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  CK(cudaEventRecord(ev[0], s));
  for (int i = 0; i < replays; ++i) CK(cudaGraphLaunch(exec, s)), CK(cudaEventRecord(ev[i + 1], s));
  CK(cudaStreamSynchronize(s));
  std::vector<float> ms(replays);
  for (int i = 0; i < replays; ++i) CK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaGraphExecDestroy(exec)), CK(cudaGraphDestroy(graph));
  return ms;
}

// Copy ceiling of the same run: cudaMemcpyAsync device to device, eager (a graph-captured memcpy
// goes to the copy engines: anchors-h200.md), median of 10 after 2, bytes read + written.
double copy_ceiling_gbps(size_t bytes, cudaStream_t s) {
  Dev<float> a(bytes / 4), b(bytes / 4);
  fill(a, -1, 1);
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)), CK(cudaEventCreate(&e1));
  std::vector<float> ms(10);
  for (int i = -2; i < 10; ++i) {
    CK(cudaEventRecord(e0, s));
    CK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e1, s)), CK(cudaEventSynchronize(e1));
    if (i >= 0) CK(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  CK(cudaEventDestroy(e0)), CK(cudaEventDestroy(e1));
  return 2.0 * bytes / (percentile(ms, 0.5) * 1e-3) / 1e9;
}

struct Row {
  std::string variant, mode, route;
  int h;  // replayed records; < 0: none (SSU) or per row (mixed)
  double bytes;
  int batch = 0, R = 0;
  double us = 0, p10 = 0, p90 = 0, gbps = 0, pct = 0;
};
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  for (size_t a = 0, b = 0; b < s.size(); a = b + 1)
    b = std::min(s.find(',', a), s.size()), v.push_back(s.substr(a, b - a));
  return v;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string shape, out, commit = "unknown", batches = "1,8,32,64,128,256,512";
  std::string pnats = kL ? "mixed" : "", paths = kL ? "monolith,split" : "";
  int replays = 25;
  // A whole number >= 1, or a usage error naming the option.
  auto count = [](const std::string& opt, const std::string& v) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 1 || n > (1 << 20))
      fail(2, opt + " '" + v + "': expected a whole number >= 1");
    return static_cast<int>(n);
  };
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "-h" || a == "--help") {
      std::printf("usage: %s --shape " FI_SHAPE_NAME " [--batch 1,8,...] [--out FILE.json] "
                  "[--commit SHA] [--replays 25] [--seed N]%s\n",
                  argv[0], kL ? " [--pnat mixed,0..L-1] [--path monolith,split,auto]" : "");
      return 0;
    }
    if (v.empty()) fail(2, a + " needs a value");
    if (a == "--shape") shape = v;
    else if (a == "--batch") batches = v;
    else if (a == "--out") out = v;
    else if (a == "--commit") commit = v;
    else if (a == "--replays") replays = count(a, v);
    else if (a == "--seed") g_seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--pnat" && kL) pnats = v;
    else if (a == "--path" && kL) paths = v;
    else fail(2, "unknown option " + a + " (" FI_KERNEL_NAME " build)");
  }
  if (shape != FI_SHAPE_NAME)
    fail(2, "this executable is the " FI_KERNEL_NAME " build for --shape " FI_SHAPE_NAME
            ", not '" + shape + "'");
  std::vector<int> bs;
  for (auto& b : split(batches)) bs.push_back(count("--batch", b));
  std::vector<std::string> pv = split(pnats), rv = split(paths);
  for (auto& p : pv)
    if (p != "mixed" && (p.empty() || p.find_first_not_of("0123456789") != p.npos ||
                         std::atoi(p.c_str()) > kL - 1))
      fail(2, "--pnat " + p + ": 'mixed' or an integer 0.." + std::to_string(kL - 1));
  for (auto& p : rv)
    if (p != "monolith" && p != "split" && p != "auto")
      fail(2, "--path " + p + ": monolith, split or auto");

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9) fail(1, std::string("built for sm_90a only; device 0 is ") + prop.name);
  g_sms = prop.multiProcessorCount;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::fprintf(stderr, "flashinfer_mamba2: %s (%d SMs), FlashInfer %s, %s, %s, L %d, seed %llu\n",
               prop.name, g_sms, FI_COMMIT, FI_KERNEL_NAME, FI_SHAPE_NAME, kL,
               (unsigned long long)g_seed);

#if defined(FI_KERNEL_SSU)  // on an H200: the vertical (TMA) kernel, then the tiled simple one
  bool ok = check({5, -1, 2}) & check({4});
#else  // every route that can be timed: both d_splits of the monolith, the split
  bool ok = check(route("monolith", 1 << 20)) & check(route("split", 1));
  if (route("monolith", 1).d_split == 2) ok &= check(route("monolith", 1));
#endif
  if (!ok) fail(1, "FlashInfer does not match the fp64 recurrence (see above)");

  const size_t copy_bytes = size_t(4) << 30;
  double copy = copy_ceiling_gbps(copy_bytes, s);
  std::fprintf(stderr, "copy ceiling (cudaMemcpyAsync D2D 4 GiB, read + write): %.0f GB/s\n", copy);

  std::vector<Row> rows;
  auto t0 = std::chrono::steady_clock::now();
  for (int batch : bs) {
    int R = calls_per_graph(batch), slots = R * batch;
    Layer ly;
    Io io(R, batch);
    std::vector<int32_t> perm(slots);  // call r takes the r-th run of a random slot permutation
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(g_seed + batch);
    std::shuffle(perm.begin(), perm.end(), rng);
    io.ids.put(perm);
    auto finish = [&](Row r, const std::vector<float>& ms, unsigned long long bad) {
      if (bad) fail(1, r.variant + ", batch " + std::to_string(batch) + ": " +
                           std::to_string(bad) + " non-finite values after timing");
      r.batch = batch, r.R = R, r.us = percentile(ms, 0.5) * 1e3 / R;
      r.p10 = percentile(ms, 0.1) * 1e3 / R, r.p90 = percentile(ms, 0.9) * 1e3 / R;
      r.gbps = r.bytes / r.us / 1e3, r.pct = 100 * r.gbps / copy;
      std::printf("%s %-34s batch %4d R %2d %-12s %9.2f us (p10 %.2f, p90 %.2f) %5.0f GB/s %3.0f%%"
                  " copy\n", FI_SHAPE_NAME, r.variant.c_str(), batch, R, r.route.c_str(), r.us,
                  r.p10, r.p90, r.gbps, r.pct);
      std::fflush(stdout);
      rows.push_back(r);
    };
#if defined(FI_KERNEL_SSU)
    Dev<state_t> pool(slots * kHPN);
    fill(pool, -1, 1);
    auto ms = time_graph(s, [&](cudaStream_t st) {
      for (int r = 0; r < R; ++r) launch(params(io, r, pool, ly), st);
    }, io.y, replays);
    finish({"flashinfer-ssu", "step", ssu_route(batch), -1, ssu_bytes() * batch}, ms,
           nonfinite(io.y) + nonfinite(pool));
#else
    Ring g(slots);
    Scratch sc(slots);
    std::vector<int32_t> start(slots), pnat(slots);
    for (auto& v : start) v = int32_t(rng() % kL);  // random ring origins
    g.start.put(start);
    for (auto& pn : pv) {  // mixed: each slot's pnat uniform in 1..L-1 (1/(L-1) of rows flush)
      double bytes = 0;    // a call's rows are a random subset: the mean over all the slots
      for (auto& v : pnat) v = pn == "mixed" ? 1 + int(rng() % (kL - 1)) : std::atoi(pn.c_str());
      for (int v : pnat) bytes += ckpt_bytes(v) / R;
      g.pnat.put(pnat);
      int h = pn == "mixed" ? -1 : std::atoi(pn.c_str());
      for (auto& path : rv) {
        Route rt = route(path, batch);
        auto ms = time_graph(s, [&](cudaStream_t st) {
          for (int r = 0; r < R; ++r)
            launch(params(io, r, g, ly, rt.split ? &sc : nullptr), rt, st);
        }, io.y, replays);
        std::string tag = h < 0 ? "mixed" : "p" + pn;
        finish({"flashinfer-replayssm-L" + std::to_string(kL) + "-" + tag + "-" + path,
                h < 0 ? "mixed" : h == kL - 1 ? "flush" : "step", rt.name, h, bytes},
               ms, nonfinite(io.y) + nonfinite(g.state) + nonfinite(g.dtc));
      }
    }
#endif
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (out.empty()) return 0;
  auto dir = std::filesystem::path(out).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  FILE* f = std::fopen(out.c_str(), "w");
  if (!f) fail(1, "cannot write " + out);
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f, "{\"bench\": \"kernels\", \"commit\": \"%s\", \"gpu\": \"%s\", \"date\": "
               "\"%s\", \"copy_bandwidth_gbps\": %.1f,\n \"copy\": \"cudaMemcpyAsync D2D of %zu "
               "bytes, eager, median, read + written\",\n \"peer\": {\"name\": \"flashinfer\", "
               "\"commit\": \"%s\", \"kernel\": \"%s\", \"L\": %d, \"sms\": %d},\n \"args\": "
               "{\"batch\": \"%s\", \"pnat\": \"%s\", \"path\": \"%s\", \"seed\": %llu, "
               "\"replays\": %d},\n \"seconds\": %.1f,\n \"rows\": [\n", commit.c_str(), prop.name,
               date, copy, copy_bytes, FI_COMMIT, FI_KERNEL_NAME, kL, g_sms, batches.c_str(),
               pnats.c_str(), paths.c_str(), (unsigned long long)g_seed, replays, secs);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::string L = kL ? std::to_string(kL) : "null", h = r.h >= 0 ? std::to_string(r.h) : "null";
    std::fprintf(f, "  {\"family\": \"mamba2\", \"shape\": \"%s\", \"batch\": %d, \"variant\": "
                 "\"%s\", \"L\": %s, \"state\": \"fp32/fp32\", \"us\": %.4f, \"us_p10\": %.4f, "
                 "\"us_p90\": %.4f, \"bytes\": %.0f, \"gbps\": %.2f, \"pct_copy_bw\": %.3f, "
                 "\"speedup\": null, \"baseline\": null, \"mode\": \"%s\", \"h\": %s, \"route\": "
                 "\"%s\", \"calls_per_graph\": %d, \"steps_per_call\": 1, \"pool_slots\": %d, "
                 "\"replays\": %d}%s\n", FI_SHAPE_NAME, r.batch, r.variant.c_str(), L.c_str(), r.us,
                 r.p10, r.p90, r.bytes, r.gbps, r.pct, r.mode.c_str(), h.c_str(), r.route.c_str(),
                 r.R, r.R * r.batch, replays, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, " ]}\n");
  if (std::fclose(f)) fail(1, "cannot write " + out);
  std::fprintf(stderr, "wrote %zu rows to %s (%.0f s)\n", rows.size(), out.c_str(), secs);
  return 0;
} catch (const std::exception& e) {  // FlashInfer's launchers throw on bad arguments
  std::fprintf(stderr, "flashinfer_mamba2: error: %s\n", e.what());
  return 1;
}
