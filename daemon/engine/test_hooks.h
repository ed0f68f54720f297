#pragma once

// Tests only: at named points the engine creates <dir>/<point>.reached and waits (up to two
// minutes) for <dir>/<point>.release, if <dir>/<point>.enable exists, so a test can act (kill
// cryod, kill the job) at that exact moment. Off when the directory is empty.

#include <string>

namespace cryo::engine {

class TestHooks {
 public:
  explicit TestHooks(std::string dir) : dir_(std::move(dir)) {}
  void At(const std::string& point) const;

 private:
  std::string dir_;
};

}  // namespace cryo::engine
