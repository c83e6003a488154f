// See train/multi_turn.h.
#include "train/multi_turn.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace ppo {

using json = nlohmann::json;

ToolAnswer parse_tool_answer(const std::string& line) {
  const json answer = parse_answer_object(line);
  ToolAnswer parsed;
  const auto output = answer.find("output");
  usage_check(output != answer.end() && output->is_string(), "no string \"output\": " + quote_answer(line));
  parsed.output = output->get<std::string>();
  if (const auto done = answer.find("done"); done != answer.end() && !done->is_null()) {
    usage_check(done->is_boolean(), "\"done\" is not a bool: " + quote_answer(line));
    parsed.done = done->get<bool>();
  }
  if (const auto reward = answer.find("reward"); reward != answer.end() && !reward->is_null()) {
    usage_check(reward->is_number(), "\"reward\" is not a number: " + quote_answer(line));
    parsed.reward = reward->get<double>();
    check_reward_value(parsed.reward, "reward", line);
  }
  return parsed;
}

ToolEnvironment::ToolEnvironment(const EnvironmentConfig& config, int64_t rank, int64_t world_size)
    : program_("rollout.multi_turn.environment", config.command, config.timeout_s,
               {{"PPO_RANK", std::to_string(rank)}, {"PPO_WORLD_SIZE", std::to_string(world_size)}}),
      thread_([this] { serve(); }) {}

ToolEnvironment::~ToolEnvironment() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ToolEnvironment::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++rollout_;
  queue_.clear();
  answers_.clear();
  error_ = nullptr;
}

void ToolEnvironment::submit(int64_t tag, json request, std::string name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({rollout_, tag, std::move(request), std::move(name)});
  }
  changed_.notify_all();
}

std::vector<std::pair<int64_t, ToolAnswer>> ToolEnvironment::collect(bool wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (wait) changed_.wait(lock, [&] { return !answers_.empty() || error_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return std::exchange(answers_, {});
}

void ToolEnvironment::serve() {
  while (true) {
    std::vector<Request> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      batch = std::exchange(queue_, {});
    }
    std::vector<json> bodies;
    for (const Request& r : batch) bodies.push_back(r.body);
    std::vector<std::pair<int64_t, ToolAnswer>> answers;
    try {
      program_.exchange(
          bodies,
          [&](size_t i, const std::string& line) { answers.emplace_back(batch[i].tag, parse_tool_answer(line)); },
          [&](size_t i, size_t) { return batch[i].name; });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (batch.front().rollout == rollout_) error_ = std::current_exception();
      queue_.clear();
      changed_.notify_all();
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (batch.front().rollout == rollout_)
        for (auto& a : answers) answers_.push_back(std::move(a));
    }
    changed_.notify_all();
  }
}

bool find_tool_call(const std::string& text, bool ended_by_stop, const MultiTurnConfig& config, std::string& call) {
  const std::string& start = config.call_start;
  const std::string& stop = config.stop;
  size_t end = text.size();
  if (ended_by_stop) {
    end = text.size() >= stop.size() ? text.size() - stop.size() : 0;
  } else if (!stop.empty()) {
    end = text.rfind(stop);
    if (end == std::string::npos) return false;
  }
  size_t begin = 0;
  if (!start.empty()) {
    const size_t at = text.rfind(start, end);
    if (at != std::string::npos && at + start.size() <= end)
      begin = at + start.size();
    else if (!ended_by_stop)
      return false;
  }
  call = text.substr(begin, end - begin);
  return true;
}

ToolTurns::ToolTurns(ToolEnvironment& environment, const Tokenizer& tokenizer, const MultiTurnConfig& config,
                     std::vector<Trajectory> trajectories)
    : environment_(environment),
      tokenizer_(tokenizer),
      config_(config),
      trajectories_(std::move(trajectories)),
      stats_(trajectories_.size()) {
  environment_.reset();
}

bool ToolTurns::turn_ended(const TurnEnd& end) {
  TrajectoryTools& stats = stats_[end.row];
  ++stats.turns;
  const bool eos = !end.by_stop && !end.response.empty() && end.response.back() == tokenizer_.eos_id();
  // The EOS closed the assistant's message where it is the template's own end of message (ChatML's <|im_end|>, Llama
  // 3's <|eot_id|>, or any EOS in the plain form, which writes none).
  const ChatTemplate* chat = trajectories_[end.row].chat;
  stats.eos_closed =
      eos && (chat == nullptr || chat->form() == ChatTemplate::Form::plain ||
              tokenizer_.decode({tokenizer_.eos_id()}, /*skip_special=*/false) == chat->end_of_message());
  if (end.out_of_room) return false;
  const std::vector<int64_t> turn(end.response.begin() + end.turn_start, end.response.end() - (eos ? 1 : 0));
  std::string call;
  if (!find_tool_call(tokenizer_.decode(turn, /*skip_special=*/false), end.by_stop, config_, call)) return false;
  if (stats.turns >= config_.max_turns) return false;  // a call in the last turn is not answered
  const Trajectory& t = trajectories_[end.row];
  const TaskSample& sample = *t.sample;
  json request = {{"id", t.id},
                  {"index", sample.index},
                  {"turn", stats.turns},
                  {"call", call},
                  {"data_source", sample.data_source},
                  {"ground_truth", sample.ground_truth},
                  {"extra_info", sample.extra_info.is_null() ? json::object() : sample.extra_info}};
  const std::string origin = sample.origin.empty() ? "index " + std::to_string(sample.index) : sample.origin;
  environment_.submit(
      end.row, std::move(request),
      "the call of trajectory " + t.id + " (sample " + origin + ", turn " + std::to_string(stats.turns) + ")");
  return true;
}

std::vector<std::pair<int64_t, std::vector<int64_t>>> ToolTurns::continuations(bool wait) {
  std::vector<std::pair<int64_t, std::vector<int64_t>>> out;
  for (auto& [row, answer] : environment_.collect(wait)) {
    TrajectoryTools& stats = stats_[row];
    ++stats.calls;
    stats.reward += answer.reward;
    if (answer.done) {
      out.emplace_back(row, std::vector<int64_t>{});
      continue;
    }
    std::string output = answer.output;
    const std::vector<int64_t> ids = tokenizer_.encode(output);
    if (static_cast<int64_t>(ids.size()) > config_.max_tool_response_length)
      output = tokenizer_.decode({ids.begin(), ids.begin() + config_.max_tool_response_length}, false);
    const ChatTemplate& chat = trajectories_[row].chat ? *trajectories_[row].chat : plain_;
    out.emplace_back(row, tokenizer_.encode(chat.tool_turn(output, stats.eos_closed)));
  }
  return out;
}

}  // namespace ppo
