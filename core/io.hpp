#pragma once
// File helpers shared by every reader and writer.

#include <memory>
#include <string>
#include <vector>

namespace pipegrid {

/** Whole file as a string; InputError naming the path when unreadable. */
std::string read_text_file(const std::string& path);
/** Everything an open file descriptor (a memfd a child wrote) holds, read
 *  from its start; stops at the first read error. */
std::string read_descriptor_from_start(int fd);

/** The output files of one command, written all or none. What happens to
 *  each depends on what its path names when add() is called:
 *  - a regular file, or nothing: add() writes a temporary beside it
 *    (`<path>.tmp.<pid>`); commit() renames it into place (a new file: a
 *    hard link to the old one keeps the old content);
 *  - a symbolic link: followed link by link (a relative link is read from
 *    its own folder) to the file at the end of the chain, which is replaced
 *    or, for a dangling link, created; the link itself is never replaced. A
 *    loop of links is refused;
 *  - a character device or a FIFO: written through (opened for writing,
 *    never replaced), after every rename of the set has succeeded, since a
 *    write to a device cannot be undone. A FIFO that no process is reading
 *    is refused rather than waited for;
 *  - the regular file this process's standard output or error writes to
 *    (`--output /dev/stdout > file`): written through that stream, after
 *    what the command printed before it, like a device;
 *  - a folder, a socket or a block device: refused.
 *  commit() refuses, and opens every device and FIFO, before it renames or
 *  writes anything. When anything fails (an add(), a refusal, a rename, a
 *  write to a device, or the command before commit() is reached) no
 *  temporary is left and every regular target is as it was before: the ones
 *  already renamed get their previous content back, or are removed if they
 *  did not exist (a device already written keeps what it got). Termination
 *  signals wait while commit() renames, and the temporaries are removed if
 *  the process is terminated before (core/termination.hpp); while devices
 *  and FIFOs are written (a FIFO may wait for its reader) the process can be
 *  terminated, and the renamed files stay. Throws InputError naming the path
 *  on failure. */
class OutputFileSet {
 public:
  OutputFileSet();
  ~OutputFileSet();
  OutputFileSet(const OutputFileSet&) = delete;
  OutputFileSet& operator=(const OutputFileSet&) = delete;

  /** Writes `content` to a temporary beside the file `path` names, or keeps
   *  it for a device or FIFO. The same path twice, or two paths that name
   *  the same file, is an InputError. */
  void add(const std::string& path, const std::string& content);
  /** Refuses what cannot be written, opens the devices and FIFOs, renames
   *  every temporary into place, then writes the devices and FIFOs. */
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
