#include "core/io.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"

namespace pipegrid {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: read error", path));
  return content.str();
}

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(fmt::format("{}: cannot write file: {}", path, std::strerror(errno)));
    out << content;
    out.flush();
    if (!out) {
      std::remove(temporary.c_str());
      throw InputError(fmt::format("{}: write error", path));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    std::remove(temporary.c_str());
    throw InputError(fmt::format("{}: cannot rename {} into place: {}", path, temporary, std::strerror(saved)));
  }
}

std::string format_exact(double value) { return fmt::format("{:.17g}", value); }

std::string human_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1 || magnitude == 0) return fmt::format("{:.4g} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.4g} ms", seconds * 1e3);
  return fmt::format("{:.4g} us", seconds * 1e6);
}

std::string human_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{:.4g} {}", bytes, units[unit]);
}

}  // namespace pipegrid
