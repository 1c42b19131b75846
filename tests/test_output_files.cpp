// OutputFileSet: the outputs of one command are written all or none.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "core/io.hpp"
#include "fifo_reader.hpp"
#include "expect_input_error.hpp"

namespace pipegrid {
namespace {

namespace fs = std::filesystem;

class OutputFileSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/pipegrid-outputs-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    unsetenv("PIPEGRID_FAULT_INJECT");
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::set<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename().string());
    return names;
  }
  /// A character device node `name` in the folder; false (the test is
  /// then skipped) where the container forbids mknod.
  bool make_char_device(const std::string& name, unsigned major_number, unsigned minor_number) const {
    return mknod(path(name).c_str(), S_IFCHR | 0666, makedev(major_number, minor_number)) == 0;
  }
  std::string dir_;
};

TEST_F(OutputFileSetTest, CommitWritesEveryFile) {
  OutputFileSet files;
  files.add(path("a.csv"), "a\n");
  files.add(path("b.svg"), "b\n");
  EXPECT_EQ(listing().size(), 2u);  // the two temporaries
  files.commit();
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv", "b.svg"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "a\n");
  EXPECT_EQ(read_text_file(path("b.svg")), "b\n");
}

TEST_F(OutputFileSetTest, NoCommitLeavesNothing) {
  {
    OutputFileSet files;
    files.add(path("a.csv"), "a\n");
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(OutputFileSetTest, UnwritableTargetLeavesNothing) {
  OutputFileSet files;
  files.add(path("a.csv"), "a\n");
  const std::string message = testutil::input_error_of([&] { files.add(path("missing/b.svg"), "b\n"); });
  EXPECT_CONTAINS(message, "missing/b.svg: cannot write file");
  EXPECT_EQ(listing().size(), 1u);  // a.csv's temporary, until the set goes
}

TEST_F(OutputFileSetTest, FailedRenameRestoresEarlierTargets) {
  write_file_atomically(path("a.csv"), "previous\n");
  fs::create_directory(path("b.svg"));  // cannot be replaced by a file
  {
    OutputFileSet files;
    files.add(path("a.csv"), "new\n");
    files.add(path("c.json"), "c\n");
    files.add(path("b.svg"), "b\n");
    const std::string message = testutil::input_error_of([&] { files.commit(); });
    EXPECT_CONTAINS(message, "b.svg: cannot write file: it is a folder");
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv", "b.svg"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "previous\n");
}

TEST_F(OutputFileSetTest, FaultAfterFirstRenameRollsBack) {
  write_file_atomically(path("a.csv"), "previous\n");
  setenv("PIPEGRID_FAULT_INJECT", "after-first-rename", 1);
  {
    OutputFileSet files;
    files.add(path("a.csv"), "new\n");
    files.add(path("b.svg"), "b\n");
    EXPECT_CONTAINS(testutil::input_error_of([&] { files.commit(); }), "after-first-rename");
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "previous\n");
}

TEST_F(OutputFileSetTest, FaultAfterTemporariesLeavesNothing) {
  setenv("PIPEGRID_FAULT_INJECT", "after-temporaries", 1);
  {
    OutputFileSet files;
    files.add(path("a.csv"), "a\n");
    files.add(path("b.svg"), "b\n");
    EXPECT_CONTAINS(testutil::input_error_of([&] { files.commit(); }), "after-temporaries");
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(OutputFileSetTest, ReplacesExistingFilesWithoutBackupsLeft) {
  write_file_atomically(path("a.csv"), "previous\n");
  OutputFileSet files;
  files.add(path("a.csv"), "new\n");
  files.commit();
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "new\n");
}

TEST_F(OutputFileSetTest, SamePathTwiceIsAnInputError) {
  OutputFileSet files;
  files.add(path("a.csv"), "a\n");
  EXPECT_CONTAINS(testutil::input_error_of([&] { files.add(path("a.csv"), "b\n"); }), "named for two outputs");
}

TEST_F(OutputFileSetTest, SymlinkIsFollowedAndItsTargetReplaced) {
  write_file_atomically(path("target.csv"), "previous\n");
  fs::create_symlink("target.csv", path("link.csv"));  // relative: read from the link's folder
  write_file_atomically(path("link.csv"), "new\n");
  EXPECT_TRUE(fs::is_symlink(path("link.csv")));
  EXPECT_EQ(fs::read_symlink(path("link.csv")), "target.csv");
  EXPECT_EQ(read_text_file(path("target.csv")), "new\n");
  EXPECT_EQ(listing(), (std::set<std::string>{"link.csv", "target.csv"}));
}

TEST_F(OutputFileSetTest, ChainOfSymlinksAcrossFoldersReachesTheLastTarget) {
  fs::create_directory(path("sub"));
  write_file_atomically(path("sub/target.csv"), "previous\n");
  fs::create_symlink("target.csv", path("sub/inner"));  // relative to sub/, not to the first link
  fs::create_symlink("sub/inner", path("outer"));
  write_file_atomically(path("outer"), "new\n");
  EXPECT_TRUE(fs::is_symlink(path("outer")));
  EXPECT_TRUE(fs::is_symlink(path("sub/inner")));
  EXPECT_EQ(read_text_file(path("sub/target.csv")), "new\n");
  EXPECT_EQ(listing(), (std::set<std::string>{"outer", "sub"}));
}

TEST_F(OutputFileSetTest, DanglingSymlinkCreatesItsTarget) {
  fs::create_directory(path("sub"));
  fs::create_symlink("sub/new.csv", path("link.csv"));
  write_file_atomically(path("link.csv"), "created\n");
  EXPECT_TRUE(fs::is_symlink(path("link.csv")));
  EXPECT_EQ(read_text_file(path("sub/new.csv")), "created\n");
}

TEST_F(OutputFileSetTest, RollbackThroughASymlinkRestoresTheTargetAndKeepsTheLink) {
  write_file_atomically(path("target.csv"), "previous\n");
  fs::create_symlink("target.csv", path("link.csv"));
  fs::create_symlink("new.csv", path("dangling.csv"));
  setenv("PIPEGRID_FAULT_INJECT", "after-first-rename", 1);
  {
    OutputFileSet files;
    files.add(path("link.csv"), "new\n");
    files.add(path("dangling.csv"), "b\n");
    EXPECT_CONTAINS(testutil::input_error_of([&] { files.commit(); }), "after-first-rename");
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"dangling.csv", "link.csv", "target.csv"}));
  EXPECT_TRUE(fs::is_symlink(path("link.csv")));
  EXPECT_EQ(read_text_file(path("target.csv")), "previous\n");
}

TEST_F(OutputFileSetTest, SymlinkLoopIsRefusedNamingThePath) {
  fs::create_symlink("b", path("a"));
  fs::create_symlink("a", path("b"));
  write_file_atomically(path("kept.csv"), "previous\n");
  {
    OutputFileSet files;
    files.add(path("kept.csv"), "new\n");
    files.add(path("a"), "x\n");
    const std::string message = testutil::input_error_of([&] { files.commit(); });
    EXPECT_CONTAINS(message, path("a") + ": cannot write file: a loop of symbolic links");
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"a", "b", "kept.csv"}));
  EXPECT_EQ(read_text_file(path("kept.csv")), "previous\n");
}

