// `tpllama convert`: write a Hugging Face-style model directory from a llama2.c checkpoint, or a
// seeded random-weight model of a named shape (the demo default and benchmark fixtures).

#include <algorithm>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/output_files.h"
#include "core/error.h"
#include "core/log.h"
#include "model/config.h"
#include "model/llama2c.h"
#include "model/recode.h"
#include "model/shapes.h"
#include "parallel/mpi_session.h"
#include "text/tokenizer.h"

namespace tpllama {

void add_convert_command(CLI::App& app, ConvertOptionsCli& o) {
  CLI::App* c = app.add_subcommand("convert", "Write a Hugging Face-style model directory");
  c->add_option(
       "--from", o.from,
       "Source: llama2c (a .bin checkpoint), random (seeded random weights), or hf (a Hugging Face "
       "checkpoint, --model, written again in --dtype one tensor at a time)")
      ->capture_default_str()
      ->check(CLI::IsMember({"llama2c", "random", "hf"}));
  c->add_option("--checkpoint", o.checkpoint, "llama2.c checkpoint (.bin), for --from llama2c");
  c->add_option("--model", o.model,
                "Hugging Face LLaMA directory, for --from hf (its tokenizer goes with it)");
  c->add_option("--tokenizer", o.tokenizer,
                "For --from llama2c and random (required): the tokenizer to place in the output, a "
                "SentencePiece "
                "tokenizer.model or a Hugging Face tokenizer.json (with the tokenizer_config.json "
                "beside it)");
  c->add_option("--out", o.out, "Output directory")->required();
  c->add_option("--dtype", o.dtype,
                "Weight dtype in the output: f32, bf16, f16, or int8 (every matrix but the "
                "embedding quantized as "
                "--dtype int8 runs hold it, with its f32 scales; the rest f32): an int8 checkpoint "
                "loads without "
                "the f32 pass")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16", "f16", "int8"}));
  c->add_option("--shape", o.shape, std::string("For --from random: ") + shape_names())
      ->capture_default_str();
  c->add_option("--config", o.config,
                "For --from random: take the architecture from this Hugging Face config.json "
                "instead of --shape "
                "(its vocab_size is kept when at least the tokenizer's)");
  c->add_option("--seed", o.seed, "For --from random: weight seed")
      ->capture_default_str()
      ->check(unsigned_64());
  c->add_option("--vocab", o.vocab, "For --from random: vocabulary size (default: the tokenizer's)")
      ->check(at_least(1));
}

int convert_command(const ConvertOptionsCli& o, const MpiSession& mpi) {
  if (mpi.rank() != 0) return 0;  // a file conversion needs one writer
  check_out_directory(o.out, {{"the model directory", o.from == "hf" ? o.model : ""},
                              {"the llama2.c checkpoint", o.from == "llama2c" ? o.checkpoint : ""},
                              {"the tokenizer", o.tokenizer},
                              {"the --config file", o.config}});
  ConvertOptions options;
  options.out_dir = o.out;
  options.tokenizer_path = o.tokenizer;
  options.dtype = o.dtype == "bf16"   ? DType::kBF16
                  : o.dtype == "f16"  ? DType::kF16
                  : o.dtype == "int8" ? DType::kI8
                                      : DType::kF32;
  if (o.from == "hf") {
    if (o.model.empty())
      fail("convert --from hf needs --model DIR (a Hugging Face LLaMA directory)");
    if (!o.tokenizer.empty())
      fail(
          "convert --from hf takes the model's own tokenizer; --tokenizer is for llama2c and "
          "random");
    check_convert_out(o.out);
    const LlamaConfig c = convert_checkpoint(o.model, options);
    log::info("wrote " + o.out + " from " + o.model + " as " + o.dtype + " (" +
              std::to_string(c.n_layers) + " layers, dim " + std::to_string(c.dim) + ", vocab " +
              std::to_string(c.vocab_size) + ")");
    return 0;
  }
  if (o.tokenizer.empty())
    fail("convert --from ", o.from, " needs --tokenizer (tokenizer.model or tokenizer.json)");
  Tokenizer tokenizer(o.tokenizer);  // fails early on a bad tokenizer
  check_convert_out(o.out);          // and on an --out holding another model, before converting
  if (o.from == "llama2c") {
    if (o.checkpoint.empty()) fail("convert --from llama2c needs --checkpoint FILE.bin");
    LlamaConfig c = convert_llama2c(o.checkpoint, options);
    if (tokenizer.vocab_size() != c.vocab_size)
      log::warn("tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                " pieces, model vocab is " + std::to_string(c.vocab_size));
    log::info("wrote " + o.out + " from " + o.checkpoint + " (" + std::to_string(c.n_layers) +
              " layers, dim " + std::to_string(c.dim) + ", vocab " + std::to_string(c.vocab_size) +
              ")");
    return 0;
  }
  LlamaConfig c = o.config.empty() ? shape_config(o.shape) : load_llama_config(o.config);
  if (!o.config.empty()) c.int8_group_size = 0;  // how the output holds its weights is --dtype's
  const bool config_vocab = !o.config.empty() && c.vocab_size >= tokenizer.vocab_size();
  c.vocab_size = o.vocab > 0 ? o.vocab : config_vocab ? c.vocab_size : tokenizer.vocab_size();
  if (c.vocab_size < tokenizer.vocab_size())
    fail("--vocab ", c.vocab_size, " is smaller than the tokenizer's ", tokenizer.vocab_size(),
         " pieces");
  // A SentencePiece model names its BOS and EOS; a tokenizer.json's shape names them (Llama 3's).
  if (tokenizer.is_sentencepiece()) {
    c.bos_token_id = std::max(0, tokenizer.bos_id());
    c.eos_token_ids = {std::max(0, tokenizer.eos_id())};
  } else if (tokenizer.bos_id() >= 0) {
    c.bos_token_id = tokenizer.bos_id();
  }
  write_random_model(c, o.seed, options);
  const std::string from = o.config.empty() ? "shape " + o.shape : "config " + o.config;
  log::info("wrote random-weight model " + o.out + " (" + from + ", seed " +
            std::to_string(o.seed) + ", vocab " + std::to_string(c.vocab_size) + ")");
  return 0;
}

}  // namespace tpllama
