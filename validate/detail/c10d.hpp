#pragma once
// What calibrate needs of the c10d launchers (validate/c10d.cpp).
// LibTorch-free.

#include <optional>
#include <vector>

#include "validate/calibrate.hpp"

namespace pipegrid::validate::detail {

/** Copies between two ranks through the launcher's process group (Gloo on
 *  cpu): ranks 0 and 1 bounce float tensors of 1 KiB to 4 MiB, `warmup`
 *  untimed then `repeats` timed round trips each; a sample is the median
 *  of half the round trips. processes: two ranks started for it. env: this
 *  process's rank of the job; ranks other than 0 get std::nullopt. */
std::optional<std::vector<CopySample>> measure_copies_between_ranks(const CalibrationRequest& request);

}  // namespace pipegrid::validate::detail
