// cryo-cri-shim: the CRI proxy kubelet talks to instead of containerd or CRI-O.
#include <string>
#include <vector>

#include "cri-shim/app.h"

int main(int argc, char** argv) {
  return cryo::shim::RunShim(std::vector<std::string>(argv + 1, argv + argc));
}
