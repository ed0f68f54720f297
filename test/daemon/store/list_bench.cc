// How long List takes over a store of many checkpoints the size of a 32 GiB GPU job's (29 CRIU
// images, four 8 GiB GPU files listing 128 chunk digests each): the first List parses every
// manifest, later ones find them parsed and open and fstat each. Prints both and their ratio
// (docs/benchmarks.md, "The store").
//
//   store_list_bench [CHECKPOINTS=500] [ROUNDS=5]

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "daemon/store/store.h"
#include "lib/base/fs.h"

using namespace cryo;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 500;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  char tmpl[] = "/tmp/cryo-list-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  const std::string root = tmpl;
  auto st = store::CreateLocalStore({root + "/store", "node-a", false});
  if (!st.ok()) return 1;
  auto& s = **st;
  for (int i = 0; i < n; ++i) {
    store::Manifest m;
    m.id = absl::StrCat("job-", i % 50, "-", i);
    m.workload = absl::StrCat("job-", i % 50);
    m.created_at = absl::StrCat("2026-11-27T10:", 10 + i / 60 % 50, ":", 10 + i % 50, "Z");
    m.root_pid = 1000 + i;
    for (int f = 0; f < 29; ++f)
      m.files.push_back({absl::StrCat("images/img-", f, ".img"), 4096, std::string(32, 'a')});
    for (int g = 0; g < 4; ++g) {
      store::ManifestFile gpu{absl::StrCat("gpu/1234.", g), uint64_t{8} << 30,
                              std::string(32, 'b')};
      for (int c = 0; c < 128; ++c)
        gpu.chunks.push_back(std::string(32, "0123456789abcdef"[c % 16]));
      m.files.push_back(std::move(gpu));
    }
    auto staged = s.Stage(m.id);
    if (!staged.ok() || !(*staged)->Publish(m).ok()) return 1;
  }
  auto time_list = [&] {
    auto t0 = std::chrono::steady_clock::now();
    auto all = s.List();
    auto ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!all.ok() || static_cast<int>(all->size()) != n) std::exit(1);
    return ms;
  };
  const double cold = time_list();
  double warm = 1e18;
  for (int r = 0; r < rounds; ++r) warm = std::min(warm, time_list());
  std::printf(
      "{\"checkpoints\": %d, \"first_list_ms\": %.1f, \"later_list_ms\": %.1f, \"ratio\": %.3f}\n",
      n, cold, warm, warm / cold);
  (void)fs::RemoveTree(root);
  return 0;
}
