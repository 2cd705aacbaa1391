// Tokenizer and IncrementalDetokenizer. Decoding reproduces SentencePiece's DecodeIds (or Hugging
// Face's decode) byte for byte, so streamed text and a one-shot decode of the same ids agree.
#include "text/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/file_read.h"
#include "core/utf8.h"
#include "text/hf_tokenizer.h"

namespace tpllama {
namespace {

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";       // U+2581, SentencePiece's space marker
constexpr char kUnknownSurface[] = " \xE2\x81\x87 ";  // SentencePiece's default unk surface

std::string replace_space_symbol(const std::string& piece) {
  std::string out;
  out.reserve(piece.size());
  const std::string marker = kSpaceSymbol;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, marker.size(), marker) == 0) {
      out += ' ';
      i += marker.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

// Byte-fallback pieces are spelled "<0xNN>".
int parse_byte_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

std::string token_display_text(const std::string& bytes) {
  if (utf8::is_valid(bytes)) return bytes;
  std::string out = "bytes:";
  char hex[5];
  for (unsigned char c : bytes) {
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += hex;
  }
  return out;
}

std::unique_ptr<Tokenizer> Tokenizer::from_model_dir(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string model = model_dir + "/tokenizer.model", json = model_dir + "/tokenizer.json";
  std::error_code ec;
  for (const std::string& file : {model, json})
    if (fs::exists(file, ec)) require_regular_file(file, "tokenizer file");
  if (fs::is_regular_file(model, ec)) {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp->LoadFromSerializedProto(
        read_regular_file(model, "tokenizer file", kMaxTokenizerFileBytes));
    if (status.ok()) return std::unique_ptr<Tokenizer>(new Tokenizer(model, std::move(sp)));
    // Llama 3's original/tokenizer.model is tiktoken's format, not SentencePiece's: tokenizer.json
    // is the one to read then.
    if (!fs::is_regular_file(json, ec))
      fail("model directory ", model_dir, ": tokenizer.model is not a SentencePiece model (",
           status.ToString(), ") and there is no tokenizer.json");
    return std::make_unique<Tokenizer>(json);
  }
  if (fs::is_regular_file(json, ec)) return std::make_unique<Tokenizer>(json);
  fail("model directory ", model_dir,
       " has no tokenizer: neither tokenizer.model (SentencePiece) nor tokenizer.json (Hugging "
       "Face)");
}

Tokenizer::Tokenizer(const std::string& path) : path_(path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".json")
    load_hf();
  else
    load_sentencepiece();
}

Tokenizer::Tokenizer(std::string path,
                     std::unique_ptr<sentencepiece::SentencePieceProcessor> loaded)
    : path_(std::move(path)), sp_(std::move(loaded)) {
  load_sentencepiece();
}

// Builds the tables from sp_, loading it from path_ first unless it is loaded already.
void Tokenizer::load_sentencepiece() {
  if (!sp_) {
    sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp_->LoadFromSerializedProto(
        read_regular_file(path_, "tokenizer file", kMaxTokenizerFileBytes));
    if (!status.ok()) fail("cannot load SentencePiece model '", path_, "': ", status.ToString());
  }
  const int n = sp_->GetPieceSize();
  bytes_.resize(static_cast<size_t>(n));
  kinds_.resize(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const auto idx = static_cast<size_t>(id);
    const std::string& piece = sp_->IdToPiece(id);
    if (sp_->IsControl(id)) {
      kinds_[idx] = Kind::kControl;
      if (!piece.empty()) specials_.emplace(piece, id);
    } else if (sp_->IsUnknown(id)) {
      kinds_[idx] = Kind::kUnknown;
      bytes_[idx] = kUnknownSurface;
    } else if (sp_->IsByte(id)) {
      const int value = parse_byte_piece(piece);
      if (value < 0)
        fail("SentencePiece model '", path_, "': byte piece ", id, " is '", piece, "'");
      kinds_[idx] = Kind::kByte;
      bytes_[idx] = std::string(1, static_cast<char>(value));
    } else {
      kinds_[idx] = Kind::kNormal;
      bytes_[idx] = replace_space_symbol(piece);
    }
  }
  strip_leading_spaces_ = 1;
  strip_normal_only_ = true;
  measure_text_per_token();
}

void Tokenizer::load_hf() {
  hf_ = std::make_unique<HfTokenizer>(path_);
  const int n = hf_->vocab_size();
  bytes_.resize(static_cast<size_t>(n));
  kinds_.resize(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const auto idx = static_cast<size_t>(id);
    if (!hf_->has_token(id)) {
      kinds_[idx] = Kind::kControl;  // a gap in the ids: no text
    } else if (hf_->is_special(id)) {
      kinds_[idx] = Kind::kControl;
      specials_.emplace(hf_->piece(id), id);
    } else {
      kinds_[idx] = hf_->is_byte(id) ? Kind::kByte : Kind::kNormal;
      bytes_[idx] = hf_->token_bytes(id);
    }
  }
  strip_leading_spaces_ = hf_->strip_leading_spaces();
  // Byte-fallback pieces are decoded byte by byte (a U+FFFD each); byte-level BPE's bytes are
  // joined and decoded lossily, a U+FFFD per maximal ill-formed subpart.
  lossy_per_byte_ =
      std::any_of(kinds_.begin(), kinds_.end(), [](Kind k) { return k == Kind::kByte; });
  measure_text_per_token();
}

// The SentencePiece API does not show the normalizer, so it is tried. A model that gives back text
// with tabs, newlines, a zero-width space, a combining accent, a ligature, an ideographic space and
// a control character exactly as they were, and spells every byte, drops no text (normalization
// "identity"; NFKC would change the probe) except, with remove_extra_whitespaces (SentencePiece's
// default, and stories260K's), runs of spaces, which become one space: counted so by min_tokens.
void Tokenizer::measure_text_per_token() {
  for (size_t id = 0; id < bytes_.size(); ++id)
    longest_token_text_ =
        std::max({longest_token_text_, bytes_[id].size(), piece(static_cast<int>(id)).size()});
  longest_token_text_ =
      std::max<size_t>(longest_token_text_, 4);  // an unknown character as one token
  if (hf_) {
    max_shrink_ = hf_->max_shrink();
    return;
  }
  const auto byte_pieces = std::count(kinds_.begin(), kinds_.end(), Kind::kByte);
  const std::string probe = "a b\t\tc\n\nd \xE2\x80\x8B e\xCC\x81 \xEF\xAC\x81 \xE3\x80\x80 \x01 z";
  if (byte_pieces != 256 || decode(encode(probe)) != probe) return;
  const std::string runs = decode(encode("a  b   c"));
  if (runs != "a  b   c" && runs != "a b c") return;
  max_shrink_ = 1.0;
  collapses_spaces_ = runs == "a b c";
}

std::optional<size_t> Tokenizer::min_tokens(std::string_view text) const {
  if (!max_shrink_) return std::nullopt;
  size_t bytes = text.size();
  if (collapses_spaces_) {
    // Leading and trailing whitespace goes, and each run of it is one space; SentencePiece takes
    // its own space symbol '▁' in the input for a space too.
    bytes = 0;
    bool pending_space = false;
    for (size_t i = 0; i < text.size();) {
      const size_t space = text[i] == ' ' ? 1 : text.compare(i, 3, kSpaceSymbol) == 0 ? 3 : 0;
      if (space > 0) {
        pending_space = bytes > 0;
        i += space;
        continue;
      }
      bytes += (pending_space ? 1 : 0) + 1;
      pending_space = false;
      ++i;
    }
  }
  const double per_token = static_cast<double>(longest_token_text_) * *max_shrink_;
  return static_cast<size_t>(std::ceil(static_cast<double>(bytes) / per_token));
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int> Tokenizer::encode(const std::string& text) const {
  if (hf_) return hf_->encode(text);
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) fail("SentencePiece cannot encode text: ", status.ToString());
  return ids;
}

// SentencePiece does not know its control pieces as text: the text between their occurrences
// (leftmost, longest first) is encoded on its own, each piece becoming its id.
std::vector<int> Tokenizer::encode_with_special_tokens(const std::string& text) const {
  if (hf_ || specials_.empty()) return encode(text);
  std::vector<int> ids;
  size_t from = 0;
  const auto flush_text = [&](size_t to) {
    if (to <= from) return;
    for (int id : encode(text.substr(from, to - from))) ids.push_back(id);
  };
  for (size_t i = 0; i < text.size();) {
    const std::pair<const std::string, int>* best = nullptr;
    for (const auto& entry : specials_)
      if (text.compare(i, entry.first.size(), entry.first) == 0 &&
          (!best || entry.first.size() > best->first.size()))
        best = &entry;
    if (!best) {
      ++i;
      continue;
    }
    flush_text(i);
    ids.push_back(best->second);
    i += best->first.size();
    from = i;
  }
  flush_text(text.size());
  return ids;
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(bytes_.size());
}

void Tokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size())
    fail("token id ", id, " out of range for vocabulary of ", vocab_size());
}

