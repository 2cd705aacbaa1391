// Trace events in memory, their wire form, and the Chrome trace-event JSON.
#include "core/trace.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tpllama {
namespace {

const char* track_name(TraceTrack t) {
  switch (t) {
    case TraceTrack::kCompute:
      return "compute";
    case TraceTrack::kCollective:
      return "collectives";
    case TraceTrack::kP2p:
      return "send/recv";
    case TraceTrack::kWait:
      return "idle (waiting)";
    case TraceTrack::kSchedule:
      return "scheduler";
  }
  return "?";
}

template <typename T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
T get(const std::vector<uint8_t>& in, size_t& pos) {
  TPLLAMA_CHECK(pos + sizeof(T) <= in.size(), "trace bytes truncated");
  T v;
  std::memcpy(&v, in.data() + pos, sizeof(T));
  pos += sizeof(T);
  return v;
}

}  // namespace

TraceRecorder::TraceRecorder(bool enabled, size_t max_events)
    : enabled_(enabled), max_events_(max_events) {}

uint16_t TraceRecorder::intern(const char* name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<uint16_t>(i);
  names_.emplace_back(name);
  return static_cast<uint16_t>(names_.size() - 1);
}

void TraceRecorder::add(const char* name, TraceTrack track, Clock::time_point start,
                        Clock::time_point end) {
  if (!enabled_) return;
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  const double s = std::chrono::duration<double, std::micro>(start - origin_).count();
  const double d = std::chrono::duration<double, std::micro>(end - start).count();
  events_.push_back({s, d, intern(name), track});
}

std::vector<uint8_t> TraceRecorder::serialize() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(names_.size()));
  for (const std::string& n : names_) {
    put<uint32_t>(out, static_cast<uint32_t>(n.size()));
    out.insert(out.end(), n.begin(), n.end());
  }
  put<uint64_t>(out, events_.size());
  put<uint64_t>(out, dropped_);
  for (const Event& e : events_) {
    put(out, e.start_us);
    put(out, e.dur_us);
    put(out, e.name);
    put(out, e.track);
  }
  return out;
}

std::string TraceRecorder::to_chrome_json(const std::vector<std::vector<uint8_t>>& per_rank,
                                          const std::vector<std::string>& labels) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t rank = 0; rank < per_rank.size(); ++rank) {
    const std::vector<uint8_t>& in = per_rank[rank];
    size_t pos = 0;
    std::vector<std::string> names(get<uint32_t>(in, pos));
    for (std::string& n : names) {
      const uint32_t len = get<uint32_t>(in, pos);
      TPLLAMA_CHECK(pos + len <= in.size(), "trace name truncated");
      n.assign(reinterpret_cast<const char*>(in.data() + pos), len);
      pos += len;
    }
    const uint64_t count = get<uint64_t>(in, pos);
    const uint64_t dropped = get<uint64_t>(in, pos);
    const int pid = static_cast<int>(rank);
    events.push_back(
        {{"ph", "M"},
         {"name", "process_name"},
         {"pid", pid},
         {"args",
          {{"name", rank < labels.size() ? labels[rank] : "rank " + std::to_string(rank)}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", pid},
                      {"args", {{"sort_index", pid}}}});
    for (int t = 0; t <= static_cast<int>(TraceTrack::kSchedule); ++t)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", pid},
                        {"tid", t},
                        {"args", {{"name", track_name(static_cast<TraceTrack>(t))}}}});
    for (uint64_t i = 0; i < count; ++i) {
      const double start = get<double>(in, pos);
      const double dur = get<double>(in, pos);
      const uint16_t name = get<uint16_t>(in, pos);
      const TraceTrack track = get<TraceTrack>(in, pos);
      events.push_back({{"ph", "X"},
                        {"pid", pid},
                        {"tid", static_cast<int>(track)},
                        {"name", name < names.size() ? names[name] : "?"},
                        {"ts", start},
                        {"dur", dur}});
    }
    if (dropped > 0)
      events.push_back({{"ph", "i"},
                        {"pid", pid},
                        {"tid", 0},
                        {"s", "p"},
                        {"ts", 0},
                        {"name", "events dropped: " + std::to_string(dropped)}});
  }
  return nlohmann::json({{"traceEvents", events}, {"displayTimeUnit", "ms"}}).dump();
}

}  // namespace tpllama
