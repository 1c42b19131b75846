// The expression grammar of experiment files.

#include <gtest/gtest.h>

#include <map>

#include "core/error.hpp"
#include "sweep/expression.hpp"

namespace pipegrid::sweep {
namespace {

class MapScope : public Scope {
 public:
  std::map<std::string, Value> values;
  std::optional<Value> lookup(std::string_view name) const override {
    const auto found = values.find(std::string(name));
    if (found == values.end()) return std::nullopt;
    return found->second;
  }
  std::optional<Value> call(std::string_view function, const std::vector<Value>& arguments) const override {
    if (function == "hosts" && arguments.size() == 1) return Value(4.0);
    return std::nullopt;
  }
};

Value eval(const std::string& text, const MapScope& scope = {}) { return Expression::parse(text).evaluate(scope); }

TEST(SweepExpression, ArithmeticIsRealDivisionWithPrecedence) {
  EXPECT_EQ(eval("256 / 3 * 3"), Value(256.0 / 3 * 3));
  EXPECT_EQ(eval("1 + 2 * 3 - 4 % 3"), Value(6.0));
  EXPECT_EQ(eval("-(2 + 3) * 2"), Value(-10.0));
  EXPECT_EQ(eval("7 / 2"), Value(3.5));
  EXPECT_EQ(eval("1.5e3 + .5"), Value(1500.5));
}

TEST(SweepExpression, ComparisonsLogicAndFunctions) {
  MapScope scope;
  scope.values["schedule"] = std::string("dp");
  scope.values["micro_batches"] = 8.0;
  scope.values["platform"] = std::string("p.xml");
  EXPECT_EQ(eval("schedule != 'dp'", scope), Value(false));
  EXPECT_EQ(eval("divides(micro_batches, 256) and micro_batches >= hosts(platform)", scope), Value(true));
  EXPECT_EQ(eval("divides(3, 256)"), Value(false));
  EXPECT_EQ(eval("not has(replicas) or replicas > 1", scope), Value(true));  // short-circuit: replicas unread
  EXPECT_EQ(eval("if(has(micro_batches), 256 / micro_batches, 1)", scope), Value(32.0));
  EXPECT_EQ(eval("min(3, 1, 2) + max(1, 5) + abs(-2)"), Value(8.0));
  EXPECT_EQ(eval("'a' + 'b' == 'ab'"), Value(true));
  EXPECT_EQ(eval("false and (1 / 0 > 1)"), Value(false));
}

TEST(SweepExpression, ErrorsNameTheExpression) {
  const auto error = [](const std::string& text) {
    try {
      eval(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("micro_batches > 2").find("'micro_batches' is not set in this run (guard it with has(micro_batches))"), std::string::npos);
  EXPECT_NE(error("1 +").find("expression '1 +'"), std::string::npos);
  EXPECT_NE(error("1 / 0").find("by zero"), std::string::npos);
  EXPECT_NE(error("'a' < 1").find("orders"), std::string::npos);
  EXPECT_NE(error("1 and true").find("expects a condition"), std::string::npos);
  EXPECT_NE(error("frob(1)").find("unknown function 'frob'"), std::string::npos);
  EXPECT_NE(error("has(1)").find("has()"), std::string::npos);
  EXPECT_NE(error("'open").find("no closing quote"), std::string::npos);
  EXPECT_NE(error("1 $ 2").find("unexpected character"), std::string::npos);
  EXPECT_NE(error(std::string(200, '(') + "1" + std::string(200, ')')).find("nested more than"), std::string::npos);
  EXPECT_NE(error("1e999").find("not a number"), std::string::npos);
}

}  // namespace
}  // namespace pipegrid::sweep
