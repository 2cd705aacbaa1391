// dispatch_bench [REPLICAS] [REQUESTS]: how many requests a second rank 0 can read, hand to the
// replicas and write back, with REPLICAS leaders (default 128) simulated in threads over the
// in-memory communicator the pipeline tests use, each answering every request at once with a
// short record; and its parts alone: the input read and gated (ids, order), the records written.
// Prints requests/s for each. Not a test: scripts/bench/dispatch.sh runs it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "session/replicas.h"
#include "unit/replica_threads.h"

namespace {

using namespace tpllama;
using Clock = std::chrono::steady_clock;

std::string input_text(int requests) {
  std::ostringstream text;
  for (int i = 0; i < requests; ++i)
    text << "{\"id\": " << i << ", \"prompt\": \"Once upon a time " << i
         << "\", \"max_tokens\": 1}\n";
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  const int replicas = argc > 1 ? std::atoi(argv[1]) : 128;
  const int requests = argc > 2 ? std::atoi(argv[2]) : 200000;
  const std::string text = input_text(requests);
  const std::string path =
      (std::filesystem::temp_directory_path() / "tpllama_dispatch_bench.jsonl").string();

  {  // the input read and gated, alone
    std::istringstream in(text);
    PromptReader reader(in, InputFormat::kJsonl, RequestDefaults{}, "bench.jsonl");
    reader.keep_lines(true);
    RequestGate gate(reader, nullptr, 1024, nullptr);
    const auto t0 = Clock::now();
    long long n = 0;
    while (gate.next(false)) ++n;
    std::printf("read and gated:  %10.0f requests/s (%lld)\n", n / seconds_since(t0), n);
  }
  {  // the records written, alone
    ResultWriter writer(path);
    Result r;
    r.text = "ok";
    r.finish_reason = "length";
    r.completion_tokens = 1;
    const auto t0 = Clock::now();
    for (int i = 0; i < requests; ++i) {
      r.id = i;
      writer.write_line(result_to_json_line(r));
    }
    writer.sync();
    std::printf("records written: %10.0f records/s\n", requests / seconds_since(t0));
  }
  {  // the whole round: rank 0's dispatcher thread, the leaders' links in threads
    std::istringstream in(text);
    PromptReader reader(in, InputFormat::kJsonl, RequestDefaults{}, "bench.jsonl");
    reader.keep_lines(true);
    ResultWriter writer(path);
    DispatchIo io;
    io.reader = &reader;
    io.writer = &writer;
    io.context = 1024;
    io.log_interval = 1e9;
    const auto t0 = Clock::now();
    const testing_util::ThreadedReplicas run = testing_util::run_replicas_in_threads(
        io, replicas, /*batch=*/8,
        [](int, const GatedRequest& g) {
          Result r;
          r.id = g.request.id;
          r.text = "ok";
          r.finish_reason = "length";
          r.completion_tokens = 1;
          return r;
        },
        std::chrono::seconds(600));
    const RunSummary& summary = run.summary;
    const std::vector<std::string>& errors = run.errors;
    const double s = seconds_since(t0);
    for (const std::string& e : errors)
      if (!e.empty()) {
        std::fprintf(stderr, "%s\n", e.c_str());
        return 1;
      }
    std::printf(
        "dispatched and written, %d replicas in threads: %10.0f requests/s (%lld records)\n",
        replicas, summary.records.requests / s, summary.records.requests);
  }
  std::filesystem::remove(path);
  return 0;
}
