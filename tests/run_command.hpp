#pragma once
// Running a command line from a test, for the end-to-end tests that drive
// the pipegrid binary (tests/test_sweep_cli.cpp,
// tests/test_output_targets_cli.cpp).

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/io.hpp"

namespace testutil {

/** `word` in single quotes for sh, every quote in it escaped. */
inline std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

struct CommandResult {
  int status = -1;  ///< the exit status; -1 when it did not exit (a signal)
  std::string out, err;
};

/** Runs the shell line `prefix` + the quoted `words`, stdout captured and
 *  stderr through the file `stderr_path` (read back into `err`). */
inline CommandResult run_words(const std::string& prefix, const std::vector<std::string>& words,
                               const std::string& stderr_path) {
  std::string line = prefix;
  for (const std::string& word : words) line += (line.empty() ? "" : " ") + shell_quote(word);
  line += " 2>" + shell_quote(stderr_path) + " </dev/null";
  CommandResult result;
  FILE* pipe = popen(line.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = pipegrid::read_text_file(stderr_path);
  return result;
}

}  // namespace testutil
