#pragma once
// The expressions of experiment files (EXPERIMENTS.md "Expressions"):
// numbers, strings in single quotes, names, + - * / % (real division),
// comparisons, `and or not` (short-circuit), if(c, a, b), has(name),
// divides(a, b) (a divides b), min, max, abs, and functions the caller's
// Scope supplies (hosts(platform), layers(profile)). Every error is an
// InputError naming the expression; no input crashes or recurses without
// bound (nesting is limited to kMaxExpressionDepth).

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace pipegrid::sweep {

/// A value: absent, a boolean, a number or a text.
using Value = std::variant<std::monostate, bool, double, std::string>;

/// What names and extra functions mean where an expression is evaluated.
class Scope {
 public:
  virtual ~Scope() = default;
  /** The value of `name`, or nullopt when it is not set. */
  virtual std::optional<Value> lookup(std::string_view name) const = 0;
  /** A function the expression grammar does not define itself; nullopt:
   *  no such function. May throw InputError. */
  virtual std::optional<Value> call(std::string_view /*function*/, const std::vector<Value>& /*arguments*/) const {
    return std::nullopt;
  }
};

inline constexpr int kMaxExpressionDepth = 64;
inline constexpr std::size_t kMaxExpressionLength = 10000;

class Expression {
 public:
  struct Node;
  /** Parses `text`; `where` prefixes error messages (FILE:LINE). */
  static Expression parse(std::string_view text, const std::string& where = "");
  /** Evaluates under `scope`; throws InputError (without the `where`
   *  prefix: the caller knows the run). */
  Value evaluate(const Scope& scope) const;
  const std::string& text() const { return text_; }

 private:
  std::shared_ptr<const Node> root_;
  std::string text_;
};

/// A value as expressions print it: numbers in the shortest exact text
/// (integers without a decimal point), texts in single quotes.
std::string value_text(const Value& value);

}  // namespace pipegrid::sweep
