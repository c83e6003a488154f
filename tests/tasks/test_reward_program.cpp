// The external reward program client: the two examples, the protocol, and every failure it must report.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "tasks/reward_program.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "tests/usage_error.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kExamples = ppo_test::paths().source_dir + "/examples/reward/";

std::string quoted(const std::string& path) {
  return "'" + path + "'";
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using ppo_test::usage_error_message;

// A reward program run by a script: each request carries the steps it performs, in order:
// ["write", text] (then flush), ["sleep", seconds], ["exit", status], ["kill", signal].
const char* kScriptedProgram = R"(import json, os, sys, time
for line in sys.stdin:
    for op, arg in json.loads(line)["do"]:
        if op == "write":
            sys.stdout.write(arg)
            sys.stdout.flush()
        elif op == "sleep":
            time.sleep(arg)
        elif op == "exit":
            sys.exit(arg)
        elif op == "kill":
            os.kill(os.getpid(), arg)
)";

struct Scripted {
  ppo_test::TempDir dir{"reward_program"};
  std::string command;
  Scripted() {
    std::ofstream(dir.sub("scripted.py")) << kScriptedProgram;
    command = "exec python3 " + quoted(dir.sub("scripted.py"));
  }
};

// One step, ["write", "..."]: an explicit array, as json's brace initialization would make {{"write", x}} an object.
json step(const std::string& op, const json& arg) {
  return json::array({op, arg});
}
json steps(const std::vector<json>& list) {
  return {{"do", list}};
}
json says(const std::string& line) {  // answers with `line`
  return steps({step("write", line + "\n")});
}

json gsm8k_request(const std::string& response, const json& ground_truth) {
  return {{"data_source", "openai/gsm8k"},
          {"prompt", "Q: how many?"},
          {"response", response},
          {"ground_truth", ground_truth},
          {"extra_info", {{"index", 0}}}};
}

// The pipe inodes ("pipe:[123]") open in this process.
std::set<std::string> open_pipes() {
  std::set<std::string> pipes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("pipe:", 0) == 0) pipes.insert(target);
  }
  return pipes;
}

