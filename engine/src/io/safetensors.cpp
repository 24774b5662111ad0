// The safetensors reader (validating, memory-mapped) and the float32/bf16 writer.
// Format and validation rules: reference models.md §3 and the comments in safetensors.h.
#include "replayssm/engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace replayssm::engine {
namespace {

using json = nlohmann::json;

// Tensor data is little-endian and read with plain copies.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

/// The reference reader's limit on the header length.
constexpr uint64_t kMaxHeader = 100'000'000;

/// One dtype string of the format: its enum value and its size in bits.
struct DTypeInfo {
  const char* name;
  StDType dtype;
  int bits;
};

/// Every dtype string of the current safetensors format, in the format's own order.
constexpr DTypeInfo kDTypes[] = {
    {"BOOL", StDType::kBool, 8},      {"F4", StDType::kOther, 4},
    {"F6_E2M3", StDType::kOther, 6},  {"F6_E3M2", StDType::kOther, 6},
    {"U8", StDType::kU8, 8},          {"I8", StDType::kI8, 8},
    {"F8_E5M2", StDType::kF8E5M2, 8}, {"F8_E4M3", StDType::kF8E4M3, 8},
    {"F8_E8M0", StDType::kOther, 8},  {"I16", StDType::kI16, 16},
    {"U16", StDType::kU16, 16},       {"F16", StDType::kF16, 16},
    {"BF16", StDType::kBF16, 16},     {"I32", StDType::kI32, 32},
    {"U32", StDType::kU32, 32},       {"F32", StDType::kF32, 32},
    {"C64", StDType::kOther, 64},     {"F64", StDType::kF64, 64},
    {"I64", StDType::kI64, 64},       {"U64", StDType::kU64, 64},
};

const DTypeInfo* find_dtype(const std::string& s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return &d;
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

/// A short rendering of a JSON value for error messages.
std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

template <class... Parts>
[[noreturn]] void fail(const std::string& path, const Parts&... parts) {
  throw CheckpointError(detail::concat(path, ": ", parts...));
}

template <class... Parts>
[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const Parts&... parts) {
  throw CheckpointError(detail::concat(path, ": tensor '", name, "': ", parts...));
}

/// A JSON number that is a non-negative integer, as uint64 (false otherwise).
bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24
      const float v = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or NaN (payload kept)
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN with its sign.
uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// Owns an open descriptor and a mapping until release() is called (or dismiss()ed).
struct MapGuard {
  int& fd;
  const uint8_t*& map;
  size_t& size;
  bool armed = true;
  ~MapGuard() {
    if (!armed) return;
    if (map) munmap(const_cast<uint8_t*>(map), size);
    if (fd >= 0) close(fd);
    map = nullptr;
    fd = -1;
  }
};

/// Parses the header text, reporting the first duplicate key at any level: the reference
/// reader rejects duplicate tensor names, and nlohmann::json would keep only the last one.
json parse_header(const std::string& path, const char* begin, const char* end) {
  struct Level {
    std::string owner;  // key of this object in its parent ("" for the top level)
    std::set<std::string> keys;
  };
  std::vector<Level> stack;
  std::string last_key, dup_owner, dup_key;
  bool dup = false;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      stack.push_back({depth > 0 ? last_key : std::string(), {}});
    } else if (ev == json::parse_event_t::object_end) {
      if (!stack.empty()) stack.pop_back();
    } else if (ev == json::parse_event_t::key) {
      last_key = parsed.get<std::string>();
      if (!stack.empty() && !stack.back().keys.insert(last_key).second && !dup) {
        dup = true;
        dup_owner = stack.size() == 1 ? std::string() : stack.back().owner;
        dup_key = last_key;
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    fail(path, "header is not valid JSON: ", e.what());
  }
  if (dup) {
    if (dup_owner == "__metadata__") fail(path, "'__metadata__' has duplicate key '", dup_key, "'");
    if (dup_owner.empty()) fail_tensor(path, dup_key, "appears more than once in the header");
    fail_tensor(path, dup_owner, "duplicate key '", dup_key, "' in its header entry");
  }
  return j;
}

}  // namespace

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(path, "cannot open: ", std::strerror(errno));
  MapGuard guard{fd_, map_, size_};
  struct stat st {};
  if (fstat(fd_, &st) != 0) fail(path, "cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) fail(path, "file is ", size_, " bytes, expected at least 8 (the header length)");
  void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) fail(path, "cannot mmap ", size_, " bytes: ", std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map_[i];
  if (n > kMaxHeader)
    fail(path, "header length ", n, " exceeds the limit (expected <= ", kMaxHeader, ")");
  if (n > size_ - 8)
    fail(path, "header length ", n, " runs past the end of the file (header would end at byte ",
         8 + n, ", file is ", size_, " bytes)");
  const char* hb = reinterpret_cast<const char*>(map_ + 8);
  if (n == 0 || hb[0] != '{')
    fail(path, "header does not start with '{' (header length ", n,
         n ? detail::concat(", first byte 0x", std::hex, +static_cast<uint8_t>(hb[0])) : "", ")");
  const json header = parse_header(path, hb, hb + n);
  if (!header.is_object()) fail(path, "header is not a JSON object");

  buffer_ = map_ + 8 + n;
  const uint64_t buffer_size = size_ - 8 - n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        fail(path, "'__metadata__' is ", brief(entry), ", expected an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          fail(path, "'__metadata__' key '", k, "' is ", brief(v), ", expected a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object())
      fail_tensor(path, name, "header entry is ", brief(entry), ", expected an object");
    StTensor t;
    t.name = name;
    // dtype
    auto it = entry.find("dtype");
    if (it == entry.end()) fail_tensor(path, name, "no 'dtype'");
    if (!it->is_string()) fail_tensor(path, name, "dtype is ", brief(*it), ", expected a string");
    t.dtype_name = it->get<std::string>();
    const DTypeInfo* dt = find_dtype(t.dtype_name);
    if (!dt)
      fail_tensor(path, name, "unknown dtype '", t.dtype_name,
                  "' (expected one of BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, "
                  "F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64)");
    t.dtype = dt->dtype;
    // shape
    it = entry.find("shape");
    if (it == entry.end()) fail_tensor(path, name, "no 'shape'");
    if (!it->is_array()) fail_tensor(path, name, "shape is ", brief(*it), ", expected an array");
    uint64_t numel = 1;
    for (const auto& d : *it) {
      uint64_t v;
      if (!as_u64(d, v) || v > static_cast<uint64_t>(INT64_MAX))
        fail_tensor(path, name, "shape ", brief(*it), " has entry ", brief(d),
                    ", expected non-negative integers");
      if (__builtin_mul_overflow(numel, v, &numel))
        fail_tensor(path, name, "shape ", brief(*it), " has too many elements");
      t.shape.push_back(static_cast<int64_t>(v));
    }
    if (numel > static_cast<uint64_t>(INT64_MAX))
      fail_tensor(path, name, "shape ", brief(*it), " has too many elements");
    // data_offsets
    it = entry.find("data_offsets");
    if (it == entry.end()) fail_tensor(path, name, "no 'data_offsets'");
    if (!it->is_array() || it->size() != 2 || !as_u64((*it)[0], t.begin) ||
        !as_u64((*it)[1], t.end))
      fail_tensor(path, name, "data_offsets is ", brief(*it),
                  ", expected [begin, end] (two non-negative integers)");
    if (t.begin > t.end)
      fail_tensor(path, name, "data_offsets [", t.begin, ", ", t.end, "] has begin > end");
    uint64_t bits;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dt->bits), &bits))
      fail_tensor(path, name, "shape ", shape_str(t.shape), " has too many elements");
    if (bits % 8 != 0)
      fail_tensor(path, name, t.dtype_name, " shape ", shape_str(t.shape), " is ", bits,
                  " bits, expected whole bytes");
    if (t.end - t.begin != bits / 8)
      fail_tensor(path, name, "data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin,
                  " bytes, expected ", bits / 8, " (", t.dtype_name, " ", shape_str(t.shape), ")");
    if (t.end > buffer_size)
      fail_tensor(path, name, "data_offsets [", t.begin, ", ", t.end,
                  "] run past the end of the data buffer (buffer is ", buffer_size, " bytes)");
    tensors_.emplace(name, std::move(t));
  }

  // Sorted by offset, the tensors must tile [0, buffer_size) exactly.
  std::vector<const StTensor*> order;
  for (const auto& [name, t] : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StTensor* a, const StTensor* b) {
    if (a->begin != b->begin) return a->begin < b->begin;
    return a->end != b->end ? a->end < b->end : a->name < b->name;
  });
  uint64_t at = 0;
  const StTensor* prev = nullptr;
  for (const StTensor* t : order) {
    if (t->begin > at)
      fail_tensor(path, t->name, "gap before its data: it starts at byte ", t->begin,
                  ", expected ", at,
                  prev ? detail::concat(" (where tensor '", prev->name, "' ends)")
                       : std::string(" (the start of the buffer)"));
    if (t->begin < at)
      fail_tensor(path, t->name, "data [", t->begin, ", ", t->end,
                  ") overlaps tensor '", prev->name, "' [", prev->begin, ", ", prev->end,
                  "): starts at byte ", t->begin, ", expected ", at);
    at = t->end;
    prev = t;
  }
  if (at != buffer_size)
    fail(path, "data buffer is ", buffer_size, " bytes but the tensors end at byte ", at,
         prev ? detail::concat(" (tensor '", prev->name, "')") : std::string(" (no tensors)"),
         ": ", buffer_size - at, " trailing bytes (expected 8 + header ", n, " + ", at, " = ",
         8 + n + at, " bytes, file is ", size_, ")");
  guard.armed = false;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
  if (fd_ >= 0) close(fd_);
}

