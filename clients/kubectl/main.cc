// kubectl-cryo: the kubectl plugin behind `kubectl cryo`. kubectl finds it on PATH by its name
// and runs it with the arguments that follow "cryo". Installed under a second name,
// kubectl-checkpoint, it serves `kubectl checkpoint POD` too.

#include <iostream>
#include <string>
#include <vector>

#include "clients/kubectl/cli.h"

int main(int argc, char** argv) {
  std::string name = argc > 0 ? argv[0] : cryo::kubectl::kPluginName;
  if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  std::vector<std::string> args(argv + 1, argv + argc);
  return cryo::kubectl::RunCli(args, name, std::cout, std::cerr);
}
