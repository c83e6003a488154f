// The `ppo` command: `ppo <subcommand> [--config FILE.yaml ...] [key.path=value ...]`.
// Exit status: 0 success; 2 bad usage, config, data or checkpoint (one `error:` line); 1 any other failure.
#include <malloc.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.h"
#include "common/config.h"
#include "common/error.h"
#include "common/strings.h"
#include "common/utf8.h"
#include "parallel/context.h"
#include "parallel/watchdog.h"
#include "train/registry_keys.h"
#include "workers/memory.h"

namespace {

const std::vector<ppo::Command>& commands() {
  static const std::vector<ppo::Command> all = ppo::all_commands();
  return all;
}

// A command line as cxxopts read it: the subcommand, its own flags, the config files and the overrides. It is read
// before MPI starts (the start-up bound needs the config); what is wrong with it is reported once MPI has.
struct CommandLine {
  const ppo::Command* command = nullptr;      // null: no subcommand, usage is printed
  std::shared_ptr<cxxopts::Options> options;  // the subcommand's (its --help)
  cxxopts::ParseResult args;
  bool help = false;
  std::vector<std::string> config_files, overrides;
};

// Bounds the job's start-up by parallel.timeout_s before MPI_Init, where a rank stopped in its first moments would
// leave the others waiting for good: the config of `line` is read here once without MPI (any error in it is left for
// the command, which reports it), so that the bound is the run's own; the default otherwise. Only under mpirun.
void bound_start_up(const CommandLine& line) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = std::getenv("PMIX_RANK");
  if (!rank) rank = std::getenv("PMI_RANK");
  if (!rank) return;
  double seconds = ppo::Config{}.parallel.timeout_s;
  try {
    if (line.command && line.command->uses_config)
      seconds = ppo::load_config(line.config_files, line.overrides).parallel.timeout_s;
  } catch (const std::exception&) {
  }
  if (seconds <= 0.0) return;
  ppo::set_watchdog_timeout(seconds);
  ppo::begin_start_up();
  ppo::start_watchdog(std::atoi(rank));
}

std::string usage() {
  std::ostringstream out;
  out << "usage: ppo <subcommand> [--config FILE.yaml ...] [key.path=value ...]\n\nsubcommands:\n";
  for (const auto& c : commands()) out << "  " << c.name << std::string(10 - c.name.size(), ' ') << c.summary << "\n";
  out << "\n`ppo <subcommand> --help` lists its options and every config key with its type, default and meaning.\n"
         "Launch on N ranks with: mpirun -np N build/ppo train --config configs/X.yaml\n";
  return out.str();
}

// "--flag: " for the flag whose value cxxopts could not parse (its message quotes the value, ‘x’, but names no
// flag), or "" when no flag of the command line has that value.
std::string flag_of_bad_value(int argc, char** argv, const std::string& message) {
  const std::string open = "\u2018", close = "\u2019";
  const size_t from = message.find(open), to = message.find(close, from == std::string::npos ? 0 : from);
  if (from == std::string::npos || to == std::string::npos) return "";
  const std::string value = message.substr(from + open.size(), to - from - open.size());
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    const size_t equals = arg.find('=');
    if (equals != std::string::npos && arg.substr(equals + 1) == value) return arg.substr(0, equals) + ": ";
    if (equals == std::string::npos && i + 1 < argc && argv[i + 1] == value) return arg + ": ";
  }
  return "";
}

CommandLine parse_command_line(int argc, char** argv) {
  CommandLine line;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") return line;
  const std::string name = argv[1];
  auto it = std::find_if(commands().begin(), commands().end(), [&](const ppo::Command& c) { return c.name == name; });
  if (it == commands().end()) {
    const std::string valid = ppo::join(commands(), ", ", [](const ppo::Command& c) { return c.name; });
    throw ppo::UsageError("unknown subcommand '" + name + "'; valid: " + valid);
  }
  line.options = std::make_shared<cxxopts::Options>("ppo " + name, it->summary);
  cxxopts::Options& options = *line.options;
  options.add_options()("h,help", "show this help");
  if (it->uses_config)
    options.add_options()("c,config", "YAML config file (repeatable; later files win)",
                          cxxopts::value<std::vector<std::string>>())("overrides", "key.path=value",
                                                                      cxxopts::value<std::vector<std::string>>());
  if (it->add_options) it->add_options(options);
  if (it->uses_config || it->positional != "overrides") options.parse_positional({it->positional});
  options.positional_help("[key.path=value ...]");
  try {
    line.args = options.parse(argc - 1, argv + 1);
  } catch (const cxxopts::exceptions::exception& e) {
    throw ppo::UsageError(flag_of_bad_value(argc, argv, e.what()) + e.what() + " (ppo " + name + " --help)");
  }
  if (!line.args.unmatched().empty())
    throw ppo::UsageError("unexpected argument '" + line.args.unmatched().front() + "' (ppo " + name + " --help)");
  line.command = &*it;
  line.help = line.args.count("help") > 0;
  if (line.args.count("config")) line.config_files = line.args["config"].as<std::vector<std::string>>();
  if (line.args.count("overrides")) line.overrides = line.args["overrides"].as<std::vector<std::string>>();
  return line;
}

int run(int argc, CommandLine& line) {
  if (!line.command) {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  if (line.help) {
    std::cout << line.options->help() << "\n"
              << (line.command->uses_config ? ppo::config_help(ppo::registry_choices()) : "");
    return 0;
  }
  ppo::CommandArgs command_args{line.args, line.config_files, line.overrides};
  return line.command->run(command_args);
}

}  // namespace

int main(int argc, char** argv) {
  // Fresh large allocations are expensive here (glibc returns them to the OS at once): keep freed memory in the
  // heap. Measured ~5x faster full forwards on the tiny model (bench/bench_generate, recompute path).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
  ppo::install_memory_tracker();  // per-phase peak memory (memory/<phase>_peak_mib)
  CommandLine line;
  std::exception_ptr bad_line;  // reported once MPI has started, as every other error
  try {
    line = parse_command_line(argc, argv);
  } catch (...) {
    bad_line = std::current_exception();
  }
  bound_start_up(line);
  ppo::Context& context = ppo::Context::init(&argc, &argv);
  int status = 1;
  try {
    if (bad_line) std::rethrow_exception(bad_line);
    status = run(argc, line);
  } catch (const ppo::UsageError& e) {
    status = 2;
    context.fail("error: " + ppo::utf8_printable(e.what()), status);
  } catch (const c10::Error& e) {  // LibTorch's what() carries a backtrace: the message alone, first line only
    status = 1;
    const std::string what = e.what_without_backtrace();
    context.fail("error: " + ppo::utf8_printable(what.substr(0, what.find('\n'))), status);
  } catch (const std::exception& e) {
    status = 1;
    context.fail("error: " + ppo::utf8_printable(e.what()), status);
  }
  context.finalize();
  return status;
}
