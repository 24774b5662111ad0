// Greedy tokens on the device (kernels.h greedy_rows): each row's argmax, so that a greedy decode
// step downloads one id per row instead of the row's vocab floats.
#include <cub/block/block_reduce.cuh>

#include <climits>
#include <cmath>

#include "cuda/kernels.h"
#include "cuda/launch_check.h"

namespace replayssm::engine::cuda {
namespace {

constexpr int kThreads = 256;

/// One block per row. Each thread walks its columns in increasing order keeping the first
/// largest; cub::ArgMax then prefers the larger value and, on ties, the smaller column: the
/// lowest id among the row's maxima, as std::max_element on the host (sample_token at
/// temperature 0).
__global__ void __launch_bounds__(kThreads)
    greedy_rows_kernel(const float* __restrict__ logits, int64_t V, int32_t* __restrict__ out) {
  using Pair = cub::KeyValuePair<int32_t, float>;
  using Reduce = cub::BlockReduce<Pair, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  Pair best(INT32_MAX, -INFINITY);
  int bad = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) {
    const float v = row[i];
    bad |= !isfinite(v);
    if (v > best.value) best = Pair(static_cast<int32_t>(i), v);
  }
  const Pair top = Reduce(tmp).Reduce(best, cub::ArgMax());
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) out[blockIdx.x] = -1;
  } else if (threadIdx.x == 0) {
    out[blockIdx.x] = top.key;
  }
}

}  // namespace

void greedy_rows(const float* logits, int64_t rows, int64_t V, int32_t* out, cudaStream_t s) {
  if (rows == 0) return;
  greedy_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(logits, V, out);
  check_launch("greedy_rows");
}

}  // namespace replayssm::engine::cuda
