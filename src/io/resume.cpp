// Output-file repair and indexing for --resume: the only place tpllama shortens a file, and only
// by the bytes after its last newline, which a single-write() record can leave behind when killed.
#include "io/resume.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "io/output_sidecar.h"
#include "io/request.h"
#include "io/request_fields.h"

namespace tpllama {
namespace {

using nlohmann::json;

// Owns one descriptor for the repair step.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Offset just past the last '\n' in the first size bytes (0 when there is none), scanning back.
off_t end_of_last_line(int fd, off_t size, const std::string& path) {
  std::vector<char> chunk(size_t{1} << 16);
  off_t end = size;
  while (end > 0) {
    const off_t begin = std::max<off_t>(0, end - static_cast<off_t>(chunk.size()));
    const auto len = static_cast<size_t>(end - begin);
    ssize_t n = ::pread(fd, chunk.data(), len, begin);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(len))
      fail("cannot read output file ", path,
           " to resume: ", n < 0 ? std::strerror(errno) : "short read");
    for (size_t i = len; i > 0; --i)
      if (chunk[i - 1] == '\n') return begin + static_cast<off_t>(i);
    end = begin;
  }
  return 0;
}

}  // namespace

size_t cut_torn_last_line(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (fd.get() < 0) fail("cannot open ", path, " to resume: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat ", path, ": ", std::strerror(errno));
  const off_t keep = end_of_last_line(fd.get(), st.st_size, path);
  if (keep == st.st_size) return 0;
  if (::ftruncate(fd.get(), keep) != 0 || ::fsync(fd.get()) != 0)
    fail("cannot truncate the torn last line of ", path, ": ", std::strerror(errno));
  return static_cast<size_t>(st.st_size - keep);
}

namespace {

// The token count a finished record gives: "prompt_tokens" (OpenAI: response.body.usage's), or a
// scoring record's "n_tokens". None (-1) for an error record.
ResumedRecord recorded_tokens(const json& record, bool openai) {
  ResumedRecord r;
  const auto count = [](const json& object, const char* field) {
    auto it = object.find(field);
    return it != object.end() && it->is_number_integer() ? it->get<long long>() : -1LL;
  };
  if (openai) {
    const json* at = &record;
    for (const char* field : {"response", "body", "usage"}) {
      auto it = at->find(field);
      if (it == at->end() || !it->is_object()) return r;
      at = &*it;
    }
    auto error = record.find("error");
    if (error == record.end() || error->is_null()) r.tokens = count(*at, "prompt_tokens");
    return r;
  }
  auto finish = record.find("finish_reason");
  if (finish != record.end() && finish->is_string() && *finish == "error") return r;
  r.scoring = record.contains("logprob") && !record.contains("text");
  r.tokens = count(record, r.scoring ? "n_tokens" : "prompt_tokens");
  return r;
}

void index_line(const std::string& text, size_t line, const char* id_field, const std::string& path,
                ResumeIndex& index) {
  const auto bad = [&](const std::string& why) {
    fail("cannot resume from ", path, ": line ", line, " ", why,
         "; the file is not a tpllama output");
  };
  json record;
  try {
    record = parse_json(text, detail::concat("cannot resume from ", path, ": line ", line));
  } catch (const json::exception& e) {
    bad("is not valid JSON (" + request_fields::parser_message(e) + ")");
  }
  if (!record.is_object()) bad(std::string("is a JSON ") + record.type_name() + ", not an object");
  // A record of the other format means the output belongs to another input: appending would mix
  // formats and redo every request.
  const bool openai = record.contains("custom_id") && record.contains("response");
  if (openai != (std::string(id_field) == "custom_id"))
    bad(std::string("is ") + (openai ? "an OpenAI batch" : "a tpllama JSONL") +
        " record, but this input's output is " + (openai ? "tpllama JSONL" : "OpenAI batch") +
        ": resume with the input that made this file");
  auto input_line = record.find("line");
  if (input_line != record.end() &&
      input_line->is_number_unsigned()) {  // error records: keyed by input line
    ++index.done[error_line_key(input_line->get<size_t>())];
    ++index.records;
    return;
  }
  auto id = record.find(id_field);
  if (id == record.end() || !(id->is_string() || id->is_number_integer()))
    bad(std::string("has no string or integer '") + id_field + "' field");
  const std::string key = id_key(*id);
  ++index.records;
  std::vector<ResumedRecord>& answers = index.by_id[key];
  if (!answers.empty()) {
    index.duplicates.push_back({key, answers.front().line, line});
    return;
  }
  ++index.done[key];
  ResumedRecord r = recorded_tokens(record, openai);
  r.line = line;
  answers.push_back(r);
}

}  // namespace

