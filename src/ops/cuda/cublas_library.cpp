// cublas(): dlopen and dlsym of the cuBLAS entry points (see cublas_library.h).
#include "ops/cuda/cublas_library.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace tpllama::cuda {
namespace {

#define TPLLAMA_STRINGIFY_(x) #x
#define TPLLAMA_STRINGIFY(x) TPLLAMA_STRINGIFY_(x)
constexpr const char* kFileName = "libcublas.so." TPLLAMA_STRINGIFY(CUBLAS_VER_MAJOR);

// The directory of the shared object that holds `symbol` ("" when it cannot be told).
std::string directory_of(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

void* open_library() {
  std::string tried;
  for (const std::string& path :
       {std::string(kFileName),
        directory_of(reinterpret_cast<const void*>(&cudaGetDeviceCount)) + kFileName,
        std::string(TPLLAMA_CUBLAS_DIR) + kFileName}) {
    if (void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* why = dlerror();
    tried += "\n  " + path + ": " + (why != nullptr ? why : "not found");
  }
  fail("cuBLAS could not be opened; the GPU path needs ", kFileName,
       " (the cuBLAS of the CUDA toolkit this binary was built with) on LD_LIBRARY_PATH. Tried:",
       tried);
}

template <typename Fn>
void resolve(void* handle, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr)
    fail(kFileName, " has no ", name,
         " (a cuBLAS older than the headers this binary was built with?)");
}

CublasLibrary load() {
  void* handle = open_library();
  CublasLibrary lib;
  resolve(handle, lib.create, "cublasCreate_v2");
  resolve(handle, lib.destroy, "cublasDestroy_v2");
  resolve(handle, lib.set_stream, "cublasSetStream_v2");
  resolve(handle, lib.set_workspace, "cublasSetWorkspace_v2");
  resolve(handle, lib.gemm_ex, "cublasGemmEx");
  resolve(handle, lib.status_name, "cublasGetStatusName");
  resolve(handle, lib.status_string, "cublasGetStatusString");
  return lib;  // the handle stays open for the life of the process
}

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary lib =
      load();  // a failed load throws and is tried again on the next call
  return lib;
}

const char* cublas_file_name() {
  return kFileName;
}

}  // namespace tpllama::cuda
