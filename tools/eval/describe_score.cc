#include "tools/eval/describe_score.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
#include <tuple>

namespace framezip::eval {
namespace {

using Clause = std::tuple<std::string, std::string, std::string>;  // color, shape, motion

// One piece's words as a clause, or nothing when it is not one of the two forms.
std::optional<Clause> ParseClause(const std::vector<std::string>& w) {
  if (w.size() != 5 || (w[0] != "a" && w[0] != "an")) return std::nullopt;
  if (w[3] == "moves") return Clause{w[1], w[2], w[4]};
  if (w[3] == "stays" && w[4] == "still") return Clause{w[1], w[2], "still"};
  return std::nullopt;
}

}  // namespace

DescribeScore ScoreDescribe(std::string_view reply, const std::vector<DescribeFact>& facts) {
  std::string lower(reply);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<std::optional<Clause>> pred;
  std::stringstream pieces(lower);
  for (std::string piece; std::getline(pieces, piece, '.');) {
    std::stringstream words(piece);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (!w.empty()) pred.push_back(ParseClause(w));
  }
  std::vector<DescribeFact> sorted = facts;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const DescribeFact& a, const DescribeFact& b) { return a.order < b.order; });
  // Longest common subsequence of the clauses (in reply order) and the facts (in onset order).
  const size_t n = pred.size(), m = sorted.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < m; ++j) {
      const bool same = pred[i].has_value() &&
                        *pred[i] == Clause{sorted[j].color, sorted[j].shape, sorted[j].motion};
      lcs[i + 1][j + 1] = same ? lcs[i][j] + 1 : std::max(lcs[i][j + 1], lcs[i + 1][j]);
    }
  }
  const double matched = lcs[n][m];
  DescribeScore s;
  s.precision = n > 0 ? matched / static_cast<double>(n) : 0;
  s.recall = m > 0 ? matched / static_cast<double>(m) : 0;
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0;
  return s;
}

}  // namespace framezip::eval
