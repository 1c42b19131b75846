#include "sweep/expression.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "core/error.hpp"
#include "sweep/csv.hpp"
#include "core/suggest.hpp"

namespace pipegrid {

std::string describe(const Value& value) {
  if (std::holds_alternative<std::monostate>(value)) return "absent";
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const double* d = std::get_if<double>(&value)) return format_number(*d);
  return "'" + std::get<std::string>(value) + "'";
}

Value Scope::call(std::string_view function, const std::vector<Value>& /*arguments*/) const {
  throw InputError(fmt::format("{}() is not available here", function));
}

namespace {

enum class Kind {
  number, string, boolean, name, negate, logical_not,
  add, subtract, multiply, divide, modulo,
  equal, not_equal, less, less_equal, greater, greater_equal,
  logical_and, logical_or,
  if_, has, divides, min, max, abs, caller,
};

const char* symbol(Kind kind) {
  switch (kind) {
    case Kind::add: return "+";
    case Kind::subtract: return "-";
    case Kind::multiply: return "*";
    case Kind::divide: return "/";
    case Kind::modulo: return "%";
    case Kind::equal: return "==";
    case Kind::not_equal: return "!=";
    case Kind::less: return "<";
    case Kind::less_equal: return "<=";
    case Kind::greater: return ">";
    case Kind::greater_equal: return ">=";
    case Kind::logical_and: return "and";
    case Kind::logical_or: return "or";
    case Kind::negate: return "-";
    case Kind::logical_not: return "not";
    default: return "?";
  }
}

const char* type_name(const Value& value) {
  switch (value.index()) {
    case 0: return "an absent value";
    case 1: return "a boolean";
    case 2: return "a number";
    default: return "a string";
  }
}

}  // namespace

struct Expression::Impl {
  struct Node {
    Kind kind;
    double number = 0;
    std::string text;                 // string literal, name, function name
    std::vector<std::size_t> children;
  };
  std::string text;
  std::string context;
  std::vector<Node> nodes;
  std::size_t root = 0;
  std::vector<std::string> names;

  std::string message(std::string_view what) const {
    std::string shown = text;
    if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
    return fmt::format("{}expression '{}': {}", context.empty() ? "" : context + ": ", shown, what);
  }
  [[noreturn]] void fail(std::string_view what) const { throw InputError(message(what)); }

  Value eval(std::size_t index, const Scope& scope) const;
  bool eval_bool(std::size_t index, const Scope& scope, std::string_view role) const;
  double eval_number(std::size_t index, const Scope& scope, std::string_view role) const;
};

namespace {

// ---------------------------------------------------------------- lexer

enum class Token { end, number, string, name, quoted_name, lparen, rparen, comma, op };

struct Lexeme {
  Token token = Token::end;
  std::string text;   // op symbol, name, string content, number text
  std::size_t column = 0;  // 1-based
};

std::string shown_lexeme(const Lexeme& lexeme) {
  switch (lexeme.token) {
    case Token::end: return "the end of the expression";
    case Token::string: return "'" + lexeme.text + "'";
    case Token::quoted_name: return "`" + lexeme.text + "`";
    default: return "'" + lexeme.text + "'";
  }
}

class Parser {
 public:
  Parser(Expression::Impl& impl) : impl_(impl), text_(impl.text) {}

  void run() {
    advance();
    impl_.root = parse_or();
    if (current_.token != Token::end)
      fail_at(current_, fmt::format("expected an operator or the end, found {}", shown_lexeme(current_)));
  }

 private:
  Expression::Impl& impl_;
  std::string_view text_;
  std::size_t pos_ = 0;
  Lexeme current_;
  std::vector<std::size_t> depth_;  // per node: height of its subtree

  [[noreturn]] void fail_at(const Lexeme& at, std::string_view what) {
    impl_.fail(fmt::format("at column {}: {}", at.column, what));
  }

  static bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
  static bool digit(char c) { return c >= '0' && c <= '9'; }

