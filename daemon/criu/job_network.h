#pragma once

// A job's pods resume with other IP addresses than they were checkpointed with (issue 37): the
// TCP connections between its members are restored with each member's old address rewritten
// to its replacement's, both ends together, sequence numbers and queues as CRIU saved them.

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/criu/listen_ports.h"

namespace cryo::criu {

// The addresses of the network namespace of `netns_pid` that another pod would not have: every
// interface's address but loopback and link-local ones, as text ("10.88.1.7", "fd00::7"),
// sorted.
absl::StatusOr<std::vector<std::string>> PodAddresses(pid_t netns_pid);

// Old address -> new address, as text; both of one family.
using AddressMap = std::map<std::string, std::string>;

// INVALID_ARGUMENT naming the pair for an entry that is not two addresses of one family.
absl::Status ValidateAddressMap(const AddressMap& map);

// Writes into `out_dir` (existing, empty) the images of `images_dir` with every inet socket's
// addresses that `map` names rewritten: files.img rewritten, every other image a symlink to
// `link_base`/NAME (`link_base`: `images_dir` as the restoring CRIU reaches it from `out_dir`,
// relative when CRIU runs under a container's root). Whether it wrote them: nothing is written
// when no socket names a mapped address.
absl::StatusOr<bool> RewriteImageAddresses(const std::string& images_dir,
                                           const std::string& out_dir, const std::string& link_base,
                                           const AddressMap& map);

// `listeners` as the rewritten images will listen: each address `map` names replaced (a
// v4-mapped IPv6 address by its IPv4 part).
std::vector<Listener> RewriteListeners(std::vector<Listener> listeners, const AddressMap& map);

// A job's memory keeps its members' old addresses: a connection it opens after a move (a
// launcher's, NCCL's) would go where no member is. In the network namespace of `netns_pid`
// (through `nsexec`; 0: cryod's own) the nftables table "inet cryo-job-addresses" sends new
// connections to each old address of `map` to the new one (DNAT on output: the process still
// sees the address it asked for; the connections it had are rewritten in the images instead).
// The table is replaced whole. It is also the record of the moves: ReadJobAddresses gives it
// back at the next checkpoint, so that a job moved twice still reaches its first addresses.
// An old address that is now a member's own is left out (said in the log).
absl::Status KeepJobAddresses(const AddressMap& map, pid_t netns_pid, const std::string& nsexec);

// The table's pairs in that namespace; none when it has no table (or the node no nft).
absl::StatusOr<AddressMap> ReadJobAddresses(pid_t netns_pid, const std::string& nsexec);

// This move's map with the moves before it: each earlier address to where its member is now
// (`earlier`'s target moved on by `moved`, or kept).
AddressMap ComposeAddressMaps(const AddressMap& moved, const AddressMap& earlier);

}  // namespace cryo::criu
