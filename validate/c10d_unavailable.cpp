// The c10d launchers in a build without Gloo's headers (validate/c10d.cpp
// not compiled): --launcher processes and env are refused.

#include <fmt/format.h>

#include "core/error.hpp"
#include "validate/detail/c10d.hpp"
#include "validate/detail/run_part.hpp"
#include "validate/launch.hpp"

namespace pipegrid::validate {
namespace detail {
namespace {
[[noreturn]] void refuse(const std::string& launcher) {
  throw InputError(fmt::format("--launcher {}: this build has no c10d transport (configured without Gloo's headers: install "
                               "libgloo-dev and reconfigure)",
                               launcher));
}
}  // namespace

bool nccl_transport_built() { return false; }
ExecutionResult execute_in_processes(const ExecutionRequest&) { refuse("processes"); }
ExecutionResult execute_from_env(const ExecutionRequest&) { refuse("env"); }
std::optional<std::vector<CopySample>> measure_copies_between_ranks(const CalibrationRequest& request) {
  refuse(to_string(request.launcher.kind));
}
}  // namespace detail

void run_launched_rank(const std::string&, int) { detail::refuse("processes"); }

}  // namespace pipegrid::validate
