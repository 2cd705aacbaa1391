// safetensors writer: JSON header padded to 8 bytes, then each tensor's bytes in order.
#include "model/safetensors_writer.h"

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

std::vector<uint8_t> converted(const TensorToWrite& t, DType dtype) {
  const size_t n = t.count;
  std::vector<uint8_t> out(n * dtype_size(dtype));
  if (dtype == DType::kF32) {
    std::copy_n(reinterpret_cast<const uint8_t*>(t.data), out.size(), out.data());
    return out;
  }
  auto* half = reinterpret_cast<uint16_t*>(out.data());
  for (size_t i = 0; i < n; ++i) half[i] = dtype == DType::kBF16 ? f32_to_bf16(t.data[i]) : f32_to_f16(t.data[i]);
  return out;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    TPLLAMA_CHECK(t.bytes.size() == static_cast<size_t>(numel(t.shape)) * dtype_size(t.dtype), "tensor '", t.name,
                  "' has ", t.bytes.size(), " bytes for its shape");
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot write ", tmp);
    const uint64_t len = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const RawTensor& t : tensors)
      out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    out.flush();
    if (!out) fail("error while writing ", tmp, " (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    fail("cannot write weights as ", dtype_name(dtype), " (use f32, f16 or bf16)");
  std::vector<RawTensor> raw;
  for (const TensorToWrite& t : tensors) {
    TPLLAMA_CHECK(static_cast<size_t>(numel(t.shape)) == t.count, "tensor '", t.name, "' has ", t.count,
                  " elements for shape of ", numel(t.shape));
    raw.push_back({t.name, t.shape, dtype, converted(t, dtype)});
  }
  write_safetensors(path, raw);
}

}  // namespace tpllama
