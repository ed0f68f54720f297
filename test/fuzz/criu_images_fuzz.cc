// CRIU images come from the store or from a checkpoint image a pod author built. For any bytes
// of a core image and a seccomp image, ReadImageCredentials returns the threads' credentials or
// an error: no crash, no hang on a looping filter chain, no undefined behaviour; and what it
// accepts passes CheckCredentials against itself (a ceiling made of exactly those threads).

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "daemon/criu/credentials.h"
#include "lib/base/fs.h"

namespace {

std::string Framed(std::initializer_list<uint32_t> magics, const uint8_t* body, size_t n) {
  std::string out;
  for (uint32_t m : magics) out.append(reinterpret_cast<const char*>(&m), 4);
  const uint32_t len = static_cast<uint32_t>(n);
  out.append(reinterpret_cast<const char*>(&len), 4);
  out.append(reinterpret_cast<const char*>(body), n);
  return out;
}

const std::string& Dir() {
  static const std::string dir = [] {
    char t[] = "/tmp/cryo-fuzz-images-XXXXXX";
    std::string d = ::mkdtemp(t);
    // The inventory CRIU 4 writes: format version 2.
    const uint8_t inv[] = {0x08, 0x02};
    (void)cryo::fs::WriteFileAtomic(d + "/inventory.img", Framed({0x58313116}, inv, sizeof(inv)));
    return d;
  }();
  return dir;
}

}  // namespace

// Input: a u32 length, that many bytes of a core entry, the rest a seccomp entry.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n;
  std::memcpy(&n, data, 4);
  data += 4;
  size -= 4;
  if (n > size) n = static_cast<uint32_t>(size);
  const std::string& dir = Dir();
  (void)cryo::fs::WriteFileAtomic(dir + "/core-1.img", Framed({0x54564319, 0x55053847}, data, n));
  (void)cryo::fs::WriteFileAtomic(dir + "/seccomp.img",
                                  Framed({0x54564319, 0x64413049}, data + n, size - n));
  auto threads = cryo::criu::ReadImageCredentials(dir);
  if (!threads.ok()) return 0;
  cryo::criu::CredentialCeiling c = cryo::criu::CeilingOf(*threads);
  for (const auto& t : *threads) {
    if (!t.seccomp_filters.empty() && c.seccomp_mode == cryo::criu::kSeccompFilter) {
      c.seccomp_filters = t.seccomp_filters;
    }
  }
  if (threads->size() == 1 && !(*threads)[0].apparmor_data &&
      (*threads)[0].lsm_sockcreate.empty() &&
      !cryo::criu::CheckCredentials(*threads, c, "itself").ok()) {
    std::abort();  // a thread exceeds a ceiling made of itself
  }
  return 0;
}
