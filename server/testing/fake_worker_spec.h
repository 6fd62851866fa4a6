// The scripted behaviour of q38-fake-worker (fake_worker_main.cc). Tests set it through the
// Supervisor's worker environment as Q38_FAKE_WORKER: comma-separated KEY=VALUE items, where R is
// the rank an item applies to, N a count of decode steps and HOW an exit code or "abort":
//
//   token_ms=MS          every decode step takes MS (every rank)
//   loading_ms=MS        every rank spends MS in "loading" before "ready"
//   refuse=R             rank R refuses the checkpoint: exits kWorkerExitModelRefused while loading
//   stuck_loading=R      rank R never leaves "loading"
//   exit_at_start=R:HOW  rank R dies before it serves
//   hang_after=R:N       rank R stops after N steps of a run and sends nothing until the call is cancelled
//   exit_after=R:N:HOW   rank R dies after N steps of a run
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace q38::fake {

inline constexpr char kBehaviourEnv[] = "Q38_FAKE_WORKER";

// A scripted death: abort() (SIGABRT), or _exit(code).
struct Death {
  bool abort = false;
  int code = 0;
};

// What one rank does.
struct Behaviour {
  int token_ms = 0;
  int loading_ms = 0;
  bool refuse = false;
  bool stuck_loading = false;
  std::optional<Death> exit_at_start;
  std::optional<int> hang_after;                   // steps
  std::optional<std::pair<int, Death>> exit_after;  // steps, how
};

inline absl::StatusOr<Death> ParseDeath(absl::string_view how) {
  if (how == "abort") return Death{true, 0};
  int code = 0;
  if (!absl::SimpleAtoi(how, &code) || code < 0 || code > 255) {
    return absl::InvalidArgumentError(absl::StrCat(kBehaviourEnv, ": '", how, "' is neither an exit code nor abort"));
  }
  return Death{false, code};
}

// The items of `spec` that apply to `rank`; an item it cannot read is an error, so a typo in a test
// fails the test rather than scripting nothing.
inline absl::StatusOr<Behaviour> ParseBehaviour(absl::string_view spec, int rank) {
  Behaviour b;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::vector<absl::string_view> args = absl::StrSplit(kv.second, ':');
    const absl::string_view key = kv.first;
    int first = 0, second = 0;
    // `count` arguments, the first `numbers` of them integers (a rank or a value, then steps).
    auto shaped = [&](size_t count, size_t numbers) {
      return args.size() == count && absl::SimpleAtoi(args[0], &first) && (numbers < 2 || absl::SimpleAtoi(args[1], &second));
    };
    if (key == "token_ms" && shaped(1, 1)) {
      b.token_ms = first;
    } else if (key == "loading_ms" && shaped(1, 1)) {
      b.loading_ms = first;
    } else if (key == "refuse" && shaped(1, 1)) {
      b.refuse |= first == rank;
    } else if (key == "stuck_loading" && shaped(1, 1)) {
      b.stuck_loading |= first == rank;
    } else if (key == "exit_at_start" && shaped(2, 1)) {
      ASSIGN_OR_RETURN(const Death death, ParseDeath(args[1]));
      if (first == rank) b.exit_at_start = death;
    } else if (key == "hang_after" && shaped(2, 2)) {
      if (first == rank) b.hang_after = second;
    } else if (key == "exit_after" && shaped(3, 2)) {
      ASSIGN_OR_RETURN(const Death death, ParseDeath(args[2]));
      if (first == rank) b.exit_after = {{second, death}};
    } else {
      return absl::InvalidArgumentError(absl::StrCat(kBehaviourEnv, ": cannot read '", item, "'"));
    }
  }
  return b;
}

}  // namespace q38::fake
