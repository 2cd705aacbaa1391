// safetensors parsing: 8-byte little-endian header length, JSON header, raw data. Every offset is
// checked against the file before use so a corrupt file gives an error, never a crash.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"

namespace tpllama {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& e, const std::string& path,
                       uint64_t data_size) {
  auto bad = [&](const std::string& why) -> TensorInfo {
    fail(path, ": tensor '", name, "': ", why);
  };
  if (!e.is_object()) return bad("header entry is not an object");
  if (!e.contains("dtype") || !e["dtype"].is_string()) return bad("missing 'dtype'");
  if (!e.contains("shape") || !e["shape"].is_array()) return bad("missing 'shape'");
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
    return bad("'data_offsets' must be [begin, end]");
  TensorInfo t;
  t.name = name;
  try {
    t.dtype = parse_safetensors_dtype(e["dtype"].get<std::string>());
  } catch (const Error& err) {
    return bad(err.what());
  }
  for (const auto& d : e["shape"]) {
    if (!d.is_number_unsigned())
      return bad("shape entries must be non-negative integers, got " + describe_json(d));
    t.shape.push_back(d.get<int64_t>());
  }
  for (const auto& o : e["data_offsets"])
    if (!o.is_number_unsigned())
      return bad("data offsets must be non-negative integers, got " + describe_json(o));
  t.begin = e["data_offsets"][0].get<uint64_t>();
  t.end = e["data_offsets"][1].get<uint64_t>();
  if (t.begin > t.end)
    return bad("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
               "] run backwards");
  if (t.end > data_size)
    return bad("data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
               "] run past the end of the data section (" + std::to_string(data_size) +
               " bytes): the file is truncated or corrupt");
  uint64_t expected = dtype_size(t.dtype);
  for (int64_t d : t.shape)
    if (__builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected))
      return bad("shape " + describe_json(e["shape"]) + " is too large to address");
  if (t.end - t.begin != expected)
    return bad("holds " + std::to_string(t.end - t.begin) + " bytes but shape and dtype need " +
               std::to_string(expected));
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      fail("tensor '", name, "': shape overflows");
    n *= d;
  }
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  require_regular_file(path, "weights file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC |
                                 O_NONBLOCK);  // never waits, should it become a FIFO meanwhile
  if (fd_ < 0) fail("cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    fail("cannot stat ", path, ": ", std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd_);
    fail(path, ": file is ", size_, " bytes, too short for a safetensors header");
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    ::close(fd_);
    fail("cannot mmap ", path, ": ", std::strerror(err));
  }
  map_ = static_cast<uint8_t*>(m);
  try {
    parse_header(read_u64_le(map_));
  } catch (...) {
    ::munmap(map_, size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::parse_header(uint64_t header_len) {
  if (header_len > kMaxHeaderBytes)
    fail(path_, ": header length ", header_len, " bytes is over the safetensors limit of ",
         kMaxHeaderBytes, " bytes (100 MiB): not a safetensors file, or a corrupt one");
  if (header_len > size_ - 8)
    fail(path_, ": header length ", header_len, " runs past the end of the file (", size_,
         " bytes): the file is truncated or not safetensors");
  data_ = map_ + 8 + header_len;
  data_size_ = size_ - 8 - header_len;
  nlohmann::json header;
  try {
    header = parse_json(std::string_view(reinterpret_cast<const char*>(map_ + 8), header_len),
                        path_ + " header");
  } catch (const nlohmann::json::exception& e) {
    fail(path_, ": header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) fail(path_, ": header is not a JSON object");
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    TensorInfo t = parse_entry(name, entry, path_, data_size_);
    tensors_.emplace(name, std::move(t));
  }
  for (const auto& [name, t] : tensors_)
    if (t.end > t.begin) by_offset.push_back(&t);  // empty tensors occupy no bytes
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  // Sorted by start, a tensor overlaps an earlier one exactly when it starts before the furthest
  // end seen so far.
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (furthest != nullptr && t->begin < furthest->end)
      fail(path_, ": tensors '", furthest->name, "' [", furthest->begin, ", ", furthest->end,
           ") and '", t->name, "' [", t->begin, ", ", t->end, ") overlap");
    if (furthest == nullptr || t->end > furthest->end) furthest = t;
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, ": no tensor named '", name, "'");
  return it->second;
}

}  // namespace tpllama
