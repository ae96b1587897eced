#pragma once
// Private to src/dist: c10's C++ stack traces out of every message a rank prints.
//
// c10::Error's what() carries the stack of the throw: 38 to 406 "frame #" lines in c10d's
// errors and in the warnings its TCPStore client logs for each call on a connection that closed
// (rank 0, the store's host, gone). A rank's one-line error, and fsdpp-run's verdict after it,
// drowned in them. PyTorch shows them to Python users only with TORCH_SHOW_CPP_STACKTRACES=1;
// fsdpp's processes do the same, by giving c10 a stack-trace fetcher that returns nothing (c10's
// fetcher is process-wide, as std::terminate's handler is). init_from_env calls it.

namespace fsdpp::dist::detail {

void hide_cpp_stack_traces_unless_asked();

}  // namespace fsdpp::dist::detail
