// Tokenizer and IncrementalDetokenizer. Decoding reproduces SentencePiece's DecodeIds byte for
// byte, so streamed text and a one-shot decode of the same ids never disagree.
#include "runtime/tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstdio>
#include <utility>

#include "core/error.h"

namespace tpllama {
namespace {

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";       // U+2581, SentencePiece's space marker
constexpr char kUnknownSurface[] = " \xE2\x81\x87 ";  // SentencePiece's default unk surface
constexpr char kReplacementChar[] = "\xEF\xBF\xBD";   // U+FFFD

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

// Length of the valid UTF-8 character at s given avail bytes; 0 when the bytes so far are a viable
// but incomplete prefix; -1 when s[0] can never start a valid character here. The second-byte
// ranges reject overlongs, surrogates and code points above U+10FFFF up front, so nothing that can
// never become valid is held back waiting for more bytes.
int utf8_char_len(const unsigned char* s, size_t avail) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  int need = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= avail) return 0;
    const unsigned char b = s[k];
    const unsigned char k_lo = k == 1 ? lo : 0x80;
    const unsigned char k_hi = k == 1 ? hi : 0xBF;
    if (b < k_lo || b > k_hi) return -1;
  }
  return need;
}

// Moves complete characters from buf to out; a byte that cannot start a valid character becomes
// U+FFFD on its own (SentencePiece's rule), except that the first *silent bytes (a prompt's
// incomplete last character) are dropped instead: they are not the caller's text. A viable
// incomplete tail stays in buf unless final. *silent shrinks by the bytes that went.
void drain_utf8(std::string& buf, std::string& out, bool final, size_t* silent) {
  const auto* data = reinterpret_cast<const unsigned char*>(buf.data());
  size_t i = 0;
  while (i < buf.size()) {
    const int len = utf8_char_len(data + i, buf.size() - i);
    if (len > 0) {
      out.append(buf, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else if (len < 0 || final) {
      if (i >= *silent) out += kReplacementChar;
      ++i;
    } else {
      break;
    }
  }
  *silent -= std::min(*silent, i);
  buf.erase(0, i);
}

}  // namespace

std::string token_display_text(const std::string& bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    const int len = utf8_char_len(data + i, bytes.size() - i);
    if (len <= 0) break;
    i += static_cast<size_t>(len);
  }
  if (i == bytes.size()) return bytes;
  std::string out = "bytes:";
  char hex[5];
  for (unsigned char c : bytes) {
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += hex;
  }
  return out;
}

Tokenizer::Tokenizer(const std::string& model_path)
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto status = processor_->Load(model_path);
  if (!status.ok()) fail("cannot load SentencePiece model '", model_path, "': ", status.ToString());
  const int n = processor_->GetPieceSize();
  bytes_.resize(static_cast<size_t>(n));
  kinds_.resize(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const auto idx = static_cast<size_t>(id);
    const std::string& piece = processor_->IdToPiece(id);
    if (processor_->IsControl(id)) {
      kinds_[idx] = Kind::kControl;
    } else if (processor_->IsUnknown(id)) {
      kinds_[idx] = Kind::kUnknown;
      bytes_[idx] = kUnknownSurface;
    } else if (processor_->IsByte(id)) {
      const int value = parse_byte_piece(piece);
      if (value < 0)
        fail("SentencePiece model '", model_path, "': byte piece ", id, " is '", piece, "'");
      kinds_[idx] = Kind::kByte;
      bytes_[idx] = std::string(1, static_cast<char>(value));
    } else {
      kinds_[idx] = Kind::kNormal;
      bytes_[idx] = replace_space_symbol(piece);
    }
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) fail("SentencePiece cannot encode text: ", status.ToString());
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
  return processor_->IdToPiece(id);
}

int Tokenizer::bos_id() const { return processor_->bos_id(); }

int Tokenizer::eos_id() const { return processor_->eos_id(); }

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
  // have no text: skipped, as generated ones are.
  for (const int id : prompt_ids)
    if (tok_ == nullptr || (id >= 0 && id < tok_->vocab_size())) push(id);
  prompt_pending_ = pending_.size();
}

std::string IncrementalDetokenizer::push(int id) {
  if (tok_ == nullptr) return "";
  tok_->check_id(id);
  const auto idx = static_cast<size_t>(id);
  const Tokenizer::Kind kind = tok_->kinds_[idx];
  const std::string& bytes = tok_->bytes_[idx];
  size_t skip = 0;
  // DecodeIds strips the dummy-prefix space from a normal piece while its output is still empty;
  // models whose add_dummy_prefix is off are not handled, as the option is not readable here.
  if (at_start_ && kind == Tokenizer::Kind::kNormal && !bytes.empty() && bytes[0] == ' ') skip = 1;
  if (bytes.size() > skip) at_start_ = false;
  pending_.append(bytes, skip, std::string::npos);
  std::string out;
  drain_utf8(pending_, out, /*final=*/false, &prompt_pending_);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  drain_utf8(pending_, out, /*final=*/true, &prompt_pending_);
  return out;
}

}  // namespace tpllama
