// tpllama entry point: MPI session → CLI → command. Any failure becomes one message and, in a
// multi-rank job, MPI_Abort so that no rank is left waiting on the failed one.
#include <unistd.h>

#include <cstdlib>
#include <exception>

#include <CLI/CLI.hpp>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "parallel/mpi_comm.h"

namespace {

// Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to its Prescott (SSE3)
// kernels: measured 1.8x slower on a 110M model here. It reads OPENBLAS_CORETYPE when it loads,
// before main, so the choice is made by starting again with it set. Haswell (AVX2) kernels are the
// ones this workplace's machines are pinned to for correctness; an explicit setting is kept.
void choose_openblas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !__builtin_cpu_supports("avx2")) return;
  ::setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run with what OpenBLAS chose
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tpllama;
  choose_openblas_kernels(argv);
  MpiSession mpi(&argc, &argv);
  install_stop_handlers();
  log::set_rank(mpi.rank(), mpi.world_size());

  CLI::App app{"tpllama: offline batch inference of LLaMA-family models under MPI"};
  app.require_subcommand(1);
  RunOptions run_options;
  ConvertOptionsCli convert_options;
  ShardOptionsCli shard_options;
  PerplexityOptions perplexity_options;
  PlanOptions plan_options;
  add_run_command(app, run_options);
  add_convert_command(app, convert_options);
  add_shard_command(app, shard_options);
  add_perplexity_command(app, perplexity_options);
  add_plan_command(app, plan_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = mpi.rank() == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    return code == 0 ? 0 : 2;
  }

  try {
    if (app.got_subcommand("run")) return run_command(run_options, mpi);
    if (app.got_subcommand("convert")) return convert_command(convert_options, mpi);
    if (app.got_subcommand("shard")) return shard_command(shard_options, mpi);
    if (app.got_subcommand("perplexity")) return perplexity_command(perplexity_options, mpi);
    if (app.got_subcommand("plan")) return plan_command(plan_options, mpi);
  } catch (const ReportedError&) {
    return 1;  // every rank knows, the failing rank has printed it: a clean exit, no abort
  } catch (const std::exception& e) {
    log::error(e.what());
    if (mpi.world_size() > 1) mpi.abort(1);
    return 1;
  }
  return 0;
}
