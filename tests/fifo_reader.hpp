#pragma once
// A FIFO's reader for the output-writer tests (tests/test_output_files.cpp,
// tests/test_output_targets_cli.cpp): a thread that reads from before its
// writer opens the FIFO until the writer closes it.

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace testutil {

/// Reads a FIFO from a thread, from before its writer opens it until the
/// writer closes it.
class FifoReader {
 public:
  explicit FifoReader(const std::string& path) {
    // Opened now (non-blocking needs no writer), so that a writer finds it.
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    EXPECT_GE(fd_, 0) << path;
    thread_ = std::thread([this] {
      bool writer_seen = false;
      for (;;) {
        pollfd ready{fd_, POLLIN, 0};
        if (::poll(&ready, 1, -1) < 0) return;
        char buffer[65536];
        const ssize_t n = ::read(fd_, buffer, sizeof buffer);
        if (n > 0) {
          received_.append(buffer, static_cast<std::size_t>(n));
          writer_seen = true;
        } else if (n == 0 && (writer_seen || (ready.revents & POLLHUP))) {
          return;  // the writer came and went
        }
      }
    });
  }
  ~FifoReader() {
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  /// What the writer wrote, once it has closed the FIFO.
  std::string received() {
    thread_.join();
    return received_;
  }

 private:
  int fd_ = -1;
  std::string received_;
  std::thread thread_;
};

}  // namespace testutil
