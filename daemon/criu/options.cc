#include "daemon/criu/options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cryo::criu {
namespace {

std::vector<std::string> Common(const JobOptions& o, bool network_lock_held = false) {
  std::vector<std::string> a;
  if (o.tcp_established) {
    a.insert(a.end(),
             {"--tcp-established", "--network-lock", network_lock_held ? "skip" : "nftables"});
  }
  if (o.tcp_close) a.push_back("--tcp-close");
  if (o.ext_unix_sk) a.push_back("--ext-unix-sk");
  if (o.shell_job) a.push_back("--shell-job");
  return a;
}

}  // namespace

std::vector<std::string> JobOptions::DumpArgs() const {
  std::vector<std::string> a = Common(*this);
  if (skip_in_flight) a.push_back("--skip-in-flight");
  if (link_remap) a.push_back("--link-remap");
  if (ghost_limit > 0) a.insert(a.end(), {"--ghost-limit", std::to_string(ghost_limit)});
  return a;
}

std::vector<std::string> JobOptions::RestoreArgs(bool network_lock_held) const {
  return Common(*this, network_lock_held);
}

absl::Status Resolve(const NodeDefaults& node, const OptionOverrides& asked, bool own_netns,
                     JobOptions* out) {
  JobOptions o;
  o.tcp_established = asked.tcp_established.value_or(
      node.tcp_established == NodeDefaults::Tcp::kOn ||
      (node.tcp_established == NodeDefaults::Tcp::kAuto && own_netns));
  o.tcp_close = asked.tcp_close.value_or(node.tcp_close);
  o.skip_in_flight = asked.skip_in_flight.value_or(node.skip_in_flight);
  o.link_remap = asked.link_remap.value_or(node.link_remap);
  o.ghost_limit = asked.ghost_limit.value_or(node.ghost_limit);
  o.ext_unix_sk = asked.ext_unix_sk.value_or(node.ext_unix_sk);
  if (o.ghost_limit > kMaxGhostLimit) {
    return absl::InvalidArgumentError(absl::StrCat("ghost limit ", o.ghost_limit,
                                                   " bytes is above the most cryo allows (",
                                                   kMaxGhostLimit, ")"));
  }
  // Closed on restore: established connections are dumped without the network lock's help.
  if (o.tcp_close) o.tcp_established = false;
  *out = o;
  return absl::OkStatus();
}

}  // namespace cryo::criu
