// The replicas' protocol. A leader asks rank 0 for requests (kAsk n); rank 0 answers with a batch
// of them (kDown: lines as read, or the gate's refusals) as soon as the gate has them, and says
// when there are no more or that a stop signal came; the leader sends each record as its engine
// writes it (kRecord) and its summary at the end (kDone).
#include "session/replicas.h"

#include <algorithm>
#include <csignal>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/stop_signal.h"

namespace tpllama {
namespace {

constexpr int kTagUp = 201;    // leader → rank 0
constexpr int kTagDown = 202;  // rank 0 → leader

enum class Up : uint8_t { kAsk = 1, kRecord = 2, kDone = 3 };
constexpr uint8_t kEnd = 1;   // kDown flag: no more requests
constexpr uint8_t kStop = 2;  // kDown flag: a stop signal (its number follows)

// How long a waiting engine is kept in next() (as PromptReader waits on a stream), and the pause
// between polls while nothing comes: from kPoll, doubled up to kMaxPoll (a rank that waits long
// takes little of its core, one that is answered at once loses little time).
constexpr auto kWait = std::chrono::milliseconds(250);
constexpr auto kPoll = std::chrono::microseconds(50);
constexpr auto kMaxPoll = std::chrono::microseconds(1000);

void put_constraint(ByteWriter& w, const std::optional<OutputConstraint>& c) {
  w.put<uint8_t>(c ? 1 : 0);
  if (!c) return;
  w.put(c->kind);
  w.put_string(c->text);
  w.put_string(c->field);
  w.put<uint8_t>(c->compact ? 1 : 0);
  w.put(c->max_digits);
}

std::optional<OutputConstraint> get_constraint(ByteReader& r) {
  if (r.get<uint8_t>() == 0) return std::nullopt;
  OutputConstraint c;
  c.kind = r.get<OutputConstraint::Kind>();
  TPLLAMA_CHECK(c.kind <= OutputConstraint::Kind::kGrammar, "constraint of unknown kind");
  c.text = r.get_string();
  c.field = r.get_string();
  c.compact = r.get<uint8_t>() != 0;
  c.max_digits = r.get<int>();
  return c;
}

}  // namespace

std::vector<uint8_t> encode_replica_requests(const ReplicaRequests& r) {
  ByteWriter w;
  w.put(r.input);
  w.put(r.output);
  w.put_string(r.origin.model);
  w.put_string(r.origin.system_fingerprint);
  w.put_string(r.answering_model);
  put_constraint(w, r.constraint);
  return std::move(w.bytes);
}

ReplicaRequests decode_replica_requests(const std::vector<uint8_t>& bytes) {
  ByteReader r(bytes, "replicas' setup message");
  ReplicaRequests q;
  q.input = r.get<InputFormat>();
  q.output = r.get<OutputFormat>();
  q.origin.model = r.get_string();
  q.origin.system_fingerprint = r.get_string();
  q.answering_model = r.get_string();
  q.constraint = get_constraint(r);
  return q;
}

// ---- a leader's side ----

namespace {

RequestDefaults with_constraint(RequestDefaults d, const std::optional<OutputConstraint>& c) {
  d.constraint = c;
  return d;
}

}  // namespace

ReplicaLink::ReplicaLink(Communicator& leaders, const ReplicaRequests& requests,
                         RequestDefaults defaults, int batch)
    : leaders_(leaders),
      requests_(requests),
      parser_(no_input_, requests.input, with_constraint(std::move(defaults), requests.constraint),
              "the input"),
      batch_(std::max(1, batch)) {
  parser_.set_answering_model(requests.answering_model);
}

// Tops the requests held and asked for up to batch_ once they are down to half of it.
void ReplicaLink::ask() {
  const int held = static_cast<int>(queue_.size()) + asked_;
  if (end_ || 2 * held > batch_) return;
  ByteWriter w;
  w.put(Up::kAsk);
  w.put<int32_t>(batch_ - held);
  leaders_.send_bytes_async(std::move(w.bytes), 0, kTagUp);
  asked_ = batch_ - static_cast<int>(queue_.size());
}

void ReplicaLink::take_messages() {
  while (std::optional<std::vector<uint8_t>> bytes =
             leaders_.try_recv_bytes(0, kTagDown, nullptr)) {
    ByteReader r(*bytes, "requests message");
    const auto flags = r.get<uint8_t>();
    const auto signal = r.get<int32_t>();
    const auto n = r.get<uint32_t>();
    for (uint32_t i = 0; i < n; ++i) {
      const auto order = r.get<uint64_t>();
      const auto line = r.get<uint64_t>();
      const bool refused = r.get<uint8_t>() != 0;
      std::string text = r.get_string();
      if (!refused) {
        queue_.push_back({parser_.parse_line(std::move(text), line), order, std::nullopt});
        continue;
      }
      // The gate refused the line: its record needs only what identifies it.
      Request req;
      req.line = line;
      req.id = nlohmann::json::parse(r.get_string());
      if (r.get<uint8_t>() != 0) req.messages = nlohmann::ordered_json::array();
      req.line_failed = r.get<uint8_t>() != 0;
      queue_.push_back({std::move(req), order, std::move(text)});
    }
    asked_ = std::max(0, asked_ - static_cast<int>(n));
    if ((flags & kEnd) != 0) end_ = true;
    if ((flags & kStop) != 0) relay_stop_signal(signal);
  }
}

std::optional<GatedRequest> ReplicaLink::next(bool wait) {
  take_messages();
  if (queue_.empty() && !end_) {
    ask();
    if (wait) {
      const auto start = Clock::now();
      auto pause = kPoll;
      while (queue_.empty() && !end_ && Clock::now() - start < kWait && stop_signal() == 0) {
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(2 * pause, kMaxPoll);
        take_messages();
      }
      waiting_seconds_ += seconds_since(start);
    }
  }
  if (queue_.empty()) {
    ended_ = end_;
    return std::nullopt;
  }
  GatedRequest g = std::move(queue_.front());
  queue_.pop_front();
  ask();
  return g;
}

void ReplicaLink::write(const Result& r) {
  ByteWriter w;
  w.put(Up::kRecord);
  w.put<uint64_t>(r.order);
  w.put<uint8_t>(r.finish_reason == "error" ? 1 : 0);
  w.put<int64_t>(r.completion_tokens);
  w.put_string(result_to_json_line(r, requests_.output, requests_.origin));
  leaders_.send_bytes_async(std::move(w.bytes), 0, kTagUp);
}

void ReplicaLink::finish(RunSummary summary) {
  ReplicaFigures f;
  f.records = summary.records.requests;
  f.prompt_tokens = summary.prompt_tokens;
  f.generated_tokens = summary.generated_tokens;
  f.steps = summary.steps;
  f.preemptions = summary.preemptions;
  f.seconds = summary.seconds;
  f.busy_seconds = summary.phases.prefill_seconds + summary.phases.decode_seconds;
  f.waiting_seconds = waiting_seconds_;
  summary.replicas = {f};
  ByteWriter w;
  w.put(Up::kDone);
  const std::vector<uint8_t> bytes = encode_summary(summary);
  w.bytes.insert(w.bytes.end(), bytes.begin(), bytes.end());
  leaders_.send_bytes_async(std::move(w.bytes), 0, kTagUp);
  leaders_.wait_sends();
}

// ---- rank 0's side ----

uint64_t routing_key(const Request& r) {
  Fnv1a h;
  const auto head = [](const std::string& text) {
    return text.substr(0, std::min(text.size(), kRoutingPrefixBytes));
  };
  if (!r.token_ids.empty()) {
    const size_t n = std::min(r.token_ids.size(), kRoutingPrefixBytes / sizeof(r.token_ids[0]));
    h.add(r.token_ids.data(), n * sizeof(r.token_ids[0]));
  } else if (r.scoring) {
    h.add(head(r.context));
  } else if (r.messages) {
    h.add(head(r.messages->dump()));
  } else {
    h.add(head(r.prompt));
  }
  return h.value();
}

Dispatcher::Dispatcher(Communicator& leaders, const DispatchIo& io)
    : leaders_(leaders),
      io_(io),
      gate_(*io.reader, io.text, io.context, io.resume),
      replicas_(static_cast<size_t>(leaders.size())),
      queued_(static_cast<size_t>(leaders.size())),
      progress_(io.total_requests, io.terminal, io.log_interval) {
  TPLLAMA_CHECK(io.reader != nullptr && io.writer != nullptr, "a dispatcher without its files");
}

void Dispatcher::run() {
  std::vector<std::optional<RunSummary>> parts(replicas_.size());
  auto pause = kPoll;
  const auto all_done = [&] {
    return std::all_of(replicas_.begin(), replicas_.end(), [](const Leader& l) { return l.done; });
  };
  while (!all_done() && !abandoned_) {
    bool busy = false;
    int from = 0;
    while (std::optional<std::vector<uint8_t>> bytes =
               leaders_.try_recv_bytes(Communicator::kAnySource, kTagUp, &from)) {
      busy = true;
      Leader& l = replicas_[static_cast<size_t>(from)];
      ByteReader r(*bytes, "replica message");
      switch (r.get<Up>()) {
        case Up::kAsk:
          l.wanted += r.get<int32_t>();
          break;
        case Up::kRecord: {
          const auto order = r.get<uint64_t>();
          errors_ += r.get<uint8_t>();
          generated_ += r.get<int64_t>();
          ++l.records;
          write(order, r.get_string());
          break;
        }
        case Up::kDone: {
          const std::vector<uint8_t> rest(bytes->begin() + static_cast<ptrdiff_t>(r.position()),
                                          bytes->end());
          parts[static_cast<size_t>(from)] = decode_summary(rest);
          l.done = true;
          break;
        }
        default:
          fail("replica ", from, " sent a message of unknown kind");
      }
    }
    busy = hand_out() || busy;
    progress_.update(counts());
    if (busy) {
      pause = kPoll;
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(2 * pause, kMaxPoll);
    }
  }
  leaders_.wait_sends();
  if (abandoned_) return;
  io_.writer->sync();
  progress_.finish(counts());
  for (const std::optional<RunSummary>& part : parts) add_replica_summary(summary_, *part);
  summary_.skipped = gate_.skipped();
  summary_.unwritten = static_cast<long long>(held_.size());
  if (summary_.stopped_by == 0 && gate_.ended())
    summary_.unmatched_records = gate_.unmatched_records();
}

void Dispatcher::read_ahead() {
  // Enough to find each asking replica its own requests, little enough that a replica's queue
  // never holds much work another could do.
  const size_t ahead = std::max<size_t>(64, 8 * replicas_.size());
  constexpr size_t kMaxOwners = size_t{1} << 20;  // keys remembered; then forgotten at once
  while (waiting_ < ahead) {
    std::optional<GatedRequest> g = gate_.next(/*wait=*/false);
    if (!g) return;
    std::string line = g->refusal ? std::string() : io_.reader->last_line();
    Waiting w{std::move(*g), std::move(line)};
    ++waiting_;
    if (io_.routing == DpRouting::kLeastLoaded || w.gated.refusal) {
      common_.push_back(std::move(w));
      continue;
    }
    if (owner_.size() > kMaxOwners) owner_.clear();
    w.key = routing_key(w.gated.request);
    const auto owner = owner_.find(w.key);
    (owner != owner_.end() ? queued_[owner->second] : common_).push_back(std::move(w));
  }
}

std::optional<Dispatcher::Waiting> Dispatcher::take_for(size_t i) {
  std::deque<Waiting>* from = !queued_[i].empty() ? &queued_[i] : &common_;
  if (from->empty()) {
    for (std::deque<Waiting>& q : queued_)
      if (q.size() > from->size()) from = &q;
    if (from->empty()) return std::nullopt;
  }
  Waiting w = std::move(from->front());
  from->pop_front();
  --waiting_;
  if (from == &common_ && io_.routing == DpRouting::kPrefix && !w.gated.refusal)
    owner_.emplace(w.key, static_cast<uint32_t>(i));
  return w;
}

bool Dispatcher::hand_out() {
  const int signal = stop_signal();
  const bool relay = stop_signals_received() > stop_relayed_;
  if (relay) stop_relayed_ = stop_signals_received();
  bool sent = false;
  for (size_t k = 0; k < replicas_.size(); ++k) {
    const size_t i = (next_leader_ + k) % replicas_.size();
    Leader& l = replicas_[i];
    if (l.done) continue;
    ByteWriter items;
    uint32_t n = 0;
    // A stop hands out nothing more (the leaders close their intake and --resume redoes the rest);
    // --ordered holds at most reorder_limit records behind an earlier one.
    while (l.wanted > 0 && signal == 0 && held_.size() < io_.reorder_limit) {
      read_ahead();
      std::optional<Waiting> w = take_for(i);
      if (!w) break;
      const GatedRequest* g = &w->gated;
      items.put<uint64_t>(g->order);
      items.put<uint64_t>(g->request.line);
      items.put<uint8_t>(g->refusal ? 1 : 0);
      if (!g->refusal) {
        items.put_string(w->line);
      } else {
        items.put_string(*g->refusal);
        items.put_string(g->request.id.dump());
        items.put<uint8_t>(g->request.chat() ? 1 : 0);
        items.put<uint8_t>(g->request.line_failed ? 1 : 0);
      }
      --l.wanted;
      ++n;
      ++handed_;
    }
    const bool end = !l.end_sent && gate_.ended() && waiting_ == 0 && l.wanted > 0;
    if (n == 0 && !end && !relay) continue;
    ByteWriter w;
    w.put<uint8_t>(static_cast<uint8_t>((end ? kEnd : 0) | (relay ? kStop : 0)));
    w.put<int32_t>(signal);
    w.put<uint32_t>(n);
    w.bytes.insert(w.bytes.end(), items.bytes.begin(), items.bytes.end());
    leaders_.send_bytes_async(std::move(w.bytes), static_cast<int>(i), kTagDown);
    if (end) l.end_sent = true;
    sent = true;
  }
  next_leader_ = (next_leader_ + 1) % replicas_.size();
  return sent;
}

void Dispatcher::write(uint64_t order, std::string line) {
  if (!io_.ordered) {
    io_.writer->write_line(line);
    ++written_;
    return;
  }
  held_.emplace(order, std::move(line));
  for (auto it = held_.begin(); it != held_.end() && it->first == next_order_;
       it = held_.erase(it), ++next_order_) {
    io_.writer->write_line(it->second);
    ++written_;
  }
}

ProgressCounts Dispatcher::counts() const {
  ProgressCounts c;
  c.done = written_ + static_cast<long long>(held_.size()) + gate_.skipped();
  c.errors = errors_;
  c.running = handed_ - written_ - static_cast<long long>(held_.size());
  c.generated_tokens = generated_;
  return c;
}

}  // namespace tpllama
