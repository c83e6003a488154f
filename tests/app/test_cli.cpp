// The `ppo` command end to end: exit statuses, one `error:` line, and the small subcommands.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/blas_kernels.h"
#include "tests/app/run_ppo.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"

using ppo_test::count_lines;
using ppo_test::Result;
using ppo_test::run_ppo;

TEST_CASE("ppo config prints every section and applies overrides", "[cpu][cli]") {
  Result r = run_ppo(
      "config actor.ppo_mini_batch_size=64 data.train_batch_size=64 'actor.optim.betas=[0.9,0.99]' "
      "'trainer.logger=[console, tensorboard]'");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("betas: [0.9, 0.99]"));  // a list with a comma and no space stays one value
  CHECK_THAT(r.output, Catch::Contains("logger: [\"console\", \"tensorboard\"]"));
  for (const char* section :
       {"data:", "model:", "actor:", "rollout:", "ref:", "critic:", "algorithm:", "trainer:", "parallel:"})
    CHECK_THAT(r.output, Catch::Contains(std::string("\n") + section) || Catch::StartsWith(section));
  CHECK_THAT(r.output, Catch::Contains("  ppo_mini_batch_size: 64"));
}

TEST_CASE("bad input exits 2 with one error line", "[cpu][cli]") {
  ppo_test::TempDir tmp;
  std::ofstream(tmp.sub("bad.yaml")) << "data:\n  seed: [1\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"config actor.ppo_mini_batchsize=64", "did you mean actor.ppo_mini_batch_size?"},
      {"config data.train_batch_size=abc", "data.train_batch_size: 'abc' is not an integer"},
      {"config --config " + tmp.sub("bad.yaml"), tmp.sub("bad.yaml") + ":"},
      {"config --config " + tmp.sub("missing.yaml"), tmp.sub("missing.yaml")},
      {"frobnicate", "unknown subcommand 'frobnicate'"},
      {"config --no-such-flag", "no-such-flag"},
      {"train data.train_batch_size=6", "actor.ppo_mini_batch_size=8 is larger than data.train_batch_size=6"},
      {"score --task kk --data " + tmp.sub("missing.jsonl") + " --responses " + tmp.sub("x.jsonl"), "missing.jsonl"},
      {"eval --checkpoint " + tmp.sub("no_checkpoint"), tmp.sub("no_checkpoint") + "/actor.pt"},
      {"train data.val_size=0", "data.val_size must be at least 1"},
  };
  for (const auto& [args, expected] : cases) {
    INFO("ppo " << args << "\n" << run_ppo(args).output);
    Result r = run_ppo(args);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output, "error: ") == 1);
    CHECK_THAT(r.output, Catch::Contains(expected));
  }
}

TEST_CASE("ppo generate prints responses with rewards", "[cpu][cli]") {
  Result r = run_ppo("generate --config " + ppo_test::paths().source_dir + "/configs/regression_tiny.yaml --count 3");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(count_lines(r.output, "response: ") == 3 * 4);  // rollout.n = 4
  CHECK(count_lines(r.output, "reward: ") == 3 * 4);
}

TEST_CASE("ppo data and ppo score round trip a K&K file", "[cpu][cli]") {
  ppo_test::TempDir tmp;
  Result d = run_ppo("data kk --people 2 --count 3 --seed 5 --out " + tmp.sub("kk.jsonl"));
  REQUIRE(d.status == 0);
  Result again = run_ppo("data kk --people 2 --count 3 --seed 5 --out " + tmp.sub("kk2.jsonl"));
  REQUIRE(again.status == 0);
  std::ifstream a(tmp.sub("kk.jsonl")), b(tmp.sub("kk2.jsonl"));
  std::string ta((std::istreambuf_iterator<char>(a)), {}), tb((std::istreambuf_iterator<char>(b)), {});
  CHECK(ta == tb);  // same seed, same file
  std::ofstream(tmp.sub("r.jsonl")) << "{\"response\": \"no tags\"}\n{\"response\": \"x\"}\n{\"response\": \"\"}\n";
  Result s = run_ppo("score --task kk --data " + tmp.sub("kk.jsonl") + " --responses " + tmp.sub("r.jsonl"));
  INFO(s.output);
  REQUIRE(s.status == 0);
  CHECK_THAT(s.output, Catch::Contains("accuracy 0.0000  mean score -3.0000"));
}