ResumeIndex prepare_resume(const std::string& output_path, OutputFormat format) {
  ResumeIndex index;
  index.path = output_path;
  struct stat st {};
  if (::stat(output_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return index;
    fail("cannot stat output file ", output_path, ": ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail("cannot resume into ", output_path, ": not a regular file");
  index.truncated_bytes = cut_torn_last_line(output_path);

  const char* id_field = format == OutputFormat::kOpenAiBatch ? "custom_id" : "id";
  std::ifstream in(output_path, std::ios::binary);
  if (!in) fail("cannot open output file ", output_path, " to resume: ", std::strerror(errno));
  std::string text;
  for (size_t line = 1; std::getline(in, text); ++line) {
    if (text.empty()) continue;  // tpllama never writes one; tolerate a hand-edited file
    index_line(text, line, id_field, output_path, index);
  }
  if (in.bad()) fail("error reading output file ", output_path, " to resume");
  return index;
}

void check_resumed_job(const std::string& output, const OutputJob& here) {
  const std::optional<OutputJob> made = read_sidecar(output);
  if (!made) {
    log::warn(
        "--resume: " + output + " has no sidecar " + sidecar_path(output) +
        " (an older tpllama's output, or another tool's): cannot check that the same job made it");
    return;
  }
  const std::string difference = output_job_difference(output, *made, here);
  if (!difference.empty())
    fail("--resume: ", difference,
         ". Resume with the settings that made it, or write to a new --output");
}

void warn_duplicates(const ResumeIndex& index) {
  if (index.duplicates.empty()) return;
  const DuplicateRecord& d = index.duplicates.front();
  log::warn("--resume: " + index.path + " holds " + std::to_string(index.duplicates.size()) +
            " duplicate records (a second record of an id already answered; the first: id " + d.id +
            " on line " + std::to_string(d.line) + ", first on line " +
            std::to_string(d.first_line) + "): kept, and not taken as answers");
}

// Taking another input's records for this input's would leave requests unanswered without a word,
// so the run stops (before any work when, as after a kill, the answered requests lead the input).
void check_resumed_record(const ResumedRecord& record, const std::string& output,
                          const Request& req, long long tokens) {
  if (record.scoring == req.scoring && record.tokens == tokens) return;
  const auto what = [](bool scoring, long long n) {
    return scoring ? "a scoring request with " + std::to_string(n) + " continuation tokens"
                   : "a " + std::to_string(n) + "-token prompt";
  };
  fail("--resume: line ", record.line, " of ", output, " answers id ", id_key(req.id), " for ",
       what(record.scoring, record.tokens), ", but this input's line ", req.line,
       " with that id is ", what(req.scoring, tokens),
       ": the output was made from another input, or with another tokenizer. Resume with the input "
       "and model "
       "that made it, or write to a new --output");
}

std::vector<bool> resumed_windows(const std::string& path, const WindowFile& file,
                                  const WindowRun& run, const std::vector<Window>& windows) {
  const std::string difference = window_run_difference(*file.run, run);
  if (!difference.empty())
    fail("cannot resume from ", path, ": it holds the windows of another run (", difference,
         "); give another --windows file, or --overwrite instead of --resume to replace it");
  std::vector<bool> done(windows.size(), false);
  for (const WindowScore& s : file.scores) {
    const size_t i = static_cast<size_t>(s.window);
    if (s.window >= static_cast<long long>(windows.size()) || s.n_tokens != windows[i].scored)
      fail("cannot resume from ", path, ": window ", s.window, " with ", s.n_tokens,
           " tokens is not one of this run's ", windows.size(), " windows");
    if (done[i]) fail("cannot resume from ", path, ": window ", s.window, " is in it twice");
    done[i] = true;
  }
  return done;
}

}  // namespace tpllama
