#pragma once
// File helpers shared by every reader and writer.

#include <string>

namespace pipegrid {

/** Whole file as a string; InputError naming the path when unreadable. */
std::string read_text_file(const std::string& path);

/** Writes `content` to `path` atomically: a temporary file beside it, then a
 *  rename, so a failed run never leaves a half-written output. Throws
 *  InputError naming the path on failure. */
void write_file_atomically(const std::string& path, const std::string& content);

/** Formats a double with 17 significant digits (exact round trip). */
std::string format_exact(double value);

/** Formats seconds and bytes for people: "1.234 s", "12.5 GiB". */
std::string human_seconds(double seconds);
std::string human_bytes(double bytes);

}  // namespace pipegrid
