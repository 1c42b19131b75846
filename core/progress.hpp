#pragma once
// The progress line a long `pipegrid simulate` shows on a terminal (stderr
// only, and only when stderr is a terminal; sim/engine.hpp, set_progress).
// Pure formatting and pacing; the engine calls them.

#include <cstddef>
#include <string>

namespace pipegrid {

/// Seconds of wall clock before the first progress line (shorter runs show
/// none) and between two lines.
constexpr double kProgressDelaySeconds = 0.5, kProgressIntervalSeconds = 0.25;

/** The progress text: "simulating: 12.5 s simulated, 45,678 activities done,
 *  3.2 s elapsed" (simulated time in SimGrid seconds; activities: timeline
 *  records so far: computes, transfers, all-reduces, optimizer steps). */
std::string progress_line(double simulated_s, std::size_t activities, double elapsed_s);

/** What to write to the terminal to show `line` in place of the previous
 *  one: a carriage return, the line, and "erase to the end of the line". */
std::string progress_update(const std::string& line);

/** What erases the progress line (a carriage return and "erase line"). */
std::string progress_erase();

/** Whether a line is due at `elapsed_s`, the last one shown at
 *  `last_shown_s` (negative: none yet). */
bool progress_due(double elapsed_s, double last_shown_s);

}  // namespace pipegrid
