// A parsed Jinja template of the subset chat templates use: parse once, render many times with
// different variables. Load-time and render-time errors name the template line.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_value.h"
#include "core/error.h"

namespace tpllama::jinja {

struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // Callables the caller passes among the variables (e.g. raise_exception); calls to any other
  // name that is not a macro or one of Jinja's globals are refused when the template loads.
  std::vector<std::string> functions;
};

// "<origin> line N: <detail>".
class RenderError : public Error {
 public:
  RenderError(const std::string& what, int line) : Error(what), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

using Variables = std::vector<std::pair<std::string, Value>>;

class Template {
 public:
  // `origin` starts every error message, e.g. "model/tokenizer_config.json: chat template".
  Template(std::string_view text, std::string origin, TemplateOptions options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Thread-safe: rendering reads the tree and writes only its own state. Exceptions that the
  // variables' callables throw pass through unchanged. A render past `limits` throws RenderError
  // naming the budget; a stop signal during it throws StoppedError.
  std::string render(const Variables& variables, RenderLimits limits = {}) const;

 private:
  std::string origin_;
  std::unique_ptr<Body> body_;
};

}  // namespace tpllama::jinja
