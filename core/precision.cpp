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

void check_gradient_dtype(const std::string& dtype, const std::string& gradient_dtype) {
  if (gradient_dtype.empty()) return;
  dtype_bytes(gradient_dtype, "--gradient-dtype");
  const std::string weights = dtype.empty() ? "fp32" : dtype;
  if (gradient_dtype != "fp32" && gradient_dtype != weights)
    throw InputError(fmt::format("--gradient-dtype {}: expected fp32 or the run's dtype ({}): gradients are kept in the "
                                 "weights' format or in fp32, found {}",
                                 printable(gradient_dtype), weights, printable(gradient_dtype)));
}

ParameterBytes bytes_per_parameter(const std::string& dtype, const std::string& optimizer,
                                   const std::string& gradient_dtype) {
  check_gradient_dtype(dtype, gradient_dtype);
  ParameterBytes bytes;
  const int size = dtype_bytes(dtype);
  bytes.weights = size;
  bytes.gradients = gradient_dtype.empty() ? size : dtype_bytes(gradient_dtype);
  bytes.master_weights = size == 4 ? 0 : 4;  // mixed precision keeps fp32 master weights
  bytes.optimizer = 4 * optimizer_copies(optimizer);  // fp32 moments: momentum 1, adam 2
  return bytes;
}

std::string default_optimizer(const std::string& dtype) {
  return dtype == "fp16" || dtype == "bf16" ? "adam" : "sgd";
}

double distributed_bytes_per_parameter(const std::string& dtype, const std::string& optimizer,
                                       const std::string& gradient_dtype, int data_parallel) {
  if (data_parallel < 1)
    throw InputError(fmt::format("--use-distributed-optimizer: expected a data-parallel size >= 1, found {}", data_parallel));
  const ParameterBytes bytes = bytes_per_parameter(dtype, optimizer, gradient_dtype);
  return bytes.weights + bytes.gradients + static_cast<double>(bytes.master_weights + bytes.optimizer) / data_parallel;
}

double step_gradient_copy_bytes_per_parameter(const std::string& dtype, const std::string& gradient_dtype,
                                              int distributed_over) {
  check_gradient_dtype(dtype, gradient_dtype);
  const bool sixteen_bit_gradients = dtype_bytes(dtype) == 2 && (gradient_dtype.empty() || gradient_dtype == dtype);
  if (!sixteen_bit_gradients) return 0;
  return distributed_over > 0 ? 4.0 / distributed_over : 4.0;
}

double optimizer_step_bytes_per_parameter(const std::string& dtype, const std::string& optimizer) {
  const double copies = optimizer_copies(optimizer);
  const int element = dtype_bytes(dtype);
  double bytes = 4 * (2 + copies) + 4 * (1 + copies) + 4;
  if (element == 2) bytes += 4 + 2;
  if (dtype == "fp16") bytes += 8;
  return bytes;
}

double resident_weight_factor(const std::string& dtype, const std::string& optimizer,
                              const std::string& gradient_dtype, int distributed_over) {
  if (distributed_over > 0)
    return distributed_bytes_per_parameter(dtype, optimizer, gradient_dtype, distributed_over) / dtype_bytes(dtype);
  return static_cast<double>(bytes_per_parameter(dtype, optimizer, gradient_dtype).total()) / dtype_bytes(dtype);
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
