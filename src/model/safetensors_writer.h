// Writes a safetensors file from host arrays: the format tpllama reads natively and that convert
// and (later) shard produce.
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

// Writes atomically: to path + ".tmp", then renamed. dtype is F32, F16 or BF16.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, DType dtype);

}  // namespace tpllama