bool reaped(pid_t pid) {  // no such process: not even a zombie
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Reaped, or a zombie that is no longer ours to reap (an orphan, waiting for init).
bool dead(pid_t pid) {
  if (reaped(pid)) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z';
}

// A SIGKILL is delivered asynchronously: the process may take a moment to die after kill() returns.
bool dies_soon(pid_t pid) {
  for (int i = 0; i < 200 && !dead(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return dead(pid);
}

pid_t read_pid(const std::string& path) {
  for (int i = 0; i < 500; ++i) {  // up to 5 s for the program to write it
    std::ifstream in(path);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("no pid in " << path);
  return -1;
}

}  // namespace

TEST_CASE("reward_program: the Python GSM8K example scores the final answer", "[tasks][reward_program]") {
  ppo::RewardProgram program("python3 " + quoted(kExamples + "gsm8k_reward.py"), /*timeout_s=*/30);
  const std::vector<json> requests = {
      gsm8k_request("3 + 4 = 7 so #### 1,000", "1000"),  // commas removed
      gsm8k_request("#### $72.", "72"),                  // '$' and a sentence's full stop removed
      gsm8k_request("#### 5\nno wait, #### 6", "6"),     // the last "####" counts
      gsm8k_request("#### 4.0", 4),                      // compared as numbers; ground truth may be a number
      gsm8k_request("#### 18", "17"),                    // wrong
      gsm8k_request("the answer is 17", "17")};          // no "####": no answer
  const std::vector<double> score = {1, 1, 1, 1, 0, 0};
  const std::vector<double> has_answer = {1, 1, 1, 1, 1, 0};
  const std::vector<ppo::RewardAnswer> answers = program.score(requests);
  REQUIRE(answers.size() == requests.size());
  for (size_t i = 0; i < answers.size(); ++i) {
    INFO("request " << i << ": " << requests[i].dump());
    CHECK(answers[i].score == score[i]);
    REQUIRE(answers[i].correct.has_value());
    CHECK(*answers[i].correct == (score[i] == 1));
    CHECK(answers[i].extras == std::map<std::string, double>{{"has_answer", has_answer[i]}});
  }
  // It stays up: a second batch goes to the same process.
  CHECK(program.score({gsm8k_request("#### 9", "9")}).at(0).score == 1);
}

TEST_CASE("reward_program: the GSM8K example with --final-turn reads only a trajectory's last assistant turn",
          "[tasks][reward_program]") {
  ppo::RewardProgram program("python3 " + quoted(kExamples + "gsm8k_reward.py") + " --method flexible --final-turn",
                             /*timeout_s=*/30);
  const std::string call =
      "<tool_call>12 * 34</tool_call><|im_end|>\n<|im_start|>tool\n408<|im_end|>\n"
      "<|im_start|>assistant\n";
  const std::vector<ppo::RewardAnswer> answers =
      program.score({gsm8k_request(call + "408", "408"), gsm8k_request(call, "408"),  // the tool's 408 only
                     gsm8k_request(call + "It is 407.", "408"), gsm8k_request("No tool: 408", "408")});
  REQUIRE(answers.size() == 4);
  CHECK(answers[0].score == 1);
  CHECK(answers[1].score == 0);
  CHECK(answers[2].score == 0);
  CHECK(answers[3].score == 1);
}

TEST_CASE("reward_program: the shell example scores trimmed exact matches with jq", "[tasks][reward_program]") {
  REQUIRE(std::system("command -v jq >/dev/null 2>&1") == 0);  // examples/reward/exact_match.sh needs jq
  ppo::RewardProgram program("bash " + quoted(kExamples + "exact_match.sh"), /*timeout_s=*/30);
  const std::vector<json> requests = {{{"response", "  Paris\n"}, {"ground_truth", "Paris"}},
                                      {{"response", "paris"}, {"ground_truth", "Paris"}},
                                      {{"response", " 42 "}, {"ground_truth", 42}},
                                      {{"response", "Paris, France"}, {"ground_truth", "Paris"}},
                                      // Invalid UTF-8 reaches the program as U+FFFD, not as an exception.
                                      {{"response", "\xff"}, {"ground_truth", "\xef\xbf\xbd"}}};
  const std::vector<double> expected = {1, 0, 1, 0, 1};
  const std::vector<ppo::RewardAnswer> answers = program.score(requests);
  REQUIRE(answers.size() == expected.size());
  for (size_t i = 0; i < answers.size(); ++i) {
    INFO("request " << i);
    CHECK(answers[i].score == expected[i]);
    CHECK(answers[i].correct == std::optional<bool>(expected[i] == 1));
    CHECK(answers[i].extras.empty());
  }
}

TEST_CASE("reward_program: extra number and bool fields become metrics and acc or correct the accuracy",
          "[tasks][reward_program]") {
  Scripted program_text;
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/30);
  const std::vector<ppo::RewardAnswer> answers = program.score({
      says(R"({"score": 0.5, "acc": true, "len": 3, "ok": false, "note": "text", "list": [1], "none": null})"),
      says(R"({"score": -2, "correct": 0, "ratio": 0.25})"),
      says(R"({"score": 1e-3, "acc": 2.5, "correct": false})"),  // "acc" wins over "correct"
      says(R"({"score": 7, "acc": null})"),                      // null: absent
  });
  REQUIRE(answers.size() == 4);
  CHECK(answers[0].score == 0.5);
  CHECK(answers[0].correct == std::optional<bool>(true));
  CHECK(answers[0].extras == std::map<std::string, double>{{"len", 3}, {"ok", 0}});
  CHECK(answers[1].score == -2);
  CHECK(answers[1].correct == std::optional<bool>(false));
  CHECK(answers[1].extras == std::map<std::string, double>{{"ratio", 0.25}});
  CHECK(answers[2].score == 1e-3);
  CHECK(answers[2].correct == std::optional<bool>(true));
  CHECK(answers[2].extras.empty());
  CHECK(answers[3].score == 7);
  CHECK_FALSE(answers[3].correct.has_value());
  CHECK(program.score({}).empty());
}

TEST_CASE("reward_program: PPO_RANK and PPO_WORLD_SIZE reach a shell read loop", "[tasks][reward_program]") {
  const std::string command =
      R"(while IFS= read -r line; do echo "{\"score\": $PPO_RANK, \"world\": $PPO_WORLD_SIZE}"; done)";
  ppo::RewardProgram program(command, /*timeout_s=*/30, {{"PPO_RANK", "3"}, {"PPO_WORLD_SIZE", "8"}});
  const std::vector<ppo::RewardAnswer> answers = program.score({json::object(), json::object()});
  REQUIRE(answers.size() == 2);
  for (const ppo::RewardAnswer& a : answers) {
    CHECK(a.score == 3);
    CHECK(a.extras == std::map<std::string, double>{{"world", 8}});
  }
  CHECK(program.command() == command);
}

TEST_CASE("reward_program: 20000 requests of 1 KB are answered in order without deadlock", "[tasks][reward_program]") {
  // Requests and answers are each far larger than a pipe's buffer: writing everything before reading would block
  // both sides forever (seen here as a timeout error).
  Scripted program_text;
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/10);
  const std::string pad(1000, 'x');
  std::vector<json> requests;
  for (int i = 0; i < 20000; ++i) {
    requests.push_back(steps({step("write", json{{"score", i}, {"pad", pad}}.dump() + "\n")}));
  }
  const auto start = Clock::now();
  const std::vector<ppo::RewardAnswer> answers = program.score(requests);
  const double seconds = seconds_since(start);
  INFO("20000 requests in " << seconds << " s");
  CHECK(seconds < 20);  // about 1 s; a wide bound for sanitizer builds
  REQUIRE(answers.size() == requests.size());
  for (int i = 0; i < 20000; ++i) REQUIRE(answers[i].score == i);
}

TEST_CASE("reward_program: a slow but steady program is not timed out", "[tasks][reward_program]") {
  // reward.timeout_s bounds the wait for the next line, not the batch: 6 x 0.3 s > 1 s is fine. (1 s, not less:
  // the first answer also waits for Python to start, which a pyenv shim makes slow.)
  Scripted program_text;
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/1);
  std::vector<json> requests(6, steps({step("sleep", 0.3), step("write", "{\"score\": 1}\n")}));
  const auto start = Clock::now();
  CHECK(program.score(requests).size() == 6);
  CHECK(seconds_since(start) > 1.7);
}

