// The files a running job will write, each held (an exclusive flock) from the
// job's start to its end, so that another tpllama job's checks refuse them before it does any work:
// the records, their sidecar, --stats and --trace alike. Not the writing itself (ResultWriter).
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace tpllama {

class OutputHolds {
 public:
  OutputHolds() = default;
  // Lets go of every file. One a hold created that is still empty is removed when the job failed
  // (the holds go while an exception unwinds): a job that failed leaves no empty file behind.
  ~OutputHolds();
  OutputHolds(const OutputHolds&) = delete;
  OutputHolds& operator=(const OutputHolds&) = delete;

  // Holds `path`, the file `flag` names, from now on, creating it empty when it is not there (a
  // dangling link's target is made). An empty path, this process's stdout or stderr, a pipe or a
  // device is not held. Throws Error naming the flag and the path when another process holds it.
  void hold(const std::string& flag, const std::string& path);
  // Lets go of `path` (as given to hold), so that a writer that locks the file itself
  // (write_text_file) can: a later job may take it in between, and is then refused by that lock.
  void release(const std::string& path);
  // A file the job will not write after all: when the hold created `path` and it is still empty,
  // lets go of it and removes it; a file that was there stays held.
  void drop_if_unwritten(const std::string& path);
  // `fd` is open on the file just renamed to the held `path` (a sidecar written anew) and holds its
  // lock: it becomes the hold, and the replaced file's descriptor is closed. Takes `fd` over.
  void take_over(const std::string& path, int fd);
  bool holds(const std::string& path) const;

 private:
  struct Held {
    std::string path;
    std::string created;  // the file the hold made (links resolved); empty when it was there
    int fd = -1;
  };
  // Closes the hold; with remove_if_empty, first removes the file when the hold made it and it is
  // still empty.
  void let_go(Held& h, bool remove_if_empty);

  std::vector<Held> held_;
  int exceptions_ = std::uncaught_exceptions();
};

}  // namespace tpllama
