#pragma once
// fsdpp-train's command line as a function, so that a second executable can run the same tool
// with trainer hooks installed (the reliability tests' fsdpp-train-faults, which injects faults
// through them; tests/support/fault_injection.h).

#include <functional>

#include "fsdpp/train/hooks.h"

namespace fsdpp::tools {

// fsdpp-train CONFIG.yaml [key.path=value ...]: reads the config, joins the job (dist's
// environment), trains. `make_hooks`, when given, is called once the job is joined and its
// hooks go to the Trainer. Returns the exit code: 0 done, 2 a configuration error (or the usage
// without arguments), 1 any other error, 128 + N when signal N stopped the run.
int run_fsdpp_train(int argc, char** argv,
                    const std::function<train::TrainerHooks()>& make_hooks = {});

}  // namespace fsdpp::tools
