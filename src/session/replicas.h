// Several replicas of the model in one job: rank 0's Dispatcher reads the input once, through the
// one RequestGate, and hands requests to the replicas' leaders as each asks for them (a replica
// asks only while its engine has free sequence slots, so a slower replica takes fewer); the
// leaders send their records back, and rank 0 writes them into the one output (in input order with
// --ordered). Each leader's ReplicaLink is its engine's source of requests and sink of records.
// The Dispatcher runs in a thread of rank 0 beside rank 0's own replica (MPI_THREAD_MULTIPLE).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/progress.h"
#include "engine/request_intake.h"
#include "engine/run_metrics.h"
#include "io/openai_batch.h"
#include "io/prompt_reader.h"
#include "io/result_writer.h"
#include "parallel/communicator.h"

namespace tpllama {

// What every leader needs to read the lines rank 0 hands it as rank 0 would, and to write its
// records as rank 0's writer would: rank 0 fills it and sends it to the leaders at the start.
struct ReplicaRequests {
  InputFormat input = InputFormat::kJsonl;
  OutputFormat output = OutputFormat::kJsonl;
  RecordOrigin origin;
  std::string answering_model;
  std::optional<OutputConstraint> constraint;  // --response-format (read on rank 0)
};
std::vector<uint8_t> encode_replica_requests(const ReplicaRequests& r);
ReplicaRequests decode_replica_requests(const std::vector<uint8_t>& bytes);

// A leader's side: the engine's GatedSource and ResultSink. `leaders`: the leaders' group (this
// leader's rank in it is its replica), a handle used by this thread only.
class ReplicaLink final : public GatedSource, public ResultSink {
 public:
  // defaults: the command line's (identical on every rank), with requests.constraint put in.
  // batch: how many requests it asks for at a time, and holds at most beyond what its engine took.
  ReplicaLink(Communicator& leaders, const ReplicaRequests& requests, RequestDefaults defaults,
              int batch);

  std::optional<GatedRequest> next(bool wait) override;
  bool ended() const override { return ended_; }
  void write(const Result& r) override;
  // After the engine's run: its summary (with this replica's figures) to rank 0.
  void finish(RunSummary summary);

 private:
  void take_messages();
  void ask();

  Communicator& leaders_;
  ReplicaRequests requests_;
  std::istringstream no_input_;
  PromptReader parser_;
  int batch_;
  std::deque<GatedRequest> queue_;
  int asked_ = 0;     // requests asked for and not yet come
  bool end_ = false;  // rank 0 has no more requests for it
  bool ended_ = false;
  double waiting_seconds_ = 0;
};

// How rank 0 picks the replica of a request (--dp-routing).
enum class DpRouting {
  // A request whose prompt starts as an earlier one's (the first kRoutingPrefixBytes: a few-shot
  // header, a system prompt, a scored context) goes to the replica that took the earlier one, where
  // its prefix is cached; to another only when that one has no room and this one would idle.
  kPrefix,
  kLeastLoaded,  // the next request to whichever replica asks first
};
inline constexpr size_t kRoutingPrefixBytes = 256;

// The key a request is routed by: a hash of its prompt's first kRoutingPrefixBytes (a scoring
// request's context, a chat's messages as JSON, or its first token ids).
uint64_t routing_key(const Request& r);

// Rank 0's side, in its own thread.
struct DispatchIo {
  PromptReader* reader = nullptr;  // keeping its lines (PromptReader::keep_lines)
  ResultWriter* writer = nullptr;
  ResumeIndex* resume = nullptr;
  const ModelText* text = nullptr;  // to spot-check resumed records (null: token ids only)
  int context = 0;
  bool ordered = false;
  size_t reorder_limit = 1024;  // records held back before no more requests are handed out
  long long total_requests = 0;
  bool terminal = false;
  double log_interval = 30;
  DpRouting routing = DpRouting::kPrefix;
};

class Dispatcher {
 public:
  Dispatcher(Communicator& leaders, const DispatchIo& io);
  // Until every leader has sent its summary, or abandon() (rank 0's own replica failed).
  void run();
  void abandon() { abandoned_ = true; }
  // After run(): the replicas' summaries summed, with the gate's and the writer's figures.
  RunSummary summary() const { return summary_; }

 private:
  struct Leader {
    int wanted = 0;         // requests it asked for and was not yet given
    bool end_sent = false;  // told there are no more
    bool done = false;      // its summary came
    long long records = 0;
  };
  // A request read ahead from the gate, waiting for a replica.
  struct Waiting {
    GatedRequest gated;
    std::string line;  // as read
    uint64_t key = 0;  // routing_key (--dp-routing prefix)
  };
  // Reads ahead from the gate into the replicas' queues (by routing key) or the common one.
  void read_ahead();
  // The next request for replica i: its own, else a new prefix (now its own), else another's (the
  // longest queue's), so that no replica idles while requests wait; nullopt when none waits.
  std::optional<Waiting> take_for(size_t i);
  // Hands out what the leaders asked for; returns whether anything was sent.
  bool hand_out();
  void write(uint64_t order, std::string line);
  ProgressCounts counts() const;

  Communicator& leaders_;
  DispatchIo io_;
  RequestGate gate_;
  std::vector<Leader> replicas_;
  std::vector<std::deque<Waiting>> queued_;       // by replica (--dp-routing prefix)
  std::deque<Waiting> common_;                    // not yet any replica's
  size_t waiting_ = 0;                            // in queued_ and common_
  std::unordered_map<uint64_t, uint32_t> owner_;  // routing key → replica
  std::map<uint64_t, std::string> held_;          // --ordered: records waiting for an earlier one
  uint64_t next_order_ = 0;
  long long written_ = 0;
  long long errors_ = 0;
  long long handed_ = 0;
  long long generated_ = 0;
  int stop_relayed_ = 0;
  size_t next_leader_ = 0;  // where the round of handing out starts (fairness)
  Progress progress_;
  std::atomic<bool> abandoned_{false};
  RunSummary summary_;
};

}  // namespace tpllama
