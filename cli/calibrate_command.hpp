#pragma once
// `pipegrid calibrate`: measures a zoo model layer by layer on one worker
// thread and the cpu:N transport's copies (validate/calibrate.hpp), and
// writes a Profile JSON and a SimGrid platform XML for the simulator.
// Compiled only when LibTorch is found (PIPEGRID_WITH_TORCH).

#include <CLI/CLI.hpp>

#include "validate/calibrate.hpp"
#include "validate/executor.hpp"

namespace pipegrid::cli {

/** Adds the subcommand and its options to `app`; returns it so the caller can
 *  test whether it was chosen. */
CLI::App* add_calibrate_command(CLI::App& app);

/** Runs the subcommand once parsed; returns the exit status. */
int run_calibrate_command();

/** Calibrates for `device` (cpu:N, N >= 1; InputError otherwise) and returns
 *  the measurements (shared with `pipegrid validate`). */
validate::Calibration calibrate_for_device(validate::CalibrationRequest request, const validate::DeviceSpec& device);

}  // namespace pipegrid::cli
