// On-policy distillation's teacher (distillation.*): where its model comes from, and the check that it reads the
// student's token ids as the student does. Its log-probs are computed by a frozen Actor (workers/actor.h), as the
// reference's are; the signals it gives are rl/distillation.h's.
#pragma once

#include <memory>
#include <string>

#include "common/config.h"
#include "text/tokenizer.h"

namespace ppo {

// The config the teacher is built from (Actor::reference): `config` with the teacher's model. Its
// distillation.teacher.model.path is a Hugging Face folder (config.json gives the shape, its tokenizer.json the
// tokenizer) or a ppo.cpp checkpoint (a global_step_N folder: the run's config.yaml two folders up gives the shape,
// the tokenizer and the LoRA settings, its actor weights the values). The teacher waits where
// distillation.teacher.offload says, as the reference waits where ref.offload says. A folder that is neither, or a
// shape validate_model_config refuses, is a UsageError naming the key and the folder.
std::unique_ptr<Config> teacher_config(const Config& config);

// UsageError naming both sources unless `teacher` reads ids as `student` does: the same vocabulary (each id's
// token, special tokens included) and the same pad, bos and eos ids.
void check_teacher_tokenizer(const Tokenizer& student, const std::string& student_source, const Tokenizer& teacher,
                             const std::string& teacher_source);
// UsageError unless the teacher's model scores every id the student's can sample: teacher_vocab >= student_vocab
// (the models' vocabulary rows); and, under a top-k loss mode (`topk` > 0), unless the student has topk ids.
void check_teacher_vocab(int64_t student_vocab, int64_t teacher_vocab, int64_t topk);

}  // namespace ppo