TEST_F(OutputFileSetTest, LinkAndItsTargetInOneCommandAreOneFileNamedTwice) {
  write_file_atomically(path("target.csv"), "previous\n");
  fs::create_symlink("target.csv", path("link.csv"));
  OutputFileSet files;
  files.add(path("target.csv"), "a\n");
  EXPECT_CONTAINS(testutil::input_error_of([&] { files.add(path("link.csv"), "b\n"); }), "named for two outputs");
}

TEST_F(OutputFileSetTest, CharacterDeviceIsWrittenThroughNotReplaced) {
  if (!make_char_device("null", 1, 3)) GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  OutputFileSet files;
  files.add(path("null"), "discarded\n");
  files.add(path("a.csv"), "a\n");
  files.commit();
  struct stat status {};
  ASSERT_EQ(stat(path("null").c_str(), &status), 0);
  EXPECT_TRUE(S_ISCHR(status.st_mode));
  EXPECT_EQ(status.st_rdev, makedev(1, 3));
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv", "null"}));
}

TEST_F(OutputFileSetTest, SymlinkToACharacterDeviceWritesTheDevice) {
  if (!make_char_device("null", 1, 3)) GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  fs::create_symlink("null", path("link"));
  write_file_atomically(path("link"), "discarded\n");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_TRUE(fs::is_character_file(path("null")));
}

