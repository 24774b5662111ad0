// Argument checks CLI11 leaves out, shared by replayssm and replayssm_bench: a word that names no
// command, an empty element of a comma-separated list option, a list option given twice.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>

namespace replayssm::cli {

/// The plural ending of a count's noun: "" for 1, "s" otherwise.
inline const char* plural_s(int64_t n) { return n == 1 ? "" : "s"; }

/// Whether argv[i] is the value of a free-text option (--prompt TEXT, --commit TEXT): the argv
/// scanners that run before or beside CLI11 (lists, --threads) must not read it as an option word.
inline bool free_text_value(char** argv, int i) {
  if (i < 2) return false;
  const std::string prev = argv[i - 1];
  return prev == "--prompt" || prev == "--commit";
}

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

/// A list option (comma-separated) among `lists` with an empty element, given as `--name VALUE`,
/// `--name=VALUE` or, for a short name, `-XVALUE`: CLI11 would drop it silently. Returns "" or
/// the error.
inline std::string empty_list_element(int argc, char** argv,
                                      std::initializer_list<const char*> lists) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") break;  // positional arguments follow
    if (free_text_value(argv, i)) continue;  // "--prompt -Then," is a prompt, not -T
    for (const char* name : lists) {
      const std::string a = argv[i], n = name, eq = n + "=";
      std::string v;
      if (a == n && i + 1 < argc)
        v = argv[i + 1];
      else if (a.rfind(eq, 0) == 0)
        v = a.substr(eq.size());
      else if (n.size() == 2 && n[1] != '-' && a.size() > 2 && a.rfind(n, 0) == 0)
        v = a.substr(2);  // -T2,,4
      else
        continue;
      if (v.empty()) return n + ": an empty value";
      if (v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos)
        return n + ": empty element in '" + v + "'";
    }
  }
  return "";
}

/// Makes `opt` a list option: its values comma-separated (`--batch 1,8,32`), the option given once
/// (reject_repeated_lists).
inline CLI::Option* comma_list(CLI::Option* opt) { return opt->delimiter(','); }

/// The --help footer of a command with list options: how to give one (`example`: "--batch 1,8").
inline std::string comma_list_footer(const std::string& example) {
  return "A list option takes its values comma-separated and is given once (" + example +
         "; repeating it is an error).";
}

/// CLI11's words for a one-value option given twice ("--state: At Most 1 required but received
/// 2") in the form the list options use, and for an empty path ("an empty path" where CLI11 prints
/// nothing after "does not exist: "); any other message unchanged.
inline std::string plain_parse_error(const std::string& what) {
  // CLI11's existence checks print an empty path as nothing ("Directory does not exist: ").
  // Only the whole message "<option>: <kind> does not exist: " (a path that merely ends in those
  // words keeps CLI11's message).
  for (const char* kind : {"Directory does not exist: ", "File does not exist: ",
                           "Path does not exist: "}) {
    const std::string k = kind;
    if (what.size() < k.size() || what.compare(what.size() - k.size(), k.size(), k) != 0) continue;
    const std::string name = what.substr(0, what.size() - k.size());  // "--model: "
    if (name.size() > 3 && name[0] == '-' && name.find(' ') == name.size() - 1 &&
        name[name.size() - 2] == ':')
      return name + "an empty path";
  }
  const std::string key = ": At Most 1 required but received ";
  const size_t at = what.find(key);
  if (at == std::string::npos) return what;
  const std::string n = what.substr(at + key.size());
  return what.substr(0, at) + ": given " + n + " times, expected once";
}

/// A list option (comma_list) of `app` or of a command it ran, given more than once among the
/// words argv[1..argc): CLI11 appends the lists (`--batch 1,2 --batch 4` ran 1,2,4), so which
/// values run would depend on a convention the user may not share. Call after parsing; throws
/// CLI::ValidationError naming the option. A word counts as an occurrence as CLI11 reads it:
/// `--name`, `--name=VALUE`, `-X` and `-XVALUE` (one option's further values, `-L 4 8`, are one
/// occurrence).
inline void reject_repeated_lists(const CLI::App& app, int argc, char** argv) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_delimiter() != ',' || o->count() == 0) continue;
    int given = 0;
    for (int i = 1; i < argc; ++i) {
      const std::string w = argv[i];
      if (w == "--") break;  // positional arguments follow
      if (free_text_value(argv, i)) continue;
      std::string name;
      if (w.rfind("--", 0) == 0)
        name = w.substr(0, w.find('='));
      else if (w.size() >= 2 && w[0] == '-')
        name = w.substr(0, 2);
      if (!name.empty() && o->check_name(name)) ++given;
    }
    if (given > 1) {
      std::string names = o->get_name(false, true);  // "-L,--ring"
      for (char& c : names)
        if (c == ',') c = '/';
      throw CLI::ValidationError(names, "given " + std::to_string(given) +
                                            " times, expected once with all the values "
                                            "comma-separated");
    }
  }
  for (const CLI::App* sub : app.get_subcommands()) reject_repeated_lists(*sub, argc, argv);
}

}  // namespace replayssm::cli
