// Output paths that name a symbolic link, a FIFO, a character device, a
// folder or a link loop, end to end through the pipegrid binary: links are
// followed, devices and FIFOs written through, the rest refused with exit
// status 2 and the path (core/io.hpp, OutputFileSet).

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/io.hpp"
#include "fifo_reader.hpp"
#include "run_command.hpp"

namespace {

namespace fs = std::filesystem;

const std::string kBinary = PIPEGRID_BINARY;
const std::string kCommon = std::string(PIPEGRID_SOURCE_DIR) + "/tests/data/common";

using Result = testutil::CommandResult;
using testutil::shell_quote;

class OutputTargetsCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/pipegrid-output-targets-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
    fs::create_directory(dir_ / "logs");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Runs pipegrid with `arguments` (a hung run is killed after 120 s and
  /// reads as status 124), stdout and stderr captured.
  Result run(const std::vector<std::string>& arguments) const {
    std::vector<std::string> words = {kBinary};
    words.insert(words.end(), arguments.begin(), arguments.end());
    return testutil::run_words("timeout -s KILL 120", words, (dir_ / "logs" / "stderr").string());
  }

  static std::vector<std::string> platform_to(const std::string& output) {
    return {"platform", "cluster", "--servers", "1", "--gpus-per-server", "2", "--device", "H100",
            "--memory", "80GiB", "--intra", "5GBps", "--inter", "5GBps", "--output", output};
  }

  /// The file platform_to() writes to a regular file.
  std::string platform_xml() const {
    const std::string reference = path("logs/reference.xml");
    EXPECT_EQ(run(platform_to(reference)).status, 0);
    return pipegrid::read_text_file(reference);
  }

  bool make_char_device(const std::string& name, unsigned major_number, unsigned minor_number) const {
    return mknod(path(name).c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)) == 0;
  }

  fs::path dir_;
};

TEST_F(OutputTargetsCliTest, PlatformThroughASymlinkReplacesItsTarget) {
  pipegrid::write_file_atomically(path("target.xml"), "previous\n");
  fs::create_symlink("target.xml", path("link.xml"));
  const Result result = run(platform_to(path("link.xml")));
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_TRUE(fs::is_symlink(path("link.xml")));
  EXPECT_EQ(pipegrid::read_text_file(path("target.xml")), platform_xml());
}

TEST_F(OutputTargetsCliTest, PlatformThroughADanglingSymlinkCreatesItsTarget) {
  fs::create_symlink("new.xml", path("link.xml"));
  const Result result = run(platform_to(path("link.xml")));
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_TRUE(fs::is_symlink(path("link.xml")));
  EXPECT_EQ(pipegrid::read_text_file(path("new.xml")), platform_xml());
}

TEST_F(OutputTargetsCliTest, PlatformToAFifoReachesItsReader) {
  const std::string expected = platform_xml();
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  testutil::FifoReader reader(path("fifo"));
  const Result result = run(platform_to(path("fifo")));
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(reader.received(), expected);
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
}

TEST_F(OutputTargetsCliTest, PlatformToAFifoWithoutReaderIsRefused) {
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  const Result result = run(platform_to(path("fifo")));
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.err.find("pipegrid: error: " + path("fifo") + ": cannot write to the FIFO: no process is reading it"),
            std::string::npos)
      << result.err;
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
}

TEST_F(OutputTargetsCliTest, ModelToACharacterDeviceLeavesTheDevice) {
  if (!make_char_device("null", 1, 3)) GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  const Result result = run({"model", "mlp", "--output", path("null")});
  EXPECT_EQ(result.status, 0) << result.err;
  struct stat status {};
  ASSERT_EQ(stat(path("null").c_str(), &status), 0);
  EXPECT_TRUE(S_ISCHR(status.st_mode));
  EXPECT_EQ(status.st_rdev, makedev(1, 3));
}

TEST_F(OutputTargetsCliTest, PlatformToAFullDeviceFailsWithTheWriteError) {
  if (!make_char_device("full", 1, 7)) GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  const Result result = run(platform_to(path("full")));
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.err.find("pipegrid: error: " + path("full") + ": write error: " + std::strerror(ENOSPC)),
            std::string::npos)
      << result.err;
  EXPECT_TRUE(fs::is_character_file(path("full")));
}

TEST_F(OutputTargetsCliTest, SimulateWritesTheFifoLastAndRollsBackWhenTheDeviceFails) {
  if (!make_char_device("full", 1, 7)) GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  pipegrid::write_file_atomically(path("timeline.csv"), "previous\n");
  const std::vector<std::string> simulate = {"simulate", "--platform", kCommon + "/chain3-fpga.xml", "--profile",
                                             kCommon + "/tiny.json", "--network", "analytic", "--schedule", "1f1b-as",
                                             "--micro-batches", "4", "--csv", path("timeline.csv"), "--svg"};
  std::vector<std::string> to_full = simulate;
  to_full.push_back(path("full"));
  const Result failed = run(to_full);
  EXPECT_EQ(failed.status, 2);
  EXPECT_NE(failed.err.find(path("full") + ": write error"), std::string::npos) << failed.err;
  EXPECT_EQ(pipegrid::read_text_file(path("timeline.csv")), "previous\n");

  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  std::vector<std::string> to_fifo = simulate;
  to_fifo.push_back(path("fifo"));
  testutil::FifoReader reader(path("fifo"));
  const Result written = run(to_fifo);
  EXPECT_EQ(written.status, 0) << written.err;
  EXPECT_NE(reader.received().find("<svg"), std::string::npos);
  EXPECT_NE(pipegrid::read_text_file(path("timeline.csv")), "previous\n");
}

TEST_F(OutputTargetsCliTest, FolderAndSymlinkLoopAreRefused) {
  fs::create_directory(path("folder"));
  const Result folder = run(platform_to(path("folder")));
  EXPECT_EQ(folder.status, 2);
  EXPECT_NE(folder.err.find(path("folder") + ": cannot write file: it is a folder"), std::string::npos) << folder.err;

  fs::create_symlink("loop-b", path("loop-a"));
  fs::create_symlink("loop-a", path("loop-b"));
  const Result loop = run(platform_to(path("loop-a")));
  EXPECT_EQ(loop.status, 2);
  EXPECT_NE(loop.err.find(path("loop-a") + ": cannot write file: a loop of symbolic links"), std::string::npos)
      << loop.err;
  EXPECT_TRUE(fs::is_symlink(path("loop-a")));
}

// `--output /dev/stdout > file`: the file is the command's own standard
// output, so the platform joins that stream; the summary line printed after
// it is kept (a rename onto the file would lose it).
TEST_F(OutputTargetsCliTest, StandardOutputRedirectedToAFileKeepsEverything) {
  const std::string file = path("stdout.txt");
  std::string line = "timeout -s KILL 120 " + shell_quote(kBinary);
  for (const std::string& argument : platform_to("/dev/stdout")) line += " " + shell_quote(argument);
  line += " >" + shell_quote(file) + " 2>/dev/null </dev/null";
  const int status = std::system(line.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << line;
  const std::string text = pipegrid::read_text_file(file);
  const std::string xml = platform_xml();
  ASSERT_GE(text.size(), xml.size());
  EXPECT_EQ(text.substr(0, xml.size()), xml);
  EXPECT_NE(text.find("/dev/stdout: 2 hosts, 1 server x 2 GPUs", xml.size()), std::string::npos) << text;
}

}  // namespace
