#include "core/child_pool.hpp"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/termination.hpp"

namespace pipegrid {

bool ChildPool::Finished::succeeded() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0 && !output.empty(); }

std::string ChildPool::Finished::failure_text() const {
  return WIFSIGNALED(status) ? fmt::format("the simulation died of signal {}", WTERMSIG(status))
                             : "the simulation's process failed";
}

ChildPool::ChildPool(int jobs, std::string what) : jobs_(jobs), what_(std::move(what)) {}

void ChildPool::start(std::size_t index, const std::function<std::string()>& work) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(what_ + ": pipe failed");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t pid = fork_child(ChildStop::Terminate);
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(what_ + ": fork failed");
  }
  if (pid == 0) {
    close(fds[0]);
    std::string text;
    try {
      text = work();
    } catch (...) {
      _exit(1);
    }
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = write(fds[1], text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(1);
      written += static_cast<std::size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  running_.push_back({pid, fds[0], index, ""});
}

std::vector<ChildPool::Finished> ChildPool::wait_some() {
  std::vector<Finished> finished;
  while (finished.empty() && !running_.empty()) {
    std::vector<pollfd> polled;
    for (const Worker& worker : running_) polled.push_back({worker.fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(what_ + ": poll failed");
    }
    std::vector<Worker> still;
    for (std::size_t w = 0; w < polled.size(); ++w) {
      Worker& worker = running_[w];
      if (polled[w].revents == 0) {
        still.push_back(std::move(worker));
        continue;
      }
      char buffer[65536];
      const ssize_t n = read(worker.fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) {
        still.push_back(std::move(worker));
        continue;
      }
      if (n > 0) {
        worker.output.append(buffer, static_cast<std::size_t>(n));
        still.push_back(std::move(worker));
        continue;
      }
      // End of its output: collect the child.
      close(worker.fd);
      int status = 0;
      while (waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
      }
      forget_child(worker.pid);
      finished.push_back({worker.index, std::move(worker.output), status});
    }
    running_ = std::move(still);
  }
  return finished;
}

}  // namespace pipegrid
