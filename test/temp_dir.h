#pragma once

// The tests' temporary directory: made under the system's temp directory, removed with all it
// holds when the test ends. Header-only, so that every test target (plugins' too) may use it.

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace cryo {

struct TempDir {
  std::string path;  // empty when none could be made (the test then fails on its first use)
  explicit TempDir(const std::string& prefix = "cryo-unit") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(t.data()) != nullptr) path = t;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& rel) const { return path + "/" + rel; }
};

}  // namespace cryo
