// A job of several replicas without a model, for tests and dispatch_bench: rank 0's Dispatcher and
// every leader's ReplicaLink (session/replicas.h) as threads over a ThreadNet, each leader's engine
// answering every request as it comes.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "session/replicas.h"
#include "unit/thread_comm.h"

namespace tpllama::testing_util {

struct ThreadedReplicas {
  RunSummary summary;               // the dispatcher's
  std::vector<std::string> errors;  // by rank, "" for none
};

// answer(replica, request): the record of a request (its order is set here).
inline ThreadedReplicas run_replicas_in_threads(
    const DispatchIo& io, int replicas, int batch,
    const std::function<Result(int, const GatedRequest&)>& answer,
    std::chrono::seconds timeout = std::chrono::seconds(60)) {
  ThreadNet net(timeout);
  const int group = net.add_group(replicas);
  const auto leader = [&](Communicator& comm, int replica) {
    std::unique_ptr<Communicator> own = comm.second_handle();
    ReplicaLink link(*own, ReplicaRequests{}, RequestDefaults{}, batch);
    RunSummary mine;
    while (true) {
      std::optional<GatedRequest> g = link.next(/*wait=*/true);
      if (!g) {
        if (link.ended()) break;
        continue;
      }
      Result r = answer(replica, *g);
      r.order = g->order;
      link.write(r);
      ++mine.records.requests;
    }
    link.finish(mine);
  };
  ThreadedReplicas out;
  out.errors = run_ranks(net, replicas, [&](int rank) {
    ThreadComm comm(net, group, rank);
    if (rank != 0) return leader(comm, rank);
    Dispatcher dispatcher(comm, io);
    std::thread own([&] { leader(comm, 0); });
    dispatcher.run();
    own.join();
    out.summary = dispatcher.summary();
  });
  return out;
}

}  // namespace tpllama::testing_util
