// The checks every command makes on the files it will read and write, before any work.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/request.h"

namespace tpllama {

// --response-format FILE read and compiled now, so that a schema the engine refuses ends the
// command before any weight is read (Error naming the file), not request by request. nullopt for
// an empty path or {"type": "text"}.
std::optional<OutputConstraint> checked_response_format(const std::string& path);

// Fails now, not after hours of work, when a file a command will write (flag, path; empty paths
// skipped) is an input file, one of `read_files` (what it is, path: the model's files), or another
// of them, cannot be written, or is locked by another tpllama process (a running job's output).
// Nothing is created, and an existing file is left as it is.
void check_output_files(const std::vector<std::string>& inputs,
                        const std::vector<std::pair<std::string, std::string>>& outputs,
                        const std::vector<std::pair<std::string, std::string>>& read_files = {});

// The files of `model_dir` a command may read, whether or not each is there yet (a file written
// there now would be read by the next run): config.json, the weights (every *.safetensors, the
// index, a shard manifest), the tokenizer and chat-template files, generation_config.json; and
// the --chat-template file. As (what, path) for check_output_files.
std::vector<std::pair<std::string, std::string>> model_files(const std::string& model_dir,
                                                             const std::string& chat_template = "");

// A records file an earlier run filled (a regular file, not empty) is replaced only when the
// command is told to (`allowed`: --overwrite, or --resume, which keeps the records): else fails
// naming the file, its size and `how` ("pass --resume to ..., or --overwrite to ...").
void check_not_replacing(const std::string& flag, const std::string& path, bool allowed,
                         const std::string& how);

// The directory shard or convert fills (--out) may not be, hold or lie inside a source it reads
// (what, path: "the model directory", a checkpoint or tokenizer file): fails naming both.
void check_out_directory(const std::string& out,
                         const std::vector<std::pair<std::string, std::string>>& sources);

// A regular file, or nothing yet (it will be one); not this process's stdout or stderr, even when
// the shell sent those to a file (perhaps both to one), nor a pipe or a device.
bool output_is_a_file(const std::string& path);

// The prompt (or text) file exists, is not a directory and, when a regular file, can be read (a
// FIFO is not opened: its writer would see a reader come and go). Fails naming it.
void check_input_file(const std::string& path);

}  // namespace tpllama
