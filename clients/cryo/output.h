#pragma once

// Human output of the cryo CLI beyond lib/base/human.h: stage names and the progress bar.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cryo/v1/cryo.pb.h"

namespace cryo::cli {

std::string StageLabel(v1::Stage s);

// Renders one line of progress; redraws in place on a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  ~ProgressBar() { Clear(); }
  void Update(const v1::Progress& p);
  void Clear();

 private:
  bool enabled_;
  bool drawn_ = false;
  v1::Stage stage_ = v1::STAGE_UNSPECIFIED;
  uint64_t stage_start_ms_ = 0;
};

}  // namespace cryo::cli
