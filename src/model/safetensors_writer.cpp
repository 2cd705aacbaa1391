// safetensors writer: JSON header padded to 8 bytes, then each tensor's bytes in order.
#include "model/safetensors_writer.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/shard_table.h"
#include "ops/weight.h"

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
  for (size_t i = 0; i < n; ++i)
    half[i] = dtype == DType::kBF16 ? f32_to_bf16(t.data[i]) : f32_to_f16(t.data[i]);
  return out;
}

}  // namespace

RawTensor encode_tensor(const TensorToWrite& t, DType dtype) {
  TPLLAMA_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
                "cannot encode '", t.name, "' as ", dtype_name(dtype));
  TPLLAMA_CHECK(static_cast<size_t>(numel(t.shape)) == t.count, "tensor '", t.name, "' has ",
                t.count, " elements for shape of ", numel(t.shape));
  return {t.name, t.shape, dtype, converted(t, dtype)};
}

const char* torch_dtype_name(DType dtype) {
  return dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
}

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, std::vector<Entry> entries)
    : path_(std::move(path)), entries_(std::move(entries)) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    const uint64_t bytes = static_cast<uint64_t>(numel(e.shape)) * dtype_size(e.dtype);
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  out_ = std::make_unique<std::ofstream>(path_ + ".tmp", std::ios::binary | std::ios::trunc);
  if (!*out_) fail("cannot write ", path_, ".tmp");
  const uint64_t len = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(len >> (8 * i));
  out_->write(reinterpret_cast<const char*>(le), 8);
  out_->write(text.data(), static_cast<std::streamsize>(text.size()));
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (!out_) return;
  out_.reset();
  std::error_code ignored;
  std::filesystem::remove(path_ + ".tmp", ignored);
}

void SafetensorsStreamWriter::write(const RawTensor& t) {
  TPLLAMA_CHECK(out_ && next_ < entries_.size(), "write of '", t.name, "' past the header's ",
                entries_.size(), " tensors");
  const Entry& e = entries_[next_++];
  TPLLAMA_CHECK(t.name == e.name && t.dtype == e.dtype &&
                    t.bytes.size() == static_cast<size_t>(numel(e.shape)) * dtype_size(e.dtype),
                "tensor '", t.name, "' (", t.bytes.size(),
                " bytes) is not the header's next entry '", e.name, "'");
  out_->write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
  if (!*out_) fail("error while writing ", path_, ".tmp (disk full?)");
}

void SafetensorsStreamWriter::finish() {
  TPLLAMA_CHECK(out_ && next_ == entries_.size(), "finish after ", next_, " of ", entries_.size(),
                " tensors");
  out_->flush();
  if (!*out_) fail("error while writing ", path_, ".tmp (disk full?)");
  out_.reset();
  std::filesystem::rename(path_ + ".tmp", path_);
}

void write_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  std::vector<SafetensorsStreamWriter::Entry> entries;
  for (const RawTensor& t : tensors) {
    TPLLAMA_CHECK(t.bytes.size() == static_cast<size_t>(numel(t.shape)) * dtype_size(t.dtype),
                  "tensor '", t.name, "' has ", t.bytes.size(), " bytes for its shape");
    entries.push_back({t.name, t.dtype, t.shape});
  }
  SafetensorsStreamWriter writer(path, std::move(entries));
  for (const RawTensor& t : tensors) writer.write(t);
  writer.finish();
}

void append_int8(std::vector<RawTensor>& out, const std::string& name, int64_t rows, int64_t cols,
                 const float* w) {
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(w[i]))
      fail("cannot quantize ", name, ": element ", i, " (row ", i / cols, ", column ", i % cols,
           ") is ", std::isnan(w[i]) ? "NaN" : "infinite", "; the source checkpoint is damaged");
  const int64_t groups = ops::int8_scale_cols(cols);
  RawTensor q{
      name, {rows, cols}, DType::kI8, std::vector<uint8_t>(static_cast<size_t>(rows * cols))};
  RawTensor scales{int8_scale_name(name),
                   {rows, groups},
                   DType::kF32,
                   std::vector<uint8_t>(static_cast<size_t>(rows * groups) * sizeof(float))};
  ops::quantize_int8_weight(w, rows, cols, reinterpret_cast<int8_t*>(q.bytes.data()),
                            reinterpret_cast<float*>(scales.bytes.data()));
  out.push_back(std::move(q));
  out.push_back(std::move(scales));
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16 && dtype != DType::kI8)
    fail("cannot write weights as ", dtype_name(dtype), " (use f32, f16, bf16 or int8)");
  std::vector<RawTensor> raw;
  for (const TensorToWrite& t : tensors) {
    TPLLAMA_CHECK(static_cast<size_t>(numel(t.shape)) == t.count, "tensor '", t.name, "' has ",
                  t.count, " elements for shape of ", numel(t.shape));
    if (dtype == DType::kI8 && stored_quantized(t.name, t.shape.size()))
      append_int8(raw, t.name, t.shape[0], t.shape[1], t.data);
    else
      raw.push_back(encode_tensor(t, dtype == DType::kI8 ? DType::kF32 : dtype));
  }
  write_safetensors(path, raw);
}

}  // namespace tpllama
