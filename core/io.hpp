#pragma once
// File helpers shared by every reader and writer.

#include <memory>
#include <string>
#include <vector>

namespace pipegrid {

/** Whole file as a string; InputError naming the path when unreadable. */
std::string read_text_file(const std::string& path);

/** The output files of one command, written all or none. add() writes each
 *  to a temporary file beside its target (`<path>.tmp.<pid>`); commit()
 *  renames them all into place. When anything fails (an add(), a rename, or
 *  the command before commit() is reached) no temporary is left and every
 *  target is as it was before: the ones already renamed get their previous
 *  content back, or are removed if they did not exist. Termination signals
 *  wait while commit() renames, and the temporaries are removed if the
 *  process is terminated before (core/termination.hpp). Throws InputError
 *  naming the path on failure. */
class OutputFileSet {
 public:
  OutputFileSet();
  ~OutputFileSet();
  OutputFileSet(const OutputFileSet&) = delete;
  OutputFileSet& operator=(const OutputFileSet&) = delete;

  /** Writes `content` to a temporary beside `path`. The same path twice is
   *  an InputError. */
  void add(const std::string& path, const std::string& content);
  /** Renames every temporary into place; all or none. */
  void commit();

 private:
  struct Entry;
  std::vector<std::unique_ptr<Entry>> entries_;
  bool committed_ = false;
};

/** One output file, alone: an OutputFileSet of one. */
void write_file_atomically(const std::string& path, const std::string& content);

/** Formats a double with 17 significant digits (exact round trip). */
std::string format_exact(double value);

/** Formats seconds and bytes for people: "1.234 s", "12.5 GiB". */
std::string human_seconds(double seconds);
std::string human_bytes(double bytes);

}  // namespace pipegrid
