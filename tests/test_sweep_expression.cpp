// sweep/expression.hpp: the experiment files' expression language.

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "expect_input_error.hpp"
#include "sweep/expression.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

/// Names from a map; hosts(p) = number of '+' in p plus 1; layers() = 40.
class MapScope : public Scope {
 public:
  std::map<std::string, Value, std::less<>> values;
  Value lookup(std::string_view name) const override {
    const auto it = values.find(name);
    return it == values.end() ? Value{} : it->second;
  }
  Value call(std::string_view function, const std::vector<Value>& arguments) const override {
    if (function == "layers") return 40.0;
    const auto* path = std::get_if<std::string>(&arguments.at(0));
    if (!path) throw InputError("hosts() takes a platform path");
    return 1.0 + static_cast<double>(std::count(path->begin(), path->end(), '+'));
  }
};

MapScope scope() {
  MapScope s;
  s.values = {{"micro_batches", 16.0}, {"schedule", std::string("gpipe")}, {"stages", 4.0},
              {"platform", std::string("a+b+c+d")}, {"recompute", true}, {"1f1b-so", 3.5}};
  return s;
}

Value eval(std::string_view text) { return Expression::parse(text).evaluate(scope()); }
std::string error_of(std::string_view text) {
  return input_error_of([&] { Expression::parse(text, "study.toml:7").evaluate(scope()); });
}

TEST(SweepExpression, Arithmetic) {
  EXPECT_EQ(eval("1 + 2 * 3"), Value(7.0));
  EXPECT_EQ(eval("(1 + 2) * 3"), Value(9.0));
  EXPECT_EQ(eval("256 / micro_batches"), Value(16.0));
  EXPECT_EQ(eval("7 / 2"), Value(3.5));  // real division
  EXPECT_EQ(eval("7 % 4"), Value(3.0));
  EXPECT_EQ(eval("-7 % 4"), Value(-3.0));
  EXPECT_EQ(eval("10 - 4 - 3"), Value(3.0));  // left associative
  EXPECT_EQ(eval("- -2"), Value(2.0));
  EXPECT_EQ(eval("2 * -3"), Value(-6.0));
  EXPECT_EQ(eval(".5 + 1e-1 + 2E1"), Value(20.6));
}

TEST(SweepExpression, ComparisonsAndLogic) {
  EXPECT_EQ(eval("schedule == 'gpipe'"), Value(true));
  EXPECT_EQ(eval("schedule != 'gpipe'"), Value(false));
  EXPECT_EQ(eval("'a' < 'b'"), Value(true));
  EXPECT_EQ(eval("micro_batches >= stages and recompute"), Value(true));
  EXPECT_EQ(eval("not recompute or micro_batches < 4"), Value(false));
  EXPECT_EQ(eval("not (micro_batches < 4)"), Value(true));
  EXPECT_EQ(eval("true and not false"), Value(true));
  EXPECT_EQ(eval("1 + 1 == 2 and 3 > 2"), Value(true));
  // Short circuit: the right side would read an absent name.
  EXPECT_EQ(eval("false and missing > 1"), Value(false));
  EXPECT_EQ(eval("true or missing > 1"), Value(true));
  EXPECT_EQ(eval("has(missing) and missing > 1"), Value(false));
}

TEST(SweepExpression, Functions) {
  EXPECT_EQ(eval("if(schedule == 'gpipe', 1, 'x')"), Value(1.0));
  EXPECT_EQ(eval("if(false, missing, 2)"), Value(2.0));
  EXPECT_EQ(eval("has(schedule)"), Value(true));
  EXPECT_EQ(eval("has(nothing)"), Value(false));
  EXPECT_EQ(eval("divides(micro_batches, 256)"), Value(true));
  EXPECT_EQ(eval("divides(3, 256)"), Value(false));
  EXPECT_EQ(eval("divides(0, 0)"), Value(true));
  EXPECT_EQ(eval("min(3, 1, 2)"), Value(1.0));
  EXPECT_EQ(eval("max(3, micro_batches, 2)"), Value(16.0));
  EXPECT_EQ(eval("abs(1 - 3)"), Value(2.0));
  EXPECT_EQ(eval("hosts(platform)"), Value(4.0));
  EXPECT_EQ(eval("micro_batches >= hosts(platform)"), Value(true));
  EXPECT_EQ(eval("layers(platform)"), Value(40.0));
  EXPECT_EQ(eval("`1f1b-so` * 2"), Value(7.0));
  EXPECT_EQ(eval("abs(`1f1b-so` - 3) / 3 < 0.25"), Value(true));
}

TEST(SweepExpression, Names) {
  const Expression e = Expression::parse("has(a) and a > b or `x-y` == b");
  EXPECT_EQ(e.names(), (std::vector<std::string>{"a", "b", "x-y"}));
  EXPECT_EQ(e.text(), "has(a) and a > b or `x-y` == b");
}