const StTensor& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail_tensor(path_, name, "not in this file");
  return it->second;
}

const uint8_t* SafetensorsFile::data(const std::string& name) const {
  return buffer_ + info(name).begin;
}

std::vector<float> SafetensorsFile::to_float32(const std::string& name) const {
  const StTensor& t = info(name);
  const uint8_t* p = buffer_ + t.begin;
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case StDType::kF32:
      if (n) std::memcpy(out.data(), p, n * 4);
      break;
    case StDType::kF16:
#pragma omp parallel for schedule(static) if (n > (size_t{1} << 20))
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_u16(p + 2 * i));
      break;
    case StDType::kBF16:
#pragma omp parallel for schedule(static) if (n > (size_t{1} << 20))
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_u16(p + 2 * i));
      break;
    case StDType::kF64:
#pragma omp parallel for schedule(static) if (n > (size_t{1} << 20))
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    default:
      fail_tensor(path_, name, "dtype ", t.dtype_name,
                  " cannot be converted to float32 (expected F32, F16, BF16 or F64)");
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before touching the file.
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.dtype_name != "F32" && t.dtype_name != "BF16")
      fail_tensor(path, t.name, "cannot write dtype '", t.dtype_name, "' (expected F32 or BF16)");
    if (t.name == "__metadata__") fail_tensor(path, t.name, "name is reserved for metadata");
    if (!seen.insert(t.name).second) fail_tensor(path, t.name, "appears more than once");
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail_tensor(path, t.name, "shape ", shape_str(t.shape), " has a negative entry");
      numel *= d;
    }
    if (static_cast<int64_t>(t.values.size()) != numel)
      fail_tensor(path, t.name, t.values.size(), " values, expected ", numel, " for shape ",
                  shape_str(t.shape));
  }
  // Like the reference writer: larger element size first, then by name.
  std::vector<const StWriteTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  auto esize = [](const StWriteTensor* t) { return t->dtype_name == "F32" ? 4 : 2; };
  std::sort(order.begin(), order.end(), [&](const StWriteTensor* a, const StWriteTensor* b) {
    return esize(a) != esize(b) ? esize(a) > esize(b) : a->name < b->name;
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const StWriteTensor* t : order) {
    const uint64_t bytes = t->values.size() * esize(t);
    header[t->name] = {{"dtype", t->dtype_name}, {"shape", t->shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(path, "cannot open for writing: ", std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<uint8_t> bytes;
  for (const StWriteTensor* t : order) {
    bytes.resize(t->values.size() * esize(t));
    if (t->dtype_name == "F32") {
      if (!bytes.empty()) std::memcpy(bytes.data(), t->values.data(), bytes.size());
    } else {
      for (size_t i = 0; i < t->values.size(); ++i) {
        const uint16_t h = f32_to_bf16(t->values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  f.close();
  if (!f) fail(path, "write failed: ", std::strerror(errno));
}

}  // namespace replayssm::engine