std::string Tokenizer::token_bytes(int id) const {
  check_id(id);
  return bytes_[static_cast<size_t>(id)];
}

bool Tokenizer::is_control(int id) const {
  check_id(id);
  return kinds_[static_cast<size_t>(id)] == Kind::kControl;
}

std::string Tokenizer::piece(int id) const {
  check_id(id);
  return hf_ ? hf_->piece(id) : sp_->IdToPiece(id);
}

int Tokenizer::bos_id() const {
  if (sp_) return sp_->bos_id();
  return hf_->prefix_ids().empty() ? -1 : hf_->prefix_ids().front();
}

int Tokenizer::eos_id() const {
  return sp_ ? sp_->eos_id() : -1;
}

std::vector<int> Tokenizer::prefix_ids() const {
  return hf_ ? hf_->prefix_ids() : std::vector<int>{};
}

std::vector<int> Tokenizer::suffix_ids() const {
  return hf_ ? hf_->suffix_ids() : std::vector<int>{};
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  IncrementalDetokenizer detok(*this);
  std::string text;
  for (const int id : ids) text += detok.push(id);
  text += detok.flush();
  return text;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok) : tok_(&tok) {}

void IncrementalDetokenizer::prime(const std::vector<int>& prompt_ids) {
  // The prompt's text is discarded, but it still decides the leading-space rule, and a character
  // the prompt leaves incomplete stays pending so generated bytes can complete it.
  // Ids past the tokenizer's pieces (a model vocabulary padded beyond them, given as token ids)
  // have no text: skipped, as generated ones are. The prompt's control tokens (its BOS) add no text
  // either way, so they do not end the leading-space rule.
  const bool skip_special = skip_special_;
  skip_special_ = true;
  for (const int id : prompt_ids)
    if (tok_ == nullptr || (id >= 0 && id < tok_->vocab_size())) push(id);
  skip_special_ = skip_special;
  prompt_pending_ = pending_.size();
}

