#include "ampctl/core/error.h"

namespace ampctl {

int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage:
    case ErrorKind::config:
    case ErrorKind::input:
    case ErrorKind::invalid_argument:
      return 2;
    case ErrorKind::interrupted:
      return 130;
    case ErrorKind::state:
    case ErrorKind::runtime:
    case ErrorKind::cuda:
      return 1;
  }
  return 1;
}

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage:
      return "usage";
    case ErrorKind::config:
      return "config";
    case ErrorKind::input:
      return "input";
    case ErrorKind::invalid_argument:
      return "invalid_argument";
    case ErrorKind::state:
      return "state";
    case ErrorKind::runtime:
      return "runtime";
    case ErrorKind::cuda:
      return "cuda";
    case ErrorKind::interrupted:
      return "interrupted";
  }
  return "unknown";
}

}  // namespace ampctl
