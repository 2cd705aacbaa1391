// tpllama entry point: MPI session → CLI → command. Any failure becomes one message and, in a
// multi-rank job, an abort of the whole job so that no rank is left waiting on the failed one.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <exception>

#include <CLI/CLI.hpp>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "ops/threads.h"
#include "parallel/mpi_session.h"

namespace {

// mpirun binds each rank to one core when it starts two ranks or fewer, which leaves a lone rank
// one core for all its threads. The OpenMP runtime reads the affinity mask once, when it loads
// (before main), and throttles its idle spinning when it believes threads outnumber cores: each
// GEMM then waits for a sleeping thread to wake (measured: 110M decode at batch 1 ran at 64% of
// the speed of an unbound run). So a rank bound to fewer cores than its share of the node (the
// node's cores / Open MPI's local ranks) widens its mask to that share, by local rank, and starts
// again. Slurm's and explicit bindings that give a rank its share are left alone.
void widen_launcher_binding(char** argv) {
  const std::optional<tpllama::LocalPlacement> place = tpllama::launcher_placement();
  if (!place || std::getenv("TPLLAMA_WIDENED") != nullptr) return;
  if (!tpllama::ops::widen_to_node_share(place->local_rank, place->ranks_on_node)) return;
  ::setenv("TPLLAMA_WIDENED", "1", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run as bound
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tpllama;
  widen_launcher_binding(argv);
  MpiSession mpi(&argc, &argv);
  install_stop_handlers();
  // A closed pipe (--output /dev/stdout | head) is a write error that names the output, not a
  // silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  log::set_rank(mpi.rank(), mpi.world_size());

  // Named, so that --help says "tpllama run", not the path it was started by (src/README.md
  // holds each command's --help: scripts/check/help_reference.py).
  CLI::App app{"tpllama: offline batch inference of LLaMA-family models under MPI", "tpllama"};
  app.require_subcommand(1);
  RunOptions run_options;
  ConvertOptionsCli convert_options;
  ShardOptionsCli shard_options;
  PerplexityOptions perplexity_options;
  PlanOptions plan_options;
  BenchOptions bench_options;
  TokenizeOptions tokenize_options;
  add_run_command(app, run_options);
  add_convert_command(app, convert_options);
  add_shard_command(app, shard_options);
  add_perplexity_command(app, perplexity_options);
  add_plan_command(app, plan_options);
  add_bench_command(app, bench_options);
  add_tokenize_command(app, tokenize_options);
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
    if (app.got_subcommand("bench")) return bench_command(bench_options, mpi);
    if (app.got_subcommand("tokenize")) return tokenize_command(tokenize_options, mpi);
  } catch (const StoppedError& e) {  // a stop signal while waiting for or reading an input
    log::warn(e.what());
    if (mpi.world_size() > 1) mpi.abort(kExitStoppedEarly);
    return kExitStoppedEarly;
  } catch (const ReportedStop&) {
    return kExitStoppedEarly;  // as ReportedError, for a stop signal
  } catch (const ReportedError&) {
    return 1;  // every rank knows, the failing rank has printed it: a clean exit, no abort
  } catch (const std::exception& e) {
    log::error(e.what());
    if (mpi.world_size() > 1) mpi.abort(1);
    return 1;
  }
  return 0;
}
