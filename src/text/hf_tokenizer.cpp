// HfTokenizer: tokenizer.json read into its parts (text/normalizer, pre_tokenizer, bpe_model,
// added_tokens, hf_decoder), the encode pipeline that runs them, and the per-id decode tables.
#include "text/hf_tokenizer.h"

#include <mutex>
#include <new>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "core/utf8.h"
#include "text/added_tokens.h"
#include "text/bpe_model.h"
#include "text/hf_decoder.h"
#include "text/hf_json.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"

namespace tpllama {

using hf::Json;

namespace {

// The most bytes the whole vocabulary may decode to (Llama 3's 128,256 tokens take about 1 MB).
constexpr size_t kMaxDecodedBytes = size_t{64} << 20;
const std::string kNoToken;  // what piece() and token_bytes() give for an id with no token

Json read_json(const std::string& path) {
  const std::string text = read_regular_file(path, "tokenizer file", kMaxTokenizerFileBytes);
  try {
    return parse_json(text, path);
  } catch (const Json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
}

const Json& field_or_null(const Json& root, const char* key) {
  static const Json null;
  auto it = root.find(key);
  return it == root.end() ? null : *it;
}

// Tables are sized by the largest id, so ids are checked against the tokens the file holds before
// any is built: a 300-token file naming id 1e9 would otherwise cost gigabytes, then be refused.
// A vocabulary may skip ids, kMaxIdGaps of them in all.
constexpr size_t kMaxIdGaps = 1024;

void check_ids(const Json& root, const std::string& path) {
  const Json& model = field_or_null(root, "model");
  const Json& vocab = model.is_object() ? field_or_null(model, "vocab") : model;
  const Json& added = field_or_null(root, "added_tokens");
  const size_t tokens =
      (vocab.is_object() ? vocab.size() : 0) + (added.is_array() ? added.size() : 0);
  const size_t limit = tokens + kMaxIdGaps;
  const auto check = [&](const Json& id, const std::string& what) {
    if (id.is_number_unsigned() && id.get<uint64_t>() >= limit)
      fail(path, ": ", what, " has id ", id.get<uint64_t>(), ", but the file holds ", tokens,
           " tokens (vocab and added_tokens): ids must be below ", limit, " (gaps of ", kMaxIdGaps,
           " ids at most)");
  };
  if (vocab.is_object())
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
      check(*it, "model: vocab entry '" + clip(it.key()) + "'");
  if (added.is_array())
    for (size_t i = 0; i < added.size(); ++i)
      if (added[i].is_object() && added[i].contains("id"))
        check(added[i]["id"], "added_tokens[" + std::to_string(i) + "]");
}

// Ids of a TemplateProcessing special token, by its name in the template.
std::vector<int> template_ids(const Json& processor, const std::string& name,
                              const std::string& where) {
  const Json& specials = hf::member(processor, "special_tokens", where);
  auto it = specials.find(name);
  if (it == specials.end()) fail(where, ": template token '", name, "' is not in special_tokens");
  std::vector<int> ids;
  for (const Json& id : hf::req_array(*it, "ids", where + ".special_tokens." + name)) {
    if (!id.is_number_integer()) fail(where, ": special_tokens.", name, " has id ", id.dump());
    ids.push_back(id.get<int>());
  }
  return ids;
}

}  // namespace

struct HfTokenizer::Impl {
  std::string path;
  hf::Normalizer normalizer;
  hf::PreTokenizer pre_tokenizer;
  std::unique_ptr<hf::BpeModel> model;
  hf::AddedTokens added;
  hf::Decoder decoder;
  std::vector<int> prefix_ids, suffix_ids;

  // Per id: spelling, decoded bytes and flags.
  enum Flag : unsigned char { kHas = 1, kSpecial = 2, kByte = 4 };
  std::vector<std::string> pieces, bytes;
  std::vector<unsigned char> flags;
  hf::StringMap<int> added_ids;

