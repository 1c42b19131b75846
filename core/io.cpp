#include "core/io.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/termination.hpp"

namespace pipegrid {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: read error", path));
  return content.str();
}

struct OutputFileSet::Entry {
  std::string path, temporary, backup;
  bool renamed = false;
  bool had_previous = false;  ///< the target existed: kept as `backup`
  bool moved_aside = false;   ///< kept by renaming it (no hard link there)
  std::unique_ptr<RegisteredTemporary> registered_temporary, registered_backup;
};

OutputFileSet::OutputFileSet() = default;

OutputFileSet::~OutputFileSet() {
  if (committed_) return;
  for (const auto& entry : entries_) std::remove(entry->temporary.c_str());
}

void OutputFileSet::add(const std::string& path, const std::string& content) {
  for (const auto& entry : entries_)
    if (entry->path == path) throw InputError(fmt::format("{}: named for two outputs of one command", path));
  auto entry = std::make_unique<Entry>();
  entry->path = path;
  entry->temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  entry->backup = fmt::format("{}.orig.{}", path, ::getpid());
  {
    TerminationSignalsBlocked blocked;
    entry->registered_temporary = std::make_unique<RegisteredTemporary>(entry->temporary);
    std::ofstream out(entry->temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(fmt::format("{}: cannot write file: {}", path, std::strerror(errno)));
    entries_.push_back(std::move(entry));
    out << content;
    out.flush();
    if (!out) throw InputError(fmt::format("{}: write error", path));
  }
}

void OutputFileSet::commit() {
  if (fault_injected("after-temporaries"))
    throw InputError("PIPEGRID_FAULT_INJECT=after-temporaries: a fault injected before the outputs were renamed into place");
  hold_if_injected("hold-after-temporaries");
  // No signal between the renames: the handler cannot undo half a commit.
  TerminationSignalsBlocked blocked;
  auto roll_back = [&] {
    for (auto entry = entries_.rbegin(); entry != entries_.rend(); ++entry) {
      Entry& e = **entry;
      if (e.renamed) {
        if (e.had_previous) std::rename(e.backup.c_str(), e.path.c_str());
        else std::remove(e.path.c_str());
      } else {
        std::remove(e.temporary.c_str());
        // Kept but not replaced: a moved file goes back; a second link
        // (rename() would not remove it: same file) goes.
        if (e.moved_aside) std::rename(e.backup.c_str(), e.path.c_str());
        else if (e.had_previous) std::remove(e.backup.c_str());
      }
    }
    entries_.clear();
  };
  for (const auto& entry : entries_) {
    Entry& e = *entry;
    struct stat status {};
    if (stat(e.path.c_str(), &status) == 0) {
      if (S_ISDIR(status.st_mode)) {
        const std::string message = fmt::format("{}: cannot write file: it is a folder", e.path);
        roll_back();  // clears entries_ (and so `e`)
        throw InputError(message);
      }
      // The previous content, kept under a second name until the commit is
      // whole: a hard link (the target never goes missing), else the file
      // itself moved aside.
      if (link(e.path.c_str(), e.backup.c_str()) != 0) {
        if (std::rename(e.path.c_str(), e.backup.c_str()) != 0) {
          const std::string message =
              fmt::format("{}: cannot keep the previous file while replacing it: {}", e.path, std::strerror(errno));
          roll_back();
          throw InputError(message);
        }
        e.moved_aside = true;
      }
      e.had_previous = true;
      e.registered_backup = std::make_unique<RegisteredTemporary>(e.backup);
    }
    if (std::rename(e.temporary.c_str(), e.path.c_str()) != 0) {
      const std::string message = fmt::format("{}: cannot rename {} into place: {}", e.path, e.temporary, std::strerror(errno));
      roll_back();
      throw InputError(message);
    }
    e.renamed = true;
    if (fault_injected("after-first-rename")) {
      roll_back();
      throw InputError("PIPEGRID_FAULT_INJECT=after-first-rename: a fault injected after the first output was renamed into place");
    }
  }
  for (const auto& entry : entries_)
    if (entry->had_previous) std::remove(entry->backup.c_str());
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::string& content) {
  OutputFileSet outputs;
  outputs.add(path, content);
  outputs.commit();
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
