// Communicator: the collectives and point-to-point messages the model needs, on Tensors, behind
// one interface so the forward does not care whether MPI or NCCL moves the bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/trace.h"

namespace tpllama {

struct CommStats {
  double collective_seconds = 0;
  double p2p_seconds = 0;
  long long collective_calls = 0;
  long long p2p_calls = 0;
  double all_reduce_seconds = 0;
  double all_reduce_bytes = 0;  // payload bytes summed over calls (for bus bandwidth)
  long long all_reduce_calls = 0;
};

// Tensor collectives take tensors on the host or, for a communicator made for a device (NCCL, or
// MPI staging through host memory), on that device.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place: every rank ends with the element-wise sum over the group.
  virtual void all_reduce_sum(Tensor t) = 0;
  // out holds size() * in.numel() elements, rank r's contribution at offset r * in.numel().
  virtual void all_gather(Tensor in, Tensor out) = 0;
  virtual void broadcast(Tensor t, int root) = 0;
  virtual void send(Tensor t, int dest, int tag) = 0;
  // Fills t, whose shape the receiver knows; a message of another size is an error.
  virtual void recv(Tensor t, int src, int tag) = 0;
  // Sends t without waiting for the receiver; t may be overwritten once this returns. Host bytes
  // are copied into the message; on a device (NCCL) the send is enqueued on the compute stream,
  // ahead of whatever later overwrites t there. Completed by wait_sends() with the byte messages.
  virtual void send_async(Tensor t, int dest, int tag) = 0;
  virtual void barrier() = 0;
  // Element-wise argmax over the group: values[i] becomes the largest, indices[i] its index;
  // equal values resolve to the smallest index (as a single rank's argmax would).
  virtual void all_reduce_argmax(std::vector<float>& values, std::vector<int32_t>& indices) = 0;
  // Whether `mine` is true on every rank of the group (a host-side agreement: every rank gets the
  // same answer, e.g. whether all of them recorded a step, before any acts on it).
  virtual bool all_true(bool mine) = 0;
  // Variable-size byte messages. The root's bytes reach every rank of the group.
  virtual void broadcast_bytes(std::vector<uint8_t>& bytes, int root) = 0;
  // Sends without waiting for the receiver (the buffer is kept until the send completes), so a
  // pipeline of ranks that each send downstream can never deadlock on a full peer.
  virtual void send_bytes_async(std::vector<uint8_t> bytes, int dest, int tag) = 0;
  virtual std::vector<uint8_t> recv_bytes(int src, int tag) = 0;
  // Completes every pending asynchronous send.
  virtual void wait_sends() = 0;
  // A message of `tag` from `src` (kAnySource: from any rank) when one has arrived, without
  // waiting; *from is its sender. Host messages between the replicas' leaders (MPI only).
  static constexpr int kAnySource = -1;
  virtual std::optional<std::vector<uint8_t>> try_recv_bytes(int /*src*/, int /*tag*/,
                                                             int* /*from*/) {
    fail("this communicator has no polling receive");
  }
  // Another handle on the same group, for a second thread of this rank: the two may send and
  // receive at once (MPI_THREAD_MULTIPLE). The group must outlive it.
  virtual std::unique_ptr<Communicator> second_handle() {
    fail("this communicator has no second handle");
  }
  // Whether a tensor send waits on the device stream until its receiver takes it (NCCL). Then what
  // the receiver needs before it posts its receive must have reached it before the send.
  virtual bool sends_hold_stream() const { return false; }
  // Whether a CUDA graph may record this communicator's tensor collectives (a group of one does
  // nothing; NCCL enqueues on the stream; host staging cannot be recorded).
  virtual bool graph_capturable() const { return size() == 1; }
  const CommStats& stats() const { return stats_; }
  // Spans of every collective and message go to this recorder when it is on.
  virtual void set_trace(TraceRecorder* trace) { trace_ = trace; }

 protected:
  CommStats stats_;
  TraceRecorder* trace_ = nullptr;
};

// Times one call into a communicator's stats and, when tracing, records it as a span.
class CommTimer {
 public:
  CommTimer(double* seconds, long long* calls, TraceRecorder* trace, const char* name,
            TraceTrack track)
      : seconds_(seconds), calls_(calls), span_(trace, name, track) {}
  ~CommTimer() {
    *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    ++*calls_;
  }
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

 private:
  double* seconds_;
  long long* calls_;
  TraceSpan span_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace tpllama
