// The start-up lines of a session, as rank 0 writes them.
#include "session/session_log.h"

#include <iomanip>
#include <sstream>

#include "core/byte_size.h"
#include "core/log.h"
#include "engine/block_pool.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/model_text.h"
#include "ops/device.h"
#include "ops/graph.h"
#include "ops/matmul.h"
#include "parallel/communicator.h"
#include "text/tokenizer.h"

namespace tpllama {

void log_model_text(const ModelText& text) {
  log::info("tokenizer: " + text.tokenizer().path() + " (" +
            std::to_string(text.tokenizer().vocab_size()) + " tokens); chat template: " +
            (text.has_chat_template() ? text.chat_template_source() : std::string("none")) +
            "; stop ids: " + text.stop_ids_origin());
}

void log_device(const ops::DeviceRuntime& device, const Placement& placement) {
  const bool gpu = device.context().device == Device::kCuda;
  const int sharers = placement.sharers;
  log::info("device: rank 0 on " + device.describe() + "; TP and stage tensors over " +
            (placement.comm == CommBackend::kNccl ? "NCCL"
             : !gpu                               ? "MPI"
                                                  : "MPI, staged through host memory") +
            (sharers > 1 && gpu ? "; " + std::to_string(sharers) + " ranks share its GPU" : ""));
}

void log_model_loaded(const std::string& source, const LlamaModel& model,
                      const Communicator& tp_comm, DType dtype, int threads, double seconds) {
  const LlamaConfig& c = model.config();
  const DeviceContext& ctx = model.context();
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "model " << source << ": " << model_type_name(c.model_type) << ", " << c.n_layers
     << " layers, dim " << c.dim << ", " << c.n_heads << " heads (" << c.n_kv_heads << " kv";
  if (c.head_dim * c.n_heads != c.dim) os << ", head_dim " << c.head_dim;
  os << "), vocab " << c.vocab_size << ", context " << c.max_seq_len;
  if (c.sliding_window > 0) os << ", sliding window " << c.sliding_window;
  os << "; loaded in " << seconds << " s; " << threads << " threads per rank; weights "
     << dtype_name(dtype);
  if (ctx.device == Device::kCpu) os << ", GEMM kernel " << ops::cpu_gemm_kernel_name();
  if (dtype == DType::kI8)
    os << " (int8: " << ops::cpu_int8_kernel_name(1) << " at decode, "
       << ops::cpu_int8_kernel_name(ops::cpu_int8_quantized_rows()) << " from "
       << ops::cpu_int8_quantized_rows() << " rows)";
  if (ops::graphs_supported(ctx))
    os << "; decode steps "
       << (model.graphs_on() && tp_comm.graph_capturable() ? "as CUDA graphs" : "launched eagerly");
  log::info(os.str());
  // Measured with gemm_int8_bench --portable: the portable int8 kernels run 2-34 times slower than
  // the portable f32 ones; int8 then only saves memory.
  if (dtype == DType::kI8 && !ops::cpu_avx512_kernels())
    log::warn(
        "this CPU has no AVX-512, so --dtype int8 runs portable kernels, several times slower than "
        "--dtype "
        "f32 or bf16 here: use int8 only to fit the model in memory");
}

void log_kv_cache(const KvCache& cache, Device device, int context, double seconds) {
  const int block_size = cache.block_size();
  const int n_blocks = cache.n_blocks();
  std::ostringstream os;
  os << "KV cache (" << dtype_name(cache.dtype()) << "): " << n_blocks << " blocks of "
     << block_size << " tokens = " << static_cast<long long>(n_blocks) * block_size << " tokens ("
     << mib(static_cast<double>(cache.bytes())) << " on rank 0), room for "
     << static_cast<long long>(sequences_held(n_blocks, block_size, context))
     << " sequences at the full context of " << context << " tokens; set up in " << std::fixed
     << std::setprecision(2) << seconds << " s"
     << (device == Device::kCpu ? ", its pages taken as blocks are first handed out" : "");
  log::info(os.str());
  if (block_size > context)
    log::warn("--kv-block-size " + std::to_string(block_size) + " is larger than the context of " +
              std::to_string(context) +
              " tokens: every sequence takes a whole block, most of it unused");
}

}  // namespace tpllama