TEST_CASE("reward_program: a crash mid-batch names the response and the exit status", "[tasks][reward_program]") {
  Scripted program_text;
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/30);
  std::vector<json> requests(10, says(R"({"score": 1})"));
  const std::string prefix = "reward.command '" + program_text.command + "': ";
  SECTION("exit status") {
    requests[3] = steps({step("exit", 3)});
    CHECK(usage_error_message([&] { program.score(requests); }) ==
          prefix + "exited with status 3 before answering response 3 of 10 (0-based); its stderr is above");
  }
  SECTION("signal") {
    requests[6] = steps({step("kill", SIGKILL)});
    CHECK(usage_error_message([&] { program.score(requests); }) ==
          prefix + "was killed by signal 9 (" + strsignal(SIGKILL) +
              ") before answering response 6 of 10 (0-based); its stderr is above");
  }
  SECTION("exit between batches, after answering") {
    CHECK(program.score({steps({step("write", "{\"score\": 1}\n"), step("exit", 0)})}).size() == 1);
    CHECK(usage_error_message([&] { program.score(requests); }) ==
          prefix + "exited with status 0 before answering response 0 of 10 (0-based); its stderr is above");
  }
  // The next batch starts a fresh program.
  CHECK(program.score({says(R"({"score": 2})")}).at(0).score == 2);
}

TEST_CASE("reward_program: a command that is not found reports status 127", "[tasks][reward_program]") {
  ppo::RewardProgram program("no_such_reward_program_7f3a", /*timeout_s=*/30);
  CHECK(usage_error_message([&] {
          program.score({json::object(), json::object()});
        }) ==
        "reward.command 'no_such_reward_program_7f3a': exited with status 127 (command not found?) before answering "
        "response 0 of 2 (0-based); its stderr is above");
}

TEST_CASE("reward_program: writing to a program that exited is an error, not a SIGPIPE", "[tasks][reward_program]") {
  // It reads one request and exits; the rest of 2 MB cannot fit in the pipe, so writes after its exit fail with
  // EPIPE (SIGPIPE would end this test program).
  ppo::RewardProgram program("read -r line; exit 5", /*timeout_s=*/30);
  const std::vector<json> requests(2000, json{{"response", std::string(1000, 'y')}});
  CHECK(usage_error_message([&] { program.score(requests); }) ==
        "reward.command 'read -r line; exit 5': exited with status 5 before answering response 0 of 2000 (0-based); "
        "its stderr is above");
}

