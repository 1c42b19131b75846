#pragma once
// The expression language of experiment files (docs/experiments-report.md,
// "Expressions"): `when`, `[derive]`, `[[where]]`, `--where`, and the
// report's `[[expect]]` assertions.
//
// Grammar, loosest binding first:
//   expr       := or
//   or         := and ('or' and)*                     short-circuit
//   and        := not ('and' not)*                    short-circuit
//   not        := 'not' not | comparison
//   comparison := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?   not chained
//   sum        := product (('+'|'-') product)*
//   product    := unary (('*'|'/'|'%') unary)*
//   unary      := '-' unary | primary
//   primary    := NUMBER | STRING | 'true' | 'false' | NAME | '(' expr ')'
//               | FUNCTION '(' [expr (',' expr)*] ')'
// NUMBER: 12, 0.5, .5, 1e-3. STRING: single quotes, no escapes ('gpipe').
// NAME: [A-Za-z_][A-Za-z0-9_]*, or any text but '`' between backquotes
// (`1f1b-so`, for table columns named by values that are no identifiers).
// Functions: if(c, a, b) (evaluates only the branch taken), has(name) (its
// argument a bare NAME: whether the name has a value), divides(a, b) (a
// divides b; both integral), min(x, ...), max(x, ...), abs(x), and the
// caller's functions hosts(platform) and layers(profile) (Scope::call).
//
// Types are strict: numbers (doubles; integers are integral doubles),
// strings, booleans. Arithmetic and ordering take numbers (ordering also two
// strings); == and != take two values of one type; and/or/not/if take
// booleans. `/` is real division; `%` is fmod, with the sign of the left
// operand. Division or `%` by zero, a non-finite result, reading an absent
// name (unless guarded by has()), a type mismatch: each is an InputError
// naming the expression, with the values involved. No input crashes or
// hangs: nesting deeper than max_depth (also long left-associative chains)
// and texts longer than max_length are errors.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace pipegrid {

/** A value: absent (monostate), a boolean, a number or a string. */
using Value = std::variant<std::monostate, bool, double, std::string>;

/** "absent", "true", "16", "'gpipe'": a value as messages show it. */
std::string describe(const Value& value);

/** What an expression reads: names and the caller's functions. */
class Scope {
 public:
  virtual ~Scope() = default;
  /** The value of `name`; monostate when it is absent. A scope that knows
   *  the set of valid names may throw InputError for an unknown one. */
  virtual Value lookup(std::string_view name) const = 0;
  /** hosts(platform), layers(profile): the caller's functions, with their
   *  evaluated arguments. The default throws InputError ("not available
   *  here"). */
  virtual Value call(std::string_view function, const std::vector<Value>& arguments) const;
};

/** A parsed expression; cheap to copy (shared, immutable). */
class Expression {
 public:
  static constexpr std::size_t max_depth = 200;
  static constexpr std::size_t max_length = 65536;
  /** Names of the caller's functions (Scope::call). */
  static const std::vector<std::string>& caller_functions();

  /** Parses `text`. `context` (e.g. "study.toml:12") prefixes every message
   *  of this expression, parse and evaluation: "CONTEXT: expression 'TEXT':
   *  ...". Throws InputError on a syntax error (with its column), an unknown
   *  function (with a suggestion), a wrong argument count. */
  static Expression parse(std::string_view text, std::string context = "");

  /** Evaluates over `scope`. Throws InputError as described above. */
  Value evaluate(const Scope& scope) const;
  /** evaluate(), which must give a boolean (InputError otherwise). */
  bool evaluate_bool(const Scope& scope) const;
  /** evaluate(), which must give a number (InputError otherwise). */
  double evaluate_number(const Scope& scope) const;

  const std::string& text() const;
  /** The distinct names read (has() arguments included), in order of first
   *  appearance: a caller checks them against its known names up front. */
  const std::vector<std::string>& names() const;

  /** "CONTEXT: expression 'TEXT': " + `what`, the form of every message. */
  std::string message(std::string_view what) const;

  struct Impl;

 private:
  explicit Expression(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace pipegrid
