// Read-only safetensors file, memory-mapped: the header is parsed and every entry validated
// (dtype, shape, offsets inside the file, no overlaps) before anyone touches tensor bytes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tpllama {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // Pointer to the first byte of a tensor's data inside the mapping.
  const uint8_t* data(const TensorInfo& t) const { return data_ + t.begin; }
  uint64_t file_size() const { return size_; }

 private:
  void parse_header(uint64_t header_len);

  std::string path_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace tpllama