TEST(SweepExpression, SyntaxErrorsNameTheExpressionAndColumn) {
  EXPECT_EQ(error_of("1 +"), "study.toml:7: expression '1 +': at column 4: expected a value, found the end of the expression");
  EXPECT_EQ(error_of("(1 + 2"), "study.toml:7: expression '(1 + 2': at column 7: expected ')' (for the '(' at column 1), found the end of the expression");
  EXPECT_CONTAINS(error_of("a = 1"), "at column 3: '=' is no operator (compare with '==')");
  EXPECT_CONTAINS(error_of("schedule == \"gpipe\""), "strings take single quotes");
  EXPECT_CONTAINS(error_of("'gpipe"), "unterminated string");
  EXPECT_CONTAINS(error_of("divide(1, 2)"), "unknown function 'divide' (did you mean 'divides'?)");
  EXPECT_CONTAINS(error_of("if(true, 1)"), "if() takes 3 arguments, found 2");
  EXPECT_CONTAINS(error_of("abs(1, 2)"), "abs() takes 1 argument, found 2");
  EXPECT_CONTAINS(error_of("min()"), "min() takes at least 1 argument, found 0");
  EXPECT_CONTAINS(error_of("has('x')"), "has() takes a name, found 'x'");
  EXPECT_CONTAINS(error_of("1 < 2 < 3"), "comparisons do not chain");
  EXPECT_CONTAINS(error_of("1f1b"), "a number followed by 'f'");
  EXPECT_CONTAINS(error_of("a && b"), "'&' is no operator");
  EXPECT_CONTAINS(error_of("1 2"), "at column 3: expected an operator or the end, found '2'");
  EXPECT_CONTAINS(error_of(""), "expected a value, found the end");
  EXPECT_CONTAINS(error_of("1e999"), "number 1e999 is out of range");
  EXPECT_CONTAINS(error_of("``"), "empty quoted name");
  EXPECT_CONTAINS(error_of("a\x01"), "unexpected byte 0x01");
}

TEST(SweepExpression, EvaluationErrorsShowValues) {
  EXPECT_EQ(error_of("missing > 1"), "study.toml:7: expression 'missing > 1': 'missing' is absent here (guard it with has(missing))");
  EXPECT_CONTAINS(error_of("schedule < 3"), "'<' compares a string ('gpipe') with a number (3)");
  EXPECT_CONTAINS(error_of("schedule + 1"), "the left operand of '+' must be a number, found a string ('gpipe')");
  EXPECT_CONTAINS(error_of("micro_batches and true"), "the left operand of 'and' must be a boolean, found a number (16)");
  EXPECT_CONTAINS(error_of("1 / (stages - 4)"), "division by zero (1 / 0)");
  EXPECT_CONTAINS(error_of("1 % 0"), "'%' by zero");
  EXPECT_CONTAINS(error_of("1e300 * 1e300"), "1e+300 * 1e+300 is not a finite number");
  EXPECT_CONTAINS(error_of("divides(2.5, 5)"), "divides(2.5, 5) takes integers");
  EXPECT_CONTAINS(error_of("if(1, 2, 3)"), "the condition of if() must be a boolean");
  EXPECT_CONTAINS(error_of("true < false"), "orders booleans");
  EXPECT_CONTAINS(error_of("hosts(3)"), "hosts() takes a platform path");
  EXPECT_CONTAINS(input_error_of([] { Expression::parse("1 + 2").evaluate_bool(scope()); }),
                  "the result must be a boolean, found a number (3)");
  // The default Scope has no caller functions.
  struct Empty : Scope {
    Value lookup(std::string_view) const override { return {}; }
  };
  EXPECT_CONTAINS(input_error_of([] { Expression::parse("hosts('p')").evaluate(Empty{}); }), "hosts() is not available here");
}

TEST(SweepExpression, DepthAndLengthLimits) {
  const std::string deep = std::string(300, '(') + "1" + std::string(300, ')');
  EXPECT_CONTAINS(error_of(deep), "nested deeper than 200 levels");
  EXPECT_CONTAINS(error_of(std::string(100000, '-') + "1"), "longer than 65536 characters");
  EXPECT_CONTAINS(error_of(std::string(1000, '-') + "1"), "nested deeper than 200 levels");
  std::string chain = "1";
  for (int i = 0; i < 500; ++i) chain += " + 1";
  EXPECT_CONTAINS(error_of(chain), "nested deeper than 200 levels");
  std::string ok = "1";
  for (int i = 0; i < 150; ++i) ok += " + 1";
  EXPECT_EQ(eval(ok), Value(151.0));
  EXPECT_EQ(eval(std::string(150, '(') + "2" + std::string(150, ')')), Value(2.0));
}

TEST(SweepExpression, RandomInputsNeverCrash) {
  // Seeded: random token soups either parse and evaluate or throw InputError.
  const std::vector<std::string> pieces = {"(", ")", ",", "1", "0", "2.5", "'s'", "a", "schedule", "micro_batches",
                                           "+", "-", "*", "/", "%", "==", "<", ">=", "and", "or", "not", "if", "has",
                                           "min", "max", "abs", "divides", "hosts", "true", "`x`", "'", "`", "e"};
  std::mt19937 generator(20240613);
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    const int length = static_cast<int>(generator() % 12) + 1;
    for (int i = 0; i < length; ++i) text += pieces[generator() % pieces.size()] + (generator() % 2 ? " " : "");
    try {
      Expression::parse(text).evaluate(scope());
    } catch (const InputError&) {
    }
  }
}

}  // namespace
}  // namespace pipegrid
