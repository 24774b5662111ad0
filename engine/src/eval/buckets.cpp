// Position buckets of the evaluation: defaults, validation, construction and names.
#include <limits>
#include <string>

#include "eval/stats.h"
#include "replayssm/errors.h"

namespace replayssm::engine {

std::vector<int64_t> default_bucket_edges() { return {1024, 4096, 16384, 65536, 131072}; }

namespace {
std::string position_name(int64_t p) {
  if (p > 0 && p % 1024 == 0) return std::to_string(p / 1024) + "K";
  return std::to_string(p);
}
}  // namespace

std::string bucket_label(int64_t begin, int64_t end) {
  if (end == std::numeric_limits<int64_t>::max()) return position_name(begin) + "+";
  return position_name(begin) + "-" + position_name(end);
}

namespace eval_detail {

void validate_edges(std::span<const int64_t> edges) {
  for (size_t i = 0; i < edges.size(); ++i) {
    check<ConfigError>(edges[i] > 0, "bucket edge ", i, " is ", edges[i], ", expected > 0");
    if (i > 0)
      check<ConfigError>(edges[i] > edges[i - 1], "bucket edges must increase: ", edges[i - 1],
                         " then ", edges[i]);
  }
}

std::vector<EvalStats> make_buckets(std::span<const int64_t> edges, int64_t positions) {
  std::vector<EvalStats> out;
  int64_t begin = 0;
  for (size_t i = 0; i <= edges.size() && begin < positions; ++i) {
    EvalStats s;
    s.begin = begin;
    s.end = i < edges.size() ? edges[i] : std::numeric_limits<int64_t>::max();
    out.push_back(s);
    begin = s.end;
  }
  return out;
}

}  // namespace eval_detail
}  // namespace replayssm::engine
