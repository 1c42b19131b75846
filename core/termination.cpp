#include "core/termination.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace pipegrid {
namespace {

constexpr int kTerminationSignals[] = {SIGTERM, SIGINT, SIGHUP};

// Fixed-size tables the handler reads without locks or allocation. A slot is
// claimed with a compare-exchange; the handler sees a slot's value or zero.
constexpr int kSlots = 256;
std::atomic<pid_t> child_pids[kSlots];
std::atomic<int> child_signals[kSlots];
std::atomic<char*> temporary_paths[kSlots];
// The process the registry belongs to: a forked child empties its copy and
// owns it from then on, so a signal to the child never touches the parent's
// files.
std::atomic<pid_t> owner{0};

extern "C" void on_termination(int signal_number) {
  const int saved_errno = errno;
  if (owner.load() == getpid()) {
    for (auto& slot : child_pids)
      if (const pid_t pid = slot.load(); pid > 0) {
        const int stop = child_signals[&slot - child_pids].load();
        kill(pid, stop == SIGTERM ? SIGTERM : SIGKILL);
      }
    for (auto& slot : temporary_paths)
      if (const char* path = slot.load()) unlink(path);
    for (auto& slot : child_pids)
      if (const pid_t pid = slot.load(); pid > 0)
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
  }
  // Die of the same signal: the default action once the handler returns.
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
  errno = saved_errno;
}

sigset_t termination_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int signal_number : kTerminationSignals) sigaddset(&set, signal_number);
  return set;
}

void reset_registry_in_child() {
  for (auto& slot : child_pids) slot.store(0);
  // The parent's strings stay allocated (the child does not own them).
  for (auto& slot : temporary_paths) slot.store(nullptr);
  owner.store(getpid());
}

}  // namespace

void install_termination_handlers() {
  owner.store(getpid());
  struct sigaction action {};
  action.sa_handler = on_termination;
  sigemptyset(&action.sa_mask);
  // The other termination signals wait while one is being handled.
  action.sa_mask = termination_set();
  action.sa_flags = 0;
  for (const int signal_number : kTerminationSignals) {
    struct sigaction previous {};
    sigaction(signal_number, nullptr, &previous);
    // A signal ignored by whoever started us (nohup, `trap '' INT`) stays ignored.
    if (previous.sa_handler == SIG_IGN) continue;
    sigaction(signal_number, &action, nullptr);
  }
}

pid_t fork_child(ChildStop stop) {
  TerminationSignalsBlocked blocked;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    reset_registry_in_child();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent died before PR_SET_PDEATHSIG took effect.
    if (getppid() != parent) _exit(1);
    return 0;
  }
  for (int slot = 0; slot < kSlots; ++slot) {
    // Termination signals are blocked here: the handler cannot see the pid
    // before its signal.
    pid_t expected = 0;
    if (child_pids[slot].compare_exchange_strong(expected, pid)) {
      child_signals[slot].store(stop == ChildStop::Kill ? SIGKILL : SIGTERM);
      break;
    }
  }
  return pid;
}

void forget_child(pid_t pid) {
  if (pid <= 0) return;
  for (auto& slot : child_pids) {
    pid_t expected = pid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

RegisteredTemporary::RegisteredTemporary(const std::string& path) : slot_(-1) {
  char* copy = new char[path.size() + 1];
  std::memcpy(copy, path.c_str(), path.size() + 1);
  for (int slot = 0; slot < kSlots; ++slot) {
    char* expected = nullptr;
    if (temporary_paths[slot].compare_exchange_strong(expected, copy)) {
      slot_ = slot;
      return;
    }
  }
  delete[] copy;  // registry full: the file is then only removed by its owner's normal clean-up
}

RegisteredTemporary::~RegisteredTemporary() {
  if (slot_ < 0) return;
  delete[] temporary_paths[slot_].exchange(nullptr);
}

TerminationSignalsBlocked::TerminationSignalsBlocked() {
  const sigset_t set = termination_set();
  pthread_sigmask(SIG_BLOCK, &set, &saved_);
}

TerminationSignalsBlocked::~TerminationSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

}  // namespace pipegrid

namespace pipegrid {

bool fault_injected(const char* point) {
  const char* value = std::getenv("PIPEGRID_FAULT_INJECT");
  return value != nullptr && std::strcmp(value, point) == 0;
}

void hold_if_injected(const char* point) {
  if (!fault_injected(point)) return;
  if (const char* marker = std::getenv("PIPEGRID_FAULT_MARKER")) {
    const int fd = open(marker, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      const std::string line = std::to_string(getpid()) + "\n";
      if (write(fd, line.data(), line.size()) < 0) {
      }
      close(fd);
    }
  }
  for (;;) pause();
}

}  // namespace pipegrid
