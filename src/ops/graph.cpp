// CUDA graphs behind a device-free handle.
#include "ops/graph.h"

#include <utility>

#include "core/error.h"
#include "ops/device.h"
#include "ops/dispatch.h"
#ifdef TPLLAMA_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace tpllama::ops {

using namespace check;

Graph::~Graph() {
#ifdef TPLLAMA_HAVE_CUDA
  if (exec_ != nullptr) cuda::destroy_graph(exec_);
#endif
}

Graph::Graph(Graph&& other) noexcept : exec_(other.exec_) {
  other.exec_ = nullptr;
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    Graph dropped(std::move(*this));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

bool graphs_supported(const DeviceContext& ctx) {
  return ctx.device == Device::kCuda && cuda_built();
}

void begin_capture(const DeviceContext& ctx) {
  TPLLAMA_CHECK(graphs_supported(ctx), "graph capture on ", device_name(ctx.device));
  on_gpu("begin_capture", ctx, {});
#ifdef TPLLAMA_HAVE_CUDA
  cuda::begin_capture(ctx);
#endif
}

Graph end_capture(const DeviceContext& ctx) {
  Graph g;
  on_gpu("end_capture", ctx, {});
#ifdef TPLLAMA_HAVE_CUDA
  g.exec_ = cuda::end_capture(ctx);
#endif
  return g;
}

void abort_capture(const DeviceContext& ctx) {
#ifdef TPLLAMA_HAVE_CUDA
  if (ctx.device == Device::kCuda) cuda::abort_capture(ctx);
#endif
}

void launch(const DeviceContext& ctx, const Graph& graph) {
  TPLLAMA_CHECK(!graph.empty(), "launch of an empty graph");
  on_gpu("launch", ctx, {});
#ifdef TPLLAMA_HAVE_CUDA
  cuda::launch_graph(ctx, graph.exec_);
#endif
}

}  // namespace tpllama::ops
