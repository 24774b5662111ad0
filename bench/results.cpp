#include "results.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>
#include <tuple>

namespace replayssm::bench {

nlohmann::json row_json(const Row& r) {
  using nlohmann::json;
  json j;
  j["family"] = r.family;
  j["shape"] = r.shape;
  j["batch"] = r.batch;
  j["variant"] = r.variant;
  j["L"] = r.L ? json(*r.L) : json(nullptr);
  j["state"] = r.state;
  j["us"] = r.us;
  j["us_p10"] = r.us_p10;
  j["us_p90"] = r.us_p90;
  j["bytes"] = r.bytes;
  j["gbps"] = r.gbps;
  j["pct_copy_bw"] = r.pct_copy_bw;
  j["speedup"] = r.speedup;
  j["baseline"] = r.baseline;
  j["mode"] = r.mode.empty() ? json(nullptr) : json(r.mode);
  j["h"] = r.h ? json(*r.h) : json(nullptr);
  j["route"] = r.route.empty() ? json(nullptr) : json(r.route);
  j["route_chosen"] = r.route_chosen.empty() ? json(nullptr) : json(r.route_chosen);
  j["plan"] = r.plan;
  j["calls_per_graph"] = r.calls;
  j["steps_per_call"] = r.steps;
  j["commit_in_graph"] = r.commit_in_graph;
  if (r.variant == "replay") j["dispatched"] = r.dispatched;
  j["pool_slots"] = r.pool_slots;
  j["replays"] = r.replays;
  return j;
}

namespace {

using Key = std::tuple<std::string, int64_t, int>;  // shape, batch, L

struct Line {
  const Row* conv = nullptr;
  std::map<std::string, const Row*> by;  // "<route>/<mode>/<h>"
};

std::string id(const Row& r) {
  return r.route + "/" + r.mode + "/" + (r.h ? std::to_string(*r.h) : std::string("-"));
}

/// Title of a family's table.
std::string family_title(const std::string& f) {
  if (f == "mamba2") return "Mamba-2";
  if (f == "gdn") return "Gated DeltaNet";
  if (f == "kda") return "KDA";
  return f;
}

std::string cell(const Row* r, const char* fmt_str = "{:.2f}") {
  return r ? fmt::format(fmt::runtime(fmt_str), r->us) : std::string("-");
}

void print_family_table(const std::string& family, const std::vector<Row>& rows,
                        double copy_gbps) {
  int w = 11;  // shape column (Mamba-2's width; wider for longer names)
  for (const Row& r : rows) w = std::max(w, static_cast<int>(r.shape.size()));
  std::map<std::pair<std::string, int64_t>, const Row*> conv;
  for (const Row& r : rows)
    if (r.variant == "conventional") conv[{r.shape, r.batch}] = &r;
  std::map<Key, Line> lines;
  for (const Row& r : rows) {
    if (r.variant != "replay" || !r.L) continue;
    Line& ln = lines[{r.shape, r.batch, *r.L}];
    ln.by[id(r)] = &r;
    auto c = conv.find({r.shape, r.batch});
    if (c != conv.end()) ln.conv = c->second;
  }
  fmt::print("\n{} decode, µs per call (median of graph replays); %cp = byte model GB/s over "
             "the copy ceiling {:.0f} GB/s;\n×conv = conventional µs / replay µs. Replay columns: "
             "the dispatcher's route; the last two: window µs with each route forced.\n\n",
             family_title(family), copy_gbps);
  fmt::print("{:<{}} {:>5} {:>3} {:>3} | {:>9} {:>4} | {:>8} {:>9} {:>9} | {:>9} {:>4} {:>6} | "
             "{:>9} {:>6} | {:>9} {:>9}\n",
             "shape", w, "batch", "L", "R", "conv", "%cp", "step h1", "step hL-2", "flush",
             "window", "%cp", "×conv", "mixed", "×conv", "win out", "win st+o");
  for (const auto& [key, ln] : lines) {
    const auto& [shape, batch, L] = key;
    auto get = [&](const std::string& k) -> const Row* {
      auto it = ln.by.find(k);
      return it == ln.by.end() ? nullptr : it->second;
    };
    const Row* s1 = get("auto/step/1");
    const Row* s2 = get("auto/step/" + std::to_string(L - 2));
    const Row* fl = get("auto/flush/" + std::to_string(L - 1));
    const Row* win = get("auto/window/-");
    const Row* mix = get("auto/mixed/-");
    const Row* wo = get("output-only/window/-");
    const Row* ws = get("state-and-output/window/-");
    const int calls = win ? win->calls : (s1 ? s1->calls : 0);
    fmt::print("{:<{}} {:>5} {:>3} {:>3} | {:>9} {:>4} | {:>8} {:>9} {:>9} | {:>9} {:>4} {:>6} | "
               "{:>9} {:>6} | {:>9} {:>9}\n",
               shape, w, batch, L, calls, cell(ln.conv),
               ln.conv ? fmt::format("{:.0f}", ln.conv->pct_copy_bw) : "-", cell(s1), cell(s2),
               cell(fl), cell(win), win ? fmt::format("{:.0f}", win->pct_copy_bw) : "-",
               win ? fmt::format("{:.2f}", win->speedup) : "-", cell(mix),
               mix ? fmt::format("{:.2f}", mix->speedup) : "-", cell(wo), cell(ws));
  }
  fmt::print("\n");
}

}  // namespace

void print_table(const std::vector<Row>& all, double copy_gbps) {
  std::vector<std::string> families;  // in the order of the rows
  for (const Row& r : all)
    if (std::find(families.begin(), families.end(), r.family) == families.end())
      families.push_back(r.family);
  for (const std::string& family : families) {
    std::vector<Row> rows;
    for (const Row& r : all)
      if (r.family == family) rows.push_back(r);
    print_family_table(family, rows, copy_gbps);
  }
}

}  // namespace replayssm::bench
