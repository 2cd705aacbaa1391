// The work a bench run did, and its rates against the machine's limits.
#include "app/bench_roofline.h"

#include "core/dtype.h"

namespace tpllama {

WorkEstimate estimate_work(const Session& session, const RunSummary& s,
                           const std::vector<RankFigures>& figures, const SyntheticSource& source) {
  const LlamaConfig& c = session.config();
  const double layer_params =
      static_cast<double>(c.n_layers) *
      (2.0 * c.dim * c.q_dim() + 2.0 * c.dim * c.kv_dim() + 3.0 * c.dim * c.hidden_dim);
  double matrix_bytes = 0;
  for (const RankFigures& f : figures) matrix_bytes += f.matrix_bytes;
  const double kv_bytes_per_position =
      2.0 * c.kv_dim() * c.n_layers * static_cast<double>(dtype_size(session.kv_dtype()));
  WorkEstimate w;
  w.decode_bytes = static_cast<double>(s.phases.decode_steps) * matrix_bytes +
                   static_cast<double>(s.phases.decode_context_tokens) * kv_bytes_per_position;
  for (int len : source.prompt_lengths()) {
    // Attention: 4 FLOPs a (query element, position seen) pair, about len² / 2 pairs causally;
    // under a sliding window W, W (W + 1) / 2 + (len - W) W.
    const double window = c.sliding_window, positions = len;
    const double twice_pairs = c.sliding_window > 0 && len > c.sliding_window
                                   ? window * (window + 1) + 2.0 * (positions - window) * window
                                   : positions * positions;
    w.prefill_flop += 2.0 * len * layer_params + 2.0 * twice_pairs * c.q_dim() * c.n_layers +
                      2.0 * c.vocab_size * c.dim;
    w.prompt_tokens += len;
  }
  // Prompt positions the prefix cache served (and continuations scored) change what was computed:
  // the estimate is scaled to the prompt tokens the prefill steps computed.
  if (s.prompt_tokens > 0)
    w.prefill_flop *=
        static_cast<double>(s.phases.prefill_step_tokens) / static_cast<double>(s.prompt_tokens);
  return w;
}

nlohmann::json ratio(double amount, double over) {
  if (!(over > 0)) return nullptr;
  return amount / over;
}

nlohmann::json roofline_json(const RunSummary& s, const WorkEstimate& work,
                             const MachineLimits& limits) {
  const double decode_bytes = work.decode_bytes;
  const double decode_tokens = static_cast<double>(s.phases.decode_step_tokens);
  const bool measured = limits.devices > 0,
             decoded = s.phases.decode_steps > 0 && s.phases.decode_seconds > 0;
  const nlohmann::json decode_bw = decoded ? ratio(decode_bytes, s.phases.decode_seconds) : nullptr;
  const nlohmann::json prefill_flops = ratio(work.prefill_flop, s.phases.prefill_seconds);
  nlohmann::json machine = nullptr;
  if (measured)
    machine = {{"measured_on", limits.where},
               {"devices", limits.devices},
               {"read_bandwidth_bytes_per_second", limits.read_bandwidth},
               {"stream_bytes_per_second", limits.stream_bandwidth},
               {"weights_read_bytes_per_second",
                limits.weights_read > 0 ? nlohmann::json(limits.weights_read) : nullptr},
               {"gemm_flops_per_second", limits.gemm_flops}};
  nlohmann::json j = {
      {"machine", machine},
      {"decode_bytes_per_token", decoded ? ratio(decode_bytes, decode_tokens) : nullptr},
      {"decode_bandwidth_bytes_per_second", decode_bw},
      {"decode_bandwidth_fraction",
       decoded && measured ? ratio(decode_bw.get<double>(), limits.read_bandwidth) : nullptr},
      {"decode_roofline_tokens_per_second",
       decoded && measured ? ratio(limits.read_bandwidth, decode_bytes / decode_tokens) : nullptr},
      {"prefill_flops_per_second", prefill_flops},
      {"prefill_gemm_fraction", measured && !prefill_flops.is_null()
                                    ? ratio(prefill_flops.get<double>(), limits.gemm_flops)
                                    : nullptr},
  };
  return j;
}

}  // namespace tpllama
