#pragma once

// What an attacker who can write a checkpoint (the store, or a checkpoint image a pod author
// builds) does to get root: rewrite every thread's credentials in CRIU's core images, then fix
// the manifest's checksums to match. Shared by the process and container e2e suites.

#include <cstring>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "criu/images.pb.h"
#include "daemon/store/checksum.h"
#include "daemon/store/manifest.h"
#include "lib/base/fs.h"

namespace cryo::testing {

// Applies `edit` to every core-*.img under <dir>/images and rewrites the manifest's sizes and
// checksums. Returns false when an image or the manifest would not parse.
inline bool RewriteCoreImages(const std::string& dir,
                              const std::function<void(::criu::core_entry*)>& edit) {
  for (const std::string& name : fs::ListNames(dir + "/images")) {
    if (!absl::StartsWith(name, "core-")) continue;
    const std::string path = dir + "/images/" + name;
    auto b = fs::ReadFile(path);
    if (!b.ok() || b->size() < 12) return false;
    uint32_t n;
    std::memcpy(&n, b->data() + 8, 4);
    ::criu::core_entry core;
    if (!core.ParseFromString(b->substr(12, n))) return false;
    edit(&core);
    const std::string body = core.SerializeAsString();
    n = static_cast<uint32_t>(body.size());
    std::string out = b->substr(0, 8);
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += body;
    if (!fs::WriteFileAtomic(path, out).ok()) return false;
  }
  auto text = fs::ReadFile(dir + "/manifest.json");
  if (!text.ok()) return false;
  auto m = store::ParseManifest(*text);
  if (!m.ok()) return false;
  for (auto& f : m->files) {
    auto d = HashFile(dir + "/" + f.path);
    if (!d.ok()) return false;
    f.size = d->size;
    f.checksum = d->checksum;
  }
  return fs::WriteFileAtomic(dir + "/manifest.json", store::ManifestToJson(*m)).ok();
}

// Applies `raise` to the credentials of every thread's core image (see RewriteCoreImages).
inline bool RewriteImageCredentials(const std::string& dir,
                                    const std::function<void(::criu::creds_entry*)>& raise) {
  return RewriteCoreImages(dir, [&](::criu::core_entry* core) {
    if (core->has_thread_core()) raise(core->mutable_thread_core()->mutable_creds());
  });
}

// Root, every capability, no_new_privs off.
inline void RaiseToRoot(::criu::creds_entry* c) {
  c->set_uid(0);
  c->set_euid(0);
  c->set_suid(0);
  c->set_fsuid(0);
  c->set_no_new_privs(0);
  for (auto* set : {c->mutable_cap_prm(), c->mutable_cap_eff(), c->mutable_cap_bnd()}) {
    set->Clear();
    set->Add(0xffffffffu);
    set->Add(0x1ffu);
  }
}

}  // namespace cryo::testing
