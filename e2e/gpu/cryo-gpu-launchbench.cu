// cryo-gpu-launchbench: the cost of the fast-path library on the calls it wraps, without the
// noise of a real job: empty kernels launched back to back (the wrapped call a training loop
// makes most), with a synchronize every 256, on --threads threads each with its own stream.
//
//   cryo-gpu-launchbench --launches 400000 --threads 1
// Prints {"launches": N, "threads": T, "seconds": S, "launches_per_s": R, "ns_per_launch": X}.

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

__global__ void Empty() {}

int main(int argc, char** argv) {
  long launches = 400000;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--launches")
      launches = std::atol(argv[i + 1]);
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
  }
  if (launches <= 0 || threads <= 0) return 2;
  cudaFree(nullptr);  // context up front: not timed
  std::vector<cudaStream_t> streams(threads);
  for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  Empty<<<1, 1, 0, streams[0]>>>();  // warm-up
  cudaDeviceSynchronize();
  const long per = launches / threads;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (long i = 0; i < per; ++i) {
        Empty<<<1, 1, 0, streams[t]>>>();
        if (i % 256 == 255) cudaStreamSynchronize(streams[t]);
      }
      cudaStreamSynchronize(streams[t]);
    });
  }
  for (auto& th : ts) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long done = per * threads;
  std::printf(
      "{\"launches\": %ld, \"threads\": %d, \"seconds\": %.4f, \"launches_per_s\": %.0f, "
      "\"ns_per_launch\": %.1f}\n",
      done, threads, s, done / s, s * 1e9 / done);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
