#include "sweep/runner.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/termination.hpp"

namespace pipegrid::sweep {

namespace {

using Clock = std::chrono::steady_clock;

// SIGTERM during a sweep: stop dispatching, let in-flight runs finish.
volatile sig_atomic_t terminate_requested = 0;
void on_terminate(int) { terminate_requested = 1; }

struct Child {
  pid_t pid;
  int fd;
  std::size_t index;
  RunMode mode;
  Clock::time_point started;
  std::string output;
  bool timed_out = false;
};

void write_whole(int fd, const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(1);
    written += static_cast<std::size_t>(n);
  }
}

// Runs `work` on a new thread and waits for it. In a forked child this
// gives the work a malloc arena of its own (glibc: one per thread, the main
// thread's being the parent's heap): its allocations come from fresh pages
// instead of the free lists of the parent's heap, whose every page the fork
// shares copy-on-write (a fault and a copy at each first touch). The stack
// is as large as the main thread's limit, and at least 64 MiB.
void on_own_thread(const std::function<void()>& work) {
  rlimit limit{};
  std::size_t stack = std::size_t{64} << 20;
  if (getrlimit(RLIMIT_STACK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur > stack)
    stack = static_cast<std::size_t>(limit.rlim_cur);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, stack);
  pthread_t thread;
  const auto start = [](void* argument) -> void* {
    (*static_cast<const std::function<void()>*>(argument))();
    return nullptr;
  };
  const bool started = pthread_create(&thread, &attributes, start, const_cast<std::function<void()>*>(&work)) == 0;
  pthread_attr_destroy(&attributes);
  if (!started) {
    work();  // no thread: the same work on this one
    return;
  }
  pthread_join(thread, nullptr);
}

std::string signal_name(int signal) {
  const char* name = sigabbrev_np(signal);
  return name ? fmt::format("SIG{}", name) : fmt::format("signal {}", signal);
}

class Progress {
 public:
  Progress(std::size_t total, bool enabled) : total_(total), enabled_(enabled) {}
  void show(std::size_t done, const std::map<std::string, int>& by_status) {
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = total_ == 0 ? kWidth : static_cast<int>(kWidth * done / total_);
    std::string counts;
    for (const std::string& status : run_statuses())
      if (const auto found = by_status.find(status); found != by_status.end() && found->second > 0)
        counts += fmt::format(" {} {}", status, found->second);
    std::fprintf(stderr, "\r[%s%s] %zu/%zu%s\033[K", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(), done, total_, counts.c_str());
    std::fflush(stderr);
  }
  void clear_line() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  std::size_t total_;
  bool enabled_;
};

}  // namespace

