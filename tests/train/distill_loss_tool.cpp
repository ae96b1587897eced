// fsdpp's side of tests/train/distill_loss_torch.py:
//
//   fsdpp_distill_loss_tool IN.safetensors OUT.safetensors CASE...
//
// IN holds `student` and `teacher` logits (..., V) and `labels` (...) int64. Each CASE is
// "type,beta,temperature,top_k,kd_ratio[,chunk[,sparse_k]]" (type as the config names it:
// forward_kl, reverse_kl, generalized_jsd); for the i-th, OUT gets `kd.<i>` (distillation_loss),
// `ce.<i>`, `loss.<i>` (distillation_objective) and `grad.<i>`, the gradient of loss.<i> with
// respect to the student's logits. chunk > 0: chunked_distillation_objective with chunks of that
// many positions instead; sparse_k > 0 too: against the teacher's sparse_k most likely tokens
// and their log-probabilities (what an offline teacher cache stores) rather than its logits.
#include <torch/torch.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "fsdpp/state/safetensors.h"
#include "fsdpp/distill/chunked_distill_loss.h"
#include "fsdpp/distill/distill_loss.h"

using namespace fsdpp;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors CASE...\n", argv[0]);
    return 2;
  }
  try {
    const auto in = state::SafetensorsFile::open(argv[1]);
    const auto student = in.get("student"), teacher = in.get("teacher"), labels = in.get("labels");
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (int i = 3; i < argc; ++i) {
      std::stringstream spec(argv[i]);
      std::vector<std::string> f;
      for (std::string part; std::getline(spec, part, ',');) f.push_back(part);
      if (f.size() < 5 || f.size() > 7) throw std::runtime_error(std::string("bad case ") + argv[i]);
      distill::DistillLossOptions o;
      o.type = f[0];
      o.beta = std::stod(f[1]);
      o.temperature = std::stod(f[2]);
      o.top_k = std::stoll(f[3]);
      const int64_t chunk = f.size() > 5 ? std::stoll(f[5]) : 0;
      const int64_t sparse_k = f.size() > 6 ? std::stoll(f[6]) : 0;
      auto s = student.clone().requires_grad_(true);
      distill::TeacherTargets t{.logits = teacher};
      if (sparse_k > 0) {
        auto [values, ids] = teacher.log_softmax(-1).topk(sparse_k, -1);
        t = {.values = values, .ids = ids};
      }
      auto parts = chunk > 0 ? distill::chunked_distillation_objective(s, t, labels, {}, o,
                                                                     std::stod(f[4]), chunk)
                             : distill::distillation_objective(s, teacher, labels, o, std::stod(f[4]));
      parts.loss.backward();
      const auto n = std::to_string(i - 3);
      out.emplace_back("kd." + n, parts.kd.detach());
      out.emplace_back("ce." + n, parts.ce.detach());
      out.emplace_back("loss." + n, parts.loss.detach());
      out.emplace_back("grad." + n, s.grad());
    }
    state::save_safetensors(argv[2], out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
