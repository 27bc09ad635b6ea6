// Teacher-forced agreement between a compression policy and full attention: both
// models are fed the same answer tokens (the full model's greedy reply) and their next-token
// distributions are compared at every answer position.
//
//   top-1 agreement = matches / positions, where a position matches when the candidate's argmax
//                     equals the reference's (ties: the lowest token id, like greedy sampling);
//   mean KL         = kl_sum / positions, KL(reference || candidate) in nats, each row's softmax
//                     taken in double precision.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"

namespace framezip::eval {

struct AgreementCounts {
  int64_t positions = 0;
  int64_t matches = 0;
  double kl_sum = 0;

  void Add(const AgreementCounts& other) {
    positions += other.positions;
    matches += other.matches;
    kl_sum += other.kl_sum;
  }
  double top1() const { return positions > 0 ? static_cast<double>(matches) / positions : 0; }
  double mean_kl() const { return positions > 0 ? kl_sum / positions : 0; }
};

// Compares row-major logits [n, vocab] of the reference and the candidate at the same n
// positions. INVALID_ARGUMENT when the sizes differ or are not a multiple of vocab.
StatusOr<AgreementCounts> CompareNextTokenLogits(std::span<const float> reference,
                                                 std::span<const float> candidate, int64_t vocab);

}  // namespace framezip::eval