  void advance() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
    current_ = Lexeme{};
    current_.column = pos_ + 1;
    if (pos_ >= text_.size()) return;
    const char c = text_[pos_];
    if (digit(c) || (c == '.' && pos_ + 1 < text_.size() && digit(text_[pos_ + 1]))) {
      const std::size_t start = pos_;
      while (pos_ < text_.size() && digit(text_[pos_])) ++pos_;
      if (pos_ < text_.size() && text_[pos_] == '.') {
        ++pos_;
        while (pos_ < text_.size() && digit(text_[pos_])) ++pos_;
      }
      if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
        std::size_t look = pos_ + 1;
        if (look < text_.size() && (text_[look] == '+' || text_[look] == '-')) ++look;
        if (look < text_.size() && digit(text_[look])) {
          pos_ = look;
          while (pos_ < text_.size() && digit(text_[pos_])) ++pos_;
        }
      }
      current_.token = Token::number;
      current_.text = std::string(text_.substr(start, pos_ - start));
      if (pos_ < text_.size() && name_char(text_[pos_]))
        fail_at(current_, fmt::format("a number followed by '{}' (a value that is no number needs quotes: '...')",
                                      text_[pos_]));
      return;
    }
    if (name_start(c)) {
      const std::size_t start = pos_;
      while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
      current_.text = std::string(text_.substr(start, pos_ - start));
      current_.token = (current_.text == "and" || current_.text == "or" || current_.text == "not") ? Token::op : Token::name;
      return;
    }
    if (c == '\'' || c == '`') {
      const std::size_t close = text_.find(c, pos_ + 1);
      if (close == std::string_view::npos)
        fail_at(current_, c == '\'' ? "unterminated string (the closing ' is missing)"
                                    : "unterminated quoted name (the closing ` is missing)");
      current_.token = c == '\'' ? Token::string : Token::quoted_name;
      current_.text = std::string(text_.substr(pos_ + 1, close - pos_ - 1));
      if (current_.token == Token::quoted_name && current_.text.empty()) fail_at(current_, "empty quoted name ``");
      pos_ = close + 1;
      return;
    }
    if (c == '(' || c == ')' || c == ',') {
      current_.token = c == '(' ? Token::lparen : c == ')' ? Token::rparen : Token::comma;
      current_.text = std::string(1, c);
      ++pos_;
      return;
    }
    for (const char* two : {"==", "!=", "<=", ">="})
      if (text_.substr(pos_, 2) == two) {
        current_.token = Token::op;
        current_.text = two;
        pos_ += 2;
        return;
      }
    if (std::string_view("+-*/%<>").find(c) != std::string_view::npos) {
      current_.token = Token::op;
      current_.text = std::string(1, c);
      ++pos_;
      return;
    }
    if (c == '=') fail_at(current_, "'=' is no operator (compare with '==')");
    if (c == '"') fail_at(current_, "strings take single quotes ('gpipe'), not double quotes");
    if (c == '&' || c == '|' || c == '!')
      fail_at(current_, fmt::format("'{}' is no operator (use 'and', 'or', 'not', '!=')", c));
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
      fail_at(current_, fmt::format("unexpected byte 0x{:02x}", static_cast<unsigned char>(c)));
    fail_at(current_, fmt::format("unexpected character '{}'", c));
  }

  bool at_op(std::string_view op) const { return current_.token == Token::op && current_.text == op; }

  std::size_t add(Kind kind, std::vector<std::size_t> children, const Lexeme& at, double number = 0, std::string text = {}) {
    std::size_t height = 1;
    for (const std::size_t child : children) height = std::max(height, depth_[child] + 1);
    if (height > Expression::max_depth)
      fail_at(at, fmt::format("nested deeper than {} levels (each operator of a chain counts one)", Expression::max_depth));
    impl_.nodes.push_back(Expression::Impl::Node{kind, number, std::move(text), std::move(children)});
    depth_.push_back(height);
    return impl_.nodes.size() - 1;
  }

  std::size_t nesting_ = 0;  // open parentheses, calls, unary operators
  /// Counts one level of nesting while alive; the parser's recursion is bounded by it.
  struct Nest {
    Parser& parser;
    Nest(Parser& p, const Lexeme& at) : parser(p) {
      if (++parser.nesting_ > Expression::max_depth)
        parser.fail_at(at, fmt::format("nested deeper than {} levels", Expression::max_depth));
    }
    ~Nest() { --parser.nesting_; }
  };

  std::size_t parse_or() {
    std::size_t left = parse_and();
    while (at_op("or")) {
      const Lexeme op = current_;
      advance();
      left = add(Kind::logical_or, {left, parse_and()}, op);
    }
    return left;
  }

  std::size_t parse_and() {
    std::size_t left = parse_not();
    while (at_op("and")) {
      const Lexeme op = current_;
      advance();
      left = add(Kind::logical_and, {left, parse_not()}, op);
    }
    return left;
  }

  std::size_t parse_not() {
    if (at_op("not")) {
      const Lexeme op = current_;
      const Nest nest(*this, op);
      advance();
      return add(Kind::logical_not, {parse_not()}, op);
    }
    return parse_comparison();
  }

  std::size_t parse_comparison() {
    const std::size_t left = parse_sum();
    static const std::vector<std::pair<std::string_view, Kind>> ops = {
        {"==", Kind::equal}, {"!=", Kind::not_equal}, {"<", Kind::less},
        {"<=", Kind::less_equal}, {">", Kind::greater}, {">=", Kind::greater_equal}};
    for (const auto& [text, kind] : ops)
      if (at_op(text)) {
        const Lexeme op = current_;
        advance();
        const std::size_t node = add(kind, {left, parse_sum()}, op);
        for (const auto& [again, unused] : ops)
          if (at_op(again))
            fail_at(current_, fmt::format("comparisons do not chain ('a < b < c'): write 'a < b and b < c'"));
        return node;
      }
    return left;
  }

  std::size_t parse_sum() {
    std::size_t left = parse_product();
    while (at_op("+") || at_op("-")) {
      const Lexeme op = current_;
      advance();
      left = add(op.text == "+" ? Kind::add : Kind::subtract, {left, parse_product()}, op);
    }
    return left;
  }

  std::size_t parse_product() {
    std::size_t left = parse_unary();
    while (at_op("*") || at_op("/") || at_op("%")) {
      const Lexeme op = current_;
      advance();
      const Kind kind = op.text == "*" ? Kind::multiply : op.text == "/" ? Kind::divide : Kind::modulo;
      left = add(kind, {left, parse_unary()}, op);
    }
    return left;
  }

  std::size_t parse_unary() {
    if (at_op("-")) {
      const Lexeme op = current_;
      const Nest nest(*this, op);
      advance();
      return add(Kind::negate, {parse_unary()}, op);
    }
    return parse_primary();
  }

  void note_name(const std::string& name) {
    if (std::find(impl_.names.begin(), impl_.names.end(), name) == impl_.names.end()) impl_.names.push_back(name);
  }

  std::size_t parse_primary() {
    const Lexeme at = current_;
    switch (at.token) {
      case Token::number: {
        const double value = std::strtod(at.text.c_str(), nullptr);
        if (!std::isfinite(value)) fail_at(at, fmt::format("number {} is out of range", at.text));
        advance();
        return add(Kind::number, {}, at, value);
      }
      case Token::string:
        advance();
        return add(Kind::string, {}, at, 0, at.text);
      case Token::quoted_name:
        advance();
        note_name(at.text);
        return add(Kind::name, {}, at, 0, at.text);
      case Token::lparen: {
        const Nest nest(*this, at);
        advance();
        const std::size_t inner = parse_or();
        if (current_.token != Token::rparen)
          fail_at(current_, fmt::format("expected ')' (for the '(' at column {}), found {}", at.column, shown_lexeme(current_)));
        advance();
        return inner;
      }
      case Token::name: {
        advance();
        if (at.text == "true" || at.text == "false") return add(Kind::boolean, {}, at, at.text == "true" ? 1 : 0);
        if (current_.token == Token::lparen) return parse_call(at);
        note_name(at.text);
        return add(Kind::name, {}, at, 0, at.text);
      }
      case Token::end:
        fail_at(at, "expected a value, found the end of the expression");
      default:
        fail_at(at, fmt::format("expected a value, found {}", shown_lexeme(at)));
    }
  }

  std::size_t parse_call(const Lexeme& function) {
    struct Builtin {
      const char* name;
      Kind kind;
      std::size_t min_args, max_args;
    };
    static const std::vector<Builtin> builtins = {
        {"if", Kind::if_, 3, 3},         {"has", Kind::has, 1, 1},  {"divides", Kind::divides, 2, 2},
        {"min", Kind::min, 1, 1000000},  {"max", Kind::max, 1, 1000000}, {"abs", Kind::abs, 1, 1},
        {"hosts", Kind::caller, 1, 1},   {"layers", Kind::caller, 1, 1}};
    const Builtin* builtin = nullptr;
    for (const auto& candidate : builtins)
      if (function.text == candidate.name) builtin = &candidate;
    if (!builtin) {
      std::vector<std::string> known;
      for (const auto& candidate : builtins) known.emplace_back(candidate.name);
      fail_at(function, fmt::format("unknown function '{}'{}", function.text, did_you_mean(function.text, known)));
    }
    const Nest nest(*this, function);
    advance();  // '('
    std::vector<std::size_t> args;
    if (builtin->kind == Kind::has) {
      if (current_.token != Token::name && current_.token != Token::quoted_name)
        fail_at(current_, fmt::format("has() takes a name, found {}", shown_lexeme(current_)));
      const Lexeme name = current_;
      advance();
      note_name(name.text);
      args.push_back(add(Kind::name, {}, name, 0, name.text));
    } else if (current_.token != Token::rparen) {
      for (;;) {
        args.push_back(parse_or());
        if (current_.token != Token::comma) break;
        advance();
      }
    }
    if (current_.token != Token::rparen)
      fail_at(current_, fmt::format("expected ',' or ')' in the arguments of {}(), found {}", function.text,
                                    shown_lexeme(current_)));
    advance();
    if (args.size() < builtin->min_args || args.size() > builtin->max_args) {
      const std::string wanted = builtin->min_args == builtin->max_args
                                     ? fmt::format("{}", builtin->min_args)
                                     : fmt::format("at least {}", builtin->min_args);
      fail_at(function, fmt::format("{}() takes {} argument{}, found {}", function.text, wanted,
                                    builtin->min_args == 1 ? "" : "s", args.size()));
    }
    return add(builtin->kind, std::move(args), function, 0, function.text);
  }
};

}  // namespace

