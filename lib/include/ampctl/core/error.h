// ampctl::Error is the one exception type the library throws. Its kind decides the process exit
// code (docs/reference.md, "Exit codes"); only apps/ catches it and prints "error: ..." plus an
// optional hint.
#pragma once

#include <stdexcept>
#include <string>

namespace ampctl {

enum class ErrorKind {
  usage,             // bad flag or command line (exit 2)
  config,            // invalid configuration value or YAML (exit 2)
  input,             // corrupt or incompatible checkpoint / data file / state_dict (exit 2)
  invalid_argument,  // a library call with an argument outside its domain (exit 2)
  state,    // API used in the wrong order, e.g. unscale_() twice (PyTorch's RuntimeError; exit 1)
  runtime,  // I/O failure, divergence, anything at run time (exit 1)
  cuda,     // a CUDA or cuBLAS call failed, or no usable GPU (exit 1)
  interrupted,  // stopped by a signal after a checkpoint (exit 130/143, chosen by the app)
};

int exit_code(ErrorKind kind);
const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string hint = {})
      : std::runtime_error(std::move(message)), m_kind(kind), m_hint(std::move(hint)) {}

  ErrorKind kind() const { return m_kind; }
  const std::string& hint() const { return m_hint; }
  int exit_code() const { return ampctl::exit_code(m_kind); }

 private:
  ErrorKind m_kind;
  std::string m_hint;
};

}  // namespace ampctl
