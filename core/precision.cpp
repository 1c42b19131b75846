#include "core/precision.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/plan.hpp"
#include "core/platform_check.hpp"

namespace pipegrid {

const std::vector<std::string>& dtype_names() {
  static const std::vector<std::string> names = {"fp32", "fp16", "bf16"};
  return names;
}

int dtype_bytes(const std::string& dtype, const std::string& what) {
  if (dtype.empty() || dtype == "fp32") return 4;
  if (dtype == "fp16" || dtype == "bf16") return 2;
  throw InputError(fmt::format("{}: expected fp32, fp16 or bf16, found '{}'", what, printable(dtype)));
}

ParameterBytes bytes_per_parameter(const std::string& dtype, const std::string& optimizer) {
  ParameterBytes bytes;
  const int size = dtype_bytes(dtype);
  bytes.weights = size;
  bytes.gradients = size;
  bytes.master_weights = size == 4 ? 0 : 4;  // mixed precision keeps fp32 master weights
  bytes.optimizer = 4 * optimizer_copies(optimizer);  // fp32 moments: momentum 1, adam 2
  return bytes;
}

std::string default_optimizer(const std::string& dtype) {
  return dtype == "fp16" || dtype == "bf16" ? "adam" : "sgd";
}

double resident_weight_factor(const std::string& dtype, const std::string& optimizer) {
  return static_cast<double>(bytes_per_parameter(dtype, optimizer).total()) / dtype_bytes(dtype);
}

std::string run_dtype(const std::string& profile_dtype, const std::string& requested, const std::string& profile_origin) {
  if (!requested.empty()) dtype_bytes(requested, "--dtype");
  if (profile_dtype.empty()) return requested;
  if (!requested.empty() && requested != profile_dtype)
    throw InputError(fmt::format("--dtype {}: profile {} states dtype {}; drop --dtype (it applies to profiles that state none)",
                                 printable(requested), profile_origin, printable(profile_dtype)));
  return profile_dtype;
}

}  // namespace pipegrid
