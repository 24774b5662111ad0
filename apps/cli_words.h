// Argument checks CLI11 leaves out, shared by replayssm and replayssm_bench: a word that names no
// command, and an empty element of a comma-separated list option.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>

namespace replayssm::cli {

/// The plural ending of a count's noun: "" for 1, "s" otherwise.
inline const char* plural_s(int64_t n) { return n == 1 ? "" : "s"; }

/// CLI11 reports a word that names no subcommand only as "A subcommand is required": the first
/// words that are not options must name a subcommand at each level. `tool` names the program in
/// the message; `hints` adds a sentence after an unknown word. Returns "" or the error.
inline std::string unknown_command(CLI::App& app, int argc, char** argv, const std::string& tool,
                                   const std::map<std::string, std::string>& hints = {}) {
  auto names_of = [](CLI::App* a) {  // "a, b, c": the commands of a
    std::string names;
    for (const CLI::App* s : a->get_subcommands([](CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + s->get_name();
    return names;
  };
  const bool version = app.get_option_no_throw("--version") != nullptr;
  CLI::App* cur = &app;
  std::string path = tool;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    const auto subs = cur->get_subcommands([](CLI::App*) { return true; });
    const std::string names = names_of(cur);
    // Before the command, the tool itself takes only --help (and --version where it has one).
    if (cur == &app && !w.empty() && w[0] == '-' && w != "-h" && w != "--help" &&
        !(version && w == "--version"))
      return "unknown option '" + w + "' of " + tool + ", expected a command first (" + names +
             ") or --help" + (version ? " / --version" : "");
    if (w.empty() || w[0] == '-' || subs.empty()) return "";  // options and leaf arguments
    CLI::App* sub = nullptr;
    for (CLI::App* s : subs)
      if (s->check_name(w)) sub = s;
    if (sub == nullptr) {
      std::string msg = "unknown command '" + w + "' of " + path + ", expected one of " + names;
      if (const auto h = hints.find(w); h != hints.end()) msg += " (" + h->second + ")";
      return msg;
    }
    cur = sub;
    path += " " + w;
  }
  if (cur->get_require_subcommand_min() > 0)  // the words ended before a required command
    return path + " needs a command, one of " + names_of(cur);
  return "";
}

/// A list option (comma-separated) among `lists` with an empty element, given as `--name VALUE`
/// or `--name=VALUE`: CLI11 would drop it silently. Returns "" or the error.
inline std::string empty_list_element(int argc, char** argv,
                                      std::initializer_list<const char*> lists) {
  for (int i = 1; i < argc; ++i)
    for (const char* name : lists) {
      const std::string a = argv[i], n = name, eq = n + "=";
      std::string v;
      if (a == n && i + 1 < argc)
        v = argv[i + 1];
      else if (a.rfind(eq, 0) == 0)
        v = a.substr(eq.size());
      else
        continue;
      if (v.empty() || v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos)
        return n + ": empty element in '" + v + "'";
    }
  return "";
}

}  // namespace replayssm::cli
