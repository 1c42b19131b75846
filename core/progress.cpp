#include "core/progress.hpp"

#include <fmt/format.h>

namespace pipegrid {

namespace {

// 1234567 -> "1,234,567".
std::string grouped(std::size_t count) {
  std::string digits = std::to_string(count), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string progress_line(double simulated_s, std::size_t activities, double elapsed_s) {
  return fmt::format("simulating: {:.6g} s simulated, {} activities done, {:.1f} s elapsed", simulated_s, grouped(activities),
                     elapsed_s);
}

std::string progress_update(const std::string& line) { return "\r" + line + "\033[K"; }

std::string progress_erase() { return "\r\033[K"; }

bool progress_due(double elapsed_s, double last_shown_s) {
  if (last_shown_s < 0) return elapsed_s >= kProgressDelaySeconds;
  return elapsed_s - last_shown_s >= kProgressIntervalSeconds;
}

}  // namespace pipegrid
