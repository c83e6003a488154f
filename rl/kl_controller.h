// KL-in-reward coefficient controller (veRL core_algos FixedKLController / AdaptiveKLController; the adaptive rule
// is Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences", arXiv:1909.08593, section 2.2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ppo {

struct KlController {
  std::string type = "fixed";  // fixed | adaptive
  double value = 0.001;        // current coefficient beta of the KL term in the reward
  double target = 0.1;         // adaptive: target KL per sequence
  double horizon = 10000;      // adaptive: samples over which beta may change by the full proportional error

  // Adaptive: err = clip(current_kl / target - 1, -0.2, 0.2); value *= 1 + err * n_steps / horizon.
  // Fixed: no-op. `n_steps` is the number of samples (sequences) of the step, as veRL passes the batch size.
  void update(double current_kl, int64_t n_steps);
};

std::vector<std::string> kl_controller_names();  // fixed, adaptive

// Builds a controller; a bad type or a non-positive adaptive horizon (or target) throws UsageError naming `key`
// ("algorithm.kl_ctrl.type: unknown type 'x'; valid: fixed, adaptive").
KlController make_kl_controller(const std::string& type, double kl_coef, double target, double horizon,
                                const std::string& key = "algorithm.kl_ctrl");

}  // namespace ppo
