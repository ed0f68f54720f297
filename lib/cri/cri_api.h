// The one way to include the generated CRI v1 API in cryo.
//
// CRI's Signal enum has values named like the <signal.h> macros (SIGTERM, SIGKILL, ...). Those
// macros would break the generated header if <signal.h> came first, so they are parked while it
// is read. Afterwards the macros win again: refer to Signal values by number
// (runtime::v1::Signal(23)) or through Signal_Parse, never as runtime::v1::SIGTERM.
#pragma once

#define CRYO_CRI_PARK_SIGNALS                                                                     \
  _Pragma("push_macro(\"SIGABRT\")") _Pragma("push_macro(\"SIGALRM\")") _Pragma(                  \
      "push_macro(\"SIGBUS\")") _Pragma("push_macro(\"SIGCHLD\")")                                \
      _Pragma("push_macro(\"SIGCLD\")") _Pragma("push_macro(\"SIGCONT\")") _Pragma(               \
          "push_macro(\"SIGFPE\")") _Pragma("push_macro(\"SIGHUP\")")                             \
          _Pragma("push_macro(\"SIGILL\")") _Pragma("push_macro(\"SIGINT\")") _Pragma(            \
              "push_macro(\"SIGIO\")") _Pragma("push_macro(\"SIGIOT\")")                          \
              _Pragma("push_macro(\"SIGKILL\")") _Pragma("push_macro(\"SIGPIPE\")") _Pragma(      \
                  "push_macro(\"SIGPOLL\")") _Pragma("push_macro(\"SIGPROF\")")                   \
                  _Pragma("push_macro(\"SIGPWR\")") _Pragma("push_macro(\"SIGQUIT\")") _Pragma(   \
                      "push_macro(\"SIGSEGV\")") _Pragma("push_macro(\"SIGSTKFLT\")")             \
                      _Pragma("push_macro(\"SIGSTOP\")") _Pragma("push_macro(\"SIGSYS\")")        \
                          _Pragma("push_macro(\"SIGTERM\")") _Pragma("push_macro(\"SIGTRAP\")")   \
                              _Pragma("push_macro(\"SIGTSTP\")") _Pragma(                         \
                                  "push_macro(\"SIGTTIN\")") _Pragma("push_macro(\"SIGTTOU\")")   \
                                  _Pragma("push_macro(\"SIGURG\")")                               \
                                      _Pragma("push_macro(\"SIGUSR1\")")                          \
                                          _Pragma("push_macro(\"SIGUSR2\")")                      \
                                              _Pragma("push_macro(\"SIGVTALRM\")")                \
                                                  _Pragma("push_macro(\"SIGWINCH\")")             \
                                                      _Pragma("push_macro(\"SIGXCPU\")") _Pragma( \
                                                          "push_macro(\"SIGXFSZ\")")              \
                                                          _Pragma("push_macro(\"SIGRTMIN\")")     \
                                                              _Pragma("push_macro(\"SIGRTMAX\")")

CRYO_CRI_PARK_SIGNALS
#undef SIGABRT
#undef SIGALRM
#undef SIGBUS
#undef SIGCHLD
#undef SIGCLD
#undef SIGCONT
#undef SIGFPE
#undef SIGHUP
#undef SIGILL
#undef SIGINT
#undef SIGIO
#undef SIGIOT
#undef SIGKILL
#undef SIGPIPE
#undef SIGPOLL
#undef SIGPROF
#undef SIGPWR
#undef SIGQUIT
#undef SIGSEGV
#undef SIGSTKFLT
#undef SIGSTOP
#undef SIGSYS
#undef SIGTERM
#undef SIGTRAP
#undef SIGTSTP
#undef SIGTTIN
#undef SIGTTOU
#undef SIGURG
#undef SIGUSR1
#undef SIGUSR2
#undef SIGVTALRM
#undef SIGWINCH
#undef SIGXCPU
#undef SIGXFSZ
#undef SIGRTMIN
#undef SIGRTMAX

#include "runtime/v1/api.grpc.pb.h"  // IWYU pragma: export
#include "runtime/v1/api.pb.h"       // IWYU pragma: export

#pragma pop_macro("SIGABRT")
#pragma pop_macro("SIGALRM")
#pragma pop_macro("SIGBUS")
#pragma pop_macro("SIGCHLD")
#pragma pop_macro("SIGCLD")
#pragma pop_macro("SIGCONT")
#pragma pop_macro("SIGFPE")
#pragma pop_macro("SIGHUP")
#pragma pop_macro("SIGILL")
#pragma pop_macro("SIGINT")
#pragma pop_macro("SIGIO")
#pragma pop_macro("SIGIOT")
#pragma pop_macro("SIGKILL")
#pragma pop_macro("SIGPIPE")
#pragma pop_macro("SIGPOLL")
#pragma pop_macro("SIGPROF")
#pragma pop_macro("SIGPWR")
#pragma pop_macro("SIGQUIT")
#pragma pop_macro("SIGSEGV")
#pragma pop_macro("SIGSTKFLT")
#pragma pop_macro("SIGSTOP")
#pragma pop_macro("SIGSYS")
#pragma pop_macro("SIGTERM")
#pragma pop_macro("SIGTRAP")
#pragma pop_macro("SIGTSTP")
#pragma pop_macro("SIGTTIN")
#pragma pop_macro("SIGTTOU")
#pragma pop_macro("SIGURG")
#pragma pop_macro("SIGUSR1")
#pragma pop_macro("SIGUSR2")
#pragma pop_macro("SIGVTALRM")
#pragma pop_macro("SIGWINCH")
#pragma pop_macro("SIGXCPU")
#pragma pop_macro("SIGXFSZ")
#pragma pop_macro("SIGRTMIN")
#pragma pop_macro("SIGRTMAX")
#undef CRYO_CRI_PARK_SIGNALS
