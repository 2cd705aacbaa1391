// Element types of weights and activations, and host conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tpllama {

// kI8: quantized weight values (symmetric, with f32 scales beside them; ops/cpu/gemm.h).
enum class DType { kF32, kF16, kBF16, kI32, kI8 };

size_t dtype_size(DType dtype);
std::string dtype_name(DType dtype);
// Parses a safetensors dtype string ("F32", "F16", "BF16", "I32", "I8"); throws naming the value.
DType parse_safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(DType dtype);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of src (of dtype) into float.
void convert_to_f32(const void* src, DType dtype, size_t n, float* dst);

}  // namespace tpllama
