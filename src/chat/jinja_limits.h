// Limits that keep a hostile template from taking the stack, memory or time: nesting depths the
// parser and renderer refuse past, and a render budget (steps and bytes built) that the renderer
// and the value operations charge, polling the stop signal as they go.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpllama::jinja {

// Nesting the parser accepts: tags inside tags plus parentheses, brackets, braces, unary signs and
// `not`s inside each other, counted together. The real templates in shared/chat_templates nest
// under 10; CPython's jinja2 hits its recursion limit near 100 parentheses.
inline constexpr int kMaxParseNesting = 200;
// Depth of one expression's tree (`a + b + c ...` and `x|f|g ...` chains grow it without nesting).
inline constexpr int kMaxExpressionDepth = 400;
// Statements and expressions being evaluated inside each other, macro calls included.
inline constexpr int kMaxRenderDepth = 2000;
// Lists and dicts inside each other, whether from the request's JSON or built by the template.
inline constexpr int kMaxValueDepth = 256;

// One render's budget. The templates of shared/chat_templates need at most 61 376 steps and
// 1.27 MB built for a 1000-turn conversation with 10 tools (ChatTemplate unit test, src/README.md):
// the defaults are over 200 times that, and a render that reaches them ends within seconds.
struct RenderLimits {
  std::int64_t max_steps = 20'000'000;
  // Bytes of every string, list and dict the render builds, and of the text it writes (its
  // output and any {% set %} block or macro it captures): memory it can hold is below this.
  std::size_t max_bytes = std::size_t{256} << 20;
};

class RenderBudget {
 public:
  explicit RenderBudget(RenderLimits limits) : limits_(limits) {}
  // One evaluation step; every 4096th also polls the stop signal (throws StoppedError).
  void step();
  // `bytes` more were built; throws EvalError naming the budget once the total passes it.
  void charge(std::size_t bytes);
  // Throws as charge would, before building `bytes` more (for operations whose result is known
  // to be large before it exists: repetition, joins, replacement, indentation).
  void check(std::size_t bytes) const;
  std::int64_t steps() const { return steps_; }
  std::size_t bytes() const { return bytes_; }

 private:
  [[noreturn]] void over_bytes(std::size_t wanted) const;
  RenderLimits limits_;
  std::int64_t steps_ = 0;
  std::size_t bytes_ = 0;
};

// While alive, `budget` is the one charge_bytes and check_bytes report to on this thread.
class BudgetScope {
 public:
  explicit BudgetScope(RenderBudget& budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  RenderBudget* outer_;
};

// No-ops outside a render (parsing a template, values built from the request's JSON).
void charge_bytes(std::size_t bytes);
void check_bytes(std::size_t bytes);

}  // namespace tpllama::jinja
