// kubectl-checkpoint: the kubectl plugin behind `kubectl checkpoint`. kubectl finds it on PATH
// by its name and runs it with the arguments that follow "checkpoint".

#include <iostream>
#include <string>
#include <vector>

#include "daemon/kubectl/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return cryo::kubectl::RunCli(args, std::cout, std::cerr);
}