// Two hand-written puzzles in the public dataset's format (extra fields; "statements" absent in one, a Python tuple
// string in the other), each answered twice.
TEST_CASE("ppo score: hand-made K&K puzzles and responses give the Logic-RL scores and accuracy", "[cpu][cli]") {
  const std::string zoey =
      R"j({"quiz": "A very special island is inhabited only by knights and knaves. Knights always tell the truth, )j"
      R"j(and knaves always lie. You meet 2 inhabitants: Zoey, and Oliver. Zoey commented, \"Oliver is a knight\". )j"
      R"j(Oliver said, \"Zoey is a knight if and only if Oliver is a knave\". So who is a knight and who is a knave?", )j"
      R"j("names": ["Zoey", "Oliver"], "solution": [false, false], "solution_text": "Zoey is a knave, and Oliver )j"
      R"j(is a knave.", "solution_text_format": "(1) Zoey is a knave\n(2) Oliver is a knave", "cot_head": "ignored"})j";
  const std::string ella =
      R"j({"quiz": "A very special island is inhabited only by knights and knaves. Knights always tell the truth, )j"
      R"j(and knaves always lie. You meet 2 inhabitants: Ella, and Liam. Ella said, \"Liam is a knave\". Liam said, )j"
      R"j(\"Ella is a knight and Liam is a knight\". So who is a knight and who is a knave?", "names": ["Ella", )j"
      R"j("Liam"], "solution": [true, false], "solution_text": "Ella is a knight, and Liam is a knave.", )j"
      R"j("solution_text_format": "(1) Ella is a knight\n(2) Liam is a knave", "statements": "(('lying', 1), )j"
      R"j(('and', ('telling-truth', 0), ('telling-truth', 1)))", "index": 7})j";
  ppo_test::TempDir tmp;
  std::ofstream(tmp.sub("hand_kk.jsonl")) << zoey << "\n" << ella << "\n" << zoey << "\n" << ella << "\n";
  // The prompt opens <think>, so a response carries only the closing tag (Logic-RL counts the prompt's).
  const std::vector<std::string> responses = {
      // correct: +1 format, +2 answer
      R"j({"response": " Oliver's claim is false. </think> <answer> (1) Zoey is a knave\n(2) Oliver is a knave </answer>"})j",
      // correct, names in another order: +3
      R"j({"response": " </think> <answer> Liam is a knave, Ella is a knight </answer>"})j",
      // one role wrong: +1 - 1.5
      R"j({"response": " </think> <answer> (1) Zoey is a knight\n(2) Oliver is a knave </answer>"})j",
      // </think> twice: format -1, answer -2 although it is right
      R"j({"response": " </think> </think> <answer> (1) Ella is a knight\n(2) Liam is a knave </answer>"})j"};
  {
    std::ofstream out(tmp.sub("hand_r.jsonl"));
    for (const auto& line : responses) out << line << "\n";
  }
  Result s = run_ppo("score --task kk --data " + tmp.sub("hand_kk.jsonl") + " --responses " + tmp.sub("hand_r.jsonl"));
  INFO(s.output);
  REQUIRE(s.status == 0);
  CHECK_THAT(s.output, Catch::Contains("0\tscore +3.00\tcorrect"));
  CHECK_THAT(s.output, Catch::Contains("1\tscore +3.00\tcorrect"));
  CHECK_THAT(s.output, Catch::Contains("2\tscore -0.50"));
  CHECK_THAT(s.output, Catch::Contains("3\tscore -3.00"));
  CHECK_THAT(s.output, Catch::Contains("accuracy 0.5000  mean score 0.6250  format ok 0.7500  (4 responses)"));

  // Responses from a system whose prompt did not open <think> carry their own: auto reads them so (a right one scores
  // +3, not -3 for two <think> tags), and --prompt-opens-think false reads every response so.
  {
    std::ofstream out(tmp.sub("own_think.jsonl"));
    out << R"j({"response": "<think> Oliver lies. </think> <answer> (1) Zoey is a knave\n(2) Oliver is a knave </answer>"})j"
        << "\n"
        << R"j({"response": " <think> </think> <answer> Ella is a knight, Liam is a knight </answer>"})j"
        << "\n"
        << R"j({"response": "<think></think><answer> (1) Zoey is a knave (2) Oliver is a knave </answer>"})j"
        << "\n"
        << R"j({"response": " </think> <answer> Ella is a knight, Liam is a knave </answer>"})j"
        << "\n";
  }
  const std::string own =
      "score --task kk --data " + tmp.sub("hand_kk.jsonl") + " --responses " + tmp.sub("own_think.jsonl");
  Result a = run_ppo(own);
  INFO(a.output);
  REQUIRE(a.status == 0);
  CHECK_THAT(a.output, Catch::Contains("0\tscore +3.00\tcorrect"));
  CHECK_THAT(a.output, Catch::Contains("1\tscore -0.50"));
  CHECK_THAT(a.output, Catch::Contains("2\tscore +3.00\tcorrect"));
  CHECK_THAT(a.output, Catch::Contains("3\tscore +3.00\tcorrect"));  // no <think> of its own: the prompt's counts
  Result forced = run_ppo(own + " --prompt-opens-think false");
  INFO(forced.output);
  REQUIRE(forced.status == 0);
  CHECK_THAT(forced.output, Catch::Contains("0\tscore +3.00\tcorrect"));
  CHECK_THAT(forced.output, Catch::Contains("3\tscore -3.00"));  // no opening tag at all
  Result opened = run_ppo(own + " --prompt-opens-think true");
  INFO(opened.output);
  CHECK_THAT(opened.output, Catch::Contains("0\tscore -3.00"));  // two opening tags
  Result bad = run_ppo(own + " --prompt-opens-think maybe");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output,
             Catch::Contains("error: --prompt-opens-think: unknown value 'maybe'; valid: auto, true, false"));
}

