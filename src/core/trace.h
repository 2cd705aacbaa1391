// TraceRecorder: spans of one rank's time (compute, collectives, point-to-point, waiting) for a
// Chrome trace-event file that opens in Perfetto or chrome://tracing. Bounded: past max_events
// it counts what it drops instead of growing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tpllama {

enum class TraceTrack : uint8_t {
  kCompute = 0,
  kCollective = 1,
  kP2p = 2,
  kWait = 3,
  kSchedule = 4
};

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  TraceRecorder(bool enabled, size_t max_events = 2'000'000);
  bool enabled() const { return enabled_; }
  // Restarts the time origin (called right after a barrier so ranks share it approximately).
  void set_origin(Clock::time_point origin) { origin_ = origin; }
  void add(const char* name, TraceTrack track, Clock::time_point start, Clock::time_point end);
  size_t dropped() const { return dropped_; }

  // Compact bytes for gathering to rank 0.
  std::vector<uint8_t> serialize() const;
  // Chrome trace JSON from every rank's serialized events; labels[r] names rank r's track group.
  static std::string to_chrome_json(const std::vector<std::vector<uint8_t>>& per_rank,
                                    const std::vector<std::string>& labels);

 private:
  struct Event {
    double start_us;
    double dur_us;
    uint16_t name;  // index into names_
    TraceTrack track;
  };
  uint16_t intern(const char* name);

  bool enabled_;
  size_t max_events_;
  size_t dropped_ = 0;
  Clock::time_point origin_ = Clock::now();
  std::vector<Event> events_;
  std::vector<std::string> names_;
};

// RAII span: records [construction, destruction) when the recorder is on.
class TraceSpan {
 public:
  TraceSpan(TraceRecorder* recorder, const char* name, TraceTrack track)
      : recorder_(recorder != nullptr && recorder->enabled() ? recorder : nullptr),
        name_(name),
        track_(track) {
    if (recorder_ != nullptr) start_ = TraceRecorder::Clock::now();
  }
  ~TraceSpan() {
    if (recorder_ != nullptr) recorder_->add(name_, track_, start_, TraceRecorder::Clock::now());
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  TraceRecorder* recorder_;
  const char* name_;
  TraceTrack track_;
  TraceRecorder::Clock::time_point start_;
};

}  // namespace tpllama
