#include "cli/launcher_flag.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid::cli {

void add_launcher_flags(CLI::App& command, LauncherFlags& flags) {
  command.add_option("--launcher", flags.kind,
                     "threads (default: one process, a worker thread per device), processes (one process per device on this "
                     "machine, messages over c10d: Gloo on cpu, NCCL on cuda) or env (a rank of a job started elsewhere, e.g. by "
                     "torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; rank 0 prints)");
  command.add_option("--launcher-timeout", flags.timeout_s,
                     "processes and env: seconds a rank waits for the store, a message or a collective before failing (default 300)");
}

validate::Launcher launcher_from_flags(const LauncherFlags& flags) {
  validate::Launcher launcher;
  launcher.kind = validate::parse_launcher_kind(flags.kind);
  if (!(flags.timeout_s > 0)) throw InputError(fmt::format("--launcher-timeout: expected > 0 seconds, found {}", flags.timeout_s));
  launcher.timeout_s = flags.timeout_s;
  if (launcher.kind == validate::Launcher::Kind::Processes) {
    std::error_code error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error) launcher.executable = self.string();
  }
  return launcher;
}

}  // namespace pipegrid::cli
