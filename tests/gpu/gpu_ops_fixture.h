// The GPU op parity tests' fixture: a CUDA runtime and the CPU beside it, seeded random inputs,
// device tensors with guard regions around them (an out-of-bounds write shows), and the checks
// that an output is device memory. Parameterized by the activations' dtype; the suite is
// instantiated once, in op_parity_test.cpp. Skips, saying so, without a GPU.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <memory>
#include "core/tensor.h"
#include "model/kv_cache.h"
#include "ops/attention.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_runtime.h"
#include "ops/device.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/rows.h"
#include "ops/sampling.h"
#include "ops/weight.h"

namespace tpllama {

using cuda::CudaRuntime;
using cuda::DeviceBuffer;

constexpr int64_t kGuard = 256;         // elements of guard on each side of a GPU output
constexpr uint16_t kSentinel = 0x7fc1;  // a quiet-NaN pattern in both f32 halves and bf16

// The current GPU's streaming multiprocessors, asked of the CUDA runtime here.
inline int multiprocessor_count() {
  int device = 0, n = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  return n;
}

class GpuOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0)
      GTEST_SKIP() << "no GPU visible: the GPU op parity tests need one (label gpu)";
    runtime_ = std::make_unique<CudaRuntime>(0);
    gpu_ = runtime_->context();
  }
  DType act() const { return GetParam(); }
  double tolerance() const { return act() == DType::kF32 ? 2e-4 : 3e-2; }

  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng_);
    // bf16 activations: the reference sees the values the GPU holds.
    if (act() == DType::kBF16)
      for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  }

  // A device tensor of `act()` (or f32 / i32 when asked) holding v, with guard regions.
  struct Device {
    DeviceBuffer buffer;
    Tensor tensor;
    size_t elements = 0;
    DType dtype = DType::kF32;
  };
  Device upload(const std::vector<float>& v, std::initializer_list<int64_t> shape, DType dtype) {
    Device d;
    d.dtype = dtype;
    d.elements = v.size();
    const size_t es = dtype_size(dtype);
    d.buffer = DeviceBuffer((v.size() + 2 * kGuard) * es);
    std::vector<uint16_t> guard((kGuard * es) / 2, kSentinel);
    d.buffer.upload(guard.data(), kGuard * es, 0);
    d.buffer.upload(guard.data(), kGuard * es, (kGuard + v.size()) * es);
    if (dtype == DType::kBF16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
      d.buffer.upload(h.data(), h.size() * 2, kGuard * es);
    } else {
      d.buffer.upload(v.data(), v.size() * 4, kGuard * es);  // f32 or i32 bit patterns
    }
    d.tensor = Tensor(static_cast<char*>(d.buffer.data()) + kGuard * es, dtype, shape,
                      tpllama::Device::kCuda);
    return d;
  }
  Device upload(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return upload(v, shape, act());
  }
  Device upload_i32(const std::vector<int32_t>& v) {
    std::vector<float> bits(v.size());
    std::memcpy(bits.data(), v.data(), v.size() * 4);
    return upload(bits, {static_cast<int64_t>(v.size())}, DType::kI32);
  }

  // The candidate's values, after checking that it ran on the GPU and kept inside its buffer.
  std::vector<float> download(const Device& d) {
    runtime_->synchronize();
    EXPECT_TRUE(cuda::is_device_pointer(d.tensor.data()))
        << "the candidate's output is not device memory";
    const size_t es = dtype_size(d.dtype);
    std::vector<uint16_t> all((d.elements + 2 * kGuard) * es / 2);
    d.buffer.download(all.data(), all.size() * 2, 0);
    for (size_t i = 0; i < kGuard * es / 2; ++i) {
      EXPECT_EQ(all[i], kSentinel) << "write before the output at element " << i / (es / 2);
      EXPECT_EQ(all[all.size() - 1 - i], kSentinel) << "write past the output";
    }
    std::vector<float> out(d.elements);
    const uint16_t* body = all.data() + kGuard * es / 2;
    for (size_t i = 0; i < d.elements; ++i) {
      if (d.dtype == DType::kBF16) {
        out[i] = bf16_to_f32(body[i]);
      } else {
        std::memcpy(&out[i], body + 2 * i, 4);
      }
    }
    return out;
  }

  void expect_close(const std::vector<float>& reference, const std::vector<float>& candidate,
                    const std::string& what, double tol = 0) {
    if (tol == 0) tol = tolerance();
    ASSERT_EQ(reference.size(), candidate.size()) << what;
    for (size_t i = 0; i < reference.size(); ++i)
      ASSERT_NEAR(candidate[i], reference[i], tol * (1.0 + std::abs(reference[i])))
          << what << ": element " << i << " (reference vs candidate)";
  }

  // Block tables for sequences of these lengths, one row each, over a pool of exactly the blocks
  // they need, handed out in a shuffled order (unused entries -1: a read of one would fail the
  // parity).
  struct PagedTables {
    std::vector<int32_t> tables;
    int blocks = 0, max_blocks = 0;
  };
  PagedTables paged_tables(const std::vector<int>& seq_len, int block_size) {
    PagedTables p;
    for (int len : seq_len) {
      const int nb = (len + block_size - 1) / block_size;
      p.blocks += nb;
      p.max_blocks = std::max(p.max_blocks, nb);
    }
    std::vector<int32_t> order(static_cast<size_t>(p.blocks));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng_);
    const size_t width = static_cast<size_t>(p.max_blocks);
    p.tables.assign(seq_len.size() * width, -1);
    size_t next = 0;
    for (size_t i = 0; i < seq_len.size(); ++i)
      for (int b = 0; b < (seq_len[i] + block_size - 1) / block_size; ++b)
        p.tables[i * width + b] = order[next++];
    return p;
  }
  // Keys or values in [-1, 1) as a cache of `kv` holds them: a bf16 cache's rounded, which the
  // reference then reads in f32.
  std::vector<float> kv_pool(int64_t elements, DType kv) {
    std::vector<float> pool(static_cast<size_t>(elements));
    for (float& v : pool) {
      v = std::uniform_real_distribution<float>(-1, 1)(rng_);
      if (kv == DType::kBF16) v = bf16_to_f32(f32_to_bf16(v));
    }
    return pool;
  }

  static Tensor host(std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return Tensor(v.data(), DType::kF32, shape);
  }

  // The GPU's compute capability major, from the runtime's description ("..., compute
  // capability 9.0").
  int compute_capability_major() const {
    const std::string text = runtime_->describe(), key = "compute capability ";
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + key.size());
  }

  // Chooses the prefill attention kernel for a scope, restoring the previous choice however it
  // ends.
  struct TensorCoreAttention {
    explicit TensorCoreAttention(bool on) : previous(ops::cuda::use_tensor_core_attention(on)) {}
    ~TensorCoreAttention() { ops::cuda::use_tensor_core_attention(previous); }
    TensorCoreAttention(const TensorCoreAttention&) = delete;
    TensorCoreAttention& operator=(const TensorCoreAttention&) = delete;
    bool previous;
  };

  std::mt19937 rng_{1234};
  std::unique_ptr<CudaRuntime> runtime_;
  DeviceContext gpu_;
  DeviceContext cpu_;
};

}  // namespace tpllama