TEST_CASE("reward_program: no answer within reward.timeout_s is an error, then a fresh program starts",
          "[tasks][reward_program]") {
  Scripted program_text;  // timeout_s=1 s, not less: the first answer also waits for Python to start
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/1);
  const std::vector<json> requests = {says(R"({"score": 1})"), says(R"({"score": 1})"), steps({step("sleep", 100)}),
                                      says(R"({"score": 1})")};
  const auto start = Clock::now();
  const std::string message = usage_error_message([&] { program.score(requests); });
  const double seconds = seconds_since(start);
  CHECK(message == "reward.command '" + program_text.command +
                       "': no answer to response 2 of 4 (0-based) within reward.timeout_s=1 s; it must print one "
                       "JSON line per request line and flush it");
  CHECK(seconds > 0.95);
  CHECK(seconds < 3);
  // The sleeping program was killed; the next batch gets a new one.
  CHECK(program.score({says(R"({"score": 4})")}).at(0).score == 4);
}

TEST_CASE("reward_program: a program that never reads nor answers times out", "[tasks][reward_program]") {
  ppo::RewardProgram program("sleep 100", /*timeout_s=*/0.3);
  const auto start = Clock::now();
  CHECK(usage_error_message([&] { program.score({json::object()}); }) ==
        "reward.command 'sleep 100': no answer to response 0 of 1 (0-based) within reward.timeout_s=0.3 s; it must "
        "print one JSON line per request line and flush it");
  CHECK(seconds_since(start) < 2);
}

TEST_CASE("reward_program: a malformed answer names the response and quotes the line", "[tasks][reward_program]") {
  Scripted program_text;
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/30);
  const std::string prefix = "reward.command '" + program_text.command + "': bad answer to response 1 of 3 (0-based): ";
  auto error_for = [&](const std::string& line) {
    return usage_error_message([&] { program.score({says(R"({"score": 1})"), says(line), says(R"({"score": 1})")}); });
  };
  CHECK(error_for("oops") == prefix + "not JSON: 'oops'");
  CHECK(error_for("") == prefix + "not JSON: ''");
  CHECK(error_for(R"({"score": NaN})") == prefix + R"(not JSON: '{"score": NaN}')");  // Python's json.dumps(nan)
  CHECK(error_for("[1]") == prefix + "not a JSON object: '[1]'");
  CHECK(error_for(R"({"acc": true})") == prefix + R"(no "score": '{"acc": true}')");
  CHECK(error_for(R"({"score": "1"})") == prefix + R"("score" is not a number: '{"score": "1"}')");
  CHECK(error_for(R"({"score": true})") == prefix + R"("score" is not a number: '{"score": true}')");
  CHECK(error_for(R"({"score": null})") == prefix + R"("score" is not a number: '{"score": null}')");
  CHECK(error_for(R"({"score": 1, "acc": "yes"})") ==
        prefix + R"("acc" is not a bool or a number: '{"score": 1, "acc": "yes"}')");
  const std::string long_line(1000, 'z');
  CHECK(error_for(long_line) == prefix + "not JSON: '" + std::string(200, 'z') + "...'");
  // A score beyond the score range (near float32's maximum every loss turns NaN), a field name that is no metric name,
  // nesting past the limit.
  CHECK(error_for(R"({"score": 1e39})") ==
        prefix + R"("score" 1e+39 is outside [-1e6, 1e6], the range of scores and rewards (rescale it in the )"
                 R"(program): '{"score": 1e39}')");
  CHECK(error_for(R"({"score": 3.0e38})").find(R"("score" 3e+38 is outside [-1e6, 1e6])") != std::string::npos);
  CHECK(error_for(R"({"score": -1000000.5})").find("is outside [-1e6, 1e6]") != std::string::npos);
  CHECK(
      error_for(R"({"score": 1, "a\nb": 1})") ==
      prefix +
          R"(field name "a\nb" is empty or holds a control character (it names a metric): '{"score": 1, "a\nb": 1}')");
  CHECK(error_for(R"({"score": 1, "x": )" + std::string(150, '[') + std::string(150, ']') + "}")
            .find(prefix + "JSON nested deeper than 100 levels") == 0);
}

