// The fast path's replies come from a process of the job, which may lie. For any bytes, each
// typed ParseFastpathReply returns the reply or an error: no crash, no undefined behaviour; an
// accepted status never names another process than the one asked, nor a version this side does
// not speak; an accepted reply encodes back to one that decodes the same. The same for a request
// and for a legacy IPC share's reply, which the library reads from another process.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "daemon/gpu/fastpath_client.h"
#include "lib/contract/gpu_fastpath_messages.h"

namespace {

namespace wire = cryo::contract::gpu_fastpath;

template <typename T>
void RoundTrips(const T& body, const cryo::gpu::FastpathProcess& p) {
  auto again = cryo::gpu::ParseFastpathReply<T>(wire::Encode(body), p);
  if (!again.ok() || wire::Encode(*again) != wire::Encode(body)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cryo::gpu::FastpathProcess p;
  p.pid = 4242;
  p.ns_pid = 42;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto st = cryo::gpu::ParseFastpathReply<wire::StatusReply>(text, p); st.ok()) {
    if (st->pid != 42 || st->version < wire::kMinVersion || st->version > wire::kVersion) {
      std::abort();
    }
    RoundTrips(*st, p);
  }
  if (auto g = cryo::gpu::ParseFastpathReply<wire::GatedReply>(text, p); g.ok()) RoundTrips(*g, p);
  if (auto q = cryo::gpu::ParseFastpathReply<wire::QuiescedReply>(text, p); q.ok())
    RoundTrips(*q, p);
  if (auto i = cryo::gpu::ParseFastpathReply<wire::ImportedReply>(text, p); i.ok())
    RoundTrips(*i, p);
  if (auto d = cryo::gpu::ParseFastpathReply<wire::DrainedReply>(text, p); d.ok())
    RoundTrips(*d, p);
  if (auto s = cryo::gpu::ParseFastpathReply<wire::SavedReply>(text, p); s.ok()) RoundTrips(*s, p);
  if (auto r = cryo::gpu::ParseFastpathReply<wire::RefillReply>(text, p); r.ok()) RoundTrips(*r, p);
  if (auto t = cryo::gpu::ParseFastpathReply<wire::TrackReply>(text, p); t.ok()) {
    auto again = cryo::gpu::ParseFastpathReply<wire::TrackReply>(wire::Encode(*t), p);
    if (!again.ok() || again->features != t->features || again->fork_counter != t->fork_counter)
      std::abort();
  }
  std::string why;
  // A share's reply comes from another process of the job, to the library in a rank.
  wire::Reply<wire::ShareReply> share;
  if (wire::Decode(std::string(text), &share, &why) && share.ok) {
    wire::Reply<wire::ShareReply> again;
    if (!wire::Decode(wire::Encode(share.body), &again, &why) || !again.ok ||
        again.body.size != share.body.size) {
      std::abort();
    }
  }
  // A challenge comes from the job's library, to cryod, which then reads the job's memory.
  wire::Challenge c;
  if (wire::DecodeChallenge(std::string(text), &c)) {
    wire::Challenge again;
    if (c.length == 0 || c.length > wire::kChallengeBytes ||
        !wire::DecodeChallenge(wire::Encode(c), &again) || again.address != c.address ||
        again.length != c.length) {
      std::abort();
    }
  }
  wire::Request req;
  if (wire::Decode(std::string(text), &req, &why)) {
    wire::Request again;
    if (!wire::Decode(wire::Encode(req), &again, &why) ||
        wire::Encode(again) != wire::Encode(req)) {
      std::abort();
    }
  }
  return 0;
}