  mutable std::mutex mutex;  // encode's scratch, the model's cache and the regex match data
  mutable std::vector<hf::Piece> words;

  void load();  // from path
  void read_post_processor(const Json& j, const std::string& where);
  void build_tables();
  void encode_text(std::string_view text, bool at_origin, std::vector<int>& ids) const;
  void encode_words(std::string_view text, bool at_origin, std::vector<int>& ids) const;
};

void HfTokenizer::Impl::read_post_processor(const Json& j, const std::string& where) {
  if (j.is_null()) return;
  std::string type = hf::type_of(j, where);
  if (type == "Sequence") {
    const Json& list = hf::req_array(j, "processors", where);
    for (size_t i = 0; i < list.size(); ++i) {
      read_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
    }
  } else if (type == "TemplateProcessing") {
    bool after = false;
    for (const Json& item : hf::req_array(j, "single", where)) {
      if (item.contains("Sequence")) {
        std::string seq = hf::req_string(item["Sequence"], "id", where + ".single");
        if (seq != "A") fail(where, ": single template has sequence '", seq, "', expected only A");
        after = true;
      } else if (item.contains("SpecialToken")) {
        std::string name = hf::req_string(item["SpecialToken"], "id", where + ".single");
        std::vector<int> ids = template_ids(j, name, where);
        std::vector<int>& dest = after ? suffix_ids : prefix_ids;
        dest.insert(dest.end(), ids.begin(), ids.end());
      } else {
        fail(where, ": single template item ", item.dump(), " is not a Sequence or SpecialToken");
      }
    }
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets: nothing for ids
    hf::refuse_type(where, type, "TemplateProcessing, ByteLevel, Sequence");
  }
}

void HfTokenizer::Impl::build_tables() {
  const std::vector<std::string>& vocab = model->pieces();
  size_t n = vocab.size();
  for (const hf::AddedToken& t : added.tokens()) n = std::max(n, static_cast<size_t>(t.id) + 1);
  pieces.assign(n, std::string());
  bytes.assign(n, std::string());
  flags.assign(n, 0);
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (model->id_of(vocab[id]) == static_cast<int>(id)) {
      pieces[id] = vocab[id];
      flags[id] = kHas;
    }
  }
  for (const hf::AddedToken& t : added.tokens()) {
    pieces[t.id] = t.content;
    flags[t.id] = kHas | (t.special ? kSpecial : 0);
    added_ids[t.content] = t.id;
  }
  size_t total = 0;  // the decode table's bytes, bounded as each token's are (hf_decoder.h)
  for (size_t id = 0; id < n; ++id) {
    if (!(flags[id] & kHas)) continue;
    bool is_byte = false;
    bytes[id] = decoder.token_bytes(pieces[id], &is_byte);
    if (is_byte) flags[id] |= kByte;
    total += bytes[id].size();
    if (total > kMaxDecodedBytes)
      fail(path, ": decoder: the first ", id + 1, " tokens decode to more than ", kMaxDecodedBytes,
           " bytes in all: refused");
  }
  for (const std::vector<int>* ids : {&prefix_ids, &suffix_ids}) {
    for (int id : *ids) {
      if (id < 0 || static_cast<size_t>(id) >= n || !(flags[id] & kHas)) {
        fail(path, ": post_processor template id ", id, " is not a token");
      }
    }
  }
}

HfTokenizer::HfTokenizer(const std::string& tokenizer_json_path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = tokenizer_json_path;
  try {
    m.load();
  } catch (
      const std::bad_alloc&) {  // a file whose parts outgrow memory: name it, not just bad_alloc
    fail(m.path, ": out of memory building the tokenizer it describes");
  }
}

void HfTokenizer::Impl::load() {
  Json root = read_json(path);
  const std::string& p = path;
  if (!root.is_object()) fail(p, ": expected a JSON object, got ", root.type_name());
  check_ids(root, p);
  normalizer = hf::Normalizer(field_or_null(root, "normalizer"), p + ": normalizer");
  pre_tokenizer = hf::PreTokenizer(field_or_null(root, "pre_tokenizer"), p + ": pre_tokenizer");
  model = std::make_unique<hf::BpeModel>(hf::member(root, "model", p), pre_tokenizer.byte_level(),
                                         p + ": model");
  added = hf::AddedTokens(field_or_null(root, "added_tokens"), normalizer, p + ": added_tokens");
  decoder = hf::Decoder(field_or_null(root, "decoder"), p + ": decoder");
  read_post_processor(field_or_null(root, "post_processor"), p + ": post_processor");
  build_tables();
}

HfTokenizer::~HfTokenizer() = default;
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;

std::vector<int> HfTokenizer::encode(const std::string& text) const {
  const Impl& m = *impl_;
  std::string repaired;
  std::string_view input = text;
  if (!utf8::is_valid(input)) {
    repaired = utf8::repair(input);
    input = repaired;
  }
  std::vector<int> ids;
  ids.reserve(input.size() / 4 + 4);
  std::vector<hf::Segment> segments;
  std::lock_guard<std::mutex> lock(m.mutex);
  m.added.split(input, false, segments);
  for (const hf::Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      m.encode_text(input.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
    }
  }
  return ids;
}

// One stretch of text between added tokens: normalized, then cut again by the added tokens that
// match normalized text, then split into words.
void HfTokenizer::Impl::encode_text(std::string_view text, bool at_origin,
                                    std::vector<int>& ids) const {
  std::string normalized;
  if (!normalizer.empty()) {
    normalized = normalizer.apply(text);
    text = normalized;
  }
  if (!added.has_normalized()) {
    encode_words(text, at_origin, ids);
    return;
  }
  std::vector<hf::Segment> segments;
  added.split(text, true, segments);
  for (const hf::Segment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      encode_words(text.substr(s.begin, s.end - s.begin), at_origin && s.begin == 0, ids);
    }
  }
}

