// CUDA runtime helpers of the benchmark: every call checked (a failure throws BenchError naming
// the call, file and line), and RAII owners of device memory, streams, events and graphs.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace replayssm::bench {

/// Any failure of the benchmark (CUDA call, bad argument, failed sanity check).
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess)
    throw BenchError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

#define BENCH_CUDA(call) ::replayssm::bench::cuda_check((call), #call, __FILE__, __LINE__)

/// An owned device allocation (cudaMalloc), freed on destruction.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes) : bytes_(bytes) {
    BENCH_CUDA(cudaMalloc(&ptr_, bytes == 0 ? 16 : bytes));
  }
  ~DeviceMemory() { reset(); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void reset() noexcept {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A non-blocking stream.
class Stream {
 public:
  Stream() { BENCH_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { BENCH_CUDA(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

/// A timing event.
class Event {
 public:
  Event() { BENCH_CUDA(cudaEventCreate(&e_)); }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) const { BENCH_CUDA(cudaEventRecord(e_, s)); }
  /// Milliseconds from `start` to this event (both completed).
  float since(const Event& start) const {
    float ms = 0.0f;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

/// An instantiated CUDA graph.
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraph_t graph) { BENCH_CUDA(cudaGraphInstantiate(&exec_, graph, 0)); }
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  void launch(cudaStream_t s) const { BENCH_CUDA(cudaGraphLaunch(exec_, s)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace replayssm::bench
