#include "core/io.hpp"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
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

namespace {

/** How an output reaches the file system. */
enum class WriteMode {
  Replace,       ///< a temporary renamed onto `file` (which may not exist yet)
  WriteThrough,  ///< the path opened for writing: a device or a FIFO
  Refused,       ///< `refusal` says why
};

struct OutputTarget {
  WriteMode mode = WriteMode::Replace;
  std::string file;  ///< Replace: the name the temporary is renamed onto
  std::string refusal;
  /// WriteThrough: the regular file is this process's own standard output
  /// (1) or error (2), as `--output /dev/stdout > file` makes it: the
  /// content joins that stream where it stands (renaming onto the file, or
  /// truncating it, would lose what the command prints around it); 0 else.
  int standard_stream = 0;
};

/** 1 or 2 when `status` is the file this process's standard output or
 *  error writes to, else 0. */
int standard_stream_of(const struct stat& status) {
  for (const int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat stream {};
    if (fstat(fd, &stream) == 0 && stream.st_dev == status.st_dev && stream.st_ino == status.st_ino) return fd;
  }
  return 0;
}

/** Longest chain of symbolic links followed (Linux's own limit). */
constexpr int kMaxLinksFollowed = 40;

std::string link_loop_message(const std::string& path) {
  return fmt::format("{}: cannot write file: a loop of symbolic links (or more than {} links in a row)", path,
                     kMaxLinksFollowed);
}

/** The contents of the symbolic link `link`, read from the link's folder
 *  when relative. */
std::string link_target(const std::string& link) {
  std::string target(PATH_MAX, '\0');
  const ssize_t length = readlink(link.c_str(), target.data(), target.size());
  if (length < 0) throw InputError(fmt::format("{}: cannot read the symbolic link: {}", link, std::strerror(errno)));
  target.resize(static_cast<std::size_t>(length));
  if (target.empty() || target.front() == '/') return target;
  const std::size_t slash = link.rfind('/');
  return slash == std::string::npos ? target : link.substr(0, slash + 1) + target;
}

/** The first name along the chain of symbolic links that starts at `path`
 *  that is not a link: `path` itself when it is none, existing or not. */
std::string end_of_link_chain(const std::string& path) {
  std::string current = path;
  for (int followed = 0; followed <= kMaxLinksFollowed; ++followed) {
    struct stat status {};
    if (lstat(current.c_str(), &status) != 0 || !S_ISLNK(status.st_mode)) return current;
    current = link_target(current);
  }
  throw InputError(link_loop_message(path));
}

OutputTarget resolve_output_target(const std::string& path) {
  OutputTarget target;
  struct stat status {};
  if (stat(path.c_str(), &status) != 0) {
    if (errno == ELOOP) {
      target.mode = WriteMode::Refused;
      target.refusal = link_loop_message(path);
      return target;
    }
    // Nothing there, or a dangling link: the file at the end is created
    // (creating the temporary reports any other reason it cannot be).
    target.file = end_of_link_chain(path);
    return target;
  }
  if (S_ISREG(status.st_mode)) {
    target.file = end_of_link_chain(path);
    if ((target.standard_stream = standard_stream_of(status)) != 0) {
      target.mode = WriteMode::WriteThrough;
      return target;
    }
    struct stat end_status {};
    // A link whose text does not name its file (/proc/self/fd/N of a file
    // since deleted): the open file is written through.
    if (lstat(target.file.c_str(), &end_status) != 0 || end_status.st_dev != status.st_dev ||
        end_status.st_ino != status.st_ino)
      target.mode = WriteMode::WriteThrough;
    return target;
  }
  if (S_ISCHR(status.st_mode) || S_ISFIFO(status.st_mode)) {
    target.mode = WriteMode::WriteThrough;
    return target;
  }
  target.mode = WriteMode::Refused;
  const char* what = S_ISDIR(status.st_mode)    ? "it is a folder"
                     : S_ISSOCK(status.st_mode) ? "it is a socket"
                     : S_ISBLK(status.st_mode)  ? "it is a block device (a disk is never written as an output)"
                                                : "it is not a regular file, a character device or a FIFO";
  target.refusal = fmt::format("{}: cannot write file: {}", path, what);
  return target;
}

/** Writes all of `content` to `fd`; InputError naming `path` on failure. A
 *  reader that closed a FIFO is a write error (EPIPE), not a SIGPIPE. */
void write_all_through(int fd, const std::string& content, const std::string& path) {
  sigset_t pipe_signal, saved;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &saved);
  sigset_t pending;
  sigpending(&pending);
  const bool pipe_signal_was_pending = sigismember(&pending, SIGPIPE) == 1;
  int error = 0;
  for (std::size_t done = 0; done < content.size() && error == 0;) {
    const ssize_t written = ::write(fd, content.data() + done, content.size() - done);
    if (written < 0 && errno != EINTR) error = errno;
    if (written > 0) done += static_cast<std::size_t>(written);
  }
  if (error == EPIPE && !pipe_signal_was_pending) {
    const timespec no_wait{};
    sigtimedwait(&pipe_signal, nullptr, &no_wait);
  }
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (error == EPIPE) throw InputError(fmt::format("{}: write error: the reader closed it before the end", path));
  if (error != 0) throw InputError(fmt::format("{}: write error: {}", path, std::strerror(error)));
}

}  // namespace

