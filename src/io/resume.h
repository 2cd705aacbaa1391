// Resuming a killed run: repair the output file's torn last line and index which request ids it
// already holds, so the driver can skip them and append the rest; and the checks that what a file
// holds is this job's (its sidecar, each skipped request's record, perplexity's windows).
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/result_writer.h"
#include "io/window_file.h"

namespace tpllama {

struct OutputJob;

// What a record of a finished request says of the request it answers, to tell whether a resumed
// run's request with that id is the same one: the prompt's token count (a scoring record: the
// continuation's), so a resume onto another input's output is caught before its records are
// taken for this input's.
struct ResumedRecord {
  size_t line = 0;        // in the output file
  bool scoring = false;   // a scoring record ("logprob"), whose count is its continuation's
  long long tokens = -1;  // -1: the record gives none
};

// A record of an id the file already answered on an earlier line. An input's ids are unique (a
// repeated one is an error record, keyed by its line), so a second record is a duplicate — of two
// runs appended to one file without --resume's skipping, or of a hand edit — not an answer.
struct DuplicateRecord {
  std::string id;  // id_key() of it
  size_t first_line = 0, line = 0;
};

struct ResumeIndex {
  std::string path;                           // the output file
  std::unordered_map<std::string, int> done;  // id_key(id) -> records already in the file
  // id_key(id) -> every record with that id, in file order (error records keyed by input line are
  // not here; an error record of an id has no count).
  std::unordered_map<std::string, std::vector<ResumedRecord>> by_id;
  std::vector<DuplicateRecord> duplicates;  // counted in records, not in done
  size_t records = 0;                       // complete records in the file
  size_t truncated_bytes = 0;               // torn last line cut off the end
};

// Missing file: an empty index. Otherwise cuts a torn last line (anything after the final '\n')
// with ftruncate, then reads the file line by line and counts records per id ("id" for kJsonl,
// "custom_id" for kOpenAiBatch); error records count, as they are final; a second record of an id
// is a duplicate (see DuplicateRecord), not a second answer. Throws Error naming the
// file and line for a complete line that is not a JSON object with that id: the file is not a
// tpllama output. Also throws for a path that is not a regular file.
ResumeIndex prepare_resume(const std::string& output_path, OutputFormat format);

// Cuts everything after the file's last '\n' (a record torn by a kill) and syncs; returns how many
// bytes went. Throws Error naming the path.
size_t cut_torn_last_line(const std::string& path);

// --resume onto records another job made is refused, naming every difference; an output without
// a sidecar (an older tpllama's, another tool's) cannot be checked, which is said.
void check_resumed_job(const std::string& output, const OutputJob& here);

// Warns of the duplicate records the index found: kept, and not taken as answers.
void warn_duplicates(const ResumeIndex& index);

// A request this run would skip as answered gives the token count its record gives (`tokens`: the
// prompt's, or a scoring request's continuation's), or the output is another input's (or was made
// with another tokenizer): throws Error naming the record's line and the request's.
void check_resumed_record(const ResumedRecord& record, const std::string& output,
                          const Request& req, long long tokens);

// The windows a --windows file of the same run (else throws Error naming the difference) already
// scored: each of its scores must be one of `windows`, once (else throws Error naming it).
std::vector<bool> resumed_windows(const std::string& path, const WindowFile& file,
                                  const WindowRun& run, const std::vector<Window>& windows);

}  // namespace tpllama
