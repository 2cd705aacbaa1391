// Files and directories the tests make under the temp dir, removed when the process that made them
// exits, so that the suite leaves nothing behind: without this, a few dozen runs had left 1435
// directories and 2400 files in /tmp, gigabytes of converted models among them. A forked child (a
// death test's) leaves them to its parent. TPLLAMA_KEEP_TEST_FILES=1 keeps everything, for a look
// after a failure.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace tpllama::test_files {

class Registry {
 public:
  ~Registry() {
    if (::getpid() != owner_ || std::getenv("TPLLAMA_KEEP_TEST_FILES") != nullptr) return;
    for (const std::filesystem::path& p : paths_) {
      std::error_code ignored;  // already gone, or never made: nothing to do
      std::filesystem::remove_all(p, ignored);
    }
  }
  void add(const std::filesystem::path& p) {
    const std::lock_guard<std::mutex> lock(mutex_);
    paths_.push_back(p);
  }

 private:
  pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::vector<std::filesystem::path> paths_;
};

// path, to be removed (with all under it) when this process exits; returns it.
inline std::string remove_at_exit(const std::string& path) {
  static Registry registry;
  registry.add(path);
  return path;
}

}  // namespace tpllama::test_files
