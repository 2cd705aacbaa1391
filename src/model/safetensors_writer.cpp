// safetensors writer: JSON header padded to 8 bytes, then each tensor's bytes in order.
#include "model/safetensors_writer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tpllama {
namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void write_converted(std::ofstream& out, const float* src, int64_t n, DType dtype) {
  if (dtype == DType::kF32) {
    out.write(reinterpret_cast<const char*>(src), static_cast<std::streamsize>(n * 4));
    return;
  }
  std::vector<uint16_t> half(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    half[static_cast<size_t>(i)] = dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
  out.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(n * 2));
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    fail("cannot write weights as ", dtype_name(dtype), " (use f32, f16 or bf16)");
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    TPLLAMA_CHECK(static_cast<size_t>(numel(t.shape)) == t.count, "tensor '", t.name, "' has ", t.count,
                  " elements for shape of ", numel(t.shape));
    uint64_t bytes = static_cast<uint64_t>(numel(t.shape)) * dtype_size(dtype);
    header[t.name] = {{"dtype", safetensors_dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot write ", tmp);
    uint64_t len = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const TensorToWrite& t : tensors) write_converted(out, t.data, numel(t.shape), dtype);
    out.flush();
    if (!out) fail("error while writing ", tmp, " (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace tpllama
