// The Logic-puzzle experiment script (scripts/kk_experiment.sh) end to end in its reduced size: data split, SFT,
// eval, GRPO from the SFT checkpoint, eval, results table and SVG curves; then PPO from the same SFT checkpoint
// (--sft-from). About 30 s on two CPU cores.
#include <sys/wait.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/jsonl.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;

struct Run {
  int status;  // exit status, -1 when the command did not exit normally
  std::string output;
};

Run run(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  const int status = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The same puzzle told differently: people in reverse order, operands of and / or / <=> reversed, another quiz text.
nlohmann::json isomorphic_statement(const nlohmann::json& s, int64_t n) {
  const std::string op = s.at(0).get<std::string>();
  if (op == "telling-truth" || op == "lying") return {op, n - 1 - s.at(1).get<int64_t>()};
  nlohmann::json operands = nlohmann::json::array();
  for (size_t i = 1; i < s.size(); ++i) operands.push_back(isomorphic_statement(s[i], n));
  if (op != "not" && op != "->") std::reverse(operands.begin(), operands.end());
  nlohmann::json node = {op};
  for (const auto& o : operands) node.push_back(o);
  return node;
}

nlohmann::json isomorphic_record(const nlohmann::json& record) {
  nlohmann::json copy = record;
  const auto& statements = record.at("statements");
  const int64_t n = static_cast<int64_t>(statements.size());
  copy["statements"] = nlohmann::json::array();
  for (int64_t j = 0; j < n; ++j) copy["statements"].push_back(isomorphic_statement(statements[n - 1 - j], n));
  copy["quiz"] = "Told differently: " + record.at("quiz").get<std::string>();
  return copy;
}

// Its runs on one thread (KK_THREADS; the script's default is two), as ctest runs two tests at once.
const std::string kScript =
    std::string("KK_THREADS=1 bash ") + ppo_test::paths().source_dir + "/scripts/kk_experiment.sh";

}  // namespace

TEST_CASE(
    "kk experiment script, reduced size: held-out split, SFT, GRPO (then PPO from the same SFT), eval tables and "
    "curves",
    "[cpu][kk][cli]") {
  ppo_test::TempDir tmp;
  const fs::path out = tmp.path / "experiment";  // not there yet: the script refuses a folder it did not write
  const Run r = run(kScript + " --quick --ppo " + ppo_test::paths().ppo_binary + " --out " + out.string());
  INFO(r.output);
  REQUIRE(r.status == 0);

  // Test puzzles are held out: no quiz text of the test set occurs in train or val (kk_prepare.py also checks the
  // logical structure).
  const auto train = ppo::read_jsonl(out / "data/train.jsonl"), val = ppo::read_jsonl(out / "data/val.jsonl"),
             test = ppo::read_jsonl(out / "data/test.jsonl");
  REQUIRE(!train.empty());
  REQUIRE(!test.empty());
  std::set<std::string> seen;
  for (const auto& rec : train) seen.insert(rec.at("quiz").get<std::string>());
  for (const auto& rec : val) seen.insert(rec.at("quiz").get<std::string>());
  for (const auto& rec : test) CHECK(seen.count(rec.at("quiz").get<std::string>()) == 0);
  // Short prompts for the character model, still opening the think block the reward counts.
  for (const auto& rec : test) {
    const std::string prompt = rec.at("prompt").get<std::string>();
    CHECK(prompt.size() < 400);
    CHECK(prompt.substr(prompt.size() - 7) == "<think>");
  }

  // Both evaluations print one row per number of people, and results.md puts them side by side.
  for (const char* eval : {"eval_sft.txt", "eval_rl.txt"}) {
    const std::string text = read_file(out / eval);
    CHECK(text.find("\n2 ") != std::string::npos);
    CHECK(text.find("\n3 ") != std::string::npos);
    CHECK(text.find("\nall ") != std::string::npos);
  }
  const std::string results = read_file(out / "results.md");
  for (const char* row : {"| 2 | ", "| 3 | ", "| all | ", "| mean reward |", "disjoint", "wall time (s): data",
                          "| people | pass@1 after SFT | pass@8 after SFT | pass@1 after SFT + GRPO |"})
    CHECK(results.find(row) != std::string::npos);
  // pass@1 and pass@8 (8 samples per test puzzle) of both checkpoints, by number of people.
  for (const char* pass : {"pass_sft.txt", "pass_rl.txt"}) {
    const std::string text = read_file(out / pass);
    CHECK(text.find("pass@1   pass@8") != std::string::npos);
    CHECK(text.find("\n3 ") != std::string::npos);
  }

  // GRPO ran its 2 steps from the SFT checkpoint; every curve is an SVG with at least one line.
  const std::string config = read_file(out / "rl/config.yaml");
  CHECK(config.find("adv_estimator: \"grpo\"") != std::string::npos);
  CHECK(config.find("sft/checkpoints/global_step_") != std::string::npos);
  int steps = 0;
  for (const auto& m : ppo::read_jsonl(out / "rl/metrics.jsonl")) steps += m.contains("critic/score/mean");
  CHECK(steps == 2);
  for (const char* svg : {"sft_loss.svg", "sft_val_acc.svg", "rl_score.svg", "rl_acc.svg"}) {
    const std::string text = read_file(out / "plots" / svg);
    INFO(svg);
    CHECK(text.rfind("<svg", 0) == 0);
    CHECK(text.find("<polyline") != std::string::npos);
  }

  // PPO with a critic from the same SFT checkpoint: data and SFT are reused, not redone.
  const fs::path ppo_out = tmp.path / "experiment_ppo";
  const Run p = run(kScript + " --quick --algo ppo --sft-from " + out.string() + " --ppo " +
                    ppo_test::paths().ppo_binary + " --out " + ppo_out.string());
  INFO(p.output);
  REQUIRE(p.status == 0);
  CHECK(p.output.find("== SFT warm start") == std::string::npos);
  CHECK(read_file(ppo_out / "data/test.jsonl") == read_file(out / "data/test.jsonl"));
  CHECK(read_file(ppo_out / "eval_sft.txt") == read_file(out / "eval_sft.txt"));
  const std::string ppo_config = read_file(ppo_out / "rl/config.yaml");
  CHECK(ppo_config.find("adv_estimator: \"gae\"") != std::string::npos);
  CHECK(ppo_config.find(out.string() + "/sft/checkpoints/global_step_") != std::string::npos);
  CHECK(read_file(ppo_out / "results.md").find("accuracy after SFT + PPO") != std::string::npos);
  // Reusing the folder being replaced, or one this script did not write, is refused.
  CHECK(run(kScript + " --quick --sft-from " + out.string() + " --ppo " + ppo_test::paths().ppo_binary + " --out " +
            out.string())
            .status == 2);
  CHECK(run(kScript + " --quick --sft-from " + tmp.path.string() + " --ppo " + ppo_test::paths().ppo_binary +
            " --out " + ppo_out.string())
            .status == 2);
}

