// OutputFileSet: the outputs of one command are written all or none.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/io.hpp"
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

}  // namespace
}  // namespace pipegrid