TEST_CASE("reward_program: an exit is noticed while a process it started holds its stdout open",
          "[tasks][reward_program]") {
  // The shell starts a child in a session of its own that keeps the pipe, and exits without answering: no EOF ever
  // comes, and only the exit says it is gone (once a wait until reward.timeout_s, 60 s here).
  ppo::RewardProgram program("setsid sleep 5 & exit 3", /*timeout_s=*/60);
  const auto start = Clock::now();
  CHECK(usage_error_message([&] { program.score({json::object()}); }) ==
        "reward.command 'setsid sleep 5 & exit 3': exited with status 3 before answering response 0 of 1 (0-based); "
        "its stderr is above");
  CHECK(seconds_since(start) < 5);
}

TEST_CASE("reward_program: reward.timeout_s is per answer line, reward.batch_timeout_s for the whole batch",
          "[tasks][reward_program]") {
  Scripted program_text;
  const std::vector<json> requests(8, steps({step("sleep", 0.3), step("write", "{\"score\": 1}\n")}));
  {  // 8 x 0.3 s: each line within timeout_s, the batch over batch_timeout_s
    ppo::RewardProgram program(program_text.command, /*timeout_s=*/2, {}, /*batch_timeout_s=*/1.5);
    const auto start = Clock::now();
    CHECK_THAT(usage_error_message([&] { program.score(requests); }),
               Catch::Contains("the batch of 8 requests was not answered within reward.batch_timeout_s=1.5 s"));
    CHECK(seconds_since(start) < 2.5);
  }
  ppo::RewardProgram unbounded(program_text.command, /*timeout_s=*/2);  // batch_timeout_s 0: no bound on the batch
  CHECK(unbounded.score(requests).size() == 8);
}

TEST_CASE("reward_program: more answer lines than requests is an error", "[tasks][reward_program]") {
  Scripted program_text;
  ppo::RewardProgram program(program_text.command, /*timeout_s=*/30);
  const std::string prefix = "reward.command '" + program_text.command + "': ";
  SECTION("two lines for the last request, in one write") {
    CHECK(usage_error_message([&] { program.score({says("{\"score\": 1}\n{\"score\": 2}")}); }) ==
          prefix +
              "more answer lines than requests: after answering response 0 of 1 (0-based) it printed "
              "'{\"score\": 2}'");
  }
  SECTION("an extra line that comes after the batch is caught by the next batch") {
    const json late = steps({step("write", "{\"score\": 1}\n"), step("sleep", 0.2), step("write", "{\"score\": 9}\n")});
    CHECK(program.score({late}).size() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    CHECK(usage_error_message([&] { program.score({says(R"({"score": 1})")}); }) ==
          prefix +
              "printed '{\"score\": 9}' before this batch's first request (more answer lines than requests in "
              "an earlier batch?)");
  }
  SECTION("many lines for the first request overtake the requests written") {
    // Request 0 gets 3000 answer lines at once; while it writes them it reads nothing, so this side cannot have
    // written request ~100 (100 KB, beyond the pipe's buffer) when "its answer" arrives.
    std::string many;
    for (int i = 0; i < 3000; ++i) many += "{\"score\": 0}\n";
    std::vector<json> requests(3000, json{{"do", json::array()}, {"pad", std::string(1000, 'p')}});
    requests[0] = steps({step("write", many)});
    const std::string message = usage_error_message([&] { program.score(requests); });
    CHECK_THAT(message, Catch::Contains("before that request was sent (more answer lines than requests?)"));
  }
  CHECK(program.score({says(R"({"score": 3})")}).at(0).score == 3);  // a fresh program
}

TEST_CASE("reward_program: the destructor kills a program that ignores EOF and leaves no zombie",
          "[tasks][reward_program]") {
  ppo_test::TempDir dir("reward_program");
  const std::string shell_pid = dir.sub("shell.pid"), child_pid = dir.sub("child.pid");
  pid_t shell = -1, child = -1;
  auto start = Clock::now();
  {
    ppo::RewardProgram program(
        "echo $$ > " + quoted(shell_pid) + "; sleep 100 & echo $! > " + quoted(child_pid) + "; wait",
        /*timeout_s=*/30);
    shell = read_pid(shell_pid);
    child = read_pid(child_pid);
    REQUIRE(::kill(shell, 0) == 0);
    start = Clock::now();
  }
  const double seconds = seconds_since(start);
  INFO("destructor took " << seconds << " s");
  CHECK(seconds > 1.5);  // it waited for a graceful exit first
  CHECK(seconds < 3.5);
  CHECK(reaped(shell));     // killed and reaped: no zombie
  CHECK(dies_soon(child));  // its process group was killed too
}

TEST_CASE("reward_program: the destructor of a program that exits on EOF is quick", "[tasks][reward_program]") {
  auto start = Clock::now();
  {
    ppo::RewardProgram program("python3 " + quoted(kExamples + "gsm8k_reward.py"), /*timeout_s=*/30);
    REQUIRE(program.score({gsm8k_request("#### 1", "1")}).at(0).score == 1);
    start = Clock::now();
  }
  CHECK(seconds_since(start) < 1);
}

// Answers with "score": how many of its descriptors above 2 lead to a pipe of its stdin or stdout or one of the
// request's "forbidden" pipes, and "pipes": how many of its descriptors lead to a pipe.
const char* kPipeLister = R"(import json, os, sys
def target(fd):
    try:
        return os.readlink("/proc/self/fd/" + fd)
    except OSError:  # the descriptor listdir used, closed by now
        return ""
for line in sys.stdin:
    fds = {int(fd): target(fd) for fd in os.listdir("/proc/self/fd")}
    forbidden = set(json.loads(line)["forbidden"]) | {fds[0], fds[1]}
    leaked = [fd for fd, pipe in fds.items() if fd > 2 and pipe in forbidden]
    pipes = [fd for fd, pipe in fds.items() if pipe.startswith("pipe:")]
    print(json.dumps({"score": len(leaked), "pipes": len(pipes)}), flush=True)
)";