std::string IncrementalDetokenizer::push(int id) {
  if (tok_ == nullptr) return "";
  tok_->check_id(id);
  const auto idx = static_cast<size_t>(id);
  const Tokenizer::Kind kind = tok_->kinds_[idx];
  const std::string special =
      kind == Tokenizer::Kind::kControl && !skip_special_ ? tok_->piece(id) : std::string();
  const std::string& bytes = special.empty() ? tok_->bytes_[idx] : special;
  size_t skip = 0;
  if (at_start_ && !bytes.empty()) {
    if (tok_->strip_normal_only_) {
      // DecodeIds strips the dummy-prefix space from each normal piece while its output is still
      // empty; models whose add_dummy_prefix is off are not handled (the option is not readable).
      if (kind == Tokenizer::Kind::kNormal && bytes[0] == ' ') skip = 1;
    } else {
      // Hugging Face strips the fused text's first characters (Strip, Metaspace decoders).
      while (stripped_ < tok_->strip_leading_spaces_ && skip < bytes.size() && bytes[skip] == ' ') {
        ++skip;
        ++stripped_;
      }
    }
  }
  if (bytes.size() > skip) at_start_ = false;
  pending_.append(bytes, skip, std::string::npos);
  std::string out;
  utf8::drain(pending_, out, /*final=*/false, &prompt_pending_, lossy());
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  utf8::drain(pending_, out, /*final=*/true, &prompt_pending_, lossy());
  return out;
}

utf8::Lossy IncrementalDetokenizer::lossy() const {
  return tok_ == nullptr || tok_->lossy_per_byte_ ? utf8::Lossy::kPerByte
                                                  : utf8::Lossy::kPerMaximalSubpart;
}

}  // namespace tpllama
