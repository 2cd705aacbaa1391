// Python's arithmetic operators for the Jinja subset, with Python's results and error messages
// (floor division and modulo round toward negative infinity; bool counts as int).
#include <cmath>
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/jinja_limits.h"

namespace tpllama::jinja {
namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  throw EvalError("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) +
                  "' and '" + type_name(b) + "'");
}

// Python ints are unbounded; this engine's are 64-bit, and says so rather than wrap.
void check_overflow(bool overflowed) {
  if (overflowed) throw EvalError("integer overflow: results beyond 64 bits are not supported");
}

Value repeat(const Value& seq, std::int64_t n) {
  const size_t size = seq.is_string() ? seq.as_string().size() : seq.as_list().items.size();
  if (n > 0 && size * static_cast<size_t>(n) > (size_t{1} << 26))
    throw EvalError("repetition result too large (" + std::to_string(size) + " x " +
                    std::to_string(n) + ")");
  if (n > 0) check_bytes(size * static_cast<size_t>(n) * (seq.is_string() ? 1 : sizeof(Value)));
  if (seq.is_string()) {
    std::string out;
    for (std::int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  for (std::int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

Value add(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    std::int64_t r = 0;
    check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
    return Value::integer(r);
  }
  if (a.is_number() && b.is_number()) return Value::number(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return Value::list(std::move(items), a.as_list().is_tuple);
  }
  if (a.is_string() || a.is_list()) {
    throw EvalError("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                    type_name(a));
  }
  unsupported("+", a, b);
}

Value multiply(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    std::int64_t r = 0;
    check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
    return Value::integer(r);
  }
  if (a.is_number() && b.is_number()) return Value::number(a.as_double() * b.as_double());
  if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(a, b.as_int());
  if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(b, a.as_int());
  unsupported("*", a, b);
}

Value divide(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  const bool ints = a.is_integral() && b.is_integral();
  if (op == "/") {
    if (b.as_double() == 0) throw EvalError("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (ints) {
    const std::int64_t x = a.as_int();
    const std::int64_t y = b.as_int();
    if (y == 0) throw EvalError("integer division or modulo by zero");
    // The one quotient beyond 64 bits (and a remainder C++ traps on, where Python's is 0).
    if (x == std::numeric_limits<std::int64_t>::min() && y == -1) {
      if (op == "%") return Value::integer(0);
      check_overflow(true);
    }
    std::int64_t q = x / y;
    std::int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      --q;
      r += y;
    }
    return Value::integer(op == "//" ? q : r);
  }
  const double x = a.as_double();
  const double y = b.as_double();
  if (y == 0) throw EvalError(op == "//" ? "float floor division by zero" : "float modulo");
  // CPython's float divmod: from fmod, not floor(x / y), so 1 // 0.1 is 9.0 as in Python.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (op == "%") return Value::number(mod);
  if (div == 0) return Value::number(std::copysign(0.0, x / y));
  double floor_div = std::floor(div);
  if (div - floor_div > 0.5) floor_div += 1.0;
  return Value::number(floor_div);
}

Value power(const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) unsupported("** or pow()", a, b);
  if (a.is_integral() && b.is_integral() && b.as_int() >= 0) {
    std::int64_t result = 1;
    std::int64_t base = a.as_int();
    for (std::int64_t e = b.as_int(); e > 0; e >>= 1) {
      if (e & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
      if (e > 1) check_overflow(__builtin_mul_overflow(base, base, &base));
    }
    return Value::integer(result);
  }
  if (a.as_double() == 0 && b.as_double() < 0)
    throw EvalError("0.0 cannot be raised to a negative power");
  return Value::number(std::pow(a.as_double(), b.as_double()));
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) throw EvalError(a.undefined_hint());
  if (b.is_undefined()) throw EvalError(b.undefined_hint());
  if (op == "+") return add(a, b);
  if (op == "-") {
    if (a.is_integral() && b.is_integral()) {
      std::int64_t r = 0;
      check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
      return Value::integer(r);
    }
    if (a.is_number() && b.is_number()) return Value::number(a.as_double() - b.as_double());
    unsupported("-", a, b);
  }
  if (op == "*") return multiply(a, b);
  if (op == "%" && a.is_string())
    throw EvalError("printf-style string formatting ('%' on a str) is not supported");
  if (op == "/" || op == "//" || op == "%") return divide(op, a, b);
  return power(a, b);
}

Value unary_op(std::string_view op, const Value& v) {
  if (v.is_undefined()) throw EvalError(v.undefined_hint());
  if (!v.is_number())
    throw EvalError("bad operand type for unary " + std::string(op) + ": '" + type_name(v) + "'");
  if (op == "+") return v.is_integral() ? Value::integer(v.as_int()) : v;
  if (!v.is_integral()) return Value::number(-v.as_double());
  std::int64_t r = 0;
  check_overflow(__builtin_sub_overflow(std::int64_t{0}, v.as_int(), &r));
  return Value::integer(r);
}

}  // namespace tpllama::jinja
