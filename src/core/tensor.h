// Tensor: a non-owning view (data pointer, shape, dtype, device). Buffer: the owner of memory on
// one device, allocated once at start-up and viewed through Tensors everywhere else.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/device_context.h"
#include "core/dtype.h"

namespace tpllama {

constexpr int kMaxDims = 4;

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
         Device device = Device::kCpu);

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t size(int dim) const { return shape_[static_cast<size_t>(dim)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr; }

  // Rows [begin, begin + count) along dim 0 of a row-major tensor.
  Tensor rows(int64_t begin, int64_t count) const;
  // Same data, new shape with the same number of elements.
  Tensor reshape(std::initializer_list<int64_t> shape) const;
  std::string shape_string() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  int ndim_ = 0;
  std::array<int64_t, kMaxDims> shape_{};
};

// Memory with one owner: 64-byte aligned host memory, or device memory adopted from its allocator
// (ops::allocate) together with the function that frees it.
class Buffer {
 public:
  using Release = void (*)(void*);

  Buffer() = default;
  explicit Buffer(size_t nbytes);  // host
  Buffer(void* data, size_t nbytes, Device device, Release release);
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Tensor view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  struct Free {
    Free() : release(nullptr) {}
    explicit Free(Release r) : release(r) {}
    void operator()(void* p) const;
    Release release;
  };
  std::unique_ptr<void, Free> data_;
  size_t nbytes_ = 0;
  Device device_ = Device::kCpu;
};

}  // namespace tpllama
