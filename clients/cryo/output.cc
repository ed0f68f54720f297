#include "clients/cryo/output.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/human.h"

namespace cryo::cli {

std::string StageLabel(v1::Stage s) {
  std::string n = v1::Stage_Name(s);
  if (n.rfind("STAGE_", 0) == 0) n = n.substr(6);
  n = absl::AsciiStrToLower(n);
  std::replace(n.begin(), n.end(), '_', ' ');
  return n;
}

void ProgressBar::Update(const v1::Progress& p) {
  if (!enabled_) return;
  if (p.stage() != stage_) {
    stage_ = p.stage();
    stage_start_ms_ = p.elapsed_ms();
  }
  std::string line = absl::StrFormat("%-13s", StageLabel(p.stage()));
  if (p.bytes_total() > 0) {
    const int width = 24;
    double frac = std::min(1.0, static_cast<double>(p.bytes_done()) / p.bytes_total());
    int fill = static_cast<int>(frac * width);
    absl::StrAppend(&line, "[", std::string(fill, '#'), std::string(width - fill, '.'), "] ",
                    human::Bytes(p.bytes_done()), " / ", human::Bytes(p.bytes_total()));
  } else if (p.bytes_done() > 0) {
    absl::StrAppend(&line, human::Bytes(p.bytes_done()));
  }
  uint64_t stage_ms = p.elapsed_ms() - stage_start_ms_;
  if (p.bytes_done() > 0 && stage_ms > 0) {
    absl::StrAppend(&line, "  ", human::Bytes(p.bytes_done() * 1000 / stage_ms), "/s");
  }
  absl::StrAppendFormat(&line, "  %.1fs", p.elapsed_ms() / 1000.0);
  if (!p.message().empty()) absl::StrAppend(&line, "  ", p.message());
  if (line.size() > 100) line.resize(100);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Clear() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace cryo::cli
