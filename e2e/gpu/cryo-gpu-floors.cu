// cryo-gpu-floors: what the machine can do at best for a checkpoint of N GiB, measured the way
// the fast path moves data, so the suite can put cryo's times beside them in the same call:
//   d2h_ms     device-to-host into one pinned 256 MiB buffer, repeated over N GiB of device memory
//   fill_ms    N GiB copied into fresh (never touched) host memory by T threads, huge pages
//              asked for as the library asks for them
//   write_ms   N GiB written into W files of DIR with direct I/O, one writer per file
//   read_ms    the same files read back with direct I/O, one reader per file
//
//   cryo-gpu-floors --gib 8 --dir /var/tmp/store --threads 16 --files 4
// Prints one JSON object. The files are removed afterwards.

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

int Fail(const char* what) {
  std::printf("{\"error\": \"%s\"}\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  std::string dir = "/var/tmp";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int files = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--gib")
      gib = std::atof(argv[i + 1]);
    else if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--files")
      files = std::atoi(argv[i + 1]);
    else
      return Fail("unknown argument");
  }
  const size_t slot = 256ull << 20;
  const size_t total = static_cast<size_t>(gib * (1ull << 30)) / slot * slot;
  if (total == 0 || threads < 1 || files < 1) return Fail("bad sizes");

  // Device-to-host through one pinned buffer (the library uses a ring of them).
  void* dev = nullptr;
  void* pinned = nullptr;
  const size_t dev_bytes = std::min(total, size_t(4) << 30);  // re-read: the link is the limit
  if (cudaMalloc(&dev, dev_bytes) != cudaSuccess) return Fail("cudaMalloc");
  if (cudaHostAlloc(&pinned, slot, cudaHostAllocPortable) != cudaSuccess) return Fail("pinned");
  cudaMemset(dev, 1, dev_bytes);
  cudaDeviceSynchronize();
  auto t0 = Clock::now();
  for (size_t off = 0; off < total; off += slot) {
    cudaMemcpy(pinned, static_cast<char*>(dev) + off % dev_bytes, slot, cudaMemcpyDeviceToHost);
  }
  const double d2h_ms = Ms(t0);
  std::memset(pinned, 7, slot);

  // Filling fresh host memory with T threads.
  char* host = static_cast<char*>(mmap(nullptr, total, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (host == MAP_FAILED) return Fail("mmap");
  madvise(host, total, MADV_HUGEPAGE);
  t0 = Clock::now();
  {
    std::vector<std::thread> ts;
    const size_t per = (total / threads + 4095) & ~size_t{4095};
    for (int k = 0; k < threads; ++k) {
      ts.emplace_back([&, k] {
        for (size_t off = k * per; off < std::min(total, (k + 1) * per); off += slot) {
          std::memcpy(host + off, pinned, std::min(slot, std::min(total, (k + 1) * per) - off));
        }
      });
    }
    for (auto& t : ts) t.join();
  }
  const double fill_ms = Ms(t0);

  // The store's floors: W files, direct I/O, one thread each, the same striping as the library.
  std::vector<std::string> paths;
  for (int k = 0; k < files; ++k) paths.push_back(dir + "/cryo-floor." + std::to_string(k));
  auto io = [&](bool write) {
    std::vector<std::thread> ts;
    const size_t units = total / slot;
    for (int k = 0; k < files; ++k) {
      ts.emplace_back([&, k] {
        int fd = open(paths[k].c_str(),
                      (write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY) | O_DIRECT, 0600);
        if (fd < 0)
          fd = open(paths[k].c_str(), write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, 0600);
        if (fd < 0) return;
        for (size_t u = k; u < units; u += files) {
          char* p = host + u * slot;
          off_t at = static_cast<off_t>((u / files) * slot);
          ssize_t n = write ? pwrite(fd, p, slot, at) : pread(fd, p, slot, at);
          if (n != static_cast<ssize_t>(slot)) break;
        }
        if (write) fdatasync(fd);
        close(fd);
      });
    }
    for (auto& t : ts) t.join();
  };
  t0 = Clock::now();
  io(true);
  const double write_ms = Ms(t0);
  t0 = Clock::now();
  io(false);
  const double read_ms = Ms(t0);
  for (const auto& p : paths) unlink(p.c_str());

  std::printf(
      "{\"gib\": %.3f, \"bytes\": %zu, \"threads\": %d, \"files\": %d, \"d2h_ms\": %.1f, "
      "\"fill_ms\": %.1f, \"write_ms\": %.1f, \"read_ms\": %.1f, \"d2h_gbps\": %.2f, "
      "\"fill_gbps\": %.2f, \"write_gbps\": %.2f, \"read_gbps\": %.2f}\n",
      gib, total, threads, files, d2h_ms, fill_ms, write_ms, read_ms, total / d2h_ms / 1e6,
      total / fill_ms / 1e6, total / write_ms / 1e6, total / read_ms / 1e6);
  return 0;
}
