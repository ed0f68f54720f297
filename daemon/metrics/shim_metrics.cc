#include "daemon/metrics/shim_metrics.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace cryo::metrics {
namespace {

constexpr off_t kMaxBytes = off_t{16} << 20;

HttpResponse Unavailable(std::string why) { return {503, "text/plain; charset=utf-8", why + "\n"}; }

}  // namespace

HttpResponse ShimMetricsResponse(const std::string& path, absl::Time now) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return Unavailable(absl::StrCat("no shim metrics at ", path,
                                      ": cryo-cri-shim is not running on this node, or runs "
                                      "without --metrics-file ",
                                      path));
    }
    return Unavailable(absl::StrCat("shim metrics at ", path, ": ", strerror(errno)));
  }
  const absl::Duration age = now - absl::FromUnixSeconds(st.st_mtim.tv_sec);
  if (age > kShimMetricsMaxAge) {
    return Unavailable(absl::StrCat("shim metrics at ", path, " are stale: written ",
                                    absl::ToInt64Seconds(age),
                                    " s ago (cryo-cri-shim stopped writing them)"));
  }
  if (st.st_size > kMaxBytes) {
    return Unavailable(absl::StrCat("shim metrics at ", path, " are ", st.st_size,
                                    " bytes, over the ", kMaxBytes, " served"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream body;
  body << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return Unavailable(absl::StrCat("shim metrics at ", path, ": cannot be read"));
  }
  return {200, "text/plain; version=0.0.4; charset=utf-8", body.str()};
}

}  // namespace cryo::metrics