// ---------------------------------------------------------------- evaluation

bool Expression::Impl::eval_bool(std::size_t index, const Scope& scope, std::string_view role) const {
  const Value value = eval(index, scope);
  if (const bool* b = std::get_if<bool>(&value)) return *b;
  fail(fmt::format("{} must be a boolean, found {} ({})", role, type_name(value), describe(value)));
}

double Expression::Impl::eval_number(std::size_t index, const Scope& scope, std::string_view role) const {
  const Value value = eval(index, scope);
  if (const double* d = std::get_if<double>(&value)) return *d;
  fail(fmt::format("{} must be a number, found {} ({})", role, type_name(value), describe(value)));
}

Value Expression::Impl::eval(std::size_t index, const Scope& scope) const {
  const Node& node = nodes[index];
  auto finite = [&](double result, std::string_view what) -> Value {
    if (!std::isfinite(result)) fail(fmt::format("{} is not a finite number", what));
    return result;
  };
  switch (node.kind) {
    case Kind::number: return node.number;
    case Kind::string: return node.text;
    case Kind::boolean: return node.number != 0;
    case Kind::name: {
      Value value;
      try {
        value = scope.lookup(node.text);
      } catch (const InputError& error) {
        fail(error.what());
      }
      if (std::holds_alternative<std::monostate>(value))
        fail(fmt::format("'{}' is absent here (guard it with has({}))", node.text, node.text));
      return value;
    }
    case Kind::negate: return -eval_number(node.children[0], scope, "the operand of unary '-'");
    case Kind::logical_not: return !eval_bool(node.children[0], scope, "the operand of 'not'");
    case Kind::logical_and:
      return eval_bool(node.children[0], scope, "the left operand of 'and'") &&
             eval_bool(node.children[1], scope, "the right operand of 'and'");
    case Kind::logical_or:
      return eval_bool(node.children[0], scope, "the left operand of 'or'") ||
             eval_bool(node.children[1], scope, "the right operand of 'or'");
    case Kind::add:
    case Kind::subtract:
    case Kind::multiply:
    case Kind::divide:
    case Kind::modulo: {
      const std::string role_left = fmt::format("the left operand of '{}'", symbol(node.kind));
      const std::string role_right = fmt::format("the right operand of '{}'", symbol(node.kind));
      const double a = eval_number(node.children[0], scope, role_left);
      const double b = eval_number(node.children[1], scope, role_right);
      const std::string shown = fmt::format("{} {} {}", format_number(a), symbol(node.kind), format_number(b));
      switch (node.kind) {
        case Kind::add: return finite(a + b, shown);
        case Kind::subtract: return finite(a - b, shown);
        case Kind::multiply: return finite(a * b, shown);
        case Kind::divide:
          if (b == 0) fail(fmt::format("division by zero ({})", shown));
          return finite(a / b, shown);
        default:
          if (b == 0) fail(fmt::format("'%' by zero ({})", shown));
          return finite(std::fmod(a, b), shown);
      }
    }
    case Kind::equal:
    case Kind::not_equal:
    case Kind::less:
    case Kind::less_equal:
    case Kind::greater:
    case Kind::greater_equal: {
      const Value a = eval(node.children[0], scope);
      const Value b = eval(node.children[1], scope);
      if (a.index() != b.index())
        fail(fmt::format("'{}' compares {} ({}) with {} ({})", symbol(node.kind), type_name(a), describe(a),
                         type_name(b), describe(b)));
      if (node.kind == Kind::equal) return a == b;
      if (node.kind == Kind::not_equal) return a != b;
      if (std::holds_alternative<bool>(a))
        fail(fmt::format("'{}' orders booleans ({} and {})", symbol(node.kind), describe(a), describe(b)));
      const bool less = a < b, greater = b < a;
      if (node.kind == Kind::less) return less;
      if (node.kind == Kind::less_equal) return !greater;
      if (node.kind == Kind::greater) return greater;
      return !less;
    }
    case Kind::if_:
      return eval_bool(node.children[0], scope, "the condition of if()") ? eval(node.children[1], scope)
                                                                          : eval(node.children[2], scope);
    case Kind::has: {
      Value value;
      try {
        value = scope.lookup(nodes[node.children[0]].text);
      } catch (const InputError& error) {
        fail(error.what());
      }
      return !std::holds_alternative<std::monostate>(value);
    }
    case Kind::divides: {
      const double a = eval_number(node.children[0], scope, "the first argument of divides()");
      const double b = eval_number(node.children[1], scope, "the second argument of divides()");
      if (std::trunc(a) != a || std::trunc(b) != b)
        fail(fmt::format("divides({}, {}) takes integers", format_number(a), format_number(b)));
      if (a == 0) return b == 0;
      return std::fmod(b, a) == 0;
    }
    case Kind::min:
    case Kind::max: {
      const bool is_min = node.kind == Kind::min;
      double best = 0;
      for (std::size_t i = 0; i < node.children.size(); ++i) {
        const double v = eval_number(node.children[i], scope,
                                     fmt::format("argument {} of {}()", i + 1, is_min ? "min" : "max"));
        if (i == 0 || (is_min ? v < best : v > best)) best = v;
      }
      return best;
    }
    case Kind::abs: return std::fabs(eval_number(node.children[0], scope, "the argument of abs()"));
    case Kind::caller: {
      std::vector<Value> arguments;
      for (const std::size_t child : node.children) arguments.push_back(eval(child, scope));
      try {
        return scope.call(node.text, arguments);
      } catch (const InputError& error) {
        fail(error.what());
      }
    }
  }
  fail("internal: unknown node");
}

// ---------------------------------------------------------------- Expression

const std::vector<std::string>& Expression::caller_functions() {
  static const std::vector<std::string> names = {"hosts", "layers"};
  return names;
}

Expression Expression::parse(std::string_view text, std::string context) {
  auto impl = std::make_shared<Impl>();
  impl->context = std::move(context);
  if (text.size() > max_length) {
    impl->text = std::string(text.substr(0, 200));
    impl->fail(fmt::format("longer than {} characters", max_length));
  }
  impl->text = std::string(text);
  Parser parser(*impl);
  parser.run();
  return Expression(std::move(impl));
}

Value Expression::evaluate(const Scope& scope) const { return impl_->eval(impl_->root, scope); }

bool Expression::evaluate_bool(const Scope& scope) const { return impl_->eval_bool(impl_->root, scope, "the result"); }

double Expression::evaluate_number(const Scope& scope) const {
  return impl_->eval_number(impl_->root, scope, "the result");
}

const std::string& Expression::text() const { return impl_->text; }
const std::vector<std::string>& Expression::names() const { return impl_->names; }
std::string Expression::message(std::string_view what) const { return impl_->message(what); }

}  // namespace pipegrid
