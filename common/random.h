// Seeded randomness that is the same on every platform and rank: splitmix64 and a Fisher-Yates permutation.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace ppo {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a of a string: a name's share of a seed (each parameter's generator is seeded by hash(seed, name)).
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

inline uint64_t hash_combine(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b));
}

// A permutation of 0..n-1 determined by `seed` alone.
inline std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  uint64_t state = splitmix64(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    state = splitmix64(state);
    int64_t j = static_cast<int64_t>(state % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace ppo
