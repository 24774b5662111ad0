// Strict reader for the safetensors format (https://github.com/huggingface/safetensors, format
// described in DESIGN.md §5 / reference models.md §3): 8-byte little-endian header length N, N
// bytes of UTF-8 JSON (trailing spaces allowed), then the byte buffer. The file is memory-mapped;
// tensors are read-only views into the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "replayssm/engine/errors.h"

namespace replayssm::engine {

/// safetensors dtype strings that the engine can convert to float32. Every other string of the
/// format (F8_E4M3, I64, ...) is parsed and reported by name but rejected by to_float32().
enum class StDType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2,
                     kU16, kU32, kU64, kOther };

/// One header entry.
struct StTensor {
  std::string name;
  std::string dtype_name;  ///< exactly as in the header, e.g. "BF16"
  StDType dtype = StDType::kOther;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  ///< data_offsets, relative to the byte buffer
  int64_t numel() const;
};

/// A memory-mapped safetensors file, validated at open:
///  - file at least 8 bytes; N <= 100,000,000 and 8 + N <= file size;
///  - header valid UTF-8 JSON object; every entry has dtype (known string), shape (non-negative
///    integers), data_offsets [begin, end] with begin <= end;
///  - end - begin == numel * element size; sorted by offset the entries tile [0, buffer size)
///    exactly (no gap, no overlap), and 8 + N + buffer end == file size;
///  - no duplicate names; "__metadata__" (string -> string) is kept, not a tensor.
/// Throws CheckpointError naming the file and the tensor on any violation.
/// Details: trailing JSON whitespace after the object is accepted (the writer pads with
/// spaces); duplicate keys are detected at every level of the header (a tensor listed twice, or
/// one entry with two "dtype" keys); keys of an entry other than dtype, shape and data_offsets
/// are ignored, as the reference reader does; sub-byte dtypes (F4, F6_*) must fill whole bytes.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  /// Header entry; CheckpointError if absent.
  const StTensor& info(const std::string& name) const;
  /// Raw little-endian bytes of a tensor inside the mapping (not necessarily aligned).
  const uint8_t* data(const std::string& name) const;
  /// The tensor converted to float32 (F32, F16, BF16, F64 accepted; others: CheckpointError).
  std::vector<float> to_float32(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  const uint8_t* buffer_ = nullptr;  // start of the byte buffer
  std::map<std::string, StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// Writes a safetensors file (F32 or BF16 data, header padded with spaces to a multiple of 8).
/// Used by tests to build good and malformed files, and by tools that save float32 tensors.
/// Data is laid out like the reference writer (larger element size first, then by name).
/// Throws CheckpointError naming the tensor for another dtype, a value count that is not the
/// shape's numel, a negative dimension or a repeated name, and naming the file if it cannot be
/// written.
struct StWriteTensor {
  std::string name;
  std::string dtype_name;  ///< "F32" or "BF16"
  std::vector<int64_t> shape;
  std::vector<float> values;  ///< numel values, converted (BF16: round to nearest even)
};
void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace replayssm::engine
