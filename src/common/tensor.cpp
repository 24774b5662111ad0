#include "replayssm/tensor.h"

#include <algorithm>
#include <sstream>

#include "replayssm/errors.h"

namespace replayssm {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF64: return "float64";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::kCUDA ? "cuda" : "cpu"; }

// A view's rank is trusted only up to kMaxDims: a corrupt ndim must not read past the arrays.
static int rank_of(const TensorView& t) { return t.ndim < 0 ? 0 : std::min(t.ndim, TensorView::kMaxDims); }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_of(*this); ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank_of(*this) - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

std::string TensorView::describe() const {
  if (empty()) return "(absent)";
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank_of(*this); ++i) os << (i ? ", " : "") << shape[i];
  if (ndim > kMaxDims || ndim < 0) os << ", ... (rank " << ndim << ")";
  os << "] " << dtype_name(dtype) << " " << device_name(device);
  return os.str();
}

TensorView TensorView::unsqueeze(int dim) const {
  check<ShapeError>(ndim < kMaxDims && dim >= 0 && dim <= ndim, "unsqueeze(", dim, ") of a rank-",
                    ndim, " view");
  TensorView out = *this;
  out.ndim = ndim + 1;
  for (int i = ndim; i > dim; --i) {
    out.shape[i] = shape[i - 1];
    out.stride[i] = stride[i - 1];
  }
  out.shape[dim] = 1;
  out.stride[dim] = dim < ndim ? stride[dim] * shape[dim] : 1;
  return out;
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  check<ShapeError>(shape.size() <= TensorView::kMaxDims, "make_view: rank ", shape.size(),
                    " exceeds ", TensorView::kMaxDims);
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t st = 1;
  for (int j = t.ndim - 1; j >= 0; --j) {
    t.stride[j] = st;
    st *= t.shape[j];
  }
  return t;
}

}  // namespace replayssm
