// fsdpp-train CONFIG.yaml [key.path=value ...]: config-driven training of a Llama-style model.
//   fsdpp-run --nproc-per-node 2 fsdpp-train configs/default.yaml training.max_steps=100
#include "train_cli.h"

int main(int argc, char** argv) { return fsdpp::tools::run_fsdpp_train(argc, argv); }