void HfTokenizer::Impl::encode_words(std::string_view text, bool at_origin,
                                     std::vector<int>& ids) const {
  words.clear();
  pre_tokenizer.split(text, at_origin, words);
  for (const hf::Piece& w : words) model->encode_word(w.text, ids);
}

int HfTokenizer::vocab_size() const {
  return static_cast<int>(impl_->pieces.size());
}

const std::string& HfTokenizer::token_bytes(int id) const {
  return has_token(id) ? impl_->bytes[id] : kNoToken;
}

bool HfTokenizer::is_special(int id) const {
  return has_token(id) && (impl_->flags[id] & Impl::kSpecial);
}

bool HfTokenizer::is_byte(int id) const {
  return has_token(id) && (impl_->flags[id] & Impl::kByte);
}

bool HfTokenizer::has_token(int id) const {
  return id >= 0 && id < vocab_size() && (impl_->flags[id] & Impl::kHas);
}

const std::string& HfTokenizer::piece(int id) const {
  return has_token(id) ? impl_->pieces[id] : kNoToken;
}

std::optional<int> HfTokenizer::token_id(const std::string& piece) const {
  auto it = impl_->added_ids.find(piece);
  if (it != impl_->added_ids.end()) return it->second;
  return impl_->model->id_of(piece);
}

int HfTokenizer::strip_leading_spaces() const {
  return impl_->decoder.strip_leading_spaces();
}

std::optional<double> HfTokenizer::max_shrink() const {
  const Impl& m = *impl_;
  if (m.pre_tokenizer.drops_text() || m.model->may_drop_text()) return std::nullopt;
  for (const hf::AddedToken& t : m.added.tokens())
    if (t.lstrip || t.rstrip) return std::nullopt;
  return m.normalizer.max_shrink();
}

const std::vector<int>& HfTokenizer::prefix_ids() const {
  return impl_->prefix_ids;
}
const std::vector<int>& HfTokenizer::suffix_ids() const {
  return impl_->suffix_ids;
}

}  // namespace tpllama
