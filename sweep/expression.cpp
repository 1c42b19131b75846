#include "sweep/expression.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid::sweep {

struct Expression::Node {
  enum class Kind { Literal, Name, Unary, Binary, Call };
  Kind kind;
  Value literal;
  std::string name;  ///< Name: the name; Unary/Binary: the operator; Call: the function
  std::vector<std::shared_ptr<const Node>> children;
};

namespace {

using NodePtr = std::shared_ptr<const Expression::Node>;
using Kind = Expression::Node::Kind;

struct Token {
  enum class Type { Number, String, Name, Operator, End };
  Type type;
  std::string text;
  double number = 0;
  std::size_t position = 0;
};

[[noreturn]] void fail(const std::string& where, std::string_view text, const std::string& message) {
  throw InputError(fmt::format("{}{}expression '{}': {}", where, where.empty() ? "" : ": ", text, message));
}

std::vector<Token> tokenize(std::string_view text, const std::string& where) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token token{Token::Type::Operator, "", 0, i};
    if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      std::size_t end = i;
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                                   ((text[end] == '+' || text[end] == '-') && (text[end - 1] == 'e' || text[end - 1] == 'E'))))
        ++end;
      token.type = Token::Type::Number;
      token.text = std::string(text.substr(i, end - i));
      char* stop = nullptr;
      token.number = std::strtod(token.text.c_str(), &stop);
      if (!stop || *stop != '\0' || !std::isfinite(token.number)) fail(where, text, fmt::format("'{}' is not a number", token.text));
      i = end;
    } else if (c == '\'') {
      const std::size_t end = text.find('\'', i + 1);
      if (end == std::string_view::npos) fail(where, text, fmt::format("the string at character {} has no closing quote", i + 1));
      token.type = Token::Type::String;
      token.text = std::string(text.substr(i + 1, end - i - 1));
      i = end + 1;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t end = i;
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
      token.type = Token::Type::Name;
      token.text = std::string(text.substr(i, end - i));
      i = end;
    } else {
      static const char* const kTwo[] = {"==", "!=", "<=", ">="};
      bool two = false;
      for (const char* op : kTwo)
        if (text.substr(i, 2) == op) {
          token.text = op;
          two = true;
        }
      if (!two) {
        if (std::string_view("+-*/%<>(),").find(c) == std::string_view::npos)
          fail(where, text, fmt::format("unexpected character '{}' at {}", c, i + 1));
        token.text = std::string(1, c);
      }
      i += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
  tokens.push_back({Token::Type::End, "", 0, text.size()});
  return tokens;
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& where) : text_(text), where_(where), tokens_(tokenize(text, where)) {}

  NodePtr parse_all() {
    NodePtr root = parse_or(0);
    if (peek().type != Token::Type::End) fail(where_, text_, fmt::format("unexpected '{}' at {}", peek().text, peek().position + 1));
    return root;
  }

 private:
  const Token& peek() const { return tokens_[index_]; }
  bool is_operator(const char* op) const { return peek().type == Token::Type::Operator && peek().text == op; }
  bool is_word(const char* word) const { return peek().type == Token::Type::Name && peek().text == word; }
  void expect(const char* op) {
    if (!is_operator(op))
      fail(where_, text_, fmt::format("expected '{}' at {}, found {}", op, peek().position + 1,
                                      peek().type == Token::Type::End ? "the end" : "'" + peek().text + "'"));
    ++index_;
  }
  void deeper(int depth) const {
    if (depth > kMaxExpressionDepth) fail(where_, text_, fmt::format("nested more than {} deep", kMaxExpressionDepth));
  }
  static NodePtr make(Kind kind, std::string name, std::vector<NodePtr> children, Value literal = {}) {
    auto node = std::make_shared<Expression::Node>();
    node->kind = kind;
    node->name = std::move(name);
    node->children = std::move(children);
    node->literal = std::move(literal);
    return node;
  }

  NodePtr parse_or(int depth) {
    deeper(depth);
    NodePtr left = parse_and(depth + 1);
    while (is_word("or")) {
      ++index_;
      left = make(Kind::Binary, "or", {left, parse_and(depth + 1)});
    }
    return left;
  }
  NodePtr parse_and(int depth) {
    NodePtr left = parse_not(depth + 1);
    while (is_word("and")) {
      ++index_;
      left = make(Kind::Binary, "and", {left, parse_not(depth + 1)});
    }
    return left;
  }
  NodePtr parse_not(int depth) {
    deeper(depth);
    if (is_word("not")) {
      ++index_;
      return make(Kind::Unary, "not", {parse_not(depth + 1)});
    }
    return parse_comparison(depth + 1);
  }
  NodePtr parse_comparison(int depth) {
    NodePtr left = parse_additive(depth + 1);
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"})
      if (is_operator(op)) {
        ++index_;
        return make(Kind::Binary, op, {left, parse_additive(depth + 1)});
      }
    return left;
  }
  NodePtr parse_additive(int depth) {
    NodePtr left = parse_multiplicative(depth + 1);
    while (is_operator("+") || is_operator("-")) {
      const std::string op = tokens_[index_++].text;
      left = make(Kind::Binary, op, {left, parse_multiplicative(depth + 1)});
    }
    return left;
  }
  NodePtr parse_multiplicative(int depth) {
    NodePtr left = parse_unary(depth + 1);
    while (is_operator("*") || is_operator("/") || is_operator("%")) {
      const std::string op = tokens_[index_++].text;
      left = make(Kind::Binary, op, {left, parse_unary(depth + 1)});
    }
    return left;
  }
  NodePtr parse_unary(int depth) {
    deeper(depth);
    if (is_operator("-")) {
      ++index_;
      return make(Kind::Unary, "-", {parse_unary(depth + 1)});
    }
    return parse_primary(depth + 1);
  }
  NodePtr parse_primary(int depth) {
    deeper(depth);
    const Token token = peek();
    switch (token.type) {
      case Token::Type::Number: ++index_; return make(Kind::Literal, "", {}, token.number);
      case Token::Type::String: ++index_; return make(Kind::Literal, "", {}, token.text);
      case Token::Type::Name: {
        ++index_;
        if (token.text == "true" || token.text == "false") return make(Kind::Literal, "", {}, token.text == "true");
        if (token.text == "and" || token.text == "or" || token.text == "not")
          fail(where_, text_, fmt::format("'{}' at {} needs an operand before it", token.text, token.position + 1));
        if (!is_operator("(")) return make(Kind::Name, token.text, {});
        ++index_;
        std::vector<NodePtr> arguments;
        if (!is_operator(")")) {
          arguments.push_back(parse_or(depth + 1));
          while (is_operator(",")) {
            ++index_;
            arguments.push_back(parse_or(depth + 1));
          }
        }
        expect(")");
        if (token.text == "has" && (arguments.size() != 1 || arguments[0]->kind != Kind::Name))
          fail(where_, text_, "has(): expected one parameter name, e.g. has(micro_batches)");
        return make(Kind::Call, token.text, std::move(arguments));
      }
      case Token::Type::Operator:
        if (token.text == "(") {
          ++index_;
          NodePtr inner = parse_or(depth + 1);
          expect(")");
          return inner;
        }
        fail(where_, text_, fmt::format("unexpected '{}' at {}", token.text, token.position + 1));
      case Token::Type::End: fail(where_, text_, "ends where a value is expected");
    }
    fail(where_, text_, "unreadable");
  }

  std::string_view text_;
  const std::string& where_;
  std::vector<Token> tokens_;
  std::size_t index_ = 0;
};

