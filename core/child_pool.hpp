#pragma once
// Work run in forked children, at most `jobs` at once (SimGrid runs one
// engine per process, so each simulation of explore and plan gets its own
// child): each child runs a function that returns text, writes it to a
// pipe and exits; the parent collects the text of each finished child.
// Children are forked through fork_child(ChildStop::Terminate): they die
// with the parent, stopping their simulation first (core/termination.hpp).

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace pipegrid {

class ChildPool {
 public:
  /// What one child left: its index (as given to start), everything it
  /// wrote, and how it ended (waitpid's status).
  struct Finished {
    std::size_t index = 0;
    std::string output;
    int status = 0;
    /// Exited with status 0 after writing something.
    bool succeeded() const;
    /// "the simulation died of signal N" or "the simulation's process
    /// failed", for a child that did not succeed.
    std::string failure_text() const;
  };

  /// `what` names the pool in errors ("explore", "plan").
  ChildPool(int jobs, std::string what);
  ChildPool(const ChildPool&) = delete;
  ChildPool& operator=(const ChildPool&) = delete;

  bool has_room() const { return static_cast<int>(running_.size()) < jobs_; }
  bool idle() const { return running_.empty(); }

  /** Flushes stdout and stderr, forks a child that runs `work` and writes
   *  its text back (a child whose work throws writes nothing and exits 1).
   *  std::runtime_error when a pipe or fork fails. */
  void start(std::size_t index, const std::function<std::string()>& work);

  /** Waits until at least one child has ended; returns every child that has. */
  std::vector<Finished> wait_some();

 private:
  struct Worker {
    pid_t pid;
    int fd;
    std::size_t index;
    std::string output;
  };
  int jobs_;
  std::string what_;
  std::vector<Worker> running_;
};

}  // namespace pipegrid
