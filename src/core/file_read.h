// Reading whole files without hanging or growing without bound. Model files (config.json,
// tokenizer files, weights) must be regular files: a FIFO would wait forever for a writer and a
// device such as /dev/zero never ends. Inputs that may be streams (a corpus or hostfile given as
// `<(...)`) are read as they come, with a size limit, and give up on a stop signal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace tpllama {

// Limits on the files read whole, far above real ones yet bounds on what a wrong path costs: the
// JSON and text files of a model directory (config.json, tokenizer_config.json, a chat template,
// a shard manifest, a checkpoint index; about 1 MB at most in practice), and tokenizer files
// (Llama 3's tokenizer.json is 9 MB, Gemma 3's 33 MB).
inline constexpr uint64_t kMaxSmallFileBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{512} << 20;

// Throws Error "<what> <path> is <kind>, not a regular file" unless path (links followed) is a
// regular file; "cannot read <what> <path>: <reason>" when it cannot be stat'ed.
void require_regular_file(const std::string& path, const std::string& what);

// The whole of a regular file of at most max_bytes (require_regular_file first); a larger one is
// refused naming its size and the limit. Messages name the file as "<what> <path>".
std::string read_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// A file read as it comes: a regular file, a pipe, a FIFO (opened without waiting for its writer)
// or a device. Closed by the destructor.
class StreamFile {
 public:
  // Throws Error "cannot open <what> <path>: <reason>" (a directory is refused so too).
  StreamFile(const std::string& path, const std::string& what);
  ~StreamFile();
  StreamFile(const StreamFile&) = delete;
  StreamFile& operator=(const StreamFile&) = delete;

  enum class Got { kData, kEnd, kNothingYet };
  // Waits up to timeout_ms (0: not at all) for bytes, and appends at most max_bytes of what is
  // there to out: kData, or kEnd at the end of the file (a FIFO's writer closed it), or kNothingYet
  // when the time passed first. Throws Error on a read error, naming the file.
  Got read_some(std::string& out, size_t max_bytes, int timeout_ms);

 private:
  int fd_ = -1;
  bool regular_ = false;
  std::string path_, what_;
};

// The whole of a file that may also be a pipe, a FIFO or a device: opened without waiting for a
// FIFO's writer, read as it comes until its end. Throws Error past max_bytes (naming the limit),
// and StoppedError (core/stop_signal.h) when a stop signal arrives while it waits or reads.
std::string read_stream_file(const std::string& path, const std::string& what, uint64_t max_bytes);

}  // namespace tpllama
