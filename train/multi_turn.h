// Multi-turn rollouts with tools (rollout.multi_turn): the environment program, and what the decoder does when an
// assistant turn ends (rollout/rollout.h, TurnHandler).
//
// The protocol (docs/multi-turn.md): the environment is started once per rank with /bin/sh -c (PPO_RANK and
// PPO_WORLD_SIZE set) and stays up. For each tool call it gets one JSON line,
//   {"id": "4-17-2", "index": 17, "turn": 1, "call": "...", "data_source": ..., "ground_truth": ..., "extra_info": ...}
// (id: the trajectory, as step-prompt-response; index: the sample's; turn: 1-based; call: the text between
// rollout.multi_turn.call_start and stop), and answers, in order, one line {"output": "...", "done": false,
// "reward": 0.5} ("done" and "reward" optional). The output is cut to max_tool_response_length tokens, wrapped in the
// chat template's tool message (text/chat_template.h, ChatTemplate::tool_turn), tokenised and appended; generation
// goes on in the same trajectory. "done": true ends the trajectory there, its output unused. The rewards of a
// trajectory's answers are added to its score.
#pragma once

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/config.h"
#include "rollout/rollout.h"
#include "tasks/json_lines_program.h"
#include "tasks/task.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ppo {

struct ToolAnswer {
  std::string output;  // "output": a string (required)
  bool done = false;   // "done": a bool
  double reward = 0;   // "reward": a finite number
};
// Parses one answer line; UsageError with the problem, without the command and the request, which the caller adds.
ToolAnswer parse_tool_answer(const std::string& line);

// The environment program, spoken to from a thread of its own so that decoding goes on while it works: requests
// queue up and go out in batches (all that queued while the last batch was answered), answered in order.
class ToolEnvironment {
 public:
  // Starts rollout.multi_turn.environment.command (UsageError when it cannot start).
  ToolEnvironment(const EnvironmentConfig& config, int64_t rank, int64_t world_size);
  // Closes the program's stdin and waits for the thread (up to a batch's timeout when one is out).
  ~ToolEnvironment();
  ToolEnvironment(const ToolEnvironment&) = delete;
  ToolEnvironment& operator=(const ToolEnvironment&) = delete;

  // Drops what queued or came for an earlier rollout (one that failed); answers of a batch still out are dropped
  // when they come.
  void reset();
  // Queues a request; `tag` comes back with its answer; `name` names it in errors ("the call of trajectory 4-17-2
  // (sample data.jsonl:18, turn 1)").
  void submit(int64_t tag, nlohmann::json request, std::string name);
  // The answers that have come, {tag, answer}; with `wait`, at least one. A failure of the program (UsageError
  // "rollout.multi_turn.environment.command 'CMD': ... the call of trajectory ...") is thrown here; the program is
  // then killed, and requests still queued are dropped.
  std::vector<std::pair<int64_t, ToolAnswer>> collect(bool wait);

 private:
  struct Request {
    uint64_t rollout;  // reset()s before it
    int64_t tag;
    nlohmann::json body;
    std::string name;
  };
  void serve();  // the thread: sends what has queued, one batch at a time

  JsonLinesProgram program_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Request> queue_;
  std::vector<std::pair<int64_t, ToolAnswer>> answers_;
  std::exception_ptr error_;
  bool stopping_ = false;
  uint64_t rollout_ = 0;
  std::thread thread_;
};

// One trajectory of a rollout: its sample, and its id for the environment.
struct Trajectory {
  const TaskSample* sample = nullptr;
  const ChatTemplate* chat = nullptr;  // the sample's template; nullptr: the plain form
  std::string id;
};

// What each trajectory did, for the batch fields and metrics.
struct TrajectoryTools {
  int64_t turns = 0;        // assistant turns
  int64_t calls = 0;        // tool calls answered
  double reward = 0;        // the sum of the answers' rewards
  bool eos_closed = false;  // the last turn ended with EOS
};

// The decoder's TurnHandler for one rollout.
class ToolTurns : public TurnHandler {
 public:
  ToolTurns(ToolEnvironment& environment, const Tokenizer& tokenizer, const MultiTurnConfig& config,
            std::vector<Trajectory> trajectories);
  bool turn_ended(const TurnEnd& end) override;
  std::vector<std::pair<int64_t, std::vector<int64_t>>> continuations(bool wait) override;
  const std::vector<TrajectoryTools>& stats() const { return stats_; }

 private:
  ToolEnvironment& environment_;
  const Tokenizer& tokenizer_;
  const MultiTurnConfig& config_;
  std::vector<Trajectory> trajectories_;
  std::vector<TrajectoryTools> stats_;
  ChatTemplate plain_ = ChatTemplate::plain();
};

// The tool call in an assistant turn's text (its EOS left out): the text between the last `call_start` and `stop`
// when the turn ended with `stop` (all of it when it has no call_start), else (it ended with EOS) between the last
// call_start and the stop after it. An empty stop ends the call at the turn's end, and an empty call_start starts it
// at the turn's start: with both empty every turn that ends with EOS goes to the environment (a game or a simulated
// user), which says when the trajectory is done. false when there is none.
bool find_tool_call(const std::string& text, bool ended_by_stop, const MultiTurnConfig& config, std::string& call);

}  // namespace ppo
