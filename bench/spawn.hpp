// Running the pipegrid binary from a bench: one spawned process, waited for,
// with its wall clock, CPU time and peak memory. Benches only (no test may
// assert on time).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace pipegrid::bench {

struct Spawned {
  double wall_s = 0;
  double cpu_s = 0;       ///< user + system of the process and of the children it waited for
  double peak_bytes = 0;  ///< the largest resident set among them (ru_maxrss)
  int status = -1;        ///< the exit status; -1 when killed by a signal
};

/// Runs `binary args` with stdout written to `out` and stderr to `err`
/// (created or truncated; an empty `err` keeps the bench's stderr) and
/// waits for it. Ends the bench (exit 1) when the binary cannot be spawned.
inline Spawned spawn_and_wait(const std::string& binary, const std::vector<std::string>& args, const std::string& out = "/dev/null",
                              const std::string& err = "/dev/null") {
  std::vector<std::string> words = {binary};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!err.empty()) posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ) != 0) {
    std::perror(("posix_spawn " + binary).c_str());
    std::exit(1);
  }
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);  // Linux: the child's usage and its waited-for children's
  Spawned spawned;
  spawned.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spawned.cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  spawned.peak_bytes = 1024.0 * static_cast<double>(usage.ru_maxrss);
  spawned.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return spawned;
}

}  // namespace pipegrid::bench
