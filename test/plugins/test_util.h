#pragma once

// Temp directory trees standing in for /proc and /sys in plugin tests.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "test/temp_dir.h"

namespace cryo::gpu::testing {

// cryo::TempDir with the files of a fake /proc or /sys written into it.
struct TempDir : cryo::TempDir {
  TempDir() : cryo::TempDir("cryo-gpu-test") {}

  void Write(const std::string& rel, const std::string& content) const {
    std::filesystem::path p = *this / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
  }
  // A symlink as /proc/PID/fd/N is: its target need not exist.
  void Link(const std::string& rel, const std::string& target) const {
    std::filesystem::path p = *this / rel;
    std::filesystem::create_directories(p.parent_path());
    std::filesystem::create_symlink(target, p);
  }
};

}  // namespace cryo::gpu::testing