TEST_CASE("ppo sft writes a checkpoint that eval and train load", "[cpu][cli]") {
  ppo_test::TempDir tmp;
  const std::string cfg = "--config " + ppo_test::paths().source_dir +
                          "/configs/regression_tiny.yaml actor.ppo_micro_batch_size_per_gpu=8 ";
  Result sft = run_ppo("sft " + cfg + "trainer.output_dir=" + tmp.sub("sft") +
                       " trainer.total_training_steps=100 trainer.test_freq=0 "
                       "actor.optim.lr=0.003 trainer.resume_mode=disable");
  INFO(sft.output);
  REQUIRE(sft.status == 0);
  const std::string ckpt = tmp.sub("sft") + "/checkpoints/global_step_100";
  Result eval = run_ppo("eval " + cfg + "--checkpoint " + ckpt);
  INFO(eval.output);
  REQUIRE(eval.status == 0);
  // Measured: 100 SFT steps reach accuracy 1.000 on the 32 validation prompts; require most of it.
  size_t all = eval.output.find("\nall ");
  REQUIRE(all != std::string::npos);
  std::istringstream row(eval.output.substr(all + 1));
  std::string label;
  int prompts = 0;
  double accuracy = -1;
  row >> label >> prompts >> accuracy;
  CHECK(prompts == 32);
  CHECK(accuracy >= 0.8);
  // Validation decodes each batch of 32 in one generation; the last progress line counts every response.
  CHECK_THAT(eval.output, Catch::Contains("eval: 32/32 responses"));
  // Bounded to 3 sequences at a time, in batches of 8 prompts, the greedy table is the same.
  Result bounded = run_ppo("eval " + cfg + "--checkpoint " + ckpt + " rollout.max_num_seqs=3 data.val_batch_size=8");
  INFO(bounded.output);
  REQUIRE(bounded.status == 0);
  CHECK(bounded.output.substr(bounded.output.find("difficulty")) == eval.output.substr(eval.output.find("difficulty")));
  Result train =
      run_ppo("train --config " + ppo_test::paths().source_dir +
              "/configs/regression_tiny.yaml actor.init_checkpoint=" + ckpt + " trainer.output_dir=" + tmp.sub("rl") +
              " trainer.total_training_steps=3 trainer.test_freq=0 "
              "trainer.val_before_train=false trainer.resume_mode=disable");
  INFO(train.output);
  REQUIRE(train.status == 0);
  CHECK_THAT(train.output, Catch::Contains("step 3/3"));
}

