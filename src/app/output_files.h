// The checks every command makes on the files it will read and write, before any work.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tpllama {

// Fails now, not after hours of work, when a file a command will write (flag, path; empty paths
// skipped) is an input file or another of them, cannot be written, or is locked by another tpllama
// process (a running job's output). Nothing is created, and an existing file is left as it is.
void check_output_files(const std::vector<std::string>& inputs,
                        const std::vector<std::pair<std::string, std::string>>& outputs);

// A regular file, or nothing yet (it will be one); not this process's stdout or stderr, even when
// the shell sent those to a file (perhaps both to one), nor a pipe or a device.
bool output_is_a_file(const std::string& path);

// The prompt (or text) file exists, is not a directory and, when a regular file, can be read (a
// FIFO is not opened: its writer would see a reader come and go). Fails naming it.
void check_input_file(const std::string& path);

}  // namespace tpllama
