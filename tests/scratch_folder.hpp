#pragma once
// A scratch folder for a test: created empty under the system's temporary
// folder (named after `prefix`), removed with its content when the object
// goes out of scope.

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace pipegrid::testutil {

class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchFolder() { std::filesystem::remove_all(path_); }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace pipegrid::testutil