RunnerSummary run_in_children(const std::vector<const PlannedRun*>& runs, const RunInChild& run_in_child,
                              const RunnerOptions& options,
                              const std::function<void(const PlannedRun&, const RunOutcome&)>& finished) {
  RunnerSummary summary;
  terminate_requested = 0;
  struct sigaction action {}, previous{};
  action.sa_handler = on_terminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous);
  std::vector<Child> running;
  std::deque<std::size_t> again;  // runs whose Fast attempt left no report
  std::size_t next = 0, done = 0;
  Progress progress(runs.size(), options.progress);
  progress.show(0, summary.by_status);
  std::fflush(nullptr);
  std::cout.flush();
  std::optional<Clock::time_point> stop_deadline;
  const auto kill_child = [](Child& child) { ::kill(child.pid, SIGKILL); };
  try {
    while (!running.empty() || (!terminate_requested && (!again.empty() || next < runs.size()))) {
      while (!terminate_requested && (!again.empty() || next < runs.size()) &&
             static_cast<int>(running.size()) < std::max(1, options.jobs)) {
        const RunMode mode = again.empty() ? RunMode::Fast : RunMode::Isolated;
        const std::size_t index = again.empty() ? next : again.front();
        int fds[2];
        if (pipe(fds) != 0) throw std::runtime_error("sweep: pipe failed");
        const pid_t pid = fork_child(ChildStop::Terminate);
        if (pid == 0) {
          ::close(fds[0]);
          sigaction(SIGTERM, &previous, nullptr);  // a run stops its simulation when terminated
          ChildReport report;
          const auto run = [&] {
            try {
              report = run_in_child(*runs[index], mode);
            } catch (const std::exception& error) {
              report = {"crashed", fmt::format("internal error: {}", error.what()), ""};
            }
          };
          if (mode == RunMode::Fast) on_own_thread(run);
          else run();
          write_whole(fds[1], nlohmann::json{{"status", report.status}, {"reason", report.reason}, {"json", report.json}}.dump());
          std::fflush(nullptr);
          _exit(0);
        }
        ::close(fds[1]);
        running.push_back({pid, fds[0], index, mode, Clock::now(), "", false});
        if (mode == RunMode::Fast) ++next;
        else again.pop_front();
      }
      if (terminate_requested && !stop_deadline) {
        progress.clear_line();
        std::fprintf(stderr, "pipegrid: SIGTERM: no new runs; waiting up to %.0f s for %zu in flight\n", options.grace_s, running.size());
        stop_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.grace_s));
      }
      if (running.empty()) break;
      // Wake for output, or at the nearest deadline.
      int wait_ms = -1;
      const auto now = Clock::now();
      const auto consider = [&](Clock::time_point deadline) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
        const int clamped = static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
        wait_ms = wait_ms < 0 ? clamped : std::min(wait_ms, clamped);
      };
      if (options.timeout_s > 0)
        for (const Child& child : running)
          consider(child.started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s)));
      if (stop_deadline) consider(*stop_deadline);
      std::vector<pollfd> polled;
      for (const Child& child : running) polled.push_back({child.fd, POLLIN, 0});
      const int ready = poll(polled.data(), polled.size(), wait_ms);
      if (ready < 0 && errno != EINTR) throw std::runtime_error("sweep: poll failed");
      const auto after = Clock::now();
      for (Child& child : running) {
        const bool past_timeout = options.timeout_s > 0 && !child.timed_out &&
                                  std::chrono::duration<double>(after - child.started).count() > options.timeout_s;
        const bool past_grace = stop_deadline && after >= *stop_deadline && !child.timed_out;
        if (past_timeout || past_grace) {
          child.timed_out = past_timeout;
          kill_child(child);
          if (past_grace) child.timed_out = false;
        }
      }
      for (std::size_t c = 0; c < running.size();) {
        Child& child = running[c];
        if (ready <= 0 || polled[c].revents == 0) {
          ++c;
          continue;
        }
        char buffer[65536];
        const ssize_t n = ::read(child.fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
          ++c;
          continue;
        }
        if (n > 0) {
          child.output.append(buffer, static_cast<std::size_t>(n));
          ++c;
          continue;
        }
        ::close(child.fd);
        int status = 0;
        while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
        }
        forget_child(child.pid);
        RunOutcome outcome;
        outcome.wall_s = std::chrono::duration<double>(Clock::now() - child.started).count();
        bool complete = false;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !child.output.empty()) {
          try {
            const nlohmann::json report = nlohmann::json::parse(child.output);
            outcome.status = report.at("status");
            outcome.reason = report.at("reason");
            outcome.json = report.at("json");
            complete = true;
          } catch (const nlohmann::json::exception&) {
          }
        }
        const PlannedRun& run = *runs[child.index];
        const bool stopped_by_us = !complete && !child.timed_out && stop_deadline;
        if (!complete && !child.timed_out && !stopped_by_us && child.mode == RunMode::Fast) {
          again.push_back(child.index);  // run it again the plain way; record that
          running.erase(running.begin() + static_cast<std::ptrdiff_t>(c));
          polled.erase(polled.begin() + static_cast<std::ptrdiff_t>(c));
          continue;
        }
        if (!complete) {
          if (child.timed_out) {
            outcome.status = "timeout";
            outcome.reason = fmt::format("killed after --timeout {} s", options.timeout_s);
          } else {
            outcome.status = "crashed";
            outcome.reason = WIFSIGNALED(status) ? fmt::format("the run's process died of {}", signal_name(WTERMSIG(status)))
                                                 : fmt::format("the run's process exited with status {} without a result",
                                                               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
          }
        }
        if (!stopped_by_us) {
          ++summary.by_status[outcome.status];
          if (is_failed_status(outcome.status)) {
            progress.clear_line();
            std::fprintf(stderr, "pipegrid: run %s [%s]: %s: %s\n", run.label.c_str(), run.key.c_str(), outcome.status.c_str(),
                         outcome.reason.c_str());
          }
          finished(run, outcome);
        }
        ++done;
        progress.show(done, summary.by_status);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(c));
        polled.erase(polled.begin() + static_cast<std::ptrdiff_t>(c));
      }
    }
  } catch (...) {
    for (Child& child : running) kill_child(child);
    sigaction(SIGTERM, &previous, nullptr);
    throw;
  }
  progress.finish();
  summary.interrupted = terminate_requested != 0;
  sigaction(SIGTERM, &previous, nullptr);
  return summary;
}

}  // namespace pipegrid::sweep
