#include "cli/torch_forward.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace pipegrid::cli {
namespace {

std::vector<const CLI::App*>& stand_ins() {
  static std::vector<const CLI::App*> commands;
  return commands;
}

}  // namespace

CLI::App* add_forwarded_command(CLI::App& app, const char* name, const char* summary) {
  CLI::App* command = app.add_subcommand(name, summary);
  if (*summary == '\0') command->group("");
  // Everything after the name is pipegrid-torch's to parse, --help included.
  command->set_help_flag();
  command->allow_extras();
  command->prefix_command();
  stand_ins().push_back(command);
  return command;
}

bool forwarded_command_chosen(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands())
    if (std::find(stand_ins().begin(), stand_ins().end(), command) != stand_ins().end()) return true;
  return false;
}

int forward_to_torch_executable(const char* executable_name, char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::string path = error ? std::string(executable_name) : (self.parent_path() / executable_name).string();
  std::cout.flush();
  std::fflush(nullptr);
  ::execv(path.c_str(), argv);
  const int reason = errno;
  std::cerr << "pipegrid: error: cannot run " << path << " (" << std::strerror(reason)
            << "): pipegrid's LibTorch commands (execute, calibrate, validate) are in that executable, built and installed "
               "next to pipegrid\n";
  return 3;
}

}  // namespace pipegrid::cli