const char* type_of(const Value& value) {
  switch (value.index()) {
    case 0: return "nothing";
    case 1: return "a condition";
    case 2: return "a number";
    default: return "a text";
  }
}

class Evaluator {
 public:
  Evaluator(const Scope& scope, std::string_view text) : scope_(scope), text_(text) {}

  Value evaluate(const Expression::Node& node) const {
    switch (node.kind) {
      case Kind::Literal: return node.literal;
      case Kind::Name: {
        std::optional<Value> value = scope_.lookup(node.name);
        if (!value) fail(fmt::format("'{}' is not set in this run (guard it with has({}))", node.name, node.name));
        return *value;
      }
      case Kind::Unary: {
        const Value operand = evaluate(*node.children[0]);
        if (node.name == "not") return !truth(operand, "not");
        return -number(operand, "-");
      }
      case Kind::Binary: return binary(node);
      case Kind::Call: return call(node);
    }
    fail("unreadable");
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw InputError(fmt::format("expression '{}': {}", text_, message));
  }
  bool truth(const Value& value, const std::string& op) const {
    if (!std::holds_alternative<bool>(value))
      fail(fmt::format("'{}' expects a condition, found {} ({})", op, type_of(value), value_text(value)));
    return std::get<bool>(value);
  }
  double number(const Value& value, const std::string& op) const {
    if (!std::holds_alternative<double>(value))
      fail(fmt::format("'{}' expects a number, found {} ({})", op, type_of(value), value_text(value)));
    return std::get<double>(value);
  }
  Value checked(double value, const std::string& op) const {
    if (!std::isfinite(value)) fail(fmt::format("'{}' gives {} (not a finite number)", op, value));
    return value;
  }

