// The `ppo` command: `ppo <subcommand> [--config FILE.yaml ...] [key.path=value ...]`.
// Exit status: 0 success; 2 bad usage, config, data or checkpoint (one `error:` line); 1 any other failure.
#include <malloc.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "common/config.h"
#include "common/error.h"
#include "common/strings.h"
#include "model/unicode.h"
#include "parallel/context.h"
#include "parallel/watchdog.h"
#include "rl/algorithms.h"
#include "workers/memory.h"

namespace {

const std::vector<ppo::Command>& commands() {
  static const std::vector<ppo::Command> all = ppo::all_commands();
  return all;
}

// Bounds the job's start-up by parallel.timeout_s before MPI_Init, where a rank stopped in its first moments would
// leave the others waiting for good: the config is read here once without MPI (any error in it is left for the
// command, which reports it), so that the bound is the run's own; the default otherwise. Only under mpirun.
void bound_start_up(int argc, char** argv) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = std::getenv("PMIX_RANK");
  if (!rank) rank = std::getenv("PMI_RANK");
  if (!rank) return;
  std::vector<std::string> files, overrides;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--config" || arg == "-c") && i + 1 < argc)
      files.push_back(argv[++i]);
    else if (arg.rfind("--config=", 0) == 0)
      files.push_back(arg.substr(9));
    else if (arg.find('=') != std::string::npos && arg.rfind("-", 0) != 0)
      overrides.push_back(arg);
  }
  double seconds = ppo::Config{}.parallel.timeout_s;
  try {
    seconds = ppo::load_config(files, overrides).parallel.timeout_s;
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

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  auto it = std::find_if(commands().begin(), commands().end(), [&](const ppo::Command& c) { return c.name == name; });
  if (it == commands().end()) {
    const std::string valid = ppo::join(commands(), ", ", [](const ppo::Command& c) { return c.name; });
    throw ppo::UsageError("unknown subcommand '" + name + "'; valid: " + valid);
  }
  cxxopts::Options options("ppo " + name, it->summary);
  options.add_options()("h,help", "show this help");
  if (it->uses_config)
    options.add_options()("c,config", "YAML config file (repeatable; later files win)",
                          cxxopts::value<std::vector<std::string>>())("overrides", "key.path=value",
                                                                      cxxopts::value<std::vector<std::string>>());
  if (it->add_options) it->add_options(options);
  if (it->uses_config || it->positional != "overrides") options.parse_positional({it->positional});
  options.positional_help("[key.path=value ...]");
  cxxopts::ParseResult args;
  try {
    args = options.parse(argc - 1, argv + 1);
  } catch (const cxxopts::exceptions::exception& e) {
    throw ppo::UsageError(flag_of_bad_value(argc, argv, e.what()) + e.what() + " (ppo " + name + " --help)");
  }
  if (!args.unmatched().empty())
    throw ppo::UsageError("unexpected argument '" + args.unmatched().front() + "' (ppo " + name + " --help)");
  if (args.count("help")) {
    std::cout << options.help() << "\n" << (it->uses_config ? ppo::config_help(ppo::variant_choices()) : "");
    return 0;
  }
  ppo::CommandArgs command_args{args, {}, {}};
  if (args.count("config")) command_args.config_files = args["config"].as<std::vector<std::string>>();
  if (args.count("overrides")) command_args.overrides = args["overrides"].as<std::vector<std::string>>();
  return it->run(command_args);
}

}  // namespace

int main(int argc, char** argv) {
  // Fresh large allocations are expensive here (glibc returns them to the OS at once): keep freed memory in the
  // heap. Measured ~5x faster full forwards on the tiny model (bench/bench_generate, recompute path).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 256 << 20);
  ppo::install_memory_tracker();  // per-phase peak memory (memory/<phase>_peak_mib)
  bound_start_up(argc, argv);
  ppo::Context& context = ppo::Context::init(&argc, &argv);
  int status = 1;
  try {
    status = run(argc, argv);
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
