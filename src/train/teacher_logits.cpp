// write_teacher_cache (teacher_logits.h): the run's data prepared as training prepares it, the
// teacher built from the distillation: section, and the cache written over the training windows
// (fsdpp/distill/teacher_cache_writer.h).
#include "fsdpp/train/teacher_logits.h"

#include <chrono>

#include "fsdpp/common/error.h"
#include "fsdpp/dist/agree.h"
#include "phases.h"

namespace fs = std::filesystem;

namespace fsdpp::train {

distill::TeacherCacheSummary write_teacher_cache(TrainConfig cfg, std::shared_ptr<dist::World> world,
                                                 const distill::TeacherCacheOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  FSDPP_CHECK_AS(ConfigError, !cfg.distillation.teacher.empty(),
                 "[teacher-logits] the config names no distillation.teacher; expected the "
                 "teacher's directory (distillation.teacher=DIR)");
  o.validate();
  TrainerHooks no_hooks;
  const detail::LanguageModels student;  // the model: and data: sections (run_model.h)
  detail::TrainSession s(cfg, world, no_hooks, student);
  detail::choose_start(s);  // model.init_from's tokenizer, the cache directory
  dist::agree_on_failure(*world->group(), "creating data.cache_dir", [&] {
    if (s.lead) fs::create_directories(s.cache_dir);
  });
  student.prepare_data(s);  // the student's training split, windows and tokenizer
  const int64_t vocab = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : s.tokenizer->vocab_size();
  FSDPP_CHECK_AS(ConfigError, o.top_k <= vocab,
                 "[teacher-logits] --top-k {} is larger than the vocabulary ({} tokens)", o.top_k,
                 vocab);
  distill::Teacher teacher(cfg.distillation, cfg.distill_run(vocab), *world);
  s.say("[teacher-logits] teacher " + teacher.describe());
  auto& sampler = *s.sampler;
  const distill::CacheWindows windows{
      .count = sampler.num_windows(), .seq_len = cfg.data.seq_len,
      .inputs = [&sampler](const std::vector<int64_t>& starts) {
        return sampler.load_batch(starts).inputs;
      }};
  auto out = distill::write_teacher_cache(teacher, windows, cfg.training.per_device_train_batch_size,
                                          *world, o, [&s](const std::string& line) { s.say(line); });
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace fsdpp::train
