#pragma once
// Schedules as CSV, PyTorch's format (torch.distributed.pipelining `_dump_csv` / `_load_csv`):
// one row per rank, rank 0 first, one action per cell in to_string form, no header:
//
//   0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,...
//   1RECV_F0,1F0,1B0,1SEND_B0,...
//
// Empty cells and spaces around a cell are skipped. Reading infers the rest: p = the number of
// rows, the stage count and m from the largest stage and microbatch, each stage's rank from the
// row that holds it (a stage in two rows, or a stage that appears in no row, is an error).

#include <iosfwd>
#include <string>

#include "fsdpp/pipeline/schedule.h"

namespace fsdpp::pipeline {

void write_csv(const PipelineSchedule& schedule, std::ostream& out);
std::string to_csv(const PipelineSchedule& schedule);
void save_csv(const PipelineSchedule& schedule, const std::string& path);

// name is given to the result (the CSV carries none).
PipelineSchedule read_csv(std::istream& in, const std::string& name = "csv");
PipelineSchedule from_csv(const std::string& text, const std::string& name = "csv");
PipelineSchedule load_csv(const std::string& path);

}  // namespace fsdpp::pipeline