TEST_F(OutputFileSetTest, FullDeviceReportsTheWriteErrorAndRollsBackTheOtherOutputs) {
  if (!make_char_device("full", 1, 7)) GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  write_file_atomically(path("a.csv"), "previous\n");
  {
    OutputFileSet files;
    files.add(path("full"), "x\n");  // named first, written last
    files.add(path("a.csv"), "new\n");
    files.add(path("b.csv"), "b\n");
    const std::string message = testutil::input_error_of([&] { files.commit(); });
    EXPECT_CONTAINS(message, path("full") + ": write error: " + std::strerror(ENOSPC));
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv", "full"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "previous\n");
  EXPECT_TRUE(fs::is_character_file(path("full")));
}

TEST_F(OutputFileSetTest, FifoIsWrittenThroughToItsReader) {
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  // More than a pipe holds: the writer must block for the reader, not fail.
  std::string content;
  for (int line = 0; content.size() < 1 << 20; ++line) content += "line " + std::to_string(line) + "\n";
  ::testutil::FifoReader reader(path("fifo"));
  OutputFileSet files;
  files.add(path("fifo"), content);
  files.add(path("a.csv"), "a\n");
  files.commit();
  EXPECT_EQ(reader.received(), content);
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
  EXPECT_EQ(read_text_file(path("a.csv")), "a\n");
}

TEST_F(OutputFileSetTest, FifoWithoutReaderIsRefusedBeforeAnythingIsWritten) {
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  write_file_atomically(path("a.csv"), "previous\n");
  {
    OutputFileSet files;
    files.add(path("a.csv"), "new\n");
    files.add(path("fifo"), "x\n");
    const std::string message = testutil::input_error_of([&] { files.commit(); });
    EXPECT_CONTAINS(message, path("fifo") + ": cannot write to the FIFO: no process is reading it");
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv", "fifo"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "previous\n");
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
}

TEST_F(OutputFileSetTest, FolderIsRefusedBeforeAnythingIsRenamed) {
  fs::create_directory(path("folder"));
  write_file_atomically(path("a.csv"), "previous\n");
  {
    OutputFileSet files;
    files.add(path("a.csv"), "new\n");
    files.add(path("folder"), "x\n");
    EXPECT_CONTAINS(testutil::input_error_of([&] { files.commit(); }), path("folder") + ": cannot write file: it is a folder");
  }
  EXPECT_EQ(listing(), (std::set<std::string>{"a.csv", "folder"}));
  EXPECT_EQ(read_text_file(path("a.csv")), "previous\n");
  EXPECT_TRUE(fs::is_empty(path("folder")));
}

TEST_F(OutputFileSetTest, SocketIsRefused) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socket_path = path("socket");
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  std::copy(socket_path.begin(), socket_path.end(), address.sun_path);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  const std::string message = testutil::input_error_of([&] { write_file_atomically(socket_path, "x\n"); });
  ::close(fd);
  EXPECT_CONTAINS(message, socket_path + ": cannot write file: it is a socket");
  EXPECT_TRUE(fs::is_socket(socket_path));
  EXPECT_EQ(listing(), (std::set<std::string>{"socket"}));
}

TEST_F(OutputFileSetTest, BlockDeviceIsRefused) {
  if (mknod(path("disk").c_str(), S_IFBLK | 0600, makedev(7, 0)) != 0)
    GTEST_SKIP() << "mknod is not permitted here: " << std::strerror(errno);
  fs::create_symlink("disk", path("link"));
  EXPECT_CONTAINS(testutil::input_error_of([&] { write_file_atomically(path("link"), "x\n"); }),
                  path("link") + ": cannot write file: it is a block device");
  EXPECT_TRUE(fs::is_block_file(path("disk")));
}

}  // namespace
}  // namespace pipegrid
