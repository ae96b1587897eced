// fsdpp-train-faults: fsdpp-train that also carries out the faults FSDPP_FAULT_KILL,
// FSDPP_FAULT_NAN, FSDPP_FAULT_SAVE_DELAY_MS and FSDPP_FAULT_SAVE_FAIL ask for
// (fault_injection.h); the reliability tests start it in place of fsdpp-train
// (docs/faults.md#injecting-faults). Built with the tests only.
#include "fault_injection.h"
#include "train_cli.h"

int main(int argc, char** argv) {
  return fsdpp::tools::run_fsdpp_train(
      argc, argv, [] { return fsdpp::testing::fault_hooks(fsdpp::testing::FaultPlan::from_env()); });
}