TEST_CASE("kk_prepare.py drops every training puzzle that is a test puzzle, and --trace answers reason to the solution",
          "[cpu][kk][cli]") {
  ppo_test::TempDir tmp;
  const fs::path dir = tmp.path;
  const std::string d = dir.string();
  for (const std::string& args : {"--people 2-3 --count 20 --seed 5 --out " + d + "/a.jsonl",
                                  "--people 3 --count 10 --seed 6 --out " + d + "/b.jsonl"}) {
    REQUIRE(run(ppo_test::paths().ppo_binary + " data kk " + args).status == 0);
  }
  {
    std::ofstream copy(dir / "c.jsonl");
    for (const auto& record : ppo::read_jsonl(dir / "a.jsonl")) copy << isomorphic_record(record).dump() << "\n";
  }
  // Training on the test and validation files themselves, or on the test puzzles told differently, leaves nothing.
  const Run r =
      run("python3 " + ppo_test::paths().source_dir + "/scripts/kk_prepare.py --test " + d + "/a.jsonl --val " + d +
          "/b.jsonl --train " + d + "/a.jsonl " + d + "/b.jsonl " + d + "/c.jsonl --out " + d + "/split");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("train      0 puzzles") != std::string::npos);
  CHECK(ppo::read_jsonl(dir / "split/train.jsonl").empty());

  // --trace: the think block lists every assignment ("KN:tf ok", statement i true or false under it), and the one
  // marked ok is the solution.
  const Run t = run("python3 " + ppo_test::paths().source_dir + "/scripts/kk_prepare.py --trace --test " + d +
                    "/a.jsonl --val " + d + "/b.jsonl --train " + d + "/b.jsonl --out " + d + "/trace");
  INFO(t.output);
  REQUIRE(t.status == 0);
  const auto traced = ppo::read_jsonl(dir / "trace/test.jsonl");
  REQUIRE(traced.size() >= 10);
  for (const auto& rec : traced) {
    const std::string answer = rec.at("answer").get<std::string>();
    INFO(answer);
    std::string solution;
    for (const auto& knight : rec.at("solution")) solution += knight.get<bool>() ? "K" : "N";
    std::vector<std::string> ok_cases;
    size_t cases = 0;
    std::istringstream words(answer.substr(0, answer.find("</think>")));
    std::string previous, word;
    while (words >> word) {
      if (word == "ok" || word == "no") ++cases;
      if (word == "ok") ok_cases.push_back(previous.substr(0, previous.find(':')));
      previous = word;
    }
    CHECK(cases == (size_t{1} << solution.size()));
    CHECK(ok_cases == std::vector<std::string>{solution});
    CHECK(answer.find("</think> <answer> " + rec.at("solution_text_format").get<std::string>() + " </answer>") !=
          std::string::npos);
  }

  // --trace local: candidates in order ("1K2N:"), each speaker's statement evaluated atom by atom, "x" ending a
  // candidate; the last candidate is the solution, marked "ok.", and every candidate before it has an "x".
  const Run l = run("python3 " + ppo_test::paths().source_dir + "/scripts/kk_prepare.py --trace local --test " + d +
                    "/a.jsonl --val " + d + "/b.jsonl --train " + d + "/b.jsonl --out " + d + "/local");
  INFO(l.output);
  REQUIRE(l.status == 0);
  for (const auto& rec : ppo::read_jsonl(dir / "local/test.jsonl")) {
    const std::string answer = rec.at("answer").get<std::string>();
    INFO(answer);
    std::string header;  // the solution as the trace writes a candidate: "1K2N3K:"
    int person = 0;
    for (const auto& knight : rec.at("solution")) header += std::to_string(++person) + (knight.get<bool>() ? "K" : "N");
    const std::string think = answer.substr(0, answer.find("</think>"));
    const size_t last = think.rfind(" " + header + ":");
    REQUIRE(last != std::string::npos);
    CHECK(think.find(" ok.", last) != std::string::npos);
    CHECK(think.find(" ok.") == think.rfind(" ok."));  // one candidate is marked ok, the last one
    CHECK(think.find(" x", last) == std::string::npos);
    size_t candidates = 0;
    for (size_t at = think.find(':', think.find('.')); at != std::string::npos; at = think.find(':', at + 1))
      ++candidates;
    size_t rejected = 0;
    for (size_t at = think.find(" x"); at != std::string::npos; at = think.find(" x", at + 1)) ++rejected;
    CHECK(rejected + 1 == candidates);
  }
}
