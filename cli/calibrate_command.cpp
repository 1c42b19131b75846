#include "cli/calibrate_command.hpp"

#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/launcher_flag.hpp"
#include "cli/model_flags.hpp"
#include "cli/torch_forward.hpp"
#include "core/error.hpp"
#include "core/io.hpp"
#include "core/profile.hpp"
#include "validate/model_zoo.hpp"

namespace pipegrid::cli {
namespace {

struct CalibrateOptions {
  std::string model;
  ModelFlags model_flags;
  int micro_batch_size = 8;
  std::string device = "cpu:2";
  int repeats = 5;
  int warmup = 2;
  std::uint64_t seed = 1;
  std::string profile, platform;
  LauncherFlags launcher;
  bool idle_devices = false;
};

CalibrateOptions options;
CLI::App* command = nullptr;

}  // namespace

validate::Calibration calibrate_for_device(validate::CalibrationRequest request, const validate::DeviceSpec& device) {
  if (device.count < 1)
    throw InputError(fmt::format("--device {}: calibrate needs the device count: cpu:N, cuda:N or cuda-partitioned:N", device.kind));
  request.device = device;
  return validate::calibrate(request);
}

CLI::App* add_calibrate_command(CLI::App& app) {
  command = app.add_subcommand("calibrate", kCalibrateSummary);
  command->add_option("--model", options.model, "zoo model: mlp, vgg16, gnmt or gpt (its options: the flags below)")->required();
  add_model_flags(*command, options.model_flags);
  command->add_option("--micro-batch-size", options.micro_batch_size, "samples per micro-batch (default 8)");
  command->add_option("--device", options.device,
                      "cpu:N (N worker threads, hosts cpu0..), cuda:N (N GPUs, hosts gpu0..) or cuda-partitioned:N (GPU 0 in N SM "
                      "partitions, hosts gpu0p0..); default cpu:2");
  command->add_option("--repeats", options.repeats, "timed runs per measurement, the median is kept (default 5)");
  command->add_option("--warmup", options.warmup, "untimed runs before them (default 2)");
  command->add_option("--seed", options.seed, "seed of the weights and the data (default 1)");
  command->add_flag("--idle-devices", options.idle_devices,
                   "time the layers with the other devices idle (default on cpu:N: they run the model meanwhile, as busy as "
                   "in a pipeline)");
  command->add_option("--output-profile", options.profile, "profile JSON to write")->required();
  command->add_option("--output-platform", options.platform, "SimGrid platform XML to write")->required();
  add_launcher_flags(*command, options.launcher);
  return command;
}

int run_calibrate_command() {
  const validate::ModelConfig model = model_from_flags(options.model, options.model_flags, *command);
  validate::CalibrationRequest request;
  request.model = model;
  request.micro_batch_size = options.micro_batch_size;
  request.repeats = options.repeats;
  request.warmup = options.warmup;
  request.seed = options.seed;
  request.launcher = launcher_from_flags(options.launcher);
  request.busy_devices = !options.idle_devices;
  const validate::DeviceSpec device = validate::parse_device_spec(options.device);
  const validate::Calibration calibration = calibrate_for_device(request, device);
  if (!calibration.primary) return 0;  // an env rank other than 0: rank 0 writes
  const std::string description = fmt::format("model {}, micro-batch size {}, device {}, median of {} runs", model.name,
                                              options.micro_batch_size, options.device, options.repeats);
  OutputFileSet files;  // both or neither
  files.add(options.profile, profile_to_json(calibration.profile));
  files.add(options.platform, validate::calibration_platform_xml(calibration, device.count, description));
  files.commit();

  double forward = 0, backward = 0, parameters = 0;
  for (const Layer& layer : calibration.profile.layers) {
    forward += layer.forward_s;
    backward += layer.backward_s;
    parameters += layer.parameter_bytes;
  }
  std::cout << fmt::format("{}: {} layers, {} parameter bytes; forward {} + backward {} per micro-batch of {}\n", model.name,
                           calibration.profile.layers.size(), parameters, human_seconds(forward), human_seconds(backward),
                           options.micro_batch_size);
  if (calibration.busy_devices > 0)
    std::cout << fmt::format("layers timed on device 0 with the other {} device{} busy ({} forward + backward passes of the "
                             "model meanwhile)\n",
                             calibration.busy_devices, calibration.busy_devices == 1 ? "" : "s", calibration.busy_passes);
  else if (device.count > 1)
    std::cout << "layers timed on device 0 with the other devices idle\n";
  std::cout << fmt::format("copy: latency {} + bytes / {:.3g} GB/s ({} sizes), + wake-up {}\n",
                           human_seconds(calibration.latency_s), calibration.bandwidth_bytes_per_s / 1e9,
                           calibration.copies.size(), human_seconds(calibration.overhead.wakeup_s));
  if (calibration.step_rate_bytes_per_s > 0)
    std::cout << fmt::format("optimizer step: {} + parameter bytes / {:.3g} GB/s ({} sizes)\n",
                             human_seconds(calibration.step_overhead_s), calibration.step_rate_bytes_per_s / 1e9,
                             calibration.steps.size());
  if (calibration.whole_backward_s > 0)
    std::cout << fmt::format("split backward: I + W {} against B {} ({:.2f} x); the profile divides each layer's B between I "
                             "and W in the measured ratio\n",
                             human_seconds(calibration.split_backward_s), human_seconds(calibration.whole_backward_s),
                             calibration.split_backward_s / calibration.whole_backward_s);
  const validate::Calibration::Overhead& overhead = calibration.overhead;
  std::cout << fmt::format("per-action overhead: {} (in-action {}, dispatch {}, sends {}; {} actions of {})\n",
                           human_seconds(overhead.action_overhead_s), human_seconds(overhead.in_action_s),
                           human_seconds(overhead.dispatch_s), human_seconds(overhead.send_s), overhead.actions,
                           overhead.plan);
  std::cout << fmt::format("stage actions: {:.3f} x their profiled layer time beyond the in-action constant, time waiting for a "
                           "core included (written as speed_factor {:.3f}){}{}\n",
                           overhead.compute_factor, 1 / overhead.compute_factor, overhead.fit_note.empty() ? "" : "; ",
                           overhead.fit_note);
  std::cout << fmt::format("wrote {} and {}\n", options.profile, options.platform);
  return 0;
}

}  // namespace pipegrid::cli
