// recover, verify, audit: the maintenance side.
#include <iostream>

#include "cli/commands.h"

namespace fencefs::cli {

int cmd_recover(const Args&) {
  fail("recover: not implemented yet");
  return 2;
}
int cmd_verify(const Args&) {
  fail("verify: not implemented yet");
  return 2;
}
int cmd_audit(const Args&) {
  fail("audit: not implemented yet");
  return 2;
}

}  // namespace fencefs::cli
