// libFuzzer target: expressions of experiment files (sweep/expression.hpp).
// Any text either parses or throws InputError; a parsed expression evaluates
// to a value or throws InputError, over a scope where some names are absent.

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "sweep/expression.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

class FuzzScope : public pipegrid::Scope {
 public:
  pipegrid::Value lookup(std::string_view name) const override {
    if (name.empty()) return {};
    switch (name.size() % 4) {
      case 0: return {};
      case 1: return static_cast<double>(name.size());
      case 2: return std::string(name);
      default: return name.front() == 't';
    }
  }
  pipegrid::Value call(std::string_view function, const std::vector<pipegrid::Value>& arguments) const override {
    if (arguments.size() != 1 || !std::holds_alternative<std::string>(arguments[0]))
      throw pipegrid::InputError(std::string(function) + "() takes a path");
    return 4.0;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pipegrid;
  try {
    const Expression expression = Expression::parse(fuzz::text_of(data, size), "fuzz.toml:1");
    const Value value = expression.evaluate(FuzzScope{});
    fuzz::fuzz_check(!std::holds_alternative<std::monostate>(value), "an expression evaluated to an absent value");
  } catch (const InputError&) {
  }
  return 0;
}
