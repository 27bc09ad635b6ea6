// Fresh random inputs for kernel tests. The seed is random per run and printed on failure (pass
// FRAMEZIP_TEST_SEED=N to replay one).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace framezip::testing {

// The run's seed: FRAMEZIP_TEST_SEED if set, else from std::random_device (logged once).
uint64_t TestSeed();

std::vector<float> RandomNormal(size_t n, std::mt19937_64& rng, float stddev = 1.0f);

}  // namespace framezip::testing
