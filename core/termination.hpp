#pragma once
// Clean-up when pipegrid is terminated by a signal (SIGTERM, SIGINT, SIGHUP):
// the process keeps a registry of its child processes and temporary files;
// the handler (async-signal-safe) stops the children, waits for every
// descendant, removes the temporaries and re-raises the signal, so the
// process still dies of it (exit status 128 + signal in a shell).
//
// Children forked through fork_child() also die with their parent when it is
// killed outright (SIGKILL): they get PR_SET_PDEATHSIG SIGKILL.

#include <signal.h>
#include <sys/types.h>

#include <string>

namespace pipegrid {

/** Installs the handlers. Call once, at the start of main(). Without it the
 *  registry is kept but nothing acts on it. The handler waits for each
 *  registered child; a worker child (ChildStop::Terminate) runs the same
 *  handler and waits for its own children first, so when the process dies no
 *  descendant of it is left running. */
void install_termination_handlers();

/** How the handler stops a registered child. */
enum class ChildStop {
  Kill,       ///< SIGKILL: a child that holds no temporaries (a SimGrid engine)
  Terminate,  ///< SIGTERM: a pipegrid worker, which cleans up after itself
};

/** fork(), with the child registered in the parent (stopped as `stop` if the
 *  parent is terminated) and, in the child, the registry emptied and
 *  PR_SET_PDEATHSIG set to SIGKILL (the child exits at once if its parent is
 *  already gone). Returns what fork() returns; throws std::runtime_error when
 *  fork fails. The parent calls forget_child() once it has reaped the child. */
pid_t fork_child(ChildStop stop);
void forget_child(pid_t pid);

/** A file registered for removal on termination while this object lives.
 *  The file itself is not touched by the constructor or the destructor. */
class RegisteredTemporary {
 public:
  explicit RegisteredTemporary(const std::string& path);
  ~RegisteredTemporary();
  RegisteredTemporary(const RegisteredTemporary&) = delete;
  RegisteredTemporary& operator=(const RegisteredTemporary&) = delete;

 private:
  int slot_;
};

/** Blocks the termination signals in this thread while it lives, so that a
 *  file created and registered under it cannot be left behind. */
class TerminationSignalsBlocked {
 public:
  TerminationSignalsBlocked();
  ~TerminationSignalsBlocked();
  TerminationSignalsBlocked(const TerminationSignalsBlocked&) = delete;
  TerminationSignalsBlocked& operator=(const TerminationSignalsBlocked&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace pipegrid

namespace pipegrid {

// Test hooks, for the tests of clean-up and atomic outputs only (documented
// in docs/formats.md, "Test hooks"): the environment variable
// PIPEGRID_FAULT_INJECT names one point of the program.

/** True when PIPEGRID_FAULT_INJECT is `point`. */
bool fault_injected(const char* point);

/** When PIPEGRID_FAULT_INJECT is `point`: appends this process's id and a
 *  newline to the file PIPEGRID_FAULT_MARKER names, then waits for a signal
 *  forever. Otherwise returns at once. */
void hold_if_injected(const char* point);

}  // namespace pipegrid
