// CUDA graphs: a decode step recorded once and replayed by one launch (GPU only).
#pragma once

#include "core/device_context.h"

namespace tpllama::ops {

// A recording of the work a context's device was given between begin_capture and end_capture,
// replayed by one launch (a CUDA graph). Only where graphs_supported(ctx): on a GPU.
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  bool empty() const { return exec_ == nullptr; }

 private:
  friend Graph end_capture(const DeviceContext& ctx);
  friend void launch(const DeviceContext& ctx, const Graph& graph);
  void* exec_ = nullptr;  // cudaGraphExec_t
};
bool graphs_supported(const DeviceContext& ctx);
// Starts recording the context's stream: the ops that follow are recorded, not run. A failure
// inside must be followed by abort_capture.
void begin_capture(const DeviceContext& ctx);
Graph end_capture(const DeviceContext& ctx);
// Ends a recording that failed part-way, discarding it and the error it left.
void abort_capture(const DeviceContext& ctx);
void launch(const DeviceContext& ctx, const Graph& graph);

}  // namespace tpllama::ops