  Value binary(const Expression::Node& node) const {
    const std::string& op = node.name;
    if (op == "and") return truth(evaluate(*node.children[0]), op) && truth(evaluate(*node.children[1]), op);
    if (op == "or") return truth(evaluate(*node.children[0]), op) || truth(evaluate(*node.children[1]), op);
    const Value left = evaluate(*node.children[0]);
    const Value right = evaluate(*node.children[1]);
    if (op == "==" || op == "!=") {
      if (left.index() != right.index())
        fail(fmt::format("'{}' compares {} ({}) with {} ({})", op, type_of(left), value_text(left), type_of(right), value_text(right)));
      return (left == right) == (op == "==");
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (left.index() != right.index() || std::holds_alternative<bool>(left))
        fail(fmt::format("'{}' orders {} ({}) and {} ({})", op, type_of(left), value_text(left), type_of(right), value_text(right)));
      const int order = left < right ? -1 : right < left ? 1 : 0;
      if (op == "<") return order < 0;
      if (op == ">") return order > 0;
      if (op == "<=") return order <= 0;
      return order >= 0;
    }
    if (op == "+" && std::holds_alternative<std::string>(left) && std::holds_alternative<std::string>(right))
      return std::get<std::string>(left) + std::get<std::string>(right);
    const double a = number(left, op), b = number(right, op);
    if (op == "+") return checked(a + b, op);
    if (op == "-") return checked(a - b, op);
    if (op == "*") return checked(a * b, op);
    if (b == 0) fail(fmt::format("'{}' by zero ({} {} 0)", op, value_text(left), op));
    if (op == "/") return checked(a / b, op);
    return checked(std::fmod(a, b), op);
  }

  Value call(const Expression::Node& node) const {
    const std::string& function = node.name;
    const auto& children = node.children;
    const auto arity = [&](std::size_t count) {
      if (children.size() != count)
        fail(fmt::format("{}() takes {} argument{}, found {}", function, count, count == 1 ? "" : "s", children.size()));
    };
    if (function == "has") return scope_.lookup(children[0]->name).has_value();
    if (function == "if") {
      arity(3);
      return truth(evaluate(*children[0]), "if") ? evaluate(*children[1]) : evaluate(*children[2]);
    }
    std::vector<Value> arguments;
    for (const auto& child : children) arguments.push_back(evaluate(*child));
    if (function == "min" || function == "max") {
      if (arguments.empty()) fail(fmt::format("{}() needs at least one argument", function));
      double best = number(arguments[0], function);
      for (const Value& argument : arguments) {
        const double v = number(argument, function);
        best = function == "min" ? std::min(best, v) : std::max(best, v);
      }
      return best;
    }
    if (function == "abs") {
      arity(1);
      return std::fabs(number(arguments[0], function));
    }
    if (function == "divides") {
      arity(2);
      const double a = number(arguments[0], function), b = number(arguments[1], function);
      if (a != std::floor(a) || b != std::floor(b)) fail(fmt::format("divides() takes integers, found {} and {}", a, b));
      return a != 0 && std::fmod(b, a) == 0;
    }
    if (std::optional<Value> value = scope_.call(function, arguments)) return *value;
    fail(fmt::format("unknown function '{}' (known: if, has, divides, min, max, abs, hosts, layers)", function));
  }

  const Scope& scope_;
  std::string_view text_;
};

}  // namespace

std::string value_text(const Value& value) {
  switch (value.index()) {
    case 0: return "nothing";
    case 1: return std::get<bool>(value) ? "true" : "false";
    case 2: {
      const double v = std::get<double>(value);
      if (v == std::floor(v) && std::fabs(v) < 9.0e15) return fmt::format("{}", static_cast<long long>(v));
      return fmt::format("{}", v);
    }
    default: return "'" + std::get<std::string>(value) + "'";
  }
}

Expression Expression::parse(std::string_view text, const std::string& where) {
  if (text.size() > kMaxExpressionLength) fail(where, text.substr(0, 40), fmt::format("longer than {} characters", kMaxExpressionLength));
  Expression expression;
  expression.text_ = std::string(text);
  expression.root_ = Parser(expression.text_, where).parse_all();
  return expression;
}

Value Expression::evaluate(const Scope& scope) const { return Evaluator(scope, text_).evaluate(*root_); }

}  // namespace pipegrid::sweep
