// Rank 0's lines on what a session set up, in the order it sets them up: the tokenizer, the device,
// the model as loaded, the KV cache, with the warnings that go with them. Text only: the choices
// are made elsewhere (placement, kv_budget, Session).
#pragma once

#include <string>

#include "core/dtype.h"
#include "session/placement.h"

namespace tpllama {

class Communicator;
class KvCache;
class LlamaModel;
class ModelText;
namespace ops {
class DeviceRuntime;
}

// "tokenizer: PATH (N tokens); chat template: ...; stop ids: ..."
void log_model_text(const ModelText& text);

// "device: rank 0 on DEVICE; TP and stage tensors over BACKEND", and the ranks sharing a GPU.
void log_device(const ops::DeviceRuntime& device, const Placement& placement);

// "model SOURCE (the directory, or "(random weights)"): its shape; loaded in S s; threads; weights,
// kernels; decode steps as CUDA graphs or not (tp_comm: whether its collectives can be recorded)",
// and a warning where int8 runs portable kernels.
void log_model_loaded(const std::string& source, const LlamaModel& model,
                      const Communicator& tp_comm, DType dtype, int threads, double seconds);

// "KV cache (DTYPE): N blocks of B tokens = ... sequences at the full context of C tokens; set up
// in S s", and a warning for a block larger than the context.
void log_kv_cache(const KvCache& cache, Device device, int context, double seconds);

}  // namespace tpllama
