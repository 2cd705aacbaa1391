// Writes safetensors files: the format tpllama reads natively, which convert and shard produce.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
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

// A safetensors file written tensor by tensor, in the order of a header given up front, so that a
// checkpoint larger than memory can be re-encoded one tensor at a time. Written to path + ".tmp"
// and renamed by finish(); a writer destroyed unfinished removes it.
class SafetensorsStreamWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::kF32;
    std::vector<int64_t> shape;
  };
  SafetensorsStreamWriter(std::string path, std::vector<Entry> entries);
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;
  // The next entry's bytes; its name, dtype and size must be the entry's.
  void write(const RawTensor& tensor);
  void finish();

 private:
  std::string path_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
  std::unique_ptr<std::ofstream> out_;
};

// Both write atomically: to path + ".tmp", then renamed. dtype is F32, F16, BF16 or I8: an int8
// checkpoint (config.h's kInt8QuantMethod), its matrices quantized by append_int8, the rest F32.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       DType dtype);
// f32 values as a tensor of dtype F32, F16 or BF16 (rounded to nearest even).
RawTensor encode_tensor(const TensorToWrite& tensor, DType dtype);
// config.json's torch_dtype of weights held as dtype (f32, f16, bf16).
const char* torch_dtype_name(DType dtype);
// Appends matrix `name` (rows, cols) of f32 w quantized as the int8 GEMM holds it: I8 `name` and
// F32 `name`_scale. Refuses a NaN or Inf, naming the element.
void append_int8(std::vector<RawTensor>& out, const std::string& name, int64_t rows, int64_t cols,
                 const float* w);
void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors);

}  // namespace tpllama