TEST_CASE("ppo sets OpenMP's spin count unless the environment already says how threads wait", "[cpu][cli]") {
  // libgomp prints its settings as it loads with OMP_DISPLAY_ENV (LibTorch's intra-op threads are libgomp's).
  const auto settings = [](const std::string& environment) {
    return run_ppo("config", 0, "", "-u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose " + environment)
        .output;
  };
  const auto spin_count = [](const std::string& output) {
    const std::string key = "GOMP_SPINCOUNT = '";
    const size_t at = output.find(key);
    if (at == std::string::npos) return std::string("(not shown)");
    return output.substr(at + key.size(), output.find('\'', at + key.size()) - at - key.size());
  };
  CHECK(spin_count(settings("")) == "1000");
  CHECK(spin_count(settings("GOMP_SPINCOUNT=4321")) == "4321");
  const std::string passive = settings("OMP_WAIT_POLICY=passive");
  CHECK(spin_count(passive) != "1000");
  CHECK(passive.find("OMP_WAIT_POLICY = 'PASSIVE'") != std::string::npos);
  // Under Valgrind (its vgpreload_*.so in LD_PRELOAD) there is no re-execution, which Valgrind would not follow: the
  // default stays. A preload that does not exist is skipped by the loader with a warning, and names Valgrind's here.
  const std::string valgrind = settings("LD_PRELOAD=/nonexistent/vgpreload_core-amd64-linux.so");
  CHECK(spin_count(valgrind) == "300000");
  CHECK(spin_count(settings("LD_PRELOAD=/nonexistent/libprofiler.so")) == "1000");
}

TEST_CASE("ppo warns in one line when OpenBLAS runs kernels older than the CPU's, naming the ones to choose",
          "[cpu][cli]") {
  CHECK(ppo::blas_kernels_warning("Prescott", "SkylakeX").find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
  CHECK(ppo::blas_kernels_warning("SANDYBRIDGE", "Haswell").find("OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(ppo::blas_kernels_warning("Haswell", "SkylakeX").empty());  // AVX2 kernels: not worth a line
  CHECK(ppo::blas_kernels_warning("Prescott", "").empty());         // the CPU has nothing better
  CHECK(ppo::blas_kernels_warning("", "SkylakeX").empty());         // no OpenBLAS
  // The program itself, with OpenBLAS made to choose (OPENBLAS_CORETYPE). Debian's LibTorch 1.13 multiplies through
  // OpenBLAS; PyPI's 2.x through MKL, which ignores the variable: no line either way.
  const auto warnings = [](const std::string& core) {
    const Result r = run_ppo("generate " + ppo_test::kTinyOneThread + "--count 1", 0, "", "OPENBLAS_CORETYPE=" + core);
    INFO(r.output);
    CHECK(r.status == 0);
    return count_lines(r.output, "warning: OpenBLAS runs its " + core + " kernels");
  };
  const bool openblas = !ppo::openblas_core().empty(), newer = !ppo::openblas_kernels_for_cpu().empty();
  CHECK(warnings("Prescott") == (openblas && newer ? 1 : 0));
  CHECK(warnings(newer ? ppo::openblas_kernels_for_cpu() : "Haswell") == 0);
  if (!openblas) WARN("this build's BLAS is not OpenBLAS: the warning cannot apply");
}
