// The request field table (io/request_fields.h): src/README.md's field reference is the table,
// row for row (the test prints the reference as the table makes it when they differ); every row
// is consistent (a parser where it is read, a neutral value that parses as JSON where it is not);
// and vLLM's truncate_prompt_tokens, added as one row, reads as vLLM documents it.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/prompt_reader.h"
#include "io/request_fields.h"

namespace tpllama {
namespace {

using request_fields::constraint_fields;
using request_fields::find_request_field;
using request_fields::kAllTakers;
using request_fields::kAnyValue;
using request_fields::kBatchChat;
using request_fields::kBatchCompletion;
using request_fields::kChats;
using request_fields::kCompletions;
using request_fields::kGenerations;
using request_fields::kJsonl;
using request_fields::kJsonlChat;
using request_fields::kJsonlCompletion;
using request_fields::kJsonlScoring;
using request_fields::kUnknownThere;
using request_fields::RequestField;
using request_fields::Takers;

// Who reads a field, in the reference's words.
std::string readers(Takers t) {
  if (t == kAllTakers) return "every request";
  if (t == 0) return "none";
  if (t == kJsonl) return "JSONL";
  if (t == kGenerations) return "completions, chats";
  if (t == (kAllTakers & ~kBatchCompletion)) return "all but batch completions";
  std::vector<std::string> names;
  if ((t & kCompletions) == kCompletions) {
    names.push_back("completions");
    t &= ~kCompletions;
  }
  if ((t & kChats) == kChats) {
    names.push_back("chats");
    t &= ~kChats;
  }
  if (t & kJsonlCompletion) names.push_back("JSONL completions");
  if (t & kJsonlScoring) names.push_back("scoring");
  if (t & kJsonlChat) names.push_back("JSONL chats");
  if (t & kBatchCompletion) names.push_back("batch completions");
  if (t & kBatchChat) names.push_back("batch chats");
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// Where a field is not read: what is taken.
std::string elsewhere(const RequestField& f) {
  if (f.read_by == kAllTakers) return "—";
  if (f.neutral == kUnknownThere) return "refused (unknown)";
  if (f.neutral == kAnyValue) return "any value";
  if (*f.neutral == '\0') return "null";
  std::ostringstream out;
  out << '`' << nlohmann::json::parse(f.neutral).dump() << "` or null";
  if (f.chat_neutral) out << " (chats: `" << f.chat_neutral << "`)";
  return out.str();
}

// The reference as the table makes it.
std::string reference_table() {
  std::ostringstream os;
  os << "| field | read by | where not read, taken at |\n| --- | --- | --- |\n";
  for (const RequestField& f : request_fields::request_fields())
    os << "| `" << f.name << "` | " << readers(f.read_by) << " | " << elsewhere(f) << " |\n";
  return os.str();
}

// The lines of src/README.md's reference table (those starting with "| `" or "| field" or
// "| ---" after the marker comment).
std::string readme_table() {
  std::ifstream in(TPLLAMA_SOURCE_DIR "/src/README.md");
  EXPECT_TRUE(in.good()) << "cannot read src/README.md";
  std::string line, table;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.find("<!-- request-fields: begin") != std::string::npos) {
      inside = true;
      continue;
    }
    if (line.find("<!-- request-fields: end") != std::string::npos) break;
    if (inside && line.rfind("|", 0) == 0) table += line + "\n";
  }
  return table;
}

TEST(RequestFieldTable, TheReadmeReferenceIsTheTable) {
  const std::string expected = reference_table();
  EXPECT_EQ(readme_table(), expected)
      << "src/README.md's request field reference (between its request-fields markers) differs "
         "from the table in src/io/request_field_table.cpp; as the table makes it:\n"
      << expected;
}

TEST(RequestFieldTable, EveryRowIsConsistent) {
  std::set<std::string> names;
  for (const RequestField& f : request_fields::request_fields()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name << " twice";
    if (f.neutral != kUnknownThere && f.neutral != kAnyValue && *f.neutral != '\0') {
      EXPECT_TRUE(nlohmann::json::accept(f.neutral)) << f.name;
    }
    if (f.read_by == 0) {
      EXPECT_EQ(f.parse, nullptr) << f.name << " is read by nothing";
      EXPECT_NE(f.neutral, kUnknownThere) << f.name << " would be unknown everywhere";
    }
    if (f.generation) {
      EXPECT_EQ(f.read_by, kGenerations) << f.name;
    }
  }
  EXPECT_NE(find_request_field("truncate_prompt_tokens"), nullptr);
  EXPECT_EQ(find_request_field("no_such_field"), nullptr);
  EXPECT_EQ(constraint_fields().size(), 6u);
}

std::vector<Request> read(const std::string& content, InputFormat format = InputFormat::kJsonl) {
  std::istringstream in(content);
  PromptReader reader(in, format, RequestDefaults{}, "fields.jsonl");
  std::vector<Request> out;
  while (auto r = reader.next(true)) out.push_back(std::move(*r));
  return out;
}

TEST(RequestFieldTable, TruncatePromptTokensIsReadAsVllmDocumentsIt) {
  const std::vector<Request> reqs =
      read(R"({"prompt": "a", "truncate_prompt_tokens": 5})"
           "\n"
           R"({"prompt": "a", "truncate_prompt_tokens": -1})"
           "\n"
           R"({"prompt": "a", "truncate_prompt_tokens": null})"
           "\n"
           R"({"context": "a", "continuation": "b", "truncate_prompt_tokens": 7})"
           "\n"
           R"({"messages": [{"role": "user", "content": "a"}], "truncate_prompt_tokens": 2})"
           "\n"
           R"({"prompt": "a", "truncate_prompt_tokens": 0})"
           "\n"
           R"({"prompt": "a", "truncate_prompt_tokens": -2})"
           "\n"
           R"({"prompt": "a", "truncate_prompt_tokens": 1.5})"
           "\n");
  ASSERT_EQ(reqs.size(), 8u);
  EXPECT_EQ(reqs[0].truncate_prompt_tokens, 5);
  EXPECT_EQ(reqs[1].truncate_prompt_tokens, -1);
  EXPECT_EQ(reqs[2].truncate_prompt_tokens, 0) << "null: off";
  EXPECT_EQ(reqs[3].truncate_prompt_tokens, 7) << "scoring requests too";
  EXPECT_EQ(reqs[4].truncate_prompt_tokens, 2) << "chats too";
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(reqs[i].error, "") << i;
  for (size_t i = 5; i < 8; ++i)
    EXPECT_NE(reqs[i].error.find("field 'truncate_prompt_tokens' must be an integer >= 1"),
              std::string::npos)
        << reqs[i].error;
  const std::vector<Request> batch = read(
      R"({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a", "truncate_prompt_tokens": 3}})"
      "\n",
      InputFormat::kOpenAiBatch);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].error, "");
  EXPECT_EQ(batch[0].truncate_prompt_tokens, 3);
}

}  // namespace
}  // namespace tpllama