TEST_CASE("reward_program: the program inherits no other pipe", "[tasks][reward_program]") {
  // Neither the pipes of another reward program nor our ends of its own may leak into a child.
  const std::set<std::string> before = open_pipes();
  ppo::RewardProgram other("cat > /dev/null", /*timeout_s=*/30);
  json other_pipes = json::array();
  for (const std::string& pipe : open_pipes()) {
    if (!before.count(pipe)) other_pipes.push_back(pipe);
  }
  REQUIRE(other_pipes.size() == 2);
  ppo_test::TempDir dir("reward_program");
  std::ofstream(dir.sub("lister.py")) << kPipeLister;
  ppo::RewardProgram program("exec python3 " + quoted(dir.sub("lister.py")), /*timeout_s=*/30);
  const ppo::RewardAnswer answer = program.score({json{{"forbidden", other_pipes}}}).at(0);
  CHECK(answer.score == 0);
  CHECK(answer.extras.at("pipes") >= 2);  // its stdin and stdout
}

TEST_CASE("reward_program: the program gets the default SIGPIPE action and no blocked signals",
          "[tasks][reward_program]") {
  // We ignore SIGPIPE and may block signals; a child must not inherit either (a pipeline inside it relies on
  // SIGPIPE). Its shell reports bit 13 (SIGPIPE) of its ignored set and whether any signal is blocked.
  const std::string command =
      R"(read -r line; ign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status); )"
      R"(blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/$$/status); )"
      R"(echo "{\"score\": $(( (0x$ign >> 12) & 1 )), \"blocked\": $(( 0x$blk != 0 ))}"; cat > /dev/null)";
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &old);
  ppo::RewardProgram program(command, /*timeout_s=*/30);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  const ppo::RewardAnswer answer = program.score({json::object()}).at(0);
  CHECK(answer.score == 0);
  CHECK(answer.extras.at("blocked") == 0);
}

TEST_CASE("reward_program: bad arguments are usage errors", "[tasks][reward_program]") {
  CHECK(usage_error_message([] { ppo::RewardProgram("", 1); }) == "reward.command is empty");
  CHECK(usage_error_message([] { ppo::RewardProgram("cat", 0); }) ==
        "reward.timeout_s must be a positive number of seconds, not 0");
  CHECK(usage_error_message([] { ppo::RewardProgram("cat", -1); }) ==
        "reward.timeout_s must be a positive number of seconds, not -1");
  CHECK_FALSE(usage_error_message([] { ppo::RewardProgram("cat", std::nan("")); }).empty());
}
