// Tensor view arithmetic and the aligned host Buffer.
#include "core/tensor.h"

#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace tpllama {

Tensor::Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(static_cast<int>(shape.size())) {
  TPLLAMA_CHECK(ndim_ >= 1 && ndim_ <= kMaxDims, "ndim ", ndim_);
  size_t i = 0;
  for (int64_t s : shape) {
    TPLLAMA_CHECK(s >= 0, "negative dimension ", s);
    shape_[i++] = s;
  }
}

int64_t Tensor::numel() const {
  if (ndim_ == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= shape_[static_cast<size_t>(i)];
  return n;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  TPLLAMA_CHECK(ndim_ >= 1 && begin >= 0 && count >= 0 && begin + count <= shape_[0], "rows [",
                begin, ", ", begin + count, ") of ", shape_string());
  Tensor t = *this;
  int64_t row_elems = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  t.shape_[0] = count;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  Tensor t(data_, dtype_, shape, device_);
  TPLLAMA_CHECK(t.numel() == numel(), "reshape ", shape_string(), " to ", t.shape_string());
  return t;
}

std::string Tensor::shape_string() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << shape_[static_cast<size_t>(i)];
  os << ']';
  return os.str();
}

void Buffer::Free::operator()(void* p) const {
  if (release != nullptr)
    release(p);
  else
    std::free(p);
}

Buffer::Buffer(size_t nbytes) : nbytes_(nbytes) {
  constexpr size_t kAlign = 64;
  size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) fail("out of host memory allocating ", nbytes, " bytes");
  data_.reset(p);
}

Buffer::Buffer(void* data, size_t nbytes, Device device, Release release)
    : data_(data, Free{release}), nbytes_(nbytes), device_(device) {}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  Tensor t(data_.get(), dtype, shape, device_);
  TPLLAMA_CHECK(t.nbytes() <= nbytes_, "view ", t.shape_string(), " exceeds buffer of ", nbytes_,
                " bytes");
  return t;
}

}  // namespace tpllama
