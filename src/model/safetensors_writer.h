// Writes safetensors files: the format tpllama reads natively, which convert and shard produce.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tpllama {

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // f32 source, converted to the file dtype while writing
  size_t count = 0;             // elements at data; must equal the shape's product
};

// Bytes already in their file dtype.
struct RawTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
};

// Both write atomically: to path + ".tmp", then renamed. dtype is F32, F16 or BF16.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, DType dtype);
void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors);

}  // namespace tpllama
