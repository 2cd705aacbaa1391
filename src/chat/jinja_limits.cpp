// The render budget: see jinja_limits.h.
#include "chat/jinja_limits.h"

#include <string>

#include "chat/jinja_value.h"
#include "core/stop_signal.h"

namespace tpllama::jinja {
namespace {

thread_local RenderBudget* current = nullptr;

}  // namespace

void RenderBudget::step() {
  if (++steps_ > limits_.max_steps)
    throw EvalError("the template passed its render budget of " +
                    std::to_string(limits_.max_steps) + " steps");
  // A stop signal is a load and a compare away; polling it every step would cost little more.
  if ((steps_ & 4095) == 0 && stop_signal() != 0)
    throw StoppedError("received signal " + std::to_string(stop_signal()) +
                       " while rendering a chat template");
}

void RenderBudget::over_bytes(std::size_t wanted) const {
  throw EvalError("the template passed its render budget of " + std::to_string(limits_.max_bytes) +
                  " bytes of strings, lists and text built (" + std::to_string(bytes_) +
                  " built, " + std::to_string(wanted) + " more wanted)");
}

void RenderBudget::charge(std::size_t bytes) {
  if (bytes > limits_.max_bytes - bytes_) over_bytes(bytes);
  bytes_ += bytes;
}

void RenderBudget::check(std::size_t bytes) const {
  if (bytes > limits_.max_bytes - bytes_) over_bytes(bytes);
}

BudgetScope::BudgetScope(RenderBudget& budget) : outer_(current) {
  current = &budget;
}
BudgetScope::~BudgetScope() {
  current = outer_;
}

void charge_bytes(std::size_t bytes) {
  if (current != nullptr) current->charge(bytes);
}

void check_bytes(std::size_t bytes) {
  if (current != nullptr) current->check(bytes);
}

}  // namespace tpllama::jinja