struct OutputFileSet::Entry {
  std::string path;  ///< as the command was given it
  OutputTarget target;
  std::string temporary, backup;  ///< Replace only
  std::string content;            ///< WriteThrough only: written at commit
  int fd = -1;                    ///< WriteThrough only: opened at commit
  bool renamed = false;
  bool had_previous = false;  ///< the target existed: kept as `backup`
  bool moved_aside = false;   ///< kept by renaming it (no hard link there)
  std::unique_ptr<RegisteredTemporary> registered_temporary, registered_backup;

  /** The path, and the file it leads to when that is another name. */
  std::string name() const {
    return target.file.empty() || target.file == path ? path : fmt::format("{} (a link to {})", path, target.file);
  }
  void close_fd() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ~Entry() { close_fd(); }
};

OutputFileSet::OutputFileSet() = default;

OutputFileSet::~OutputFileSet() {
  if (committed_) return;
  for (const auto& entry : entries_)
    if (!entry->temporary.empty()) std::remove(entry->temporary.c_str());
}

void OutputFileSet::add(const std::string& path, const std::string& content) {
  for (const auto& entry : entries_)
    if (entry->path == path) throw InputError(fmt::format("{}: named for two outputs of one command", path));
  auto entry = std::make_unique<Entry>();
  entry->path = path;
  entry->target = resolve_output_target(path);
  struct stat status {};
  const bool exists = stat(path.c_str(), &status) == 0;
  for (const auto& other : entries_) {
    struct stat other_status {};
    const bool same_file = exists && stat(other->path.c_str(), &other_status) == 0
                               ? status.st_dev == other_status.st_dev && status.st_ino == other_status.st_ino
                               : !entry->target.file.empty() && entry->target.file == other->target.file;
    if (same_file)
      throw InputError(fmt::format("{}: the same file as {}: named for two outputs of one command", path, other->path));
  }
  if (entry->target.mode != WriteMode::Replace) {
    if (entry->target.mode == WriteMode::WriteThrough) entry->content = content;
    entries_.push_back(std::move(entry));
    return;
  }
  entry->temporary = fmt::format("{}.tmp.{}", entry->target.file, ::getpid());
  entry->backup = fmt::format("{}.orig.{}", entry->target.file, ::getpid());
  {
    TerminationSignalsBlocked blocked;
    entry->registered_temporary = std::make_unique<RegisteredTemporary>(entry->temporary);
    std::ofstream out(entry->temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(fmt::format("{}: cannot write file: {}", entry->name(), std::strerror(errno)));
    const std::string name = entry->name();
    entries_.push_back(std::move(entry));
    out << content;
    out.flush();
    if (!out) throw InputError(fmt::format("{}: write error", name));
  }
}

void OutputFileSet::commit() {
  if (fault_injected("after-temporaries"))
    throw InputError("PIPEGRID_FAULT_INJECT=after-temporaries: a fault injected before the outputs were renamed into place");
  hold_if_injected("hold-after-temporaries");
  // No signal between the renames: the handler cannot undo half a commit.
  std::optional<TerminationSignalsBlocked> blocked(std::in_place);
  auto roll_back = [&] {
    for (auto entry = entries_.rbegin(); entry != entries_.rend(); ++entry) {
      Entry& e = **entry;
      if (e.target.mode != WriteMode::Replace) continue;
      const std::string& file = e.target.file;
      if (e.renamed) {
        if (e.had_previous) std::rename(e.backup.c_str(), file.c_str());
        else std::remove(file.c_str());
      } else {
        std::remove(e.temporary.c_str());
        // Kept but not replaced: a moved file goes back; a second link
        // (rename() would not remove it: same file) goes.
        if (e.moved_aside) std::rename(e.backup.c_str(), file.c_str());
        else if (e.had_previous) std::remove(e.backup.c_str());
      }
    }
    entries_.clear();  // closes the devices' descriptors
  };
  auto fail = [&](std::string message) {  // by value: roll_back() ends the entries
    if (!blocked) blocked.emplace();
    roll_back();
    throw InputError(message);
  };
  // Everything that can be refused is, before any target is touched.
  for (const auto& entry : entries_) {
    Entry& e = *entry;
    if (e.target.mode == WriteMode::Refused) fail(e.target.refusal);
    if (e.target.mode != WriteMode::WriteThrough) continue;
    if (e.target.standard_stream != 0) {
      e.fd = ::dup(e.target.standard_stream);
      if (e.fd < 0) fail(fmt::format("{}: cannot write to the standard stream: {}", e.path, std::strerror(errno)));
      continue;
    }
    // Non-blocking, so that a FIFO without a reader is an error (ENXIO), not
    // a wait without end; the writes themselves block.
    e.fd = ::open(e.path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (e.fd < 0) {
      const int error = errno;
      struct stat status {};
      if (error == ENXIO && stat(e.path.c_str(), &status) == 0 && S_ISFIFO(status.st_mode))
        fail(fmt::format("{}: cannot write to the FIFO: no process is reading it (start the reader first)", e.path));
      fail(fmt::format("{}: cannot open for writing: {}", e.path, std::strerror(error)));
    }
    const int flags = fcntl(e.fd, F_GETFL);
    if (flags < 0 || fcntl(e.fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
      fail(fmt::format("{}: cannot open for writing: {}", e.path, std::strerror(errno)));
  }
  for (const auto& entry : entries_) {
    Entry& e = *entry;
    if (e.target.mode != WriteMode::Replace) continue;
    const std::string& file = e.target.file;
    struct stat status {};
    if (stat(file.c_str(), &status) == 0) {
      if (S_ISDIR(status.st_mode)) fail(fmt::format("{}: cannot write file: it is a folder", e.name()));
      // The previous content, kept under a second name until the commit is
      // whole: a hard link (the target never goes missing), else the file
      // itself moved aside.
      if (link(file.c_str(), e.backup.c_str()) != 0) {
        if (std::rename(file.c_str(), e.backup.c_str()) != 0)
          fail(fmt::format("{}: cannot keep the previous file while replacing it: {}", e.name(), std::strerror(errno)));
        e.moved_aside = true;
      }
      e.had_previous = true;
      e.registered_backup = std::make_unique<RegisteredTemporary>(e.backup);
    }
    if (std::rename(e.temporary.c_str(), file.c_str()) != 0)
      fail(fmt::format("{}: cannot rename {} into place: {}", e.name(), e.temporary, std::strerror(errno)));
    e.renamed = true;
    if (fault_injected("after-first-rename"))
      fail("PIPEGRID_FAULT_INJECT=after-first-rename: a fault injected after the first output was renamed into place");
  }
  // Devices and FIFOs last: what they got cannot be taken back. A FIFO's
  // reader may be slow, so termination signals are let through here.
  blocked.reset();
  for (const auto& entry : entries_) {
    Entry& e = *entry;
    if (e.target.mode != WriteMode::WriteThrough) continue;
    struct stat status {};
    if (e.target.standard_stream != 0) {
      // What the command printed before goes first, in order.
      std::fflush(e.target.standard_stream == STDOUT_FILENO ? stdout : stderr);
      (e.target.standard_stream == STDOUT_FILENO ? std::cout : std::cerr).flush();
    } else if (fstat(e.fd, &status) == 0 && S_ISREG(status.st_mode) && ftruncate(e.fd, 0) != 0) {
      fail(fmt::format("{}: write error: {}", e.path, std::strerror(errno)));
    }
    try {
      write_all_through(e.fd, e.content, e.path);
    } catch (const InputError& error) {
      fail(error.what());
    }
    const int closed = ::close(e.fd);
    e.fd = -1;
    if (closed != 0) fail(fmt::format("{}: write error: {}", e.path, std::strerror(errno)));
  }
  blocked.emplace();
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

std::string read_descriptor_from_start(int fd) {
  std::string text;
  ::lseek(fd, 0, SEEK_SET);
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace pipegrid
