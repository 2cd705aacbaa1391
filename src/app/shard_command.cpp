// `tpllama shard`: one safetensors file per rank of a layout, so that each rank of a later run
// maps only its own file.
#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/output_files.h"
#include "core/log.h"
#include "model/shard_writer.h"
#include "parallel/mpi_session.h"

namespace tpllama {

void add_shard_command(CLI::App& app, ShardOptionsCli& o) {
  CLI::App* c =
      app.add_subcommand("shard", "Split a model into one file per rank of a TP x PP layout");
  c->add_option("--model", o.model, "Hugging Face LLaMA model directory")->required();
  c->add_option("--out", o.out, "Output directory")->required();
  c->add_option("--tp", o.tp, "Tensor-parallel ranks per stage")
      ->capture_default_str()
      ->check(at_least(1));
  c->add_option("--pp", o.pp, "Pipeline stages")->capture_default_str()->check(at_least(1));
  c->add_option("--pp-layers", o.pp_layers,
                "Layers per stage, e.g. 2,3 (default: even, remainder to the middle)")
      ->delimiter(',');
  c->add_option("--dtype", o.dtype,
                "keep: each tensor as the checkpoint stores it; int8: every matrix but the "
                "embedding quantized as "
                "--dtype int8 runs hold it, with its f32 scales, so each rank loads it without the "
                "f32 pass (an "
                "int8 checkpoint stays int8 either way)")
      ->capture_default_str()
      ->check(CLI::IsMember({"keep", "int8"}));
}

int shard_command(const ShardOptionsCli& o, const MpiSession& mpi) {
  if (mpi.rank() != 0) return 0;  // one writer
  check_out_directory(o.out, {{"the model directory", o.model}});
  write_shards(ShardOptions{o.model, o.out, o.tp, o.pp, o.pp_layers, o.dtype == "int8"});
  std::string layers;  // the run must split the stages as the shards do
  for (size_t i = 0; i < o.pp_layers.size(); ++i)
    layers += (i == 0 ? " --pp-layers " : ",") + std::to_string(o.pp_layers[i]);
  log::info("wrote shard directory " + o.out + " for tp " + std::to_string(o.tp) + " x pp " +
            std::to_string(o.pp) + "; run it with mpirun -np " + std::to_string(o.tp * o.pp) +
            " ... --tp " + std::to_string(o.tp) + " --pp " + std::to_string(o.pp) + layers);
  return 0;
}

}  // namespace tpllama
